//! In-memory ports for tests (feature `test-support`). Not durable: never
//! use outside tests.
//!
//! [`MemoryLog`] keeps records per subject and in global append order, can be
//! told to fail the next append, and survives a simulated crash simply by
//! being the one value a test keeps while dropping every session.

use crate::error::LifecycleError;
use crate::evidence::{ProcessIdentity, TerminalReceiptRef};
use crate::ports::{
    BaselineCleanup, Clock, ObservedProcess, PortError, ReceiptEntry, ReceiptLog, RecordSource,
    StoredRecord, TransitionLog,
};
use crate::proof::{AppendReceipt, PendingRecord, Subject, SubjectKind};
use core::cell::Cell;
use glove_types::codes::lifecycle::{APPLY_CLEANUP_FAILED, LIFECYCLE_LOG_UNAVAILABLE};
use glove_types::ids::SessionId;
use glove_types::Sha256Digest;
use std::collections::BTreeMap;

/// A receipt reference made up by a test (to test a mismatch, or to build
/// a reference without a receipt log). Production code gets one only from
/// [`TerminalReceiptRef::durable`].
pub fn forge_receipt(receipt_seq: u64, receipt_digest: Sha256Digest) -> TerminalReceiptRef {
    TerminalReceiptRef::new(receipt_seq, receipt_digest)
}

/// A process a test says it observed: the raw values an [`ObservedProcess`]
/// reports, for [`ProcessIdentity::observed`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The boot id.
    pub boot_id: String,
    /// The pid.
    pub pid: u32,
    /// Start time in clock ticks after boot.
    pub start_time_ticks: u64,
    /// The cgroup inode.
    pub cgroup_id: u64,
}

impl ObservedProcess for Observed {
    fn boot_id(&self) -> &str {
        &self.boot_id
    }
    fn pid(&self) -> u32 {
        self.pid
    }
    fn start_time_ticks(&self) -> u64 {
        self.start_time_ticks
    }
    fn cgroup_id(&self) -> u64 {
        self.cgroup_id
    }
}

/// A process identity from raw values, through [`Observed`].
pub fn forge_identity(
    boot_id: &str,
    pid: u32,
    start_time_ticks: u64,
    cgroup_id: u64,
) -> Result<ProcessIdentity, LifecycleError> {
    ProcessIdentity::observed(&Observed {
        boot_id: boot_id.to_owned(),
        pid,
        start_time_ticks,
        cgroup_id,
    })
}

/// Raw record bytes handed to replay as if a store held them (to test
/// corrupt, foreign and hand-made records): every session asked for gets
/// all of them, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawRecords(pub Vec<Vec<u8>>);

impl RecordSource for RawRecords {
    fn session_records(&self, _id: &SessionId) -> Vec<StoredRecord> {
        self.0.iter().cloned().map(StoredRecord::Bytes).collect()
    }

    fn all_session_records(&self) -> Vec<StoredRecord> {
        self.0.iter().cloned().map(StoredRecord::Bytes).collect()
    }
}

type Key = (SubjectKind, String, u64);

/// An in-memory transition log.
#[derive(Debug, Default, Clone)]
pub struct MemoryLog {
    records: BTreeMap<Key, Vec<u8>>,
    order: Vec<Key>,
    fail_next: bool,
}

impl MemoryLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the next `append` fail with `lifecycle_log_unavailable`.
    pub fn fail_next_append(&mut self) {
        self.fail_next = true;
    }

    /// Number of records appended so far (all subjects).
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether nothing was appended.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Every record of `kind`, in append order (what a store replays).
    pub fn records(&self, kind: SubjectKind) -> Vec<Vec<u8>> {
        self.order
            .iter()
            .filter(|k| k.0 == kind)
            .filter_map(|k| self.records.get(k).cloned())
            .collect()
    }

    /// The records of one subject, in sequence order.
    pub fn records_of(&self, subject: Subject<'_>) -> Vec<Vec<u8>> {
        self.records
            .iter()
            .filter(|(k, _)| k.0 == subject.kind() && k.1 == subject.id())
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Replaces a stored record's bytes (to test corruption handling).
    pub fn tamper(&mut self, subject: Subject<'_>, seq: u64, bytes: Vec<u8>) {
        self.records
            .insert((subject.kind(), subject.id().to_owned(), seq), bytes);
    }
}

