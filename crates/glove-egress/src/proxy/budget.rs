//! Budgets: the session's refusal budget (refusals journaled per second)
//! and an endpoint's connection and byte limits, taken before a decision
//! is recorded. The meters that count bytes as they flow are in
//! `crate::meter`.

use super::record::Refusal;
use super::{now_ms, ConnCtx, Shared};
use crate::meter::EndpointState;
use glove_types::codes::egress::*;
use glove_types::egress::Endpoint;

/// Refusals journaled per second at most, per session (see `refuse`).
pub(crate) const REFUSAL_EVENTS_PER_SECOND: u32 = 64;

impl Shared {
    pub(super) fn refusal_event_allowed(&self) -> bool {
        let second = now_ms() / 1000;
        let Ok(mut w) = self.refusal_window.lock() else {
            return false;
        };
        if w.0 != second {
            *w = (second, 0);
        }
        if w.1 >= REFUSAL_EVENTS_PER_SECOND {
            return false;
        }
        w.1 += 1;
        true
    }
}

impl ConnCtx {
    /// Takes one upstream connection and `head` bytes (a request head as
    /// the upstream gets it; 0 for a tunnel, whose bytes count as they
    /// flow) from the endpoint's budget. A head that does not fit what is
    /// left of the byte limit is refused whole: none of it is sent.
    pub(super) fn take_budget(
        &self,
        st: &EndpointState,
        ep: &Endpoint,
        head: u64,
    ) -> Result<(), Refusal> {
        if st.bytes_exhausted() {
            return Err(Refusal::new(
                EGRESS_LIMIT_REACHED,
                format!("{ep} has used its byte limit"),
            ));
        }
        if !st.reserve(head) {
            return Err(Refusal::new(
                EGRESS_LIMIT_REACHED,
                format!(
                    "the request head ({head} bytes) is over what is left of {ep}'s byte limit"
                ),
            ));
        }
        if !st.take_connection() {
            st.refund(head);
            return Err(Refusal::new(
                EGRESS_LIMIT_REACHED,
                format!("{ep} has used its connection limit"),
            ));
        }
        Ok(())
    }
}
