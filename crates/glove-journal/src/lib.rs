//! Durable storage for Glove: bounded append-only journals, the session
//! store and the HMAC-chained receipt journal.
//!
//! A tour of the crate, bottom up:
//!
//! * [`format`] — the one on-disk format: an 80-byte header, then records
//!   of frame + payload + a SHA-256 digest chained to the previous record;
//! * [`spec`] — [`JournalSpec`]: kind, byte and record bounds, record kinds;
//! * [`anchor`] — [`Anchor`], a trusted (count, length, head digest) summary
//!   a caller keeps to notice a journal cut at a record boundary;
//! * [`anchor_file`] — [`anchor_file::AnchorFile`], the authenticated
//!   `<journal>.anchor` beside a journal: the session store and the receipt
//!   journal rewrite theirs after every durable append and refuse, on open,
//!   a journal shorter than it or diverging from it;
//! * [`replay`] — [`replay_bytes`], the pure, panic-free strict decoder that
//!   classifies every failure as a torn tail or as corruption with a code and
//!   a byte offset;
//! * [`atomic`] — [`atomic::write_file`], the one helper for a small
//!   durable file written whole (sibling, fsync, rename, fsync of the
//!   directory);
//! * `placement` — protected placement checks and the file operations
//!   (private);
//! * `commit` — group commit (private): appenders queue records, one leader
//!   at a time writes and syncs a whole batch and wakes exactly the
//!   followers that sync covered; [`CommitStats`] says how batches formed;
//! * [`journal`] — [`Journal`], the locked writer handle: create, open with
//!   torn-tail repair, durable append with group commit, poisoning, rewrite;
//! * [`session`] — [`SessionStore`], sessions created from canonical plans
//!   with idempotent retry, stage transitions checked against the shared
//!   stage graph, lookups by session id and idempotency key;
//! * [`lifecycle`] — glove-lifecycle's ports over the two stores:
//!   [`lifecycle::StoreLog`] (a `TransitionLog` on the session store) and
//!   [`lifecycle::StoreReceipts`] (a `ReceiptLog` on the receipt journal);
//! * [`apply`] — [`ApplyJournal`], the apply transactions' durable log:
//!   glove-lifecycle's `TransitionLog` for apply subjects, the single-use
//!   registry rebuilt from every reservation, replay for recovery;
//! * [`exposure`] — [`ExposureJournal`], the path-exposure leases: one
//!   record per grant and per revocation, replayed strictly into each
//!   exposure's generations, a replacement written as one batch;
//! * [`receipt`] — [`ReceiptJournal`]: capacity reservations, HMAC-chained
//!   canonical-JSON receipts, paging, exact-head acknowledgement, compaction,
//!   and the offline verifier [`verify_file`];
//! * [`error`] — [`JournalError`], one `#[non_exhaustive]` enum whose
//!   [`JournalError::code`] gives the stable code of every failure.
//!
//! `docs/journal.md` describes the format byte by byte and the guarantees.
//! The crate contains no `unsafe` code; system calls go through `rustix`.
#![forbid(unsafe_code)]

pub mod anchor;
pub mod anchor_file;
pub mod apply;
pub mod atomic;
mod commit;
mod crash_point;
pub mod error;
pub mod exposure;
pub mod format;
pub mod journal;
pub mod lifecycle;
mod placement;
pub mod receipt;
pub mod replay;
pub mod session;
pub mod spec;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;

pub use anchor::Anchor;
pub use anchor_file::AnchorFile;
pub use apply::ApplyJournal;
pub use commit::CommitStats;
pub use error::JournalError;
pub use exposure::ExposureJournal;
pub use format::JournalKind;
pub use journal::{Appended, Journal, JournalView, OpenReport, Opened, RecordView, TornRepair};

pub use receipt::{verify_file, ReceiptJournal};
pub use replay::{replay_bytes, Replayed};
pub use session::SessionStore;

pub use spec::JournalSpec;

/// Reads a whole journal file for a read-only check (verify, show):
/// nothing is locked or changed. The last component must be a regular file
/// (no symbolic link, FIFO or device: refused at once, never waited on),
/// and one over `max_bytes` is refused before anything is read.
pub fn read_bounded(path: &std::path::Path, max_bytes: u64) -> Result<Vec<u8>, JournalError> {
    use rustix::fd::AsFd;
    let fd = placement::open_readonly(path)?;
    let size = rustix::fs::fstat(&fd)
        .map_err(JournalError::io(error::IoOp::Stat))?
        .st_size;
    let size = u64::try_from(size).unwrap_or(u64::MAX);
    if size > max_bytes {
        return Err(JournalError::corrupt(
            error::CorruptKind::BoundExceeded,
            max_bytes,
        ));
    }
    placement::read_exact(fd.as_fd(), size)
}
