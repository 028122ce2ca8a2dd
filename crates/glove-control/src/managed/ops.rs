//! Requests on a live session: input, resize, signal, stop, attach, cleanup, shutdown.

use super::transcript::Event;
use super::{err, life, lock, mem, Live, Runtime};
use crate::error::ControlError;
use crate::ports::Transitions;
use glove_lifecycle::{AnySession, StopReason};
use glove_sandbox::wire::ToLauncher;
use glove_types::codes::control::*;
use glove_types::digest::to_hex;
use glove_types::ids::SessionId;
use glove_types::stage::SessionStage;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

impl Runtime {
    pub(super) fn send(
        &self,
        caller: &str,
        id: &SessionId,
        m: ToLauncher,
    ) -> Result<(), ControlError> {
        let live = self.owned(caller, id)?;
        if mem(&live.ended).is_some() {
            return Err(err(
                SESSION_NOT_LIVE,
                format!("session {} has ended", id.as_str()),
            ));
        }
        // Input, a resize or a signal would become part of the evidence
        // (echoed literals, a chosen termination): an evaluation is the
        // agent's run alone. Stop stays available, and fails the run.
        if mem(&live.evaluation).is_some() {
            return Err(err(
                glove_types::codes::refinement::REFINEMENT_SESSION_NOT_INTERACTIVE,
                format!(
                    "session {} is a refinement evaluation: it takes no input, resize or signal",
                    id.as_str()
                ),
            ));
        }
        let r = mem(&live.writer).send(&m);
        r.map_err(|_| {
            err(
                SESSION_NOT_LIVE,
                format!("session {} has ended", id.as_str()),
            )
        })
    }

    /// `write_stdin`.
    pub fn write_stdin(
        &self,
        caller: &str,
        id: &SessionId,
        data: &[u8],
    ) -> Result<Value, ControlError> {
        self.send(caller, id, ToLauncher::Stdin(data.to_vec()))?;
        Ok(json!({"written": data.len()}))
    }

    /// `resize`.
    pub fn resize(
        &self,
        caller: &str,
        id: &SessionId,
        rows: u16,
        cols: u16,
    ) -> Result<Value, ControlError> {
        self.send(caller, id, ToLauncher::Resize(rows, cols))?;
        Ok(json!({"rows": rows, "cols": cols}))
    }

    /// `signal`.
    pub fn signal(&self, caller: &str, id: &SessionId, signal: i32) -> Result<Value, ControlError> {
        self.send(caller, id, ToLauncher::Signal(signal))?;
        Ok(json!({"signalled": signal}))
    }

    /// `stop_session`: the stop intent is durable, then TERM, KILL after
    /// the grace. The receipt follows when the launcher reports the exit.
    pub fn stop(&self, caller: &str, id: &SessionId, grace_ms: u64) -> Result<Value, ControlError> {
        self.owned(caller, id)?;
        self.stop_for(id, grace_ms, StopReason::Requested)
    }

    pub(super) fn stop_for(
        &self,
        id: &SessionId,
        grace_ms: u64,
        reason: StopReason,
    ) -> Result<Value, ControlError> {
        let live = self.live(id)?;
        {
            let mut guard = mem(&live.session);
            match guard.take() {
                Some(AnySession::Running(running)) => {
                    let mut store = lock(&self.store)?;
                    // The session goes back into the guard whatever happens.
                    let (session, stopped) = running.enter(|running| {
                        match running.log_stop(reason, &mut Transitions::new(&mut store)) {
                            Ok(p) => match running.stop(p) {
                                Ok(s) => (AnySession::from(s), Ok(())),
                                Err(r) => {
                                    let (s, e) = r.into_parts();
                                    (AnySession::from(s), Err(life(&e)))
                                }
                            },
                            Err(e) => (AnySession::from(running), Err(life(&e))),
                        }
                    });
                    *guard = Some(session);
                    stopped?;
                }
                Some(stopping @ AnySession::Stopping(_)) => *guard = Some(stopping),
                other @ (None
                | Some(
                    AnySession::Created(_)
                    | AnySession::Preparing(_)
                    | AnySession::Starting(_)
                    | AnySession::Exited(_)
                    | AnySession::Failed(_),
                )) => {
                    let stage = other
                        .as_ref()
                        .map(|a| a.stage().as_str())
                        .unwrap_or("ending");
                    *guard = other;
                    return Err(err(
                        SESSION_NOT_LIVE,
                        format!("session {} is {stage}", id.as_str()),
                    ));
                }
            }
        }
        self.test_pause("after_stop_record");
        let r = mem(&live.writer).send(&ToLauncher::Stop(grace_ms));
        r.map_err(|_| err(SESSION_NOT_LIVE, "the launcher is gone"))?;
        Ok(json!({"session_id": id.as_str(), "stage": "stopping", "grace_ms": grace_ms}))
    }

