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
//! | seq 0, `created` with both plan digests | a creation record: session id, idempotency key and plan staged with [`StoreLog::stage_plan`], the record's `controller_plan_digest`; the store computes `plan_content_digest` from the plan and the adapter refuses the append unless it equals the record's. The lifecycle bytes are not stored: [`StoreLog::lookup`] and the [`RecordSource`] hand back [`StoredRecord::Creation`] (session id and both digests) and the lifecycle re-encodes the canonical record (canonical JSON is deterministic). The adapter never encodes or decodes a lifecycle record: it reads the stage and the creation digests from the [`PendingRecord`]. |
//! | seq `k` ≥ 1 (any other stage) | the session's `k`-th transition record: stage = the record's stage, evidence = the lifecycle record's bytes verbatim. |
//!
//! Consequences:
//!
//! * the store checks every transition against the same stage graph as the
//!   lifecycle, and its replay (strict, torn tail repaired) is the only
//!   source of the records the store hands, as a [`RecordSource`], to
//!   `glove_lifecycle::replay_session`, `recover_stored` and `recover_all`;
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
//! Writers: [`SessionStore::transition`] and `create_session` are not public
//! (the `test-support` feature opens them for tests, see
//! [`crate::testing`]): the only way to append a session transition is
//! through the lifecycle and [`StoreLog`]. [`repeat_creation`] answers a
//! repeated creation request without writing.
//!
//! Terminal receipts: [`StoreReceipts`] finds a session's receipt through
//! the receipt journal's per-session index
//! ([`ReceiptJournal::receipts_of`]): by the session of the reservation the
//! receipt spent, or, for a receipt a compaction kept (the compacted file
//! drops the record's session), by the `session_id` of its MAC-covered
//! body. The found receipt's body must name the session, and
//! [`StoreReceipts::get_or_append`] refuses, before writing, a body naming
//! another session than the reservation it spends. The reference is the
//! receipt's sequence number and the SHA-256 of its stored envelope. More
//! than one receipt for one session is ambiguous and fails closed
//! (`lifecycle_receipt_mismatch`). Receipts already acknowledged and
//! compacted away are not found.
//!
//! Apply receipts: an apply transaction's terminal receipt (`apply_v1`)
//! joins the same journal, chain and sequence, filed under the key
//! [`receipt_key`]`(Subject::Apply(txn))` = `SessionId::new(txn.as_str())`
//! (the journal's "session" key is the receipt's subject id).
//! [`StoreReceipts`] answers `Subject::Apply(txn)` with exactly one receipt
//! under that key whose kind is `apply_v1` and whose body names `txn` as
//! its `transaction_id`, and `Subject::Session(id)` only with a
//! `resource_v1` receipt whose body names `id` as its `session_id`.
//! A session id equal to a transaction id shares the key: the question for
//! the subject whose receipt is not there fails closed with
//! `lifecycle_receipt_mismatch` (as does any key holding two receipts);
//! it never confirms the wrong subject.
//! [`StoreReceipts::get_or_append_apply`] appends an apply receipt the way
//! `get_or_append` appends a session's.

use crate::receipt::{ReceiptJournal, ReceiptKind, StoredReceipt};
use crate::session::{Creation, NewSession, SessionRecord as StoredSession};
use crate::{JournalError, SessionStore};
use core::borrow::{Borrow, BorrowMut};
use glove_lifecycle::apply::TransactionId;
use glove_lifecycle::{
    AppendReceipt, PendingRecord, PlanDigests, PortError, ReceiptEntry, ReceiptLog, RecordSource,
    StoredRecord, Subject, TerminalKind, TerminalReceiptRef, TransitionLog,
};
use glove_types::codes::journal::JOURNAL_RECORD_KIND_REFUSED;
use glove_types::codes::lifecycle::{
    LIFECYCLE_LOG_UNAVAILABLE, LIFECYCLE_RECEIPT_MISMATCH, LIFECYCLE_RECORD_INVALID,
    LIFECYCLE_RECORD_MISSING_CREATION, LIFECYCLE_RECORD_SEQUENCE,
};
use glove_types::ids::{IdempotencyKey, SessionId};
use glove_types::stage::SessionStage;
use glove_types::Sha256Digest;
use std::collections::HashMap;

fn journal_err(e: JournalError) -> PortError {
    PortError::new(e.code())
}