impl TransitionLog for MemoryLog {
    fn append(&mut self, record: &PendingRecord<'_>) -> Result<AppendReceipt, PortError> {
        if std::mem::take(&mut self.fail_next) {
            return Err(PortError::new(LIFECYCLE_LOG_UNAVAILABLE));
        }
        let s = record.subject();
        let key = (s.kind(), s.id().to_owned(), record.seq());
        if self.records.contains_key(&key) {
            return Err(PortError::new(LIFECYCLE_LOG_UNAVAILABLE));
        }
        self.records.insert(key.clone(), record.bytes().to_vec());
        self.order.push(key);
        Ok(record.acknowledge())
    }

    fn lookup(&self, subject: Subject<'_>, seq: u64) -> Result<Option<StoredRecord>, PortError> {
        Ok(self
            .records
            .get(&(subject.kind(), subject.id().to_owned(), seq))
            .cloned()
            .map(StoredRecord::Bytes))
    }
}

impl RecordSource for MemoryLog {
    fn session_records(&self, id: &SessionId) -> Vec<StoredRecord> {
        self.records_of(Subject::Session(id))
            .into_iter()
            .map(StoredRecord::Bytes)
            .collect()
    }

    fn all_session_records(&self) -> Vec<StoredRecord> {
        self.records(SubjectKind::Session)
            .into_iter()
            .map(StoredRecord::Bytes)
            .collect()
    }
}

/// An in-memory receipt journal: which terminal receipt each subject has.
#[derive(Debug, Default, Clone)]
pub struct MemoryReceipts {
    receipts: BTreeMap<(SubjectKind, String), ReceiptEntry>,
}

impl MemoryReceipts {
    /// An empty journal.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends the terminal receipt `(seq, digest)` of `subject` and
    /// returns its reference, as a real receipt log does after a durable
    /// append.
    pub fn append(
        &mut self,
        subject: Subject<'_>,
        receipt_seq: u64,
        receipt_digest: Sha256Digest,
    ) -> TerminalReceiptRef {
        self.put(subject, forge_receipt(receipt_seq, receipt_digest));
        forge_receipt(receipt_seq, receipt_digest)
    }

    /// Records `receipt` as the durable terminal receipt of `subject`.
    pub fn put(&mut self, subject: Subject<'_>, receipt: TerminalReceiptRef) {
        self.receipts.insert(
            (subject.kind(), subject.id().to_owned()),
            ReceiptEntry::new(receipt.receipt_seq(), receipt.receipt_digest()),
        );
    }

    /// [`MemoryReceipts::append`] for a receipt of `kind` (a refinement
    /// receipt, say).
    pub fn append_of_kind(
        &mut self,
        subject: Subject<'_>,
        receipt_seq: u64,
        receipt_digest: Sha256Digest,
        kind: crate::evidence::TerminalKind,
    ) -> TerminalReceiptRef {
        self.receipts.insert(
            (subject.kind(), subject.id().to_owned()),
            ReceiptEntry::of_kind(receipt_seq, receipt_digest, kind),
        );
        forge_receipt(receipt_seq, receipt_digest)
    }
}

impl ReceiptLog for MemoryReceipts {
    fn terminal_receipt(&self, subject: Subject<'_>) -> Result<Option<ReceiptEntry>, PortError> {
        Ok(self
            .receipts
            .get(&(subject.kind(), subject.id().to_owned()))
            .copied())
    }
}

/// A clock the test sets.
#[derive(Debug, Default)]
pub struct ManualClock(Cell<u64>);

impl ManualClock {
    /// A clock reading `now_ms`.
    pub fn at(now_ms: u64) -> Self {
        Self(Cell::new(now_ms))
    }

    /// Sets the time.
    pub fn set(&self, now_ms: u64) {
        self.0.set(now_ms);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.get()
    }
}

/// A recording baseline cleanup.
#[derive(Debug, Default)]
pub struct MemoryCleanup {
    /// How many times the port was called.
    pub calls: usize,
    /// Fail the next call with `apply_cleanup_failed`.
    pub fail_next: bool,
}

impl BaselineCleanup for MemoryCleanup {
    fn cleanup_baseline(&mut self, _txn: &crate::apply::TransactionId) -> Result<(), PortError> {
        self.calls += 1;
        if std::mem::take(&mut self.fail_next) {
            return Err(PortError::new(APPLY_CLEANUP_FAILED));
        }
        Ok(())
    }
}
