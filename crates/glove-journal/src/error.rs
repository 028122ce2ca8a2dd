//! The one error type of the crate, [`JournalError`], and its typed parts.
//!
//! Every variant maps to exactly one stable [`ErrorCode`] through
//! [`JournalError::code`]. Corruption found on replay is a single variant,
//! [`JournalError::Corrupt`], whose [`CorruptKind`] names the class (each
//! with its own code) and whose offset is the byte position in the file
//! where the problem starts.

use glove_types::codes::{file as fc, journal as jc};
use glove_types::ids::SessionId;
use glove_types::stage::SessionStage;
use glove_types::{ErrorCode, Rejection};
use rustix::io::Errno;

/// Which operating-system operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IoOp {
    /// Opening the parent directory.
    OpenDir,
    /// Opening or creating the journal file (or a sibling file).
    Open,
    /// `fstat` of a file or directory.
    Stat,
    /// Taking the exclusive `flock`.
    Lock,
    /// Reading the file.
    Read,
    /// Writing the file.
    Write,
    /// `fsync`/`fdatasync` of a file.
    Sync,
    /// `fsync` of the parent directory.
    SyncDir,
    /// Truncating the torn tail.
    Truncate,
    /// Renaming a finished temporary file into place.
    Rename,
    /// Changing the mode of a new file.
    Chmod,
    /// Drawing random bytes for an id or salt.
    Random,
}

impl IoOp {
    fn as_str(self) -> &'static str {
        match self {
            IoOp::OpenDir => "opening the directory",
            IoOp::Open => "opening the file",
            IoOp::Stat => "fstat",
            IoOp::Lock => "flock",
            IoOp::Read => "read",
            IoOp::Write => "write",
            IoOp::Sync => "fdatasync",
            IoOp::SyncDir => "fsync of the directory",
            IoOp::Truncate => "ftruncate",
            IoOp::Rename => "rename",
            IoOp::Chmod => "fchmod",
            IoOp::Random => "getrandom",
        }
    }
}

impl core::fmt::Display for IoOp {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A placement rule that the journal's file or directory breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Placement {
    /// The parent is not a directory.
    DirNotDirectory,
    /// The parent directory's mode is not exactly 0700.
    DirBadMode {
        /// The permission bits found.
        mode: u32,
    },
    /// The parent directory belongs to another user.
    DirWrongOwner {
        /// The owner found.
        uid: u32,
    },
    /// The journal path's last component is a symbolic link.
    Symlink,
    /// The journal is not a regular file.
    NotRegular,
    /// The journal file's mode is not exactly 0600.
    FileBadMode {
        /// The permission bits found.
        mode: u32,
    },
    /// The journal file belongs to another user.
    FileWrongOwner {
        /// The owner found.
        uid: u32,
    },
    /// The journal file has more than one hard link.
    LinkCount {
        /// The link count found.
        links: u64,
    },
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Placement::DirNotDirectory => f.write_str("its parent is not a directory"),
            Placement::DirBadMode { mode } => {
                write!(f, "its directory has mode {mode:04o}, not 0700")
            }
            Placement::DirWrongOwner { uid } => {
                write!(f, "its directory belongs to uid {uid}, not this user")
            }
            Placement::Symlink => f.write_str("the path names a symbolic link"),
            Placement::NotRegular => f.write_str("the path names no regular file"),
            Placement::FileBadMode { mode } => write!(f, "the file has mode {mode:04o}, not 0600"),
            Placement::FileWrongOwner { uid } => {
                write!(f, "the file belongs to uid {uid}, not this user")
            }
            Placement::LinkCount { links } => write!(f, "the file has {links} hard links, not 1"),
        }
    }
}

/// Which bound an append would exceed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Bound {
    /// The byte bound of the file.
    Bytes,
    /// The record-count bound.
    Records,
}

