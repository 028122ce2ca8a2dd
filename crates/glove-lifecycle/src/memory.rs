//! In-memory ports for tests (feature `test-support`). Not durable: never
//! use outside tests.
//!
//! [`MemoryLog`] keeps records per subject and in global append order, can be
//! told to fail the next append, and survives a simulated crash simply by
//! being the one value a test keeps while dropping every session.

use crate::evidence::TerminalReceiptRef;
use crate::ports::{BaselineCleanup, Clock, PortError, ReceiptLog, TransitionLog};
use crate::proof::{AppendReceipt, PendingRecord, Subject, SubjectKind};
use core::cell::Cell;
use glove_types::codes::lifecycle::{APPLY_CLEANUP_FAILED, LIFECYCLE_LOG_UNAVAILABLE};
use std::collections::BTreeMap;

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

    fn lookup(&self, subject: Subject<'_>, seq: u64) -> Result<Option<Vec<u8>>, PortError> {
        Ok(self
            .records
            .get(&(subject.kind(), subject.id().to_owned(), seq))
            .cloned())
    }
}

/// An in-memory receipt journal: which terminal receipt each subject has.
#[derive(Debug, Default, Clone)]
pub struct MemoryReceipts {
    receipts: BTreeMap<(SubjectKind, String), TerminalReceiptRef>,
}

impl MemoryReceipts {
    /// An empty journal.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `receipt` as the durable terminal receipt of `subject`.
    pub fn put(&mut self, subject: Subject<'_>, receipt: TerminalReceiptRef) {
        self.receipts
            .insert((subject.kind(), subject.id().to_owned()), receipt);
    }
}

impl ReceiptLog for MemoryReceipts {
    fn terminal_receipt(
        &self,
        subject: Subject<'_>,
    ) -> Result<Option<TerminalReceiptRef>, PortError> {
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
