//! Recovery at startup: every interrupted session reconciled and failed with a receipt.

use super::identity::init_matches;
use super::receipt::{receipt_body, recorded_limits, Ending, ReceiptFacts};
use super::{life, lock, Runtime};
use crate::error::ControlError;
use crate::ports::{self, ReceiptView, Transitions};
use crate::process;
use glove_types::ids::SessionId;
use glove_types::policy::ResourceLimits;
use glove_types::stage::SessionStage;
use serde_json::{json, Value};
use std::time::Duration;

/// What recovery did to a session's processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Reconciled {
    /// The recorded init identity matched (and the init was killed).
    pub(super) matched: bool,
    /// The recorded launcher was killed instead.
    pub(super) launcher_killed: bool,
    /// Session cgroup directories removed after the launcher was killed.
    pub(super) cgroups_removed: usize,
}

impl Reconciled {
    fn describe(&self) -> &'static str {
        if self.matched {
            "matched, sandbox killed"
        } else if self.launcher_killed {
            "not recorded or not matching; the recorded launcher was killed, and the sandbox with it"
        } else {
            "did not match, nothing signalled"
        }
    }

    /// What the receipt records of it.
    fn recovery(
        &self,
        stage: SessionStage,
        replay_error: Option<String>,
    ) -> glove_types::receipt::Recovery {
        glove_types::receipt::Recovery {
            stage,
            identity_matched: self.matched,
            launcher_killed: self.launcher_killed,
            cgroups_removed: self.cgroups_removed as u64,
            killed: self.matched || self.launcher_killed,
            replay_error,
        }
    }
}

impl Runtime {
    /// Recovery at startup (see `docs/operations.md`).
    pub fn recover(&self) -> Vec<Value> {
        let mut out = Vec::new();
        if let Err(e) = self.recover_into(&mut out) {
            tracing::error!(code = e.code().as_str(), "recovery stopped: {e}");
        }
        self.sweep_launcher_records();
        self.compact_store_if_due();
        out
    }

    fn recover_into(&self, out: &mut Vec<Value>) -> Result<(), ControlError> {
        // Every session the store holds, with the stage the store holds for
        // it: one whose records do not replay is failed with a code and a
        // receipt, never skipped. Replay reads each session's records from
        // the store (the lifecycle's record source).
        let stored: Vec<(SessionId, SessionStage)> = {
            let store = lock(&self.store)?;
            store
                .index()
                .iter()
                .map(|s| (s.session_id().clone(), s.stage()))
                .collect()
        };
        for (id, stored_stage) in stored {
            let recovered = {
                let store = lock(&self.store)?;
                glove_lifecycle::recover_stored(&*store, &id, stored_stage)
            };
            let d = match recovered {
                Ok(glove_lifecycle::Recovered::Interrupted(d)) => d,
                Ok(_) => continue,
                Err(u) => {
                    out.extend(self.fail_unreplayable(u));
                    continue;
                }
            };
            let code = d.code();
            let stage = d.stage();
            // Running and stopping sessions recorded the init's identity
            // (a stopping one keeps it from its running stage); a starting
            // one did not (its launcher holds the sandbox for a release
            // that never comes and tears it down when our end of the
            // socket closes).
            let rec = self.reconcile(&id, d.process_identity());
            let binding = d.launch_binding().map(|b| b.digest());
            let matched = rec.matched;
            // A stop whose receipt is already durable only lacks its exit
            // record.
            let d = match d {
                glove_lifecycle::RecoveryDecision::FinishStop(stopping) => {
                    match self.terminal(&id) {
                        Some(r) => {
                            self.finish_stop_at_recovery(&id, stopping, r, matched, out);
                            continue;
                        }
                        None => glove_lifecycle::RecoveryDecision::FinishStop(stopping),
                    }
                }
                other @ (glove_lifecycle::RecoveryDecision::AbandonPreparation(_)
                | glove_lifecycle::RecoveryDecision::ResolveLaunch(_)
                | glove_lifecycle::RecoveryDecision::ReconcileProcess(_)) => other,
            };
            let digests = *d.into_any().digests();
            let facts = ReceiptFacts {
                digests,
                binding,
                limits: self.limits_of(&id),
                projections: vec![],
                adapter: None,
                egress: None,
                mcp: self.recovered_mcp(&id),
                retained: Vec::new(),
                refinement: self.refinement_of(&id),
            };
            let body = receipt_body(
                &id,
                &facts,
                &Ending::Failure {
                    code: code.as_str().into(),
                    message: format!(
                        "gloved restarted with the session {}; identity {}",
                        stage.as_str(),
                        rec.describe()
                    ),
                },
                Some(rec.recovery(stage, None)),
            );
            // Replay again: the decision was consumed above.
            let any = match ports::replay(&*lock(&self.store)?, &id) {
                Some(Ok(a)) => a,
                _ => continue,
            };
            let res = self.fail_any(any, code, &body);
            if res.is_ok() {
                self.forget_launcher(&id);
            }
            tracing::warn!(session_id = ?id.as_str(), code = code.as_str(), matched, ok = res.is_ok(), "session recovered");
            out.push(json!({"session_id": id.as_str(), "code": code.as_str(), "identity_matched": matched}));
        }
        Ok(())
    }

