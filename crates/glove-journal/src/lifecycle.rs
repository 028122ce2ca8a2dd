//! The lifecycle's ports over this crate's stores: [`StoreLog`] implements
//! glove-lifecycle's [`TransitionLog`] on a [`SessionStore`],
//! [`StoreReceipts`] its [`ReceiptLog`] on a [`ReceiptJournal`]. The one
//! adapter both `gloved` and the model-based tests (`proptests/`) use.
//!
//! Both hold their store either owned or borrowed (`StoreLog<SessionStore>`,
//! `StoreLog<&mut SessionStore>`; the same for receipts), so a service can
//! wrap the store it keeps behind a lock for the duration of one call.
//!
//! The session store does not know the lifecycle's records: it keeps its own
//! binary creation record and, per transition, a stage byte plus opaque
//! canonical-JSON evidence; the lifecycle hands its log canonical-JSON
//! records numbered per session. The adapter maps them as follows.
//!
//! | lifecycle record | session store |
//! | --- | --- |
//! | seq 0, `created` with both plan digests | a creation record: session id, idempotency key and plan staged with [`StoreLog::stage_plan`], the record's `controller_plan_digest`; the store computes `plan_content_digest` from the plan and the adapter refuses the append unless it equals the record's. The lifecycle bytes are not stored: canonical JSON is deterministic, so [`StoreLog::lookup`] re-encodes them from the creation record. |
//! | seq `k` ≥ 1 (any other stage) | the session's `k`-th transition record: stage = the record's stage, evidence = the lifecycle record's bytes verbatim. |
//!
//! Consequences:
//!
//! * the store checks every transition against the same stage graph as the
//!   lifecycle, and its replay (strict, torn tail repaired) is the only
//!   source of the records [`all_records`] hands to
//!   `glove_lifecycle::recover_all`;
//! * an append at any position other than the session's next one is
//!   refused (`lifecycle_record_sequence`), so the `(subject, seq)` slots are
//!   write-once as the port contract requires; the lifecycle looks a slot up
//!   before appending, so a repeat never reaches `append`;
//! * only sessions: an apply-transaction record is refused with
//!   `journal_record_kind_refused` (the apply journal is another file);
//! * a creation whose plan was not staged, or whose digests do not match
//!   the staged plan, is refused with `lifecycle_log_unavailable` (nothing
//!   appended);
//! * journal failures pass through with their own codes (`journal_*`,
//!   `store_*`, `session_conflict`); a poisoned store fails every later
//!   append, and the caller reopens it.
//!
//! Terminal receipts: [`StoreReceipts`] finds a session's receipt by the
//! `session_id` field of the receipt body (the receipt journal's in-memory
//! state does not keep the reservation's session id, and compaction drops
//! it from the file, while the body is covered by the receipt MACs and
//! survives compaction). The reference is the receipt's sequence number and
//! the SHA-256 of its stored envelope. More than one receipt naming one
//! session is ambiguous and fails closed (`lifecycle_receipt_mismatch`).
//! Receipts already acknowledged and compacted away are not found.

use crate::receipt::{ReceiptJournal, ReceiptKind, StoredReceipt};
use crate::session::{NewSession, SessionRecord as StoredSession};
use crate::{JournalError, SessionStore};
use core::borrow::{Borrow, BorrowMut};
use glove_lifecycle::{
    AppendReceipt, PendingRecord, PlanDigests, PortError, ReceiptLog, SessionEntry, SessionRecord,
    Subject, TerminalReceiptRef, TransitionLog,
};
use glove_types::codes::journal::JOURNAL_RECORD_KIND_REFUSED;
use glove_types::codes::lifecycle::{
    LIFECYCLE_LOG_UNAVAILABLE, LIFECYCLE_RECEIPT_MISMATCH, LIFECYCLE_RECORD_FOREIGN,
    LIFECYCLE_RECORD_INVALID, LIFECYCLE_RECORD_MISSING_CREATION, LIFECYCLE_RECORD_SEQUENCE,
};
use glove_types::ids::{IdempotencyKey, SessionId};
use glove_types::Sha256Digest;
use std::collections::HashMap;

fn journal_err(e: JournalError) -> PortError {
    PortError::new(e.code())
}

/// Lifecycle record 0 of a stored session, re-encoded from its creation.
pub fn creation_bytes(s: &StoredSession) -> Result<Vec<u8>, PortError> {
    SessionRecord {
        session_id: s.session_id().clone(),
        seq: 0,
        prev: None,
        entry: SessionEntry::Created {
            digests: PlanDigests::new(*s.plan_content_digest(), *s.controller_plan_digest()),
        },
    }
    .encode()
    .map_err(|e| PortError::new(e.code()))
}