/// One class of corruption found on replay. Each has its own code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CorruptKind {
    /// The header is shorter than its fixed size or fails its digest.
    HeaderCorrupt,
    /// The header is intact but names another magic, version or kind.
    HeaderMismatch,
    /// A record frame fails its check value or has non-zero reserved bits.
    FrameCorrupt,
    /// A record's chained digest is wrong and more bytes follow it.
    DigestMismatch,
    /// A record's sequence number skips ahead.
    SequenceGap,
    /// A record repeats the previous sequence number.
    SequenceDuplicate,
    /// A record's sequence number goes backwards.
    SequenceReordered,
    /// A record kind the journal does not carry.
    UnknownKind,
    /// A record length past the record bound.
    RecordTooLong,
    /// The file is past its byte bound, or holds more records than allowed.
    BoundExceeded,
    /// The file is shorter than the trusted anchor's byte length.
    ShorterThanAnchor,
    /// The records do not end, or the chain does not match, where the
    /// trusted anchor says.
    AnchorMismatch,
    /// A session-store record does not decode.
    StoreRecordInvalid,
    /// A session id or idempotency key is created twice.
    StoreDuplicateSession,
    /// A transition names a session never created.
    StoreUnknownSession,
    /// A transition the stage graph forbids.
    StoreImpossibleTransition,
    /// A snapshot record that does not decode or is not the first record.
    StoreSnapshotInvalid,
    /// A receipt-journal record does not decode or is out of place.
    ReceiptRecordInvalid,
    /// A receipt's body or envelope HMAC does not verify.
    ReceiptMacMismatch,
    /// A receipt's sequence number does not follow its predecessor.
    ReceiptSequenceInvalid,
    /// The receipt chain does not start at or pass through the anchor.
    ReceiptAnchorMismatch,
    /// The receipt journal is shorter than, or diverges from, its
    /// acknowledged head.
    ReceiptBehindAck,
    /// The acknowledged-head file is malformed or fails its HMAC.
    ReceiptAckFileInvalid,
    /// A compacted receipt journal has no acknowledged-head file.
    ReceiptAckMissing,
    /// An anchor file is malformed, names another journal, or fails its
    /// HMAC.
    AnchorFileInvalid,
    /// An anchor file required for the check is missing.
    AnchorFileMissing,
    /// The journal is missing while its anchor or acknowledged-head file
    /// is still there.
    MissingButAnchored,
    /// An apply-journal record does not decode, or a transaction's records
    /// do not replay, or a single-use value is reserved twice.
    ApplyRecordInvalid,
    /// A path-exposure journal record does not decode as its schema.
    ExposureRecordInvalid,
    /// Path-exposure records that do not replay (a generation out of
    /// order, a revocation of no live lease, two live leases of one
    /// project).
    ExposureHistoryInvalid,
}

impl CorruptKind {
    /// The stable code of this class.
    pub const fn code(self) -> ErrorCode {
        match self {
            CorruptKind::HeaderCorrupt => jc::JOURNAL_HEADER_CORRUPT,
            CorruptKind::HeaderMismatch => jc::JOURNAL_HEADER_MISMATCH,
            CorruptKind::FrameCorrupt => jc::JOURNAL_FRAME_CORRUPT,
            CorruptKind::DigestMismatch => jc::JOURNAL_RECORD_DIGEST_MISMATCH,
            CorruptKind::SequenceGap => jc::JOURNAL_SEQUENCE_GAP,
            CorruptKind::SequenceDuplicate => jc::JOURNAL_SEQUENCE_DUPLICATE,
            CorruptKind::SequenceReordered => jc::JOURNAL_SEQUENCE_REORDERED,
            CorruptKind::UnknownKind => jc::JOURNAL_RECORD_KIND_UNKNOWN,
            CorruptKind::RecordTooLong => jc::JOURNAL_RECORD_TOO_LONG,
            CorruptKind::BoundExceeded => jc::JOURNAL_BOUND_EXCEEDED,
            CorruptKind::ShorterThanAnchor => jc::JOURNAL_SHORTER_THAN_ANCHOR,
            CorruptKind::AnchorMismatch => jc::JOURNAL_ANCHOR_MISMATCH,
            CorruptKind::StoreRecordInvalid => jc::STORE_RECORD_INVALID,
            CorruptKind::StoreDuplicateSession => jc::STORE_DUPLICATE_SESSION,
            CorruptKind::StoreUnknownSession => jc::STORE_UNKNOWN_SESSION,
            CorruptKind::StoreImpossibleTransition => jc::STORE_IMPOSSIBLE_TRANSITION,
            CorruptKind::StoreSnapshotInvalid => jc::STORE_SNAPSHOT_INVALID,
            CorruptKind::ReceiptRecordInvalid => jc::RECEIPT_RECORD_INVALID,
            CorruptKind::ReceiptMacMismatch => jc::RECEIPT_MAC_MISMATCH,
            CorruptKind::ReceiptSequenceInvalid => jc::RECEIPT_SEQUENCE_INVALID,
            CorruptKind::ReceiptAnchorMismatch => jc::RECEIPT_ANCHOR_MISMATCH,
            CorruptKind::ReceiptBehindAck => jc::RECEIPT_BEHIND_ACK,
            CorruptKind::ReceiptAckFileInvalid => jc::RECEIPT_ACK_FILE_INVALID,
            CorruptKind::ReceiptAckMissing => jc::RECEIPT_ACK_MISSING,
            CorruptKind::AnchorFileInvalid => jc::JOURNAL_ANCHOR_FILE_INVALID,
            CorruptKind::AnchorFileMissing => jc::JOURNAL_ANCHOR_FILE_MISSING,
            CorruptKind::MissingButAnchored => jc::JOURNAL_MISSING_BUT_ANCHORED,
            CorruptKind::ApplyRecordInvalid => {
                glove_types::codes::apply::APPLY_JOURNAL_RECORD_INVALID
            }
            CorruptKind::ExposureRecordInvalid => {
                glove_types::codes::exposure::EXPOSURE_RECORD_INVALID
            }
            CorruptKind::ExposureHistoryInvalid => {
                glove_types::codes::exposure::EXPOSURE_JOURNAL_HISTORY_INVALID
            }
        }
    }
}