/// The plan digests of a stored session: its two digests, and the kind of
/// terminal receipt its plan requires (a refinement evaluation plan, one
/// with a `refinement` binding, ends with a refinement receipt).
pub fn stored_digests(s: &StoredSession) -> PlanDigests {
    let d = PlanDigests::new(*s.plan_content_digest(), *s.controller_plan_digest());
    if plan_is_refinement(s.plan()) {
        d.refinement()
    } else {
        d
    }
}

/// Whether stored plan bytes carry a refinement binding: a top-level
/// `refinement` member. Read from the JSON object itself, not through the
/// plan decoder, so a plan a later, stricter decoder refuses keeps its
/// kind; bytes that are not a JSON object count as a refinement plan
/// (fail closed: such a session can end only with a refinement receipt,
/// never silently with a resource one).
pub fn plan_is_refinement(plan: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(plan)
        .map_or(true, |m| m.contains_key("refinement"))
}

/// Lifecycle record 0 of a stored session, in the store's own form: the
/// lifecycle re-encodes the canonical record from it.
pub fn creation_record(s: &StoredSession) -> StoredRecord {
    StoredRecord::Creation {
        session_id: s.session_id().clone(),
        digests: stored_digests(s),
    }
}

/// Every lifecycle record of one session, in order (empty if the store
/// does not hold it).
fn session_records(store: &SessionStore, id: &SessionId) -> Vec<StoredRecord> {
    let Some(s) = store.get(id) else {
        return Vec::new();
    };
    let mut out = vec![creation_record(s)];
    for t in store.transitions(id).unwrap_or(&[]) {
        out.push(StoredRecord::Bytes(t.evidence().to_vec()));
    }
    out
}

/// Every lifecycle record the store holds, in store order.
fn all_records(store: &SessionStore) -> Vec<StoredRecord> {
    let mut all: Vec<(u64, StoredRecord)> = Vec::new();
    for s in store.index().iter() {
        all.push((s.created_seq(), creation_record(s)));
        for t in store.transitions(s.session_id()).unwrap_or(&[]) {
            all.push((t.seq(), StoredRecord::Bytes(t.evidence().to_vec())));
        }
    }
    all.sort_by_key(|(seq, _)| *seq);
    all.into_iter().map(|(_, r)| r).collect()
}

/// The store is the record source replay and recovery read (see the module
/// docs for the mapping).
impl RecordSource for SessionStore {
    fn session_records(&self, id: &SessionId) -> Vec<StoredRecord> {
        session_records(self, id)
    }

    fn all_session_records(&self) -> Vec<StoredRecord> {
        all_records(self)
    }
}

/// A repeated creation request: when the store already holds the session
/// id or the idempotency key of `req`, the store's answer to it (the
/// original on a byte-identical retry, `session_conflict` otherwise), which
/// never appends; `None` when it holds neither (a new session: create it
/// through the lifecycle, `Session::log_create` after
/// [`StoreLog::stage_plan`]).
pub fn repeat_creation(
    store: &mut SessionStore,
    req: NewSession<'_>,
) -> Option<Result<Creation, JournalError>> {
    let known = store.by_idempotency_key(req.idempotency_key).is_some()
        || store.get(req.session_id).is_some();
    known.then(|| store.create_session(req))
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

    /// The store, writable: only for this crate and the `test-support`
    /// door (a session transition is appended through the lifecycle).
    #[cfg(any(test, feature = "test-support"))]
    pub(crate) fn store_mut(&mut self) -> &mut SessionStore {
        self.store.borrow_mut()
    }
}

impl<S: BorrowMut<SessionStore>> RecordSource for StoreLog<S> {
    fn session_records(&self, id: &SessionId) -> Vec<StoredRecord> {
        session_records(self.store(), id)
    }

    fn all_session_records(&self) -> Vec<StoredRecord> {
        all_records(self.store())
    }
}

