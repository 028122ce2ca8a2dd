//! Ports: the small traits through which the lifecycle reaches storage and
//! time. The crate has no I/O of its own; `glove-journal` implements the logs
//! and `glove-bin` the clock and the cleanup.

use crate::error::LifecycleError;
use crate::evidence::{PlanDigests, TerminalKind, TerminalReceiptRef};
use crate::proof::{AppendReceipt, PendingRecord, Subject};
use core::fmt;
use glove_types::ids::SessionId;
use glove_types::{ErrorCode, Sha256Digest};

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
/// * [`lookup`](TransitionLog::lookup) returns record `seq` of `subject`
///   as stored, if any. The lifecycle uses it to make a repeated
///   transition idempotent and to fail closed on a conflicting one.
pub trait TransitionLog {
    /// Durably appends one record.
    fn append(&mut self, record: &PendingRecord<'_>) -> Result<AppendReceipt, PortError>;

    /// Record `seq` of `subject`, as stored.
    fn lookup(&self, subject: Subject<'_>, seq: u64) -> Result<Option<StoredRecord>, PortError>;
}

/// One stored lifecycle record, as a store hands it back.
///
/// A store keeps the bytes the lifecycle appended verbatim, except that it
/// may keep a session's record 0 in its own form (the session id and both
/// plan digests); canonical JSON is deterministic, so the lifecycle
/// re-encodes that record byte for byte. A store never encodes a lifecycle
/// record itself: the record types and their encoders are private to this
/// crate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoredRecord {
    /// The record's bytes, exactly as appended.
    Bytes(Vec<u8>),
    /// A session's record 0, kept as the store's own creation record.
    Creation {
        /// The session.
        session_id: SessionId,
        /// The digests it was created with.
        digests: PlanDigests,
    },
}

impl StoredRecord {
    /// The record's canonical bytes.
    pub(crate) fn into_bytes(self) -> Result<Vec<u8>, LifecycleError> {
        match self {
            StoredRecord::Bytes(b) => Ok(b),
            StoredRecord::Creation {
                session_id,
                digests,
            } => crate::record::encode(
                &session_id,
                0,
                None,
                &crate::record::SessionEntry::Created { digests },
            ),
        }
    }
}

/// Read access to the stored session records: the only input replay and
/// recovery take ([`crate::replay_session`], [`crate::recover_stored`],
/// [`crate::recover_all`]).
///
/// Contract: every record handed out is one the store holds, as the
/// lifecycle appended it through the same store's [`TransitionLog`]
/// (see [`StoredRecord`] for record 0). The store serves them from its own
/// replayed state, so reading cannot fail.
pub trait RecordSource {
    /// Every stored record of session `id`, in sequence order (empty when
    /// the store holds no such session).
    fn session_records(&self, id: &SessionId) -> Vec<StoredRecord>;

    /// Every stored session record, in store order (records of different
    /// sessions may interleave).
    fn all_session_records(&self) -> Vec<StoredRecord>;
}

/// What a [`ReceiptLog`] reports of a durably appended terminal receipt:
/// its sequence number in the receipt journal and the digest of its
/// envelope. The lifecycle turns it into a [`TerminalReceiptRef`]
/// ([`TerminalReceiptRef::durable`]); nothing else makes one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReceiptEntry {
    receipt_seq: u64,
    receipt_digest: Sha256Digest,
    kind: TerminalKind,
}

impl ReceiptEntry {
    /// A durable resource receipt (`resource_v1`) as the receipt journal
    /// holds it.
    pub fn new(receipt_seq: u64, receipt_digest: Sha256Digest) -> Self {
        Self::of_kind(receipt_seq, receipt_digest, TerminalKind::Resource)
    }

    /// A durable receipt of `kind` as the receipt journal holds it.
    pub fn of_kind(receipt_seq: u64, receipt_digest: Sha256Digest, kind: TerminalKind) -> Self {
        Self {
            receipt_seq,
            receipt_digest,
            kind,
        }
    }

    /// The receipt's kind.
    pub fn kind(&self) -> TerminalKind {
        self.kind
    }

    /// Sequence number in the receipt journal.
    pub fn receipt_seq(&self) -> u64 {
        self.receipt_seq
    }

    /// Digest of the receipt envelope.
    pub fn receipt_digest(&self) -> Sha256Digest {
        self.receipt_digest
    }
}

/// Read access to the receipt journal: which terminal receipt, if any, is
/// durably appended for a subject.
///
/// Contract: report a receipt only once it is durable (appended and synced
/// as the journal promises). The answer is the one source of
/// [`TerminalReceiptRef`]s.
pub trait ReceiptLog {
    /// The durably appended terminal receipt of `subject`.
    fn terminal_receipt(&self, subject: Subject<'_>) -> Result<Option<ReceiptEntry>, PortError>;
}

/// A process the runtime observed, as the kernel reported it (for Linux:
/// `/proc/sys/kernel/random/boot_id`, `/proc/<pid>/stat` field 22 and the
/// inode of the process's cgroup directory). The crate does no I/O, so it
/// cannot read these itself: the runtime implements this port over what it
/// read, and [`ProcessIdentity::observed`](crate::ProcessIdentity::observed)
/// is the one way to make a [`ProcessIdentity`](crate::ProcessIdentity).
///
/// Contract: every value was read from the kernel for one live process,
/// not computed or copied from a record.
pub trait ObservedProcess {
    /// The kernel's boot id.
    fn boot_id(&self) -> &str;
    /// The pid in the service's pid namespace.
    fn pid(&self) -> u32;
    /// Start time in clock ticks after boot.
    fn start_time_ticks(&self) -> u64;
    /// The inode of the process's cgroup directory.
    fn cgroup_id(&self) -> u64;
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
    expected: Option<TerminalKind>,
) -> Result<(), LifecycleError> {
    let entry = receipts
        .terminal_receipt(subject)
        .map_err(PortError::into_lifecycle)?;
    match entry {
        None => Err(LifecycleError::ReceiptMissing {
            receipt_seq: referenced.receipt_seq(),
        }),
        Some(e)
            if e.receipt_seq() != referenced.receipt_seq()
                || e.receipt_digest() != referenced.receipt_digest() =>
        {
            Err(LifecycleError::ReceiptMismatch {
                referenced_seq: referenced.receipt_seq(),
                durable_seq: e.receipt_seq(),
            })
        }
        Some(e) => match expected {
            Some(want) if e.kind() != want => Err(LifecycleError::ReceiptKindMismatch {
                expected: want,
                durable: e.kind(),
            }),
            _ => Ok(()),
        },
    }
}