/// Every lifecycle record of one session, in order (for
/// `glove_lifecycle::replay_session`); `None` if the store does not hold
/// the session.
pub fn session_records(store: &SessionStore, id: &SessionId) -> Option<Vec<Vec<u8>>> {
    let s = store.get(id)?;
    let mut out = vec![creation_bytes(s).ok()?];
    for t in store.transitions(id).unwrap_or(&[]) {
        out.push(t.evidence().to_vec());
    }
    Some(out)
}

/// Every lifecycle record the store holds, in store order (for
/// `glove_lifecycle::recover_all`). A session whose creation record cannot
/// be re-encoded is left out; that cannot happen for a session the store
/// accepted, whose id and digests it validated.
pub fn all_records(store: &SessionStore) -> Vec<Vec<u8>> {
    let mut all: Vec<(u64, Vec<u8>)> = Vec::new();
    for s in store.index().iter() {
        if let Ok(b) = creation_bytes(s) {
            all.push((s.created_seq(), b));
        }
        for t in store.transitions(s.session_id()).unwrap_or(&[]) {
            all.push((t.seq(), t.evidence().to_vec()));
        }
    }
    all.sort_by_key(|(seq, _)| *seq);
    all.into_iter().map(|(_, bytes)| bytes).collect()
}

/// What a creation needs beyond the lifecycle's record.
#[derive(Debug)]
struct StagedPlan {
    key: IdempotencyKey,
    plan: Vec<u8>,
}

/// A [`TransitionLog`] over the session store (see the module docs), owning
/// the store (`StoreLog<SessionStore>`) or borrowing it
/// (`StoreLog<&mut SessionStore>`).
#[derive(Debug)]
pub struct StoreLog<S: BorrowMut<SessionStore> = SessionStore> {
    store: S,
    /// Plans staged for creations not yet appended.
    staged: HashMap<SessionId, StagedPlan>,
}

impl<S: BorrowMut<SessionStore>> StoreLog<S> {
    /// Wraps an open store.
    pub fn new(store: S) -> Self {
        StoreLog {
            store,
            staged: HashMap::new(),
        }
    }

    /// Stages the idempotency key and canonical plan that the creation
    /// record of `session` will carry. Call before `Session::log_create`.
    pub fn stage_plan(&mut self, session: &SessionId, key: IdempotencyKey, plan: Vec<u8>) {
        self.staged
            .insert(session.clone(), StagedPlan { key, plan });
    }

    /// The store.
    pub fn store(&self) -> &SessionStore {
        self.store.borrow()
    }

    /// The store, for direct use (for example to take its anchor).
    pub fn store_mut(&mut self) -> &mut SessionStore {
        self.store.borrow_mut()
    }

    /// Every lifecycle record the store holds, in store order: feed them to
    /// `glove_lifecycle::recover_all` (see [`all_records`]).
    pub fn records(&self) -> Vec<Vec<u8>> {
        all_records(self.store())
    }
}

impl<S: BorrowMut<SessionStore>> TransitionLog for StoreLog<S> {
    fn append(&mut self, record: &PendingRecord<'_>) -> Result<AppendReceipt, PortError> {
        let Subject::Session(id) = record.subject() else {
            return Err(PortError::new(JOURNAL_RECORD_KIND_REFUSED));
        };
        let decoded =
            SessionRecord::decode(record.bytes()).map_err(|e| PortError::new(e.code()))?;
        if &decoded.session_id != id {
            return Err(PortError::new(LIFECYCLE_RECORD_FOREIGN));
        }
        let store: &mut SessionStore = self.store.borrow_mut();
        let next = store.transitions(id).map_or(0, |t| t.len() as u64 + 1);
        if decoded.seq != record.seq() || record.seq() != next {
            return Err(PortError::new(LIFECYCLE_RECORD_SEQUENCE));
        }
        match (&decoded.entry, next) {
            (SessionEntry::Created { digests }, 0) => {
                let staged = self
                    .staged
                    .get(id)
                    .ok_or(PortError::new(LIFECYCLE_LOG_UNAVAILABLE))?;
                if Sha256Digest::of(&staged.plan) != digests.plan_content_digest() {
                    return Err(PortError::new(LIFECYCLE_LOG_UNAVAILABLE));
                }
                let created = store
                    .create_session(NewSession {
                        session_id: id,
                        idempotency_key: &staged.key,
                        controller_plan_digest: digests.controller_plan_digest(),
                        plan: &staged.plan,
                    })
                    .map_err(journal_err)?;
                // Lookups re-encode record 0: it must come back byte for byte.
                if creation_bytes(created.record())? != record.bytes() {
                    return Err(PortError::new(LIFECYCLE_RECORD_INVALID));
                }
                self.staged.remove(id);
            }
            (SessionEntry::Created { .. }, _) => {
                return Err(PortError::new(LIFECYCLE_RECORD_SEQUENCE));
            }
            (_, 0) => return Err(PortError::new(LIFECYCLE_RECORD_MISSING_CREATION)),
            (entry, _) => {
                let _ = store
                    .transition(id, entry.stage(), record.bytes())
                    .map_err(journal_err)?;
            }
        }
        Ok(record.acknowledge())
    }

