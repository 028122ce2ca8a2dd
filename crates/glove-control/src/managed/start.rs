//! `start_session`: from a created session to a running sandbox, and the session thread to its end.

use super::door::{DoorFault, ManagedDoor, Released, Stage};
use super::launcher::{drain_until_end, launch_failure, LauncherLink};
use super::receipt::{receipt_body, Ending, ReceiptFacts};
use super::spec::build_spec;
use super::transcript::{Event, Transcript};
use super::{auth_err, err, life, lock, mem, port, ClockPort, Live, Runtime, ATTACH_QUEUE};
use crate::assembly::{Attachments, Fault, Started, WireSpec};
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
            // A refinement evaluation's fixture, read and checked before
            // anything is recorded or launched (a refusal leaves the
            // session created).
            let fixture =
                super::evaluation::read_fixture(self.cfg.bundle_root.as_deref(), &admitted)
                    .map_err(ControlError::from)?;
            let refinement = admitted
                .refinement()
                .map(super::evaluation::RefinementFacts::of);
            // The plan's exposures, checked again now and opened from
            // their held descriptors (a refusal leaves the session created).
            let exposed = match (admitted.path_exposures(), self.exposures()) {
                ([], _) => Vec::new(),
                (_, None) => {
                    return Err(err(
                        glove_types::codes::exposure::EXPOSURE_UNAVAILABLE,
                        "the plan names path exposures; this service has none",
                    ))
                }
                (wanted, Some(x)) => x
                    .open_for_session(wanted, admitted.runtime_template_id(), self.clock.now_ms())
                    .map_err(ControlError::from)?,
            };
            self.test_hold("after_resolve");
            // The session's parts, prepared on its spec before anything is
            // recorded: a part that cannot be prepared leaves the session
            // created.
            // A retained exposure is a retained workspace filled from the
            // project's held descriptor; the others are tmpfs copies.
            let (kept, exposed): (Vec<_>, Vec<_>) = exposed.into_iter().partition(|x| x.retained);
            let mut retained_grants = built.retained;
            for x in kept {
                retained_grants.push(super::spec::RetainedGrant {
                    alias: x.label,
                    host_path: x.project.display().to_string(),
                    target: x.target,
                    max_bytes: x.max_bytes,
                    create_if_missing: false,
                    source_fd: Some(std::sync::Arc::new(x.source)),
                });
            }
            let first_target = retained_grants.first().map(|g| g.target.clone());
            let inputs = self.inputs(policy, &admitted, id, built.leases, retained_grants)?;
            let mut spec = WireSpec {
                wire: built.wire,
                channel: None,
                retained: Vec::new(),
                exposures: Vec::new(),
            };
            let first = exposed.first().map(|x| x.target.clone()).or(first_target);
            if let (Some(first), true) = (first, admitted.path_grants().is_empty()) {
                spec.wire.working_directory = first;
            }
            for x in exposed {
                spec.wire
                    .exposure_targets
                    .push(glove_sandbox::wire::ExposureTarget {
                        target: x.target,
                        read_only: x.read_only,
                        max_bytes: x.max_bytes,
                    });
                spec.exposures.push(x.source);
            }
            let attachments = Attachments::prepare(inputs, &mut spec).map_err(|f| {
                let (e, _leases) = *f;
                tracing::warn!(session_id = ?id.as_str(), code = e.code().as_str(), "{}", e.detail());
                ControlError::from(e.public())
            })?;
            let mut facts = ReceiptFacts {
                digests,
                binding: None,
                limits: Some(*admitted.limits()),
                projections: built.projections,
                adapter: built.adapter,
                egress: None,
                mcp: None,
                retained: Vec::new(),
                refinement,
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
                let _held = attachments.abandon();
                let _ = self.fail_any(preparing.into(), code, &body);
                return Err(err(code, e.to_string()));
            }
            // Build (the binding durable as `starting`), start the parts,
            // release (the identity durable as `running`).
            let mut door = ManagedDoor {
                rt: self,
                id,
                stage: Stage::Preparing(preparing),
                verified: Some(verified),
                facts,
            };
            let launched = attachments.launch(&mut door, spec);
            let ManagedDoor { stage, facts: door_facts, .. } = door;
            facts = door_facts;
            let (
                Released {
                    mut link,
                    info,
                    at: released_at,
                },
                parts,
            ) = match launched {
                Ok(v) => v,
                Err(failed) => {
                    let failed = *failed;
                    facts.add_reports(&failed.reports);
                    let (code, message) = match failed.fault {
                        Fault::Attachment(e) => {
                            tracing::warn!(session_id = ?id.as_str(), code = e.code().as_str(), "{}", e.detail());
                            (e.code(), e.public().message().to_owned())
                        }
                        Fault::Door(DoorFault::Session(code, message)) => (code, message),
                        Fault::Door(DoorFault::Control(e)) => return Err(e),
                    };
                    let any = stage
                        .into_any()
                        .ok_or(ControlError::Internal("session stage"))?;
                    return Err(self.fail_session(id, any, code, message, &facts));
                }
            };
            let Stage::Running(running) = stage else {
                link.close();
                return Err(ControlError::Internal("session stage"));
            };
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
                    // Held (the leases' locks) until the failure is recorded.
                    let reports = parts.abandon();
                    facts.add_reports(&reports);
                    return Err(self.fail_session(
                        id,
                        running.into(),
                        SESSION_LAUNCH_FAILED,
                        "the launcher channel could not be shared; the session was stopped".into(),
                        &facts,
                    ));
                }
            };
            let binding = facts.binding.map(|d| d.to_hex()).unwrap_or_default();
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
                parts: Mutex::new(Some(parts)),
                evaluation: Mutex::new(
                    fixture
                        .as_ref()
                        .map(|f| super::evaluation::Running::new(f, released_at)),
                ),
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
                let mut facts = kept.facts.clone();
                let reports = mem(&kept.parts).take().map(Started::abandon);
                if let Some(r) = &reports {
                    facts.add_reports(r);
                }
                return Err(self.fail_session(
                    id,
                    any,
                    SESSION_LAUNCH_FAILED,
                    "the session thread could not be started; the session was ended".into(),
                    &facts,
                ));
            }
            tracing::info!(session_id = ?id.as_str(), init_pid = info.init.pid, "session running");
            Ok(json!({
                "session_id": id.as_str(),
                "stage": "running",
                "launch_binding_digest": binding,
                "init_pid": info.init.pid,
            }))
        })
    }

    /// Fails a session in a live stage with a receipt; the error to return.
    fn fail_session(
        &self,
        id: &SessionId,
        any: AnySession,
        code: ErrorCode,
        reason: String,
        facts: &ReceiptFacts,
    ) -> ControlError {
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
    }

    /// The session thread: output, then the ending.
    pub(super) fn pump(&self, live: &Live, mut link: Box<dyn LauncherLink>) {
        let end = loop {
            match link.recv() {
                Ok(FromLauncher::Output(b)) => {
                    // The evaluator sees every byte before the transcript
                    // may evict it.
                    if let Some(e) = mem(&live.evaluation).as_mut() {
                        e.feed(&b);
                    }
                    let mut s = mem(&live.stream);
                    let data: Arc<[u8]> = b.into();
                    let seq = s.0.push(data.clone());
                    let _ = s.1.send(Event::Output(seq, data));
                }
                Ok(FromLauncher::Exited(o)) => {
                    // The agent's end, for an evaluation's wall latency.
                    if let Some(e) = mem(&live.evaluation).as_mut() {
                        e.ended();
                    }
                    break Ok(o);
                }
                Ok(FromLauncher::Failed(f)) => break Err(launch_failure(&f)),
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
            // The end is durable: the launcher may go, and with it the
            // sandbox's init, now rather than at cleanup.
            mem(&live.writer).close();
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
        // The sandbox is gone: the parts stop, and what they saw goes into
        // the receipt (the leases read back; their locks go when this ends,
        // the receipt written, not when the session is cleaned up).
        let mut facts = live.facts.clone();
        let reports = mem(&live.parts).take().map(Started::finish);
        if let Some(r) = &reports {
            facts.add_reports(r);
        }
        // A refinement evaluation is finished once the stream drained and
        // the parts reported, with what the supervisor observed.
        if let Some(run) = mem(&live.evaluation).take() {
            let outcome = end.as_ref().ok().map(|o| &**o);
            super::evaluation::record(&mut facts, run.finish(outcome));
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
                // How the agent ended, so an attached client can exit with
                // the agent's own status.
                let v = json!({
                    "session_id": id.as_str(),
                    "stage": "exited",
                    "receipt_seq": r.receipt_seq(),
                    "exit": o.exit,
                    "ended_by": o.ended_by,
                });
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
