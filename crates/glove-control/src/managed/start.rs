//! `start_session`: from a created session to a running sandbox, and the session thread to its end.

use super::binding::launch_binding;
use super::identity::lifecycle_identity;
use super::launcher::{drain_until_end, expect_frame, launch_failure, LauncherLink};
use super::receipt::{receipt_body, Ending, ReceiptFacts};
use super::spec::build_spec;
use super::transcript::{Event, Transcript};
use super::{auth_err, err, life, lock, mem, port, ClockPort, Live, Runtime, ATTACH_QUEUE};
use crate::error::ControlError;
use crate::ports::{self, ReceiptView, Transitions};
use glove_lifecycle::{AnySession, StartAuthPolicy, StartAuthorization, StopReason};
use glove_sandbox::outcome::Outcome;
use glove_sandbox::wire::{FromLauncher, ToLauncher};
use glove_types::codes::control::*;
use glove_types::ids::SessionId;
use glove_types::plan::{admit, DecodedPlan};
use glove_types::policy::ValidatedPolicy;
use glove_types::stage::SessionStage;
use glove_types::ErrorCode;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

impl Runtime {
    /// `start_session`; a concurrent start of the same session is refused
    /// with `session_not_startable`.
    pub fn start(
        self: &Arc<Self>,
        policy: &ValidatedPolicy,
        owner: &str,
        id: &SessionId,
        authorization: &str,
        size: (u16, u16),
    ) -> Result<Value, ControlError> {
        if self.is_closing() {
            return Err(err(
                CONTROL_SHUTTING_DOWN,
                "the service is shutting down and starts no session",
            ));
        }
        if !mem(&self.starting).insert(id.clone()) {
            return Err(err(
                SESSION_NOT_STARTABLE,
                format!("session {} is being started", id.as_str()),
            ));
        }
        let r = self.start_inner(policy, owner, id, authorization, size);
        mem(&self.starting).remove(id);
        r
    }