    /// Graceful shutdown: every running session is stopped (TERM, KILL
    /// after `grace_ms`) with the reason `service_shutdown`, and its receipt
    /// awaited for at most `wait`. Sessions not finished by then are left
    /// to recovery at the next start.
    pub fn shutdown(&self, grace_ms: u64, wait: Duration) {
        self.closing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        // Starts in progress finish first (each refuses to release its
        // sandbox from now on), so every session that runs is in `live`.
        let deadline = std::time::Instant::now() + wait;
        while !mem(&self.starting).is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let live: Vec<Arc<Live>> = mem(&self.live).values().cloned().collect();
        for l in &live {
            if mem(&l.ended).is_none() {
                if let Err(e) = self.stop_for(&l.id, grace_ms, StopReason::ServiceShutdown) {
                    tracing::warn!(session_id = ?l.id.as_str(), code = e.code().as_str(), "cannot stop a session at shutdown");
                }
            }
        }
        for l in &live {
            // Bounded wait for the session thread to record the end.
            while mem(&l.ended).is_none() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// `attach`: the transcript after `after_seq`, and the stream.
    pub fn attach(
        &self,
        caller: &str,
        id: &SessionId,
        after_seq: u64,
    ) -> Result<(Value, Option<broadcast::Receiver<Event>>), ControlError> {
        let live = self.owned(caller, id)?;
        let s = mem(&live.stream);
        let chunks: Vec<Value> =
            s.0.chunks
                .iter()
                .filter(|(seq, _)| *seq > after_seq)
                .map(|(seq, d)| json!({"seq": seq, "data_hex": to_hex(d)}))
                .collect();
        let first = s.0.chunks.front().map_or(s.0.next_seq, |(q, _)| *q);
        let ended = mem(&live.ended).clone();
        let rx = ended.is_none().then(|| s.1.subscribe());
        Ok((
            json!({
                "session_id": id.as_str(),
                "transcript": chunks,
                "first_seq": first,
                "next_seq": s.0.next_seq,
                "ended": ended,
            }),
            rx,
        ))
    }

    /// `cleanup_session`: forgets the live state once the terminal receipt
    /// is durable. The sandbox's own mounts, tmpfs copies and cgroup are
    /// removed by the launcher when the sandbox ends.
    pub fn cleanup(&self, caller: &str, id: &SessionId) -> Result<Value, ControlError> {
        if let Some(live) = mem(&self.live).get(id).cloned() {
            if live.owner != caller {
                return Err(err(
                    SESSION_NOT_OWNED,
                    format!("session {} belongs to another client", id.as_str()),
                ));
            }
        }
        let stage = lock(&self.store)?.get(id).map(|r| r.stage());
        let receipt = self.terminal(id);
        // A session the store compacted away ended: its receipt (durable
        // before the terminal record) is what is left of it.
        let stage = match (stage, receipt) {
            (Some(s), _) => s,
            (None, Some(_)) => SessionStage::Exited,
            (None, None) => {
                return Err(err(
                    glove_types::codes::journal::STORE_SESSION_NOT_FOUND,
                    format!("no session {}", id.as_str()),
                ))
            }
        };
        if stage == SessionStage::Created && receipt.is_none() {
            return self.abandon(id);
        }
        let terminal = matches!(stage, SessionStage::Exited | SessionStage::Failed);
        if !terminal || receipt.is_none() {
            return Err(err(
                SESSION_NOT_TERMINAL,
                format!("session {} is {}", id.as_str(), stage.as_str()),
            ));
        }
        let removed = mem(&self.live).remove(id).is_some();
        Ok(json!({"session_id": id.as_str(), "cleaned": true, "live_state_removed": removed}))
    }
}

impl Runtime {
    /// A session that was created but never started (its start refused, or
    /// simply never asked for) is ended for good: a failure receipt with
    /// `session_abandoned`, then the terminal record, so it no longer waits
    /// in the store.
    fn abandon(&self, id: &SessionId) -> Result<Value, ControlError> {
        use super::receipt::{receipt_body, Ending, ReceiptFacts};
        let any = {
            let store = lock(&self.store)?;
            crate::ports::replay(&store, id)
                .ok_or(ControlError::Internal("session state"))?
                .map_err(ControlError::Port)?
        };
        if !matches!(any, AnySession::Created(_)) {
            return Err(err(
                SESSION_NOT_TERMINAL,
                format!("session {} is {}", id.as_str(), any.stage().as_str()),
            ));
        }
        let facts = ReceiptFacts {
            digests: *any.digests(),
            binding: None,
            limits: self.limits_of(id),
            projections: vec![],
            adapter: None,
            egress: None,
            mcp: None,
            retained: Vec::new(),
            refinement: self.refinement_of(id),
        };
        let body = receipt_body(
            id,
            &facts,
            &Ending::Failure {
                code: SESSION_ABANDONED.as_str().into(),
                message: "cleaned up before it ever started".into(),
            },
            None,
        );
        self.fail_any(any, SESSION_ABANDONED, &body)?;
        tracing::info!(session_id = ?id.as_str(), "created session abandoned at cleanup");
        Ok(
            json!({"session_id": id.as_str(), "cleaned": true, "abandoned": true, "live_state_removed": false}),
        )
    }
}