/// Why a session creation conflicts with what is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConflictReason {
    /// The session id exists with another key, plan or digest.
    SessionIdReused,
    /// The idempotency key exists with another session id, plan or digest.
    IdempotencyKeyReused,
}

impl ConflictReason {
    /// What was reused, in words.
    pub const fn describe(self) -> &'static str {
        match self {
            ConflictReason::SessionIdReused => {
                "the session id is already used with another idempotency key, plan or digest"
            }
            ConflictReason::IdempotencyKeyReused => {
                "the idempotency key is already used with another session id, plan or digest"
            }
        }
    }
}

/// A refusal of the receipt journal that is not corruption.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReceiptRefusal {
    /// No room for another reservation.
    ReservationRefused,
    /// The reservation is not held.
    ReservationUnknown {
        /// The session the reservation was for.
        session: SessionId,
    },
    /// A reservation for this session is already held.
    ReservationExists {
        /// The session.
        session: SessionId,
    },
    /// The receipt body exceeds the bound.
    TooLarge {
        /// Body length in bytes.
        len: u64,
        /// The bound.
        max: u64,
    },
    /// The body lacks `receipt_kind` or names another kind.
    KindMismatch,
    /// The acknowledgement does not name the exact delivered head.
    AckMismatch,
    /// The page starts before the oldest kept receipt.
    PageCompacted {
        /// Oldest sequence a page may start after.
        base_seq: u64,
    },
    /// The page starts after the newest receipt.
    PageOutOfRange {
        /// The newest sequence.
        head_seq: u64,
    },
    /// The byte bound is smaller than the next receipt.
    PageTooSmall {
        /// Size of the next receipt.
        needed: u64,
    },
    /// The key is not 32 bytes.
    KeyInvalid,
    /// A head string is malformed.
    HeadInvalid,
}

impl ReceiptRefusal {
    fn code(&self) -> ErrorCode {
        match self {
            ReceiptRefusal::ReservationRefused => jc::RECEIPT_RESERVATION_REFUSED,
            ReceiptRefusal::ReservationUnknown { .. } => jc::RECEIPT_RESERVATION_UNKNOWN,
            ReceiptRefusal::ReservationExists { .. } => jc::RECEIPT_RESERVATION_EXISTS,
            ReceiptRefusal::TooLarge { .. } => jc::RECEIPT_TOO_LARGE,
            ReceiptRefusal::KindMismatch => jc::RECEIPT_KIND_MISMATCH,
            ReceiptRefusal::AckMismatch => jc::RECEIPT_ACK_MISMATCH,
            ReceiptRefusal::PageCompacted { .. } => jc::RECEIPT_PAGE_COMPACTED,
            ReceiptRefusal::PageOutOfRange { .. } => jc::RECEIPT_PAGE_OUT_OF_RANGE,
            ReceiptRefusal::PageTooSmall { .. } => jc::RECEIPT_PAGE_TOO_SMALL,
            ReceiptRefusal::KeyInvalid => jc::RECEIPT_KEY_INVALID,
            ReceiptRefusal::HeadInvalid => jc::RECEIPT_HEAD_INVALID,
        }
    }
}