impl<S: BorrowMut<SessionStore>> TransitionLog for StoreLog<S> {
    fn append(&mut self, record: &PendingRecord<'_>) -> Result<AppendReceipt, PortError> {
        let Subject::Session(id) = record.subject() else {
            return Err(PortError::new(JOURNAL_RECORD_KIND_REFUSED));
        };
        // The lifecycle built the record: its subject and seq are the
        // record's own; the stage and the creation digests come from it.
        let stage = record
            .session_stage()
            .ok_or(PortError::new(LIFECYCLE_RECORD_INVALID))?;
        let store: &mut SessionStore = self.store.borrow_mut();
        let next = store.transitions(id).map_or(0, |t| t.len() as u64 + 1);
        if record.seq() != next {
            return Err(PortError::new(LIFECYCLE_RECORD_SEQUENCE));
        }
        match (stage, record.plan_digests(), next) {
            (SessionStage::Created, Some(digests), 0) => {
                let staged = self
                    .staged
                    .get(id)
                    .ok_or(PortError::new(LIFECYCLE_LOG_UNAVAILABLE))?;
                if Sha256Digest::of(&staged.plan) != digests.plan_content_digest() {
                    return Err(PortError::new(LIFECYCLE_LOG_UNAVAILABLE));
                }
                // Record 0 is re-encoded from the stored plan: the receipt
                // kind it names must be the plan's.
                let refinement = digests.terminal_kind() == TerminalKind::Refinement;
                if refinement != plan_is_refinement(&staged.plan) {
                    return Err(PortError::new(LIFECYCLE_RECORD_INVALID));
                }
                let created = store
                    .create_session(NewSession {
                        session_id: id,
                        idempotency_key: &staged.key,
                        controller_plan_digest: digests.controller_plan_digest(),
                        plan: &staged.plan,
                    })
                    .map_err(journal_err)?;
                // Lookups re-encode record 0 from the creation record: it
                // must name this session with these digests.
                let r = created.record();
                let same = r.session_id() == id
                    && *r.plan_content_digest() == digests.plan_content_digest()
                    && *r.controller_plan_digest() == digests.controller_plan_digest();
                if !same {
                    return Err(PortError::new(LIFECYCLE_RECORD_INVALID));
                }
                self.staged.remove(id);
            }
            (SessionStage::Created, None, _) => {
                return Err(PortError::new(LIFECYCLE_RECORD_INVALID));
            }
            (SessionStage::Created, Some(_), _) => {
                return Err(PortError::new(LIFECYCLE_RECORD_SEQUENCE));
            }
            (_, _, 0) => return Err(PortError::new(LIFECYCLE_RECORD_MISSING_CREATION)),
            (stage, _, _) => {
                let _ = store
                    .transition(id, stage, record.bytes())
                    .map_err(journal_err)?;
            }
        }
        Ok(record.acknowledge())
    }

