//! The lifecycle's ports over the journals, for the records after creation.
//!
//! Mapping (the same as `proptests/src/lifecycle_store.rs`, which checks it
//! against a model): lifecycle record 0 is the store's creation record
//! (re-encoded on lookup, written by `create_session`'s own adapter in
//! [`super::service`]); lifecycle record `k ≥ 1` is the session's `k`-th
//! store transition, with the record's stage and its bytes verbatim as the
//! evidence. An append anywhere but the session's next position is refused
//! (`lifecycle_record_sequence`).
//!
//! [`ReceiptView`] finds a session's terminal receipt by the `session_id`
//! of the receipt body; two receipts naming one session fail closed.

use glove_journal::receipt::StoredReceipt;
use glove_journal::{ReceiptJournal, SessionStore};
use glove_lifecycle::{
    AnySession, AppendReceipt, PendingRecord, PlanDigests, PortError, ReceiptLog, SessionEntry,
    SessionRecord, Subject, TerminalReceiptRef, TransitionLog,
};
use glove_types::codes::journal::JOURNAL_RECORD_KIND_REFUSED;
use glove_types::codes::lifecycle::{
    LIFECYCLE_RECEIPT_MISMATCH, LIFECYCLE_RECORD_FOREIGN, LIFECYCLE_RECORD_SEQUENCE,
};
use glove_types::ids::SessionId;
use glove_types::Sha256Digest;

/// Lifecycle record 0 of a stored session, re-encoded from its creation.
pub fn creation_bytes(s: &glove_journal::session::SessionRecord) -> Result<Vec<u8>, PortError> {
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

/// Every lifecycle record of one session, in order.
pub fn session_records(store: &SessionStore, id: &SessionId) -> Option<Vec<Vec<u8>>> {
    let s = store.get(id)?;
    let mut out = vec![creation_bytes(s).ok()?];
    for t in store.transitions(id).unwrap_or(&[]) {
        out.push(t.evidence().to_vec());
    }
    Some(out)
}

/// Every lifecycle record of the store, in store order (for `recover_all`).
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
    all.into_iter().map(|(_, b)| b).collect()
}

/// Replays one session into its typestate.
pub fn replay(store: &SessionStore, id: &SessionId) -> Option<Result<AnySession, PortError>> {
    let records = session_records(store, id)?;
    Some(glove_lifecycle::replay_session(&records).map_err(|e| PortError::new(e.code())))
}

/// [`TransitionLog`] for records 1 and later (see the module docs).
pub struct Transitions<'a>(pub &'a mut SessionStore);

impl TransitionLog for Transitions<'_> {
    fn append(&mut self, record: &PendingRecord<'_>) -> Result<AppendReceipt, PortError> {
        let Subject::Session(id) = record.subject() else {
            return Err(PortError::new(JOURNAL_RECORD_KIND_REFUSED));
        };
        let decoded =
            SessionRecord::decode(record.bytes()).map_err(|e| PortError::new(e.code()))?;
        if &decoded.session_id != id {
            return Err(PortError::new(LIFECYCLE_RECORD_FOREIGN));
        }
        let next = self.0.transitions(id).map_or(0, |t| t.len() as u64 + 1);
        if decoded.seq != record.seq() || record.seq() != next || next == 0 {
            return Err(PortError::new(LIFECYCLE_RECORD_SEQUENCE));
        }
        self.0
            .transition(id, decoded.entry.stage(), record.bytes())
            .map_err(|e| PortError::new(e.code()))?;
        Ok(record.acknowledge())
    }

    fn lookup(&self, subject: Subject<'_>, seq: u64) -> Result<Option<Vec<u8>>, PortError> {
        let Subject::Session(id) = subject else {
            return Err(PortError::new(JOURNAL_RECORD_KIND_REFUSED));
        };
        let Some(s) = self.0.get(id) else {
            return Ok(None);
        };
        let Some(k) = seq.checked_sub(1) else {
            return creation_bytes(s).map(Some);
        };
        Ok(usize::try_from(k)
            .ok()
            .and_then(|k| self.0.transitions(id).unwrap_or(&[]).get(k))
            .map(|t| t.evidence().to_vec()))
    }
}

/// The reference the lifecycle records for a stored receipt.
pub fn reference(r: &StoredReceipt) -> TerminalReceiptRef {
    TerminalReceiptRef::new(r.seq, Sha256Digest::of(&r.envelope))
}

fn body_session(r: &StoredReceipt) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(&r.envelope).ok()?;
    Some(v.get("body")?.get("session_id")?.as_str()?.to_owned())
}

/// [`ReceiptLog`] over the receipt journal (see the module docs).
pub struct ReceiptView<'a>(pub &'a ReceiptJournal);

impl ReceiptLog for ReceiptView<'_> {
    fn terminal_receipt(
        &self,
        subject: Subject<'_>,
    ) -> Result<Option<TerminalReceiptRef>, PortError> {
        let Subject::Session(id) = subject else {
            return Err(PortError::new(JOURNAL_RECORD_KIND_REFUSED));
        };
        let mut found = self
            .0
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
