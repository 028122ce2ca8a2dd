//! `session_list`: every session the store holds, oldest first, paged by
//! creation sequence.

use super::*;

/// Sessions per page when the caller does not say.
pub(super) const DEFAULT_LIST_SESSIONS: u64 = 100;
/// Most sessions in one page.
pub(super) const MAX_LIST_SESSIONS: u64 = 256;

impl Service {
    pub(super) fn session_list(&self, p: ListParams) -> Result<Value, ControlError> {
        let max = p.max_sessions.unwrap_or(DEFAULT_LIST_SESSIONS);
        if max == 0 || max > MAX_LIST_SESSIONS {
            return Err(invalid_params(
                &Rejection::new(
                    CONTROL_INVALID_PARAMS,
                    format!("max_sessions must be 1 to {MAX_LIST_SESSIONS}"),
                )
                .at("max_sessions"),
            ));
        }
        let after = p.after_seq.unwrap_or(0);
        let store = lock(self.store.as_ref().ok_or_else(internal)?)?;
        let mut records: Vec<&SessionRecord> = store
            .index()
            .iter()
            .filter(|r| r.created_seq() > after)
            .collect();
        records.sort_by_key(|r| r.created_seq());
        let more = records.len() as u64 > max;
        records.truncate(usize::try_from(max).unwrap_or(usize::MAX));
        let sessions: Vec<Value> = records.iter().map(|r| list_entry(r)).collect();
        let next = if more {
            records.last().map(|r| r.created_seq())
        } else {
            None
        };
        Ok(json!({
            "now_ms": self.clock.now_ms(),
            "sessions": sessions,
            "next_after_seq": next,
        }))
    }
}

fn list_entry(r: &SessionRecord) -> Value {
    // The stored plan was admitted when it was created; a plan that no
    // longer decodes (it cannot happen short of a bug) is listed without
    // the two fields it would give.
    let plan = DecodedPlan::decode(r.plan()).ok();
    json!({
        "session_id": r.session_id().as_str(),
        "stage": r.stage().as_str(),
        "runtime_template_id": plan.as_ref().map(|p| p.runtime_template_id().as_str()),
        "issued_at_ms": plan.as_ref().map(DecodedPlan::issued_at_ms),
        "created_seq": r.created_seq(),
        "stage_seq": r.stage_seq(),
    })
}