    /// A stop whose receipt is already durable only lacks its exit record:
    /// record it.
    fn finish_stop_at_recovery(
        &self,
        id: &SessionId,
        stopping: glove_lifecycle::ParkedSession<glove_lifecycle::Stopping>,
        r: glove_lifecycle::TerminalReceiptRef,
        matched: bool,
        out: &mut Vec<Value>,
    ) {
        let res = (|| {
            let mut store = lock(&self.store)?;
            let j = lock(&self.receipts)?;
            stopping.enter(|stopping| {
                let p = stopping
                    .log_exit(r, &ReceiptView::new(&j), &mut Transitions::new(&mut store))
                    .map_err(|e| life(&e))?;
                stopping
                    .exit(p)
                    .map(glove_lifecycle::Session::park)
                    .map_err(|e| life(e.error()))
            })
        })();
        tracing::warn!(session_id = ?id.as_str(), ok = res.is_ok(), "stop finished at recovery (receipt was durable)");
        if res.is_ok() {
            self.forget_launcher(id);
        }
        out.push(
            json!({"session_id": id.as_str(), "stage": "exited", "identity_matched": matched}),
        );
    }

    /// Ends what is left of a session's processes at recovery. With the
    /// init's identity recorded, the init if it is still that process;
    /// with none recorded (a crash between release and the running
    /// record), the launcher if it is still the recorded one (the sandbox
    /// init dies with it: parent-death signal). A recorded identity that
    /// does not match means nothing is signalled at all.
    pub(super) fn reconcile(
        &self,
        id: &SessionId,
        recorded: Option<&glove_lifecycle::ProcessIdentity>,
    ) -> Reconciled {
        // The init is signalled through a pidfd opened and checked first
        // (see `process`): never by raw pid after a check.
        let matched = recorded.is_some_and(|ident| {
            process::kill_if_same(
                &process::PidFds,
                i32::try_from(ident.pid()).unwrap_or(0),
                |now| init_matches(ident, now),
                Duration::from_secs(5),
            )
            .matched()
        });
        let cgroups_removed = if recorded.is_none() {
            self.kill_recorded_launcher(id)
        } else {
            None
        };
        Reconciled {
            matched,
            launcher_killed: cgroups_removed.is_some(),
            cgroups_removed: cgroups_removed.unwrap_or(0),
        }
    }

