//! The lifecycle's ports over the journals, as the runtime uses them.
//!
//! The adapters themselves are `glove_journal::lifecycle` (shared with the
//! model-based tests in `proptests/`, which check them against a model):
//! the session store is the lifecycle's `RecordSource` (replay and recovery
//! read records from it, never from bytes passed around);
//! lifecycle record 0 is the store's creation record (re-encoded on lookup;
//! written by `create_session` in [`crate::service`], which stages the plan
//! first); lifecycle record `k ≥ 1` is the session's `k`-th store
//! transition, with the record's stage and its bytes verbatim as the
//! evidence. An append anywhere but the session's next position is refused
//! (`lifecycle_record_sequence`). A session's terminal receipt is found by
//! the `session_id` of the receipt body; two receipts naming one session
//! fail closed.
//!
//! Here the store and the receipt journal live behind locks, so the runtime
//! wraps the locked value for one call: [`Transitions`] and [`ReceiptView`]
//! are the borrowed forms of the shared adapters.

use glove_journal::lifecycle::{StoreLog, StoreReceipts};
use glove_journal::{ReceiptJournal, SessionStore};
use glove_lifecycle::{AnySession, PortError};
use glove_types::ids::SessionId;

/// `TransitionLog` over a borrowed (locked) session store.
pub type Transitions<'a> = StoreLog<&'a mut SessionStore>;

/// `ReceiptLog` over a borrowed (locked) receipt journal.
pub type ReceiptView<'a> = StoreReceipts<&'a ReceiptJournal>;

/// Replays one session into its typestate.
pub fn replay(store: &SessionStore, id: &SessionId) -> Option<Result<AnySession, PortError>> {
    store.get(id)?;
    Some(glove_lifecycle::replay_session(store, id).map_err(|e| PortError::new(e.code())))
}

/// Compacts the receipt journal when acknowledged receipts take enough of
/// its budget ([`ReceiptJournal::needs_compaction`]): called after every
/// acknowledgement and at startup. A failed compaction leaves the handle
/// refusing writes (`journal_poisoned`) until `gloved` restarts; it is
/// logged and reported, never hidden.
pub fn compact_if_due(j: &mut ReceiptJournal) -> Result<u64, glove_journal::JournalError> {
    if !j.needs_compaction() {
        return Ok(0);
    }
    match j.compact() {
        Ok(r) => {
            tracing::info!(
                removed = r.removed,
                kept = r.kept,
                "receipt journal compacted"
            );
            Ok(r.removed)
        }
        Err(e) => {
            tracing::error!(
                code = e.code().as_str(),
                "receipt journal compaction failed: {e}"
            );
            Err(e)
        }
    }
}

/// Reserves receipt room for `id`; when the journal is full but holds
/// acknowledged receipts, compacts them away and tries once more.
pub fn reserve(
    j: &mut ReceiptJournal,
    id: &SessionId,
) -> Result<glove_journal::receipt::Reservation, glove_journal::JournalError> {
    match j.reserve(id) {
        Err(e)
            if e.code() == glove_types::codes::journal::RECEIPT_RESERVATION_REFUSED
                && j.reclaimable().records > 0 =>
        {
            j.compact()?;
            j.reserve(id)
        }
        r => r,
    }
}

/// Compacts the session store when [`SessionStore::needs_compaction`] says
/// so, carrying the used start-authorization nonces (`carry`, with their
/// expiry) so that an authorization whose start record is compacted away
/// is still refused as replayed. With `carry` unknown (its lock poisoned)
/// nothing is compacted: dropping nonces would fail open. A failure is
/// logged; the store then refuses writes until `gloved` restarts.
pub fn compact_store_if_due(
    store: &mut SessionStore,
    carry: Option<&[([u8; 16], u64)]>,
    now_ms: u64,
) -> Option<glove_journal::session::CompactReport> {
    if !store.needs_compaction() {
        return None;
    }
    let Some(carry) = carry else {
        tracing::error!(
            "the session store needs compaction but the used nonces are unknown; not compacting"
        );
        return None;
    };
    match store.compact(carry, now_ms) {
        Ok(r) => {
            tracing::info!(
                generation = r.generation,
                kept = r.sessions_kept,
                dropped = r.sessions_dropped,
                nonces = r.nonces_carried,
                "session store compacted"
            );
            Some(r)
        }
        Err(e) => {
            tracing::error!(
                code = e.code().as_str(),
                "session store compaction failed: {e}"
            );
            None
        }
    }
}
