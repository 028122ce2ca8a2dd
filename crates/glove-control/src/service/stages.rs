//! The owner's stage methods: `stages_list`, `stage_diff`, `stage_remove`
//! and `stage_apply`. Each answers only a caller on the owner socket
//! ([`Caller::is_owner`]); a controller, local or remote, is refused with
//! `control_owner_only` (`apply_remote_refused` for `stage_apply`), so a
//! host path never reaches it and it can never apply.

use super::*;
use crate::apply::books::Books;
use crate::apply::run::{apply, check_grant, ApplyInput};
use crate::apply::TrustPolicy;
use crate::stages::{self, StageStore};
use glove_types::apply::SignedApplyAuthorization;
use glove_types::codes::apply::APPLY_REMOTE_REFUSED;
use glove_types::codes::control::CONTROL_OWNER_ONLY;

/// What apply needs in the service: the trust policy and the books.
#[derive(Debug)]
pub(crate) struct ApplyParts {
    pub(crate) trust: TrustPolicy,
    pub(crate) books: Mutex<Books>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StageParams {
    session_id: String,
    #[serde(default)]
    alias: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DiffParams {
    session_id: String,
    #[serde(default)]
    alias: Option<String>,
    /// `stat` (default), `json` or `patch`.
    #[serde(default)]
    format: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ApplyParams {
    session_id: String,
    #[serde(default)]
    alias: Option<String>,
    /// The signed authorization file's text.
    authorization: String,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub(super) fn owner_only(auth: &Caller, code: glove_types::ErrorCode) -> Result<(), ControlError> {
    if auth.is_owner() {
        Ok(())
    } else {
        Err(ControlError::from(Rejection::new(
            code,
            "only the owner at this machine (the owner socket) may do this",
        )))
    }
}

impl Service {
    fn stage_store(&self) -> Result<StageStore, ControlError> {
        Ok(StageStore::open(&self.runtime()?.stage_dir())?)
    }

    pub(super) fn stages_list(&self, auth: &Caller) -> Result<Value, ControlError> {
        owner_only(auth, CONTROL_OWNER_ONLY)?;
        let (all, broken) = self.stage_store()?.list()?;
        let stages: Vec<Value> = all.iter().map(stages::StageSummary::to_json).collect();
        Ok(json!({"stages": stages, "broken": broken}))
    }

    pub(super) fn stage_diff(&self, auth: &Caller, p: DiffParams) -> Result<Value, ControlError> {
        owner_only(auth, CONTROL_OWNER_ONLY)?;
        session_id(p.session_id.clone())?;
        let stage = self
            .stage_store()?
            .open_stage(&p.session_id, p.alias.as_deref())?;
        let seen = stages::inspect(&stage, now_ms())?;
        let changes = seen.changes();
        let trees = seen.trees();
        let ws = |e: crate::workspace::WorkspaceError| ControlError::from(e.to_rejection());
        let out = match p.format.as_deref().unwrap_or("stat") {
            "stat" => {
                json!({"stat": crate::workspace::render::render_stat(&changes, &trees, false).map_err(ws)?})
            }
            "json" => crate::workspace::render::render_json(&changes, &trees).map_err(ws)?,
            "patch" => {
                json!({"patch": crate::workspace::render::patch::render_patch(&changes, &trees, false)
                .map_err(ws)?.complete().map_err(ws)?})
            }
            _ => {
                return Err(invalid_params(
                    &Rejection::new(CONTROL_INVALID_PARAMS, "format is stat, json or patch")
                        .at("format"),
                ))
            }
        };
        let mut out = out;
        seen.add_digests(&mut out);
        seen.release()?;
        Ok(out)
    }

    pub(super) fn stage_remove(
        &self,
        auth: &Caller,
        p: StageParams,
    ) -> Result<Value, ControlError> {
        owner_only(auth, CONTROL_OWNER_ONLY)?;
        session_id(p.session_id.clone())?;
        self.stage_store()?
            .remove(&p.session_id, p.alias.as_deref())?;
        Ok(json!({"removed": true}))
    }

    pub(super) fn stage_apply(&self, auth: &Caller, p: ApplyParams) -> Result<Value, ControlError> {
        owner_only(auth, APPLY_REMOTE_REFUSED)?;
        session_id(p.session_id.clone())?;
        let parts = self.apply.as_ref().ok_or_else(internal)?;
        let signed = SignedApplyAuthorization::decode_file(p.authorization.as_bytes())?;
        let mut books = lock(&parts.books)?;
        check_grant(&books, &signed)?;
        let stage = self
            .stage_store()?
            .open_stage(&p.session_id, p.alias.as_deref())?;
        let receipts = self.receipts.as_ref().ok_or_else(internal)?;
        let mut receipts = lock(receipts)?;
        let ended = apply(
            &mut books,
            &mut receipts,
            &ApplyInput {
                stage: &stage,
                signed: &signed,
                trust: &parts.trust,
            },
        )?;
        Ok(ended.to_json())
    }

    /// Freezes the stages a previous run left live (their session died with
    /// it, and session recovery has just ended its sandbox): each is
    /// attached again read-only and its final manifest taken. A stage whose
    /// image is still mounted (the sandbox's mount namespace not yet gone)
    /// is retried for up to five seconds, then left for its first use.
    pub fn recover_stages(&self) -> Vec<Value> {
        let Ok(store) = self.stage_store() else {
            return Vec::new();
        };
        let Ok((all, _)) = store.list() else {
            return Vec::new();
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut out = Vec::new();
        for s in all
            .iter()
            .filter(|s| !s.running && s.record.state == stages::StageState::Live)
        {
            let name = format!("{}/{}", s.record.session_id, s.record.alias);
            let frozen = store
                .open_stage(&s.record.session_id, Some(&s.record.alias))
                .and_then(|stage| loop {
                    match stages::freeze(&stage, now_ms()) {
                        Err(e)
                            if e.code() == glove_types::codes::retained::RETAINED_STAGE_BUSY
                                && std::time::Instant::now() < deadline =>
                        {
                            std::thread::sleep(std::time::Duration::from_millis(50));
                        }
                        other => break other,
                    }
                });
            out.push(match frozen {
                Ok(_) => json!({"stage_frozen": name}),
                Err(e) => json!({"stage_left_live": name, "code": e.code().as_str()}),
            });
        }
        out
    }

    /// Removes the stages made more than `max_age_ms` ago whose session is
    /// over (a running one is kept); one report each.
    pub fn prune_stages(&self, max_age_ms: u64) -> Vec<Value> {
        let Ok(store) = self.stage_store() else {
            return Vec::new();
        };
        let Ok((all, _)) = store.list() else {
            return Vec::new();
        };
        let now = now_ms();
        all.iter()
            .filter(|s| !s.running && now.saturating_sub(s.record.created_at_ms) > max_age_ms)
            .map(|s| {
                let r = &s.record;
                match store.remove(&r.session_id, Some(&r.alias)) {
                    Ok(()) => json!({"stage_removed": format!("{}/{}", r.session_id, r.alias)}),
                    Err(e) => json!({"stage_kept": format!("{}/{}", r.session_id, r.alias),
                                     "code": e.code().as_str()}),
                }
            })
            .collect()
    }

    /// Recovers applies a previous run left unfinished (see
    /// `crate::apply::recover`); one JSON report each.
    pub fn recover_applies(&self) -> Vec<Value> {
        let (Some(parts), Some(receipts)) = (&self.apply, &self.receipts) else {
            return Vec::new();
        };
        let (Ok(mut books), Ok(mut receipts)) = (lock(&parts.books), lock(receipts)) else {
            return Vec::new();
        };
        crate::apply::recover::recover(&mut books, &mut receipts)
            .into_iter()
            .map(|r| json!({"apply_recovery": r.to_json()}))
            .collect()
    }
}