    /// Removes launcher records of sessions that are terminal (a start
    /// that failed after writing one, or a crash after the end).
    pub(super) fn sweep_launcher_records(&self) {
        let Ok(dir) = std::fs::read_dir(&self.cfg.materialization_root) else {
            return;
        };
        for e in dir.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if !(name.starts_with("launcher-") && name.ends_with(".json")) {
                continue;
            }
            let id = std::fs::read(e.path())
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .and_then(|v| v["session_id"].as_str().map(str::to_owned))
                .and_then(|s| SessionId::new(s).ok());
            let terminal = id.as_ref().is_none_or(|id| {
                // A poisoned store keeps the record (fail safe).
                lock(&self.store).is_ok_and(|store| {
                    store.get(id).is_none_or(|r| {
                        matches!(r.stage(), SessionStage::Exited | SessionStage::Failed)
                    })
                })
            });
            if terminal {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    /// The limits the session was admitted with: the stored plan's, decoded
    /// strictly (the plan is what admission checked the policy against and
    /// what the launch spec took its limits from). `None` when the plan
    /// cannot be decoded; nothing is defaulted.
    /// The `mcp` member of a recovered session's receipt (see
    /// [`super::mcp::recovered`]).
    pub(super) fn recovered_mcp(&self, id: &SessionId) -> Option<glove_types::receipt::McpReceipt> {
        let journal = self
            .cfg
            .materialization_root
            .join("mcp")
            .join(format!("{}.journal", id.as_str()));
        let tool = {
            let store = lock(&self.store).ok()?;
            store.get(id).and_then(|s| {
                glove_types::plan::DecodedPlan::decode(s.plan())
                    .ok()
                    .and_then(|p| p.tool_policy_ids().first().map(|t| t.as_str().to_owned()))
            })
        };
        super::mcp::recovered(&journal, tool.as_deref())
    }

    /// A refinement evaluation's facts from its stored plan (no
    /// evaluation: the receipt says the evaluator did not complete).
    pub(super) fn refinement_of(
        &self,
        id: &SessionId,
    ) -> Option<super::evaluation::RefinementFacts> {
        let store = lock(&self.store).ok()?;
        super::evaluation::RefinementFacts::of_stored_plan(store.get(id)?.plan())
    }

    pub(super) fn limits_of(&self, id: &SessionId) -> Option<ResourceLimits> {
        let store = lock(&self.store).ok()?;
        recorded_limits(store.get(id)?.plan())
    }

    /// Fails a session whose records do not replay: its processes are
    /// reconciled as a running session's are (from the last identity that
    /// still decodes, else the recorded launcher), then its receipt is
    /// written and the failure record appended after the last stored one.
    pub(super) fn fail_unreplayable(&self, u: Box<glove_lifecycle::Unreplayable>) -> Option<Value> {
        let id = u.id().clone();
        let code = u.code();
        let replay_error = u.error().code();
        let stage = u.stored_stage();
        if matches!(stage, SessionStage::Exited | SessionStage::Failed) {
            // Failed at an earlier recovery (or terminal before the damage).
            if self.terminal(&id).is_none() {
                tracing::error!(session_id = ?id.as_str(), replay_error = replay_error.as_str(), "a terminal session does not replay and has no receipt");
            }
            return None;
        }
        let r = self.reconcile(&id, u.process_identity());
        let digests = {
            let store = lock(&self.store).ok()?;
            store.get(&id).map(glove_journal::lifecycle::stored_digests)
        }?;
        let facts = ReceiptFacts {
            digests,
            binding: u.launch_binding().map(|b| b.digest()),
            limits: self.limits_of(&id),
            projections: vec![],
            adapter: None,
            egress: None,
            mcp: self.recovered_mcp(&id),
            retained: Vec::new(),
            refinement: self.refinement_of(&id),
        };
        let body = receipt_body(
            &id,
            &facts,
            &Ending::Failure {
                code: code.as_str().into(),
                message: format!(
                    "gloved restarted with the session {} and its records do not replay ({}); identity {}",
                    stage.as_str(),
                    replay_error.as_str(),
                    r.describe()
                ),
            },
            Some(r.recovery(stage, Some(replay_error.as_str().to_owned()))),
        );
        let res = self.append_receipt(&id, &body).and_then(|receipt| {
            let mut store = lock(&self.store)?;
            let j = lock(&self.receipts)?;
            (*u).log_fail(
                receipt,
                &ReceiptView::new(&j),
                &mut Transitions::new(&mut store),
            )
            .map_err(|e| life(&e))
        });
        if res.is_ok() {
            self.forget_launcher(&id);
        }
        tracing::error!(session_id = ?id.as_str(), code = code.as_str(), replay_error = replay_error.as_str(), ok = res.is_ok(), "a session whose records do not replay was failed");
        Some(
            json!({"session_id": id.as_str(), "code": code.as_str(), "replay_error": replay_error.as_str(), "identity_matched": r.matched}),
        )
    }
}
