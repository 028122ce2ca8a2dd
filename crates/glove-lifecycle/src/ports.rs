//! Ports: the small traits through which the lifecycle reaches storage and
//! time. The crate has no I/O of its own; `glove-journal` implements the logs
//! and `glove-bin` the clock and the cleanup.

use crate::error::LifecycleError;
use crate::evidence::TerminalReceiptRef;
use crate::proof::{AppendReceipt, PendingRecord, Subject};
use core::fmt;
use glove_types::ErrorCode;

/// A port failure: the implementation's own stable code (for example a
/// journal code such as an fsync failure). The lifecycle passes it through
/// unchanged as [`LifecycleError::Port`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PortError {
    code: ErrorCode,
}

impl PortError {
    /// A failure with the implementation's code.
    pub fn new(code: ErrorCode) -> Self {
        Self { code }
    }

    /// The code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    pub(crate) fn into_lifecycle(self) -> LifecycleError {
        LifecycleError::Port { code: self.code }
    }
}

impl fmt::Debug for PortError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PortError({})", self.code)
    }
}

impl fmt::Display for PortError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.code.meaning())
    }
}

impl std::error::Error for PortError {}

/// The durable, append-only store of lifecycle records (the session store
/// for sessions, the apply journal for apply transactions).
///
/// Contract:
///
/// * [`append`](TransitionLog::append) stores `record.bytes()` verbatim as
///   record `record.seq()` of `record.subject()` and returns
///   `Ok(record.acknowledge())` **only after** the bytes are durable (fsync of
///   file and directory where the store promises it). Any doubt is an error.
///   It must refuse a second, different record at the same
///   `(subject, seq)`.
/// * [`lookup`](TransitionLog::lookup) returns the stored bytes of record
///   `seq` of `subject`, if any. The lifecycle uses it to make a repeated
///   transition idempotent and to fail closed on a conflicting one.
pub trait TransitionLog {
    /// Durably appends one record.
    fn append(&mut self, record: &PendingRecord<'_>) -> Result<AppendReceipt, PortError>;

    /// The bytes stored as record `seq` of `subject`.
    fn lookup(&self, subject: Subject<'_>, seq: u64) -> Result<Option<Vec<u8>>, PortError>;
}

/// Read access to the receipt journal: which terminal receipt, if any, is
/// durably appended for a subject.
pub trait ReceiptLog {
    /// The durably appended terminal receipt of `subject`.
    fn terminal_receipt(
        &self,
        subject: Subject<'_>,
    ) -> Result<Option<TerminalReceiptRef>, PortError>;
}

/// Wall-clock time, used to check start authorizations.
///
/// Wall time (not monotonic time) because the authorization's window is set
/// by its issuer, possibly another process or host; the verifier allows a
/// bounded skew.
pub trait Clock {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// Removes the retained baseline of an applied transaction.
///
/// Called only after the applied receipt is durable. Must be idempotent: it
/// may run again after a restart, and "already gone" is success.
pub trait BaselineCleanup {
    /// Removes the baseline kept by transaction `txn`.
    fn cleanup_baseline(&mut self, txn: &crate::apply::TransactionId) -> Result<(), PortError>;
}

/// Looks up and checks the durable terminal receipt for `subject`.
pub(crate) fn confirm_receipt<R: ReceiptLog + ?Sized>(
    receipts: &R,
    subject: Subject<'_>,
    referenced: &TerminalReceiptRef,
) -> Result<(), LifecycleError> {
    match receipts
        .terminal_receipt(subject)
        .map_err(PortError::into_lifecycle)?
    {
        None => Err(LifecycleError::ReceiptMissing {
            receipt_seq: referenced.receipt_seq(),
        }),
        Some(durable) if durable == *referenced => Ok(()),
        Some(durable) => Err(LifecycleError::ReceiptMismatch {
            referenced_seq: referenced.receipt_seq(),
            durable_seq: durable.receipt_seq(),
        }),
    }
}