impl core::fmt::Display for ReceiptRefusal {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.code().meaning())?;
        match self {
            ReceiptRefusal::ReservationUnknown { session }
            | ReceiptRefusal::ReservationExists { session } => write!(f, " (session {session})"),
            ReceiptRefusal::TooLarge { len, max } => write!(f, " ({len} > {max} bytes)"),
            ReceiptRefusal::PageCompacted { base_seq } => write!(f, " (base {base_seq})"),
            ReceiptRefusal::PageOutOfRange { head_seq } => write!(f, " (head {head_seq})"),
            ReceiptRefusal::PageTooSmall { needed } => write!(f, " (needs {needed} bytes)"),
            _ => Ok(()),
        }
    }
}

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// An operating-system call failed.
    #[error("journal I/O failed: {op}: {errno}")]
    Io {
        /// The operation.
        op: IoOp,
        /// The error number.
        errno: Errno,
    },
    /// Create found an existing file.
    #[error("a journal already exists there")]
    Exists,
    /// Open found no file.
    #[error("no journal exists there")]
    NotFound,
    /// Another handle holds the writer lock.
    #[error("another writer holds the journal lock")]
    Locked,
    /// The file or its directory breaks a placement rule.
    #[error("journal placement rejected: {0}")]
    Placement(Placement),
    /// Replay found corruption; the journal is not opened.
    #[error("journal corrupt at byte {offset}: {}", kind.code().meaning())]
    Corrupt {
        /// The class of corruption.
        kind: CorruptKind,
        /// Byte offset in the file where it starts.
        offset: u64,
    },
    /// A write or sync failed; this handle is now poisoned.
    #[error("journal {op} failed, handle poisoned: {errno}")]
    SyncFailed {
        /// The operation that failed.
        op: IoOp,
        /// The error number.
        errno: Errno,
    },
    /// An earlier write or sync failed; reopen the journal.
    #[error("journal handle is poisoned by an earlier failure")]
    Poisoned,
    /// An append would pass a bound.
    #[error("journal is full ({0:?} bound)")]
    Full(Bound),
    /// A payload is larger than the record bound.
    #[error("record of {len} bytes exceeds the bound of {max}")]
    RecordTooLarge {
        /// Payload length.
        len: u64,
        /// The bound.
        max: u64,
    },
    /// The generic journal was asked to create or open a session store or
    /// a receipt journal, which only their own types may write.
    #[error("journal kind {0} is written only by its own type, not the generic journal")]
    KindGuarded(u16),
    /// An append named a record kind the journal does not carry.
    #[error("record kind {kind} is not carried by this journal")]
    KindRefused {
        /// The kind.
        kind: u16,
    },
    /// An input failed validation (its own code is kept).
    #[error("invalid {field}: {rejection}")]
    Invalid {
        /// Which input.
        field: &'static str,
        /// Why, with its code.
        rejection: Rejection,
    },
    /// A plan is larger than the store's plan bound.
    #[error("plan of {len} bytes exceeds the bound of {max}")]
    PlanTooLarge {
        /// Plan length.
        len: u64,
        /// The bound.
        max: u64,
    },
    /// Session creation conflicts with a stored session.
    #[error("session {session} conflicts with a stored session: {}", .reason.describe())]
    SessionConflict {
        /// The session id of the request.
        session: SessionId,
        /// What was reused.
        reason: ConflictReason,
    },
    /// No such session.
    #[error("no session {session}")]
    SessionNotFound {
        /// The session id.
        session: SessionId,
    },
    /// The transition is not allowed from the current stage.
    #[error("session {session} cannot move from {} to {}", .from.as_str(), .to.as_str())]
    IllegalTransition {
        /// The session.
        session: SessionId,
        /// Its current stage.
        from: SessionStage,
        /// The requested stage.
        to: SessionStage,
    },
    /// The session is already in the stage with other evidence.
    #[error("session {session} is already {} with different evidence", .stage.as_str())]
    TransitionConflict {
        /// The session.
        session: SessionId,
        /// The stage.
        stage: SessionStage,
    },
    /// A session-store admission (create, prepare, start) would leave less
    /// room than the live sessions may still need to become terminal.
    #[error(
        "session store has no room: needs {} records and {} bytes beyond the live sessions' \
         reserve, has {} records and {} bytes",
        .need.records, .need.bytes, .room.records, .room.bytes
    )]
    NoRoom {
        /// What the admission needs.
        need: crate::session::Room,
        /// What is free beyond the reserve.
        room: crate::session::Room,
    },
    /// Compaction was asked to carry more unexpired nonces than fit.
    #[error("{count} unexpired nonces to carry, at most {max}")]
    NoncesTooMany {
        /// Unexpired nonces (carried and supplied, deduplicated).
        count: u64,
        /// The bound.
        max: u64,
    },
    /// A receipt-journal refusal.
    #[error("receipt refused: {0}")]
    Receipt(ReceiptRefusal),
}

