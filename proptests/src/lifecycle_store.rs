//! The lifecycle's ports over `glove-journal`: [`StoreLog`] implements
//! [`TransitionLog`] on a [`SessionStore`], [`StoreReceipts`] implements
//! [`ReceiptLog`] on a [`ReceiptJournal`].
//!
//! The two crates do not know each other: the session store keeps its own
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
//!   source of the records [`StoreLog::records`] hands to
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

use glove_journal::receipt::{ReceiptJournal, ReceiptKind, StoredReceipt};
use glove_journal::session::NewSession;
use glove_journal::{JournalError, SessionStore};
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

/// What a creation needs beyond the lifecycle's record.
#[derive(Debug)]
struct StagedPlan {
    key: IdempotencyKey,
    plan: Vec<u8>,
}

/// A [`TransitionLog`] over the session store (see the module docs).
#[derive(Debug)]
pub struct StoreLog {
    store: SessionStore,
    /// Plans staged for creations not yet appended.
    staged: HashMap<SessionId, StagedPlan>,
}

impl StoreLog {
    /// Wraps an open store.
    pub fn new(store: SessionStore) -> StoreLog {
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
        &self.store
    }

    /// The store, for direct use (for example to take its anchor).
    pub fn store_mut(&mut self) -> &mut SessionStore {
        &mut self.store
    }

    /// Every lifecycle record the store holds, in store order: feed them to
    /// `glove_lifecycle::recover_all`.
    pub fn records(&self) -> Result<Vec<Vec<u8>>, PortError> {
        let mut all: Vec<(u64, Vec<u8>)> = Vec::new();
        for s in self.store.index().iter() {
            all.push((s.created_seq(), creation_bytes(s)?));
            for t in self.store.transitions(s.session_id()).unwrap_or(&[]) {
                all.push((t.seq(), t.evidence().to_vec()));
            }
        }
        all.sort_by_key(|(seq, _)| *seq);
        Ok(all.into_iter().map(|(_, bytes)| bytes).collect())
    }
}

/// Lifecycle record 0 of a stored session, re-encoded from its creation.
fn creation_bytes(s: &glove_journal::session::SessionRecord) -> Result<Vec<u8>, PortError> {
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

impl TransitionLog for StoreLog {
    fn append(&mut self, record: &PendingRecord<'_>) -> Result<AppendReceipt, PortError> {
        let Subject::Session(id) = record.subject() else {
            return Err(PortError::new(JOURNAL_RECORD_KIND_REFUSED));
        };
        let decoded =
            SessionRecord::decode(record.bytes()).map_err(|e| PortError::new(e.code()))?;
        if &decoded.session_id != id {
            return Err(PortError::new(LIFECYCLE_RECORD_FOREIGN));
        }
        let next = self.store.transitions(id).map_or(0, |t| t.len() as u64 + 1);
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
                let created = self
                    .store
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
                let _ = self
                    .store
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
        let Some(s) = self.store.get(id) else {
            return Ok(None);
        };
        let Some(k) = seq.checked_sub(1) else {
            return creation_bytes(s).map(Some);
        };
        let transitions = self.store.transitions(id).unwrap_or(&[]);
        Ok(usize::try_from(k)
            .ok()
            .and_then(|k| transitions.get(k))
            .map(|t| t.evidence().to_vec()))
    }
}

/// A [`ReceiptLog`] over the receipt journal (see the module docs).
#[derive(Debug)]
pub struct StoreReceipts {
    journal: ReceiptJournal,
}

impl StoreReceipts {
    /// Wraps an open receipt journal.
    pub fn new(journal: ReceiptJournal) -> StoreReceipts {
        StoreReceipts { journal }
    }

    /// The receipt journal.
    pub fn journal(&self) -> &ReceiptJournal {
        &self.journal
    }

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
        let reservation = match self.journal.held_reservation(session) {
            Some(r) => r,
            None => self.journal.reserve(session).map_err(journal_err)?,
        };
        let stored = self
            .journal
            .append_receipt(&reservation, ReceiptKind::ResourceV1, body)
            .map_err(journal_err)?;
        if body_session(&stored).as_deref() != Some(session.as_str()) {
            return Err(PortError::new(LIFECYCLE_RECEIPT_MISMATCH));
        }
        Ok(reference(&stored))
    }
}

fn reference(r: &StoredReceipt) -> TerminalReceiptRef {
    TerminalReceiptRef::new(r.seq, Sha256Digest::of(&r.envelope))
}

/// The `session_id` of a stored receipt's body.
fn body_session(r: &StoredReceipt) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(&r.envelope).ok()?;
    Some(v.get("body")?.get("session_id")?.as_str()?.to_owned())
}

impl ReceiptLog for StoreReceipts {
    fn terminal_receipt(
        &self,
        subject: Subject<'_>,
    ) -> Result<Option<TerminalReceiptRef>, PortError> {
        let Subject::Session(id) = subject else {
            return Err(PortError::new(JOURNAL_RECORD_KIND_REFUSED));
        };
        let mut found = self
            .journal
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