    fn lookup(&self, subject: Subject<'_>, seq: u64) -> Result<Option<StoredRecord>, PortError> {
        let Subject::Session(id) = subject else {
            return Err(PortError::new(JOURNAL_RECORD_KIND_REFUSED));
        };
        let store = self.store();
        let Some(s) = store.get(id) else {
            return Ok(None);
        };
        let Some(k) = seq.checked_sub(1) else {
            return Ok(Some(creation_record(s)));
        };
        let transitions = store.transitions(id).unwrap_or(&[]);
        Ok(usize::try_from(k)
            .ok()
            .and_then(|k| transitions.get(k))
            .map(|t| StoredRecord::Bytes(t.evidence().to_vec())))
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
    /// otherwise `body` (a `resource_v1` body) appended now (spending a
    /// held reservation, or a new one). `body` must name `session` in its
    /// `session_id` field. The reference comes from the lifecycle, which
    /// asks this log for it after the append
    /// ([`TerminalReceiptRef::durable`]).
    pub fn get_or_append(
        &mut self,
        session: &SessionId,
        body: &[u8],
    ) -> Result<TerminalReceiptRef, PortError> {
        self.get_or_append_subject(Subject::Session(session), body)
    }

    /// The terminal receipt of apply transaction `txn`: the durable one if
    /// there is one, otherwise `body` (an `apply_v1` body, e.g.
    /// `ApplyReceiptV1::encode`) appended now under the key
    /// [`receipt_key`]`(Subject::Apply(txn))`, spending a held reservation
    /// or a new one. `body` must name `txn` in its `transaction_id` field
    /// and decode strictly.
    pub fn get_or_append_apply(
        &mut self,
        txn: &TransactionId,
        body: &[u8],
    ) -> Result<TerminalReceiptRef, PortError> {
        self.get_or_append_subject(Subject::Apply(txn), body)
    }

    fn get_or_append_subject(
        &mut self,
        subject: Subject<'_>,
        body: &[u8],
    ) -> Result<TerminalReceiptRef, PortError> {
        let durable = |this: &Self| {
            TerminalReceiptRef::durable(this, subject).map_err(|e| PortError::new(e.code()))
        };
        if let Some(r) = durable(self)? {
            return Ok(r);
        }
        let kind = subject_kind(subject);
        // The body must name the subject whose reservation it spends, so
        // the index (by the record's key) and the body agree: checked
        // before anything is written.
        if body_names(body, kind).as_deref() != Some(subject.id()) {
            return Err(PortError::new(LIFECYCLE_RECEIPT_MISMATCH));
        }
        let key = receipt_key(subject)?;
        let journal: &mut ReceiptJournal = self.journal.borrow_mut();
        let reservation = match journal.held_reservation(&key) {
            Some(r) => r,
            None => journal.reserve(&key).map_err(journal_err)?,
        };
        journal
            .append_receipt(&reservation, kind, body)
            .map_err(journal_err)?;
        durable(self)?.ok_or(PortError::new(LIFECYCLE_RECEIPT_MISMATCH))
    }
}

/// The receipt journal's key for `subject`: the session id, or the apply
/// transaction's id as a [`SessionId`] (the same charset, so this never
/// fails for a validated id; it would be `lifecycle_record_invalid`).
/// Reserve, append and release an apply receipt under this key.
pub fn receipt_key(subject: Subject<'_>) -> Result<SessionId, PortError> {
    match subject {
        Subject::Session(id) => Ok(id.clone()),
        Subject::Apply(txn) => {
            SessionId::new(txn.as_str()).map_err(|_| PortError::new(LIFECYCLE_RECORD_INVALID))
        }
    }
}

/// The receipt kind a subject's terminal receipt has.
fn subject_kind(subject: Subject<'_>) -> ReceiptKind {
    match subject {
        Subject::Session(_) => ReceiptKind::ResourceV1,
        Subject::Apply(_) => ReceiptKind::ApplyV1,
    }
}

/// Whether a receipt of `kind` may end `subject`: a session ends with a
/// resource or a refinement receipt (which one its plan requires is the
/// lifecycle's check), a transaction with an apply receipt.
fn kind_fits(subject: Subject<'_>, kind: ReceiptKind) -> bool {
    match subject {
        Subject::Session(_) => matches!(kind, ReceiptKind::ResourceV1 | ReceiptKind::RefinementV1),
        Subject::Apply(_) => kind == ReceiptKind::ApplyV1,
    }
}

/// What the receipt log reports for a stored receipt: its sequence number,
/// the SHA-256 of its stored envelope, and its kind.
pub fn reference(r: &StoredReceipt) -> ReceiptEntry {
    let kind = match r.kind {
        ReceiptKind::RefinementV1 => TerminalKind::Refinement,
        ReceiptKind::ApplyV1 => TerminalKind::Apply,
        ReceiptKind::ResourceV1 => TerminalKind::Resource,
    };
    ReceiptEntry::of_kind(r.seq, Sha256Digest::of(&r.envelope), kind)
}

/// The subject a receipt body of `kind` names (its
/// [`ReceiptKind::subject_field`]).
fn body_names(body: &[u8], kind: ReceiptKind) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    Some(v.get(kind.subject_field())?.as_str()?.to_owned())
}

/// Whether a stored receipt is `subject`'s: of the subject's kind, with a
/// body naming the subject in that kind's subject field.
fn is_receipt_of(r: &StoredReceipt, subject: Subject<'_>) -> bool {
    let named = || {
        let v: serde_json::Value = serde_json::from_slice(&r.envelope).ok()?;
        Some(
            v.get("body")?
                .get(r.kind.subject_field())?
                .as_str()?
                .to_owned(),
        )
    };
    kind_fits(subject, r.kind) && named().as_deref() == Some(subject.id())
}

impl<J: Borrow<ReceiptJournal>> ReceiptLog for StoreReceipts<J> {
    fn terminal_receipt(&self, subject: Subject<'_>) -> Result<Option<ReceiptEntry>, PortError> {
        // Through the journal's index by subject key (the key its receipt
        // records name); the receipt must be of the subject's kind and its
        // body must name the subject. A session and a transaction with the
        // same id share a key: whichever receipt is there, the other
        // subject's question fails closed, never confirms.
        let key = receipt_key(subject)?;
        match self.journal().receipts_of(&key).as_slice() {
            [] => Ok(None),
            [r] if is_receipt_of(r, subject) => Ok(Some(reference(r))),
            _ => Err(PortError::new(LIFECYCLE_RECEIPT_MISMATCH)),
        }
    }
}