impl JournalError {
    /// The stable code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            JournalError::Io { .. } => jc::JOURNAL_IO,
            JournalError::Exists => jc::JOURNAL_EXISTS,
            JournalError::NotFound => jc::JOURNAL_NOT_FOUND,
            JournalError::Locked => jc::JOURNAL_LOCKED,
            JournalError::Placement(p) => match p {
                Placement::DirNotDirectory => jc::JOURNAL_DIR_NOT_DIRECTORY,
                Placement::DirBadMode { .. } => jc::JOURNAL_DIR_BAD_MODE,
                Placement::DirWrongOwner { .. } => jc::JOURNAL_DIR_WRONG_OWNER,
                Placement::Symlink => fc::FILE_SYMLINK,
                Placement::NotRegular => fc::FILE_NOT_REGULAR,
                Placement::FileBadMode { .. } => fc::FILE_BAD_MODE,
                Placement::FileWrongOwner { .. } => fc::FILE_WRONG_OWNER,
                Placement::LinkCount { .. } => fc::FILE_LINK_COUNT,
            },
            JournalError::Corrupt { kind, .. } => kind.code(),
            JournalError::SyncFailed { .. } => jc::JOURNAL_SYNC_FAILED,
            JournalError::Poisoned => jc::JOURNAL_POISONED,
            JournalError::Full(_) => jc::JOURNAL_FULL,
            JournalError::RecordTooLarge { .. } => jc::JOURNAL_RECORD_TOO_LARGE,
            JournalError::KindGuarded(_) => jc::JOURNAL_KIND_GUARDED,
            JournalError::KindRefused { .. } => jc::JOURNAL_RECORD_KIND_REFUSED,
            JournalError::Invalid { rejection, .. } => rejection.code(),
            JournalError::PlanTooLarge { .. } => jc::STORE_PLAN_TOO_LARGE,
            JournalError::SessionConflict { .. } => jc::SESSION_CONFLICT,
            JournalError::SessionNotFound { .. } => jc::STORE_SESSION_NOT_FOUND,
            JournalError::IllegalTransition { .. } => jc::STORE_ILLEGAL_TRANSITION,
            JournalError::TransitionConflict { .. } => jc::STORE_TRANSITION_CONFLICT,
            JournalError::NoRoom { .. } => jc::STORE_NO_ROOM,
            JournalError::NoncesTooMany { .. } => jc::STORE_NONCES_TOO_MANY,
            JournalError::Receipt(r) => r.code(),
        }
    }

    /// Whether this is replay-time corruption (the journal was not opened).
    pub fn is_corrupt(&self) -> bool {
        matches!(self, JournalError::Corrupt { .. })
    }

    pub(crate) fn io(op: IoOp) -> impl FnOnce(Errno) -> JournalError {
        move |errno| JournalError::Io { op, errno }
    }

    pub(crate) fn corrupt(kind: CorruptKind, offset: u64) -> JournalError {
        JournalError::Corrupt { kind, offset }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_corrupt_kind_has_a_distinct_journal_area_code() {
        use CorruptKind::*;
        let all = [
            HeaderCorrupt,
            HeaderMismatch,
            FrameCorrupt,
            DigestMismatch,
            SequenceGap,
            SequenceDuplicate,
            SequenceReordered,
            UnknownKind,
            RecordTooLong,
            BoundExceeded,
            ShorterThanAnchor,
            AnchorMismatch,
            StoreRecordInvalid,
            StoreDuplicateSession,
            StoreUnknownSession,
            StoreImpossibleTransition,
            StoreSnapshotInvalid,
            ReceiptRecordInvalid,
            ReceiptMacMismatch,
            ReceiptSequenceInvalid,
            ReceiptAnchorMismatch,
            ReceiptBehindAck,
            ReceiptAckFileInvalid,
            ReceiptAckMissing,
            AnchorFileInvalid,
            AnchorFileMissing,
            MissingButAnchored,
        ];
        let mut codes: Vec<_> = all.iter().map(|k| k.code().as_str()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), all.len());
        for k in all {
            assert_eq!(k.code().area(), glove_types::codes::Area::Journal);
        }
    }
}