    fn lookup(&self, subject: Subject<'_>, seq: u64) -> Result<Option<Vec<u8>>, PortError> {
        let Subject::Session(id) = subject else {
            return Err(PortError::new(JOURNAL_RECORD_KIND_REFUSED));
        };
        let store = self.store();
        let Some(s) = store.get(id) else {
            return Ok(None);
        };
        let Some(k) = seq.checked_sub(1) else {
            return creation_bytes(s).map(Some);
        };
        let transitions = store.transitions(id).unwrap_or(&[]);
        Ok(usize::try_from(k)
            .ok()
            .and_then(|k| transitions.get(k))
            .map(|t| t.evidence().to_vec()))
    }
}

/// A [`ReceiptLog`] over the receipt journal (see the module docs), owning
/// it or borrowing it.
#[derive(Debug)]
pub struct StoreReceipts<J: Borrow<ReceiptJournal> = ReceiptJournal> {
    journal: J,
}

impl<J: Borrow<ReceiptJournal>> StoreReceipts<J> {
    /// Wraps an open receipt journal.
    pub fn new(journal: J) -> Self {
        StoreReceipts { journal }
    }

    /// The receipt journal.
    pub fn journal(&self) -> &ReceiptJournal {
        self.journal.borrow()
    }
}

impl<J: BorrowMut<ReceiptJournal>> StoreReceipts<J> {
    /// The terminal receipt of `session`: the durable one if there is one,
    /// otherwise `body` appended now (spending a held reservation, or a new
    /// one). `body` must name `session` in its `session_id` field.
    pub fn get_or_append(
        &mut self,
        session: &SessionId,
        body: &[u8],
    ) -> Result<TerminalReceiptRef, PortError> {
        if let Some(r) = self.terminal_receipt(Subject::Session(session))? {
            return Ok(r);
        }
        let journal: &mut ReceiptJournal = self.journal.borrow_mut();
        let reservation = match journal.held_reservation(session) {
            Some(r) => r,
            None => journal.reserve(session).map_err(journal_err)?,
        };
        let stored = journal
            .append_receipt(&reservation, ReceiptKind::ResourceV1, body)
            .map_err(journal_err)?;
        if body_session(&stored).as_deref() != Some(session.as_str()) {
            return Err(PortError::new(LIFECYCLE_RECEIPT_MISMATCH));
        }
        Ok(reference(&stored))
    }
}

/// The reference the lifecycle records for a stored receipt: its sequence
/// number and the SHA-256 of its stored envelope.
pub fn reference(r: &StoredReceipt) -> TerminalReceiptRef {
    TerminalReceiptRef::new(r.seq, Sha256Digest::of(&r.envelope))
}

/// The `session_id` of a stored receipt's body.
fn body_session(r: &StoredReceipt) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(&r.envelope).ok()?;
    Some(v.get("body")?.get("session_id")?.as_str()?.to_owned())
}

impl<J: Borrow<ReceiptJournal>> ReceiptLog for StoreReceipts<J> {
    fn terminal_receipt(
        &self,
        subject: Subject<'_>,
    ) -> Result<Option<TerminalReceiptRef>, PortError> {
        let Subject::Session(id) = subject else {
            return Err(PortError::new(JOURNAL_RECORD_KIND_REFUSED));
        };
        let mut found = self
            .journal()
            .receipts()
            .iter()
            .filter(|r| body_session(r).as_deref() == Some(id.as_str()));
        match (found.next(), found.next()) {
            (None, _) => Ok(None),
            (Some(r), None) => Ok(Some(reference(r))),
            (Some(_), Some(_)) => Err(PortError::new(LIFECYCLE_RECEIPT_MISMATCH)),
        }
    }
}