    pub(super) fn start_inner(
        self: &Arc<Self>,
        policy: &ValidatedPolicy,
        owner: &str,
        id: &SessionId,
        authorization: &str,
        size: (u16, u16),
    ) -> Result<Value, ControlError> {
        // The session, its plan, and the plan admitted again now.
        let (any, plan_bytes) = {
            let store = lock(&self.store)?;
            let rec = store.get(id).ok_or_else(|| {
                err(
                    glove_types::codes::journal::STORE_SESSION_NOT_FOUND,
                    format!("no session {}", id.as_str()),
                )
            })?;
            let plan = rec.plan().to_vec();
            (
                ports::replay(&store, id)
                    .ok_or(ControlError::Internal("session state"))?
                    .map_err(port)?,
                plan,
            )
        };
        // Room in the store for every record the session may still need,
        // up to its terminal one, before anything is spent or launched
        // (compacting first if that makes the room).
        let room = lock(&self.store)?.check_room_to_start(id);
        if let Err(e) = room {
            if e.code() != glove_types::codes::journal::STORE_NO_ROOM {
                return Err(ControlError::Journal(e));
            }
            self.compact_store_if_due();
            lock(&self.store)?
                .check_room_to_start(id)
                .map_err(ControlError::Journal)?;
        }
        // The authorization is checked (and its nonce spent) first, so a
        // replayed one is refused as such whatever the session's stage.
        let digests = *any.digests();
        let auth = StartAuthorization::decode(authorization.as_bytes()).map_err(auth_err)?;
        let verified = {
            let mut nonces = lock(&self.nonces)?;
            auth.verify(
                &self.key,
                id,
                &digests,
                StartAuthPolicy::default(),
                &ClockPort(self.clock),
                &mut nonces,
            )
            .map_err(auth_err)?
        };
        let created = match any {
            AnySession::Created(created) => created,
            other @ (AnySession::Preparing(_)
            | AnySession::Starting(_)
            | AnySession::Running(_)
            | AnySession::Stopping(_)
            | AnySession::Exited(_)
            | AnySession::Failed(_)) => {
                return Err(err(
                    SESSION_NOT_STARTABLE,
                    format!("session {} is {}", id.as_str(), other.stage().as_str()),
                ));
            }
        };
        // From here on the session is typed, under one brand; it leaves the
        // scope only as an `AnySession` (the live registry, `fail_with`).
        created.enter(|created| -> Result<Value, ControlError> {
            let decoded = DecodedPlan::decode(&plan_bytes).map_err(ControlError::from)?;
            let admitted = admit(decoded, None, policy, self.clock.now_ms()).map_err(|r| {
                err(
                    SESSION_PLAN_NOT_ADMITTED,
                    format!(
                        "the stored plan is not admitted now: {}: {}",
                        r.code().as_str(),
                        r.message()
                    ),
                )
            })?;
            let built = build_spec(policy, &admitted, &self.cfg, size.0, size.1)
                .map_err(ControlError::from)?;
            self.test_hold("after_resolve");
            let mut spec = built.wire;
            let leases = built.leases;
            let runtime = policy
                .runtime_templates()
                .iter()
                .find(|t| t.id() == admitted.runtime_template_id())
                .map(|t| t.runtime_id().as_str().to_owned())
                .unwrap_or_default();
            let egress_start = match super::egress::session_settings(policy, &admitted, &runtime)
                .map_err(ControlError::from)?
            {
                Some(settings) => Some(
                    super::egress::EgressStart::prepare(
                        &settings,
                        &self.cfg.egress_extra_roots,
                        &mut spec,
                    )
                    .map_err(ControlError::from)?,
                ),
                None => None,
            };
            // The tool policy's mediator: its profile read and its sockets
            // bound now; it starts before the agent is released.
            let mut mcp_start =
                match super::mcp::tool_policy_for(policy, &admitted).map_err(ControlError::from)? {
                    Some(tool) => {
                        let relay = self
                            .cfg
                            .launcher
                            .parent()
                            .map(|d| d.join("glove"))
                            .unwrap_or_default();
                        Some(
                            super::mcp::McpStart::prepare(
                                tool,
                                &self.cfg.runtime_dir,
                                &relay,
                                &mut spec,
                            )
                            .map_err(ControlError::from)?,
                        )
                    }
                    None => None,
                };
            let mut facts = ReceiptFacts {
                digests,
                binding: None,
                limits: Some(*admitted.limits()),
                projections: built.projections,
                adapter: built.adapter,
                egress: None,
                mcp: None,
            };
            // Preparing, then receipt capacity.
            let preparing = {
                let mut store = lock(&self.store)?;
                let p = created
                    .log_prepare(&mut Transitions::new(&mut store))
                    .map_err(|e| life(&e))?;
                created.prepare(p).map_err(|e| life(e.error()))?
            };
            self.test_pause("after_prepare_record");
            if let Err(e) = ports::reserve(&mut *lock(&self.receipts)?, id) {
                let code = e.code();
                let body = receipt_body(
                    id,
                    &facts,
                    &Ending::Failure {
                        code: code.as_str().into(),
                        message: e.to_string(),
                    },
                    None,
                );
                // Without capacity there may be no room for a receipt either;
                // the failure record needs one, so try and report the first error.
                let _ = self.fail_any(preparing.into(), code, &body);
                return Err(err(code, e.to_string()));
            }
            let fail_with =
                |any: AnySession, code: ErrorCode, reason: String, facts: &ReceiptFacts| {
                    let body = receipt_body(
                        id,
                        facts,
                        &Ending::Failure {
                            code: code.as_str().into(),
                            message: reason.clone(),
                        },
                        None,
                    );
                    match self.fail_any(any, code, &body) {
                        Ok(_) => err(code, reason),
                        Err(e) => e,
                    }
                };
            let mut link = match self.launcher.spawn() {
                Ok(x) => x,
                Err(r) => {
                    return Err(fail_with(
                        preparing.into(),
                        r.code(),
                        r.message().into(),
                        &facts,
                    ))
                }
            };
            // The session's proxy runs before the sandbox exists; the
            // channel's sandbox end goes with the spec.
            let (egress, sent) = match egress_start {
                None => (None, link.send(&ToLauncher::Spec(Box::new(spec.clone())))),
                Some(e) => {
                    let policy_id = e.policy_id();
                    match e.start(id, &self.cfg.materialization_root.join("egress")) {
                        Ok((handle, channel)) => (
                            Some((policy_id, handle)),
                            link.send_with_channel(
                                &ToLauncher::Spec(Box::new(spec.clone())),
                                channel,
                            ),
                        ),
                        Err(r) => {
                            link.close();
                            return Err(fail_with(
                                preparing.into(),
                                r.code(),
                                r.message().into(),
                                &facts,
                            ));
                        }
                    }
                }
            };
            let reply = sent.and_then(|()| link.recv());
            let prepared = match expect_frame(reply, |f| match f {
                FromLauncher::Prepared(p) => Ok(p),
                other => Err(other),
            }) {
                Ok(p) => p,
                Err((code, message)) => {
                    link.close();
                    return Err(fail_with(preparing.into(), code, message, &facts));
                }
            };
            let binding = match launch_binding(&spec, &prepared) {
                Ok(b) => b,
                Err(r) => {
                    link.close();
                    return Err(fail_with(
                        preparing.into(),
                        r.code(),
                        r.message().into(),
                        &facts,
                    ));
                }
            };
            facts.binding = Some(binding.digest());
            // The binding is durable before the agent may run.
            let starting = {
                let mut store = lock(&self.store)?;
                let p =
                    match preparing.log_start(binding, verified, &mut Transitions::new(&mut store))
                    {
                        Ok(p) => p,
                        Err(e) => {
                            drop(store);
                            link.close();
                            return Err(fail_with(
                                preparing.into(),
                                e.code(),
                                e.code().meaning().into(),
                                &facts,
                            ));
                        }
                    };
                preparing.start(p).map_err(|e| life(e.error()))?
            };
            // Before the agent may run: where its launcher is, so recovery can
            // end a sandbox whose running record never became durable (the
            // sandbox init dies with its launcher).
            if let Err(r) = self.record_launcher(id, link.pid()) {
                link.close();
                return Err(fail_with(
                    starting.into(),
                    r.code(),
                    r.message().into(),
                    &facts,
                ));
            }
            self.test_pause("after_start_record");
            // Shutdown began while the sandbox was prepared: it is not
            // released (shutdown waits for this start to finish, so the
            // session cannot slip past its stop).
            if self.is_closing() {
                link.close();
                return Err(fail_with(
                    starting.into(),
                    CONTROL_SHUTTING_DOWN,
                    "the service shut down before the session was released".into(),
                    &facts,
                ));
            }
            // The mediator is ready (upstreams started, tools listed and
            // pinned) before the agent may run.
            let mcp = match mcp_start.take() {
                None => None,
                Some(m) => match m.start(id, &self.cfg.materialization_root.join("mcp")) {
                    Ok(r) => Some(r),
                    Err(r) => {
                        link.close();
                        return Err(fail_with(
                            starting.into(),
                            r.code(),
                            r.message().into(),
                            &facts,
                        ));
                    }
                },
            };
            let started = link.send(&ToLauncher::Release).and_then(|()| link.recv());
            let info = match expect_frame(started, |f| match f {
                FromLauncher::Started(s) => Ok(s),
                other => Err(other),
            }) {
                Ok(s) => s,
                Err((code, message)) => {
                    link.close();
                    facts.mcp = mcp.map(super::mcp::McpRunning::finish);
                    return Err(fail_with(starting.into(), code, message, &facts));
                }
            };
            let identity = match lifecycle_identity(&info.init) {
                Ok(i) => i,
                Err(r) => {
                    let _ = link.send(&ToLauncher::Stop(0));
                    link.kill_and_wait();
                    facts.mcp = mcp.map(super::mcp::McpRunning::finish);
                    return Err(fail_with(
                        starting.into(),
                        r.code(),
                        r.message().into(),
                        &facts,
                    ));
                }
            };
            self.test_pause("after_release");
            let logged = {
                let mut store = lock(&self.store)?;
                starting.log_run(identity, &mut Transitions::new(&mut store))
            };
            let p = match logged {
                Ok(p) => p,
                Err(e) => {
                    // The agent runs but its identity is not durable: end it
                    // now rather than leave it to its limits.
                    let _ = link.send(&ToLauncher::Stop(0));
                    let _ = drain_until_end(link.as_mut());
                    link.close();
                    facts.mcp = mcp.map(super::mcp::McpRunning::finish);
                    return Err(fail_with(
                        starting.into(),
                        e.code(),
                        e.code().meaning().into(),
                        &facts,
                    ));
                }
            };
            let running = starting.run(p).map_err(|e| life(e.error()))?;
            link.unbounded();
            let writer = match link.writer() {
                Ok(w) => w,
                Err(e) => {
                    // Without a writer the session could not be stopped:
                    // end it now, and record its end with a receipt.
                    tracing::error!(session_id = ?id.as_str(), "no second launcher writer: {e}");
                    let _ = link.send(&ToLauncher::Stop(0));
                    let _ = drain_until_end(link.as_mut());
                    link.close();
                    facts.mcp = mcp.map(super::mcp::McpRunning::finish);
                    return Err(fail_with(
                        running.into(),
                        SESSION_LAUNCH_FAILED,
                        "the launcher channel could not be shared; the session was stopped".into(),
                        &facts,
                    ));
                }
            };
            let (tx, _) = broadcast::channel(ATTACH_QUEUE);
            let live = Arc::new(Live {
                id: id.clone(),
                owner: owner.to_owned(),
                writer: Mutex::new(writer),
                stream: Mutex::new((
                    Transcript {
                        chunks: VecDeque::new(),
                        bytes: 0,
                        cap: self.cfg.transcript_bytes,
                        next_seq: 1,
                    },
                    tx,
                )),
                session: Mutex::new(Some(running.into())),
                ended: Mutex::new(None),
                facts,
                leases: Mutex::new(leases),
                egress: Mutex::new(egress),
                mcp: Mutex::new(mcp),
            });
            mem(&self.live).insert(id.clone(), live.clone());
            let rt = self.clone();
            let kept = live.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("session-{}", id.as_str()))
                .spawn(move || rt.pump(&live, link));
            if spawned.is_err() {
                // The link went down with the closure (the launcher ends the
                // sandbox when its socket closes); the session is failed with
                // a receipt rather than left running with nobody reading it.
                tracing::error!(session_id = ?id.as_str(), "cannot start the session thread");
                mem(&self.live).remove(id);
                let any = mem(&kept.session)
                    .take()
                    .ok_or(ControlError::Internal("session state"))?;
                return Err(fail_with(
                    any,
                    SESSION_LAUNCH_FAILED,
                    "the session thread could not be started; the session was ended".into(),
                    &kept.facts,
                ));
            }
            tracing::info!(session_id = ?id.as_str(), init_pid = info.init.pid, "session running");
            Ok(json!({
                "session_id": id.as_str(),
                "stage": "running",
                "launch_binding_digest": binding.digest().to_hex(),
                "init_pid": info.init.pid,
            }))
        })
    }

    /// The session thread: output, then the ending.
    pub(super) fn pump(&self, live: &Live, mut link: Box<dyn LauncherLink>) {
        let end = loop {
            match link.recv() {
                Ok(FromLauncher::Output(b)) => {
                    let mut s = mem(&live.stream);
                    let data: Arc<[u8]> = b.into();
                    let seq = s.0.push(data.clone());
                    let _ = s.1.send(Event::Output(seq, data));
                }
                Ok(FromLauncher::Exited(o)) => break Ok(o),
                Ok(FromLauncher::Failed(f)) => {
                    break Err((SESSION_LAUNCH_FAILED, launch_failure(&f)))
                }
                Ok(_) => {}
                Err(e) => break Err((SESSION_LAUNCHER_LOST, e)),
            }
        };
        // A launcher that can no longer be talked to may still supervise
        // its sandbox: it is ended before the session's end (and the
        // release of its leases) is recorded.
        if matches!(&end, Err((c, _)) if *c == SESSION_LAUNCHER_LOST) {
            link.kill_and_wait();
        } else {
            link.close();
        }
        let result = self.finish(live, end);
        if result.is_ok() {
            self.forget_launcher(&live.id);
        }
        let ended = match result {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(session_id = ?live.id.as_str(), code = e.code().as_str(), "cannot record the session's end");
                json!({"session_id": live.id.as_str(), "stage": "unrecorded", "code": e.code().as_str()})
            }
        };
        *mem(&live.ended) = Some(ended.clone());
        let s = mem(&live.stream);
        let _ = s.1.send(Event::Ended(ended));
    }

    pub(super) fn finish(
        &self,
        live: &Live,
        end: Result<Box<Outcome>, (ErrorCode, String)>,
    ) -> Result<Value, ControlError> {
        let mut guard = mem(&live.session);
        let any = guard
            .take()
            .ok_or(ControlError::Internal("session state"))?;
        let id = live.id.clone();
        // The leases' versions after the session (its sandbox is gone).
        let mut facts = live.facts.clone();
        // Taken out of the session: their locks go when this ends (the
        // receipt written), not when the session is cleaned up.
        let mut holds = std::mem::take(&mut *mem(&live.leases));
        // The sandbox is gone: what its proxy saw goes into the receipt.
        if let Some((policy_id, proxy)) = mem(&live.egress).take() {
            facts.egress = Some(match proxy.finish(super::egress::FINISH_GRACE) {
                Ok(summary) => super::egress::receipt_of(&summary),
                Err(e) => {
                    tracing::error!(session_id = ?id.as_str(), code = e.code().as_str(), "egress proxy: {e}");
                    super::egress::receipt_of_failure(&policy_id)
                }
            });
        }
        if let Some(m) = mem(&live.mcp).take() {
            facts.mcp = Some(m.finish());
        }
        if let Some(a) = facts.adapter.as_mut() {
            for hold in holds.iter_mut() {
                let end = hold.finish();
                if let Err(r) = &end {
                    tracing::error!(session_id = ?id.as_str(), code = r.code().as_str(), "lease not read back: {}", r.message());
                }
                if let Some(l) = a
                    .leases
                    .iter_mut()
                    .find(|l| l.secret_handle == hold.handle().as_str())
                {
                    l.version_at_end = end.ok();
                }
            }
        }
        let result = match end {
            Ok(o) => {
                let reason = if o.ended_by.is_some() {
                    StopReason::LimitReached
                } else {
                    StopReason::AgentExited
                };
                let stopping = match any {
                    AnySession::Running(running) => {
                        let mut store = lock(&self.store)?;
                        running.enter(|running| -> Result<_, ControlError> {
                            let p = running
                                .log_stop(reason, &mut Transitions::new(&mut store))
                                .map_err(|e| life(&e))?;
                            Ok(running.stop(p).map_err(|e| life(e.error()))?.park())
                        })?
                    }
                    AnySession::Stopping(stopping) => stopping,
                    other @ (AnySession::Created(_)
                    | AnySession::Preparing(_)
                    | AnySession::Starting(_)
                    | AnySession::Exited(_)
                    | AnySession::Failed(_)) => {
                        // Not running nor stopping: nothing to end (the
                        // session value is dropped, as before).
                        return Err(life(&glove_lifecycle::LifecycleError::WrongStage {
                            expected: SessionStage::Stopping,
                            actual: other.stage(),
                        }));
                    }
                };
                let body = receipt_body(&id, &facts, &Ending::Outcome(&o), None);
                let r = self.append_receipt(&id, &body)?;
                let mut store = lock(&self.store)?;
                let j = lock(&self.receipts)?;
                let exited = stopping.enter(|stopping| -> Result<_, ControlError> {
                    let p = stopping
                        .log_exit(r, &ReceiptView::new(&j), &mut Transitions::new(&mut store))
                        .map_err(|e| life(&e))?;
                    Ok(stopping.exit(p).map_err(|e| life(e.error()))?.park())
                })?;
                let v = json!({"session_id": id.as_str(), "stage": "exited", "receipt_seq": r.receipt_seq()});
                *guard = Some(exited.into());
                v
            }
            Err((code, message)) => {
                let body = receipt_body(
                    &id,
                    &facts,
                    &Ending::Failure {
                        code: code.as_str().into(),
                        message,
                    },
                    None,
                );
                let failed = self.fail_any(any, code, &body)?;
                let seq = self.terminal(&id).map(|r| r.receipt_seq());
                *guard = Some(failed);
                json!({"session_id": id.as_str(), "stage": "failed", "code": code.as_str(), "receipt_seq": seq})
            }
        };
        tracing::info!(session_id = ?id.as_str(), result = %result, "session ended");
        self.compact_store_if_due();
        Ok(result)
    }
}
