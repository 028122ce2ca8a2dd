//! [`Journal`]: the durable, bounded, exclusively locked append-only file.
//!
//! * **Create** writes the header to a fresh sibling opened with `O_EXCL`,
//!   locks and `fsync`s it, renames it into place with `RENAME_NOREPLACE`
//!   and `fsync`s the directory. A crash at any point leaves either no
//!   journal or a complete header (never a half-written one at the name).
//! * **Open** checks placement, takes the writer lock, waiting at most a
//!   second for it (`journal_locked` if another handle still holds it: a
//!   child forked by the writer's process holds a copy until its `exec`;
//!   an open handed an anchor read earlier does not wait, and the stores
//!   read theirs under the lock), reads the file once and
//!   replays it strictly. A torn tail is cut off exactly once: its bytes are
//!   first copied to a sibling `<name>.torn.<offset>.<random>` (synced, with
//!   the directory), then the file is truncated and synced; the repair is
//!   reported in [`OpenReport`].
//! * **Append** is durable when it returns: the record is written and
//!   covered by a completed `fdatasync`. Appenders on several threads share
//!   writes and syncs (group commit, see the private `commit` module): each queues its
//!   encoded record under a mutex; one waiting thread at a time is the
//!   leader, cuts everything queued into a batch, writes it with one
//!   `pwrite` and runs one `fdatasync`; it then wakes exactly the followers
//!   that sync covered. Records queued while a leader works wait for the
//!   next batch. A record is acknowledged only by a sync that started after
//!   it was written.
//! * A failed write or sync **poisons** the handle: that call fails with
//!   `journal_sync_failed` and every later call with `journal_poisoned`. The
//!   descriptor is never synced again; reopen to recover (replay decides
//!   what reached the disk).

use crate::anchor::Anchor;
use crate::commit::{Commit, CommitStats, State};
use crate::error::{Bound, CorruptKind, IoOp, JournalError};
use crate::format::{encode_record, record_len, Header, HEADER_LEN};
use crate::placement;
use crate::replay::{replay_bytes, RecordMeta, Replayed, TornTail};
use crate::spec::JournalSpec;
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::MutexGuard;

mod files;
mod view;

use files::{build_image, repair_torn, write_new};
pub use view::JournalView;

/// Proof that a record is durably appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "an append's receipt tells where the record went"]
pub struct Appended {
    /// The record's sequence number.
    pub seq: u64,
    /// Byte offset of the record's frame.
    pub offset: u64,
    /// The record's chained digest.
    pub digest: [u8; 32],
}

/// A torn tail that open cut off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornRepair {
    /// Where the tail started (the new file length).
    pub offset: u64,
    /// How many bytes were cut.
    pub len: u64,
    /// The sibling file the cut bytes were saved to.
    pub saved_as: PathBuf,
}

/// What open found and did, for the caller to log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// The torn tail that was repaired, if any.
    pub torn: Option<TornRepair>,
    /// Opened through an anchor file that did not exist (a journal from
    /// before anchor files, or one whose anchor was removed): nothing could
    /// be checked against it; a fresh anchor has been written.
    pub unanchored: bool,
}

/// A record as seen after open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// The record kind.
    pub kind: u16,
    /// The sequence number.
    pub seq: u64,
    /// Byte offset of the frame.
    pub offset: u64,
    /// The payload.
    pub payload: &'a [u8],
}

/// A freshly opened journal with the records replay found.
#[derive(Debug)]
pub struct Opened {
    /// The writer handle.
    pub journal: Journal,
    /// What open found and repaired.
    pub report: OpenReport,
    image: Vec<u8>,
    records: Vec<RecordMeta>,
}

impl Opened {
    /// The valid records, in order.
    pub fn records(&self) -> impl Iterator<Item = RecordView<'_>> + '_ {
        self.records.iter().map(|m| RecordView {
            kind: m.kind,
            seq: m.seq,
            offset: m.offset,
            payload: self.image.get(m.payload.clone()).unwrap_or(&[]),
        })
    }

    /// The number of valid records.
    pub fn record_count(&self) -> usize {
        self.records.len()
    }

    /// Splits into the handle, the report, the file image (the valid
    /// prefix) and the records as ranges of that image, so a caller can
    /// keep payloads without copying them.
    pub fn into_parts(self) -> (Journal, OpenReport, Vec<u8>, Vec<RecordMeta>) {
        (self.journal, self.report, self.image, self.records)
    }
}

/// An open journal holding the exclusive writer lock.
///
/// `Journal` is `Send + Sync`: share it (for example in an `Arc`) between
/// appending threads to get group commit.
#[derive(Debug)]
pub struct Journal {
    file: OwnedFd,
    dir: OwnedFd,
    path: PathBuf,
    name: OsString,
    spec: JournalSpec,
    header: Header,
    commit: Commit,
}

/// The kinds only their own types write: a session store's and the apply
/// journal's records are appended only through the lifecycle, a receipt journal's carry the
/// receipt MAC. The generic constructors refuse them, so no code in the
/// process can open either file as a raw, appendable [`Journal`].
fn guarded(spec: &JournalSpec) -> Result<(), JournalError> {
    use crate::format::JournalKind;
    if spec.kind == JournalKind::SESSION_STORE
        || spec.kind == JournalKind::RECEIPTS
        || spec.kind == JournalKind::APPLY
        || spec.kind == JournalKind::EXPOSURES
    {
        return Err(JournalError::KindGuarded(spec.kind.0));
    }
    Ok(())
}

impl Journal {
    /// Creates a new, empty journal at `path`. The directory must already
    /// exist with mode 0700; the file must not exist. A session store or a
    /// receipt journal is refused (`journal_kind_guarded`): their own types
    /// create them.
    pub fn create(path: &Path, spec: &JournalSpec) -> Result<Journal, JournalError> {
        Journal::create_with(path, spec, [])
    }

    /// Creates a new journal that already holds `records` when it first
    /// appears under its name (so a crash never leaves it without them).
    /// Guarded kinds are refused, as by [`create`](Self::create).
    pub fn create_with<'a>(
        path: &Path,
        spec: &JournalSpec,
        records: impl IntoIterator<Item = (u16, &'a [u8])>,
    ) -> Result<Journal, JournalError> {
        guarded(spec)?;
        Journal::create_with_unguarded(path, spec, records)
    }

    /// [`create_with`](Self::create_with) for any kind: for the session
    /// store and the receipt journal themselves (and, through
    /// `testing`, tests that plant records by hand).
    pub(crate) fn create_with_unguarded<'a>(
        path: &Path,
        spec: &JournalSpec,
        records: impl IntoIterator<Item = (u16, &'a [u8])>,
    ) -> Result<Journal, JournalError> {
        let (dir_path, name) = placement::split(path);
        let dir = placement::open_dir(&dir_path)?;
        let header = Header::new(spec.kind, placement::random()?, placement::random()?);
        let (image, count, head) = build_image(spec, &header, records)?;
        let (fd, end) = write_new(&dir, name, &image, false)?;
        Ok(Journal::assemble(
            fd, dir, path, spec, header, end, count, head,
        ))
    }

    /// Opens an existing journal, replays it strictly and repairs a torn
    /// tail. With an `anchor`, a file that is shorter than it, or does not
    /// match it, is corrupt. With an anchor the lock is not waited for (the
    /// caller read the anchor before it, and a holder's appends during a
    /// wait would leave it stale). The session store and the receipt
    /// journal read their anchor under the lock instead, and wait.
    ///
    /// Guarded kinds are refused, as by [`create`](Self::create).
    pub fn open(
        path: &Path,
        spec: &JournalSpec,
        anchor: Option<&Anchor>,
    ) -> Result<Opened, JournalError> {
        guarded(spec)?;
        Journal::open_unguarded(path, spec, anchor)
    }

    /// [`open`](Self::open) for any kind (the session store's own open).
    pub(crate) fn open_unguarded(
        path: &Path,
        spec: &JournalSpec,
        anchor: Option<&Anchor>,
    ) -> Result<Opened, JournalError> {
        let wait = anchor.is_none();
        let anchors = || Ok((anchor.into_iter().copied().collect(), ()));
        Ok(Journal::open_inner(path, spec, wait, anchors)?.0)
    }

    /// Opens an existing journal like [`open`](Self::open), waiting for
    /// the lock, and only once it holds the lock calls `anchors` for what
    /// to check the file against: the anchors it gives are tried in order
    /// and the first the file matches is used (none: unanchored). Reading
    /// the anchor under the lock means no holder can append, compact or
    /// move the anchor on between the read and the check.
    pub(crate) fn open_anchored_by<T>(
        path: &Path,
        spec: &JournalSpec,
        anchors: impl FnOnce() -> Result<(Vec<Anchor>, T), JournalError>,
    ) -> Result<(Opened, T), JournalError> {
        Journal::open_inner(path, spec, true, anchors)
    }

    fn open_inner<T>(
        path: &Path,
        spec: &JournalSpec,
        wait: bool,
        anchors: impl FnOnce() -> Result<(Vec<Anchor>, T), JournalError>,
    ) -> Result<(Opened, T), JournalError> {
        let (dir_path, name) = placement::split(path);
        let dir = placement::open_dir(&dir_path)?;
        let fd = placement::open_in(dir.as_fd(), name, true)?;
        placement::check_file(fd.as_fd())?;
        if wait {
            placement::lock(fd.as_fd())?;
        } else {
            placement::lock_within(fd.as_fd(), std::time::Duration::ZERO)?;
        }
        // The lock may have been waited for: meanwhile another writer may
        // have appended (so the size is read only now) or compacted the
        // journal onto a new file (so `fd` must still be the named one).
        placement::still_named(dir.as_fd(), name, fd.as_fd())?;
        let size = placement::check_file(fd.as_fd())?;
        // A rewrite a crash cut short left its new file beside this one;
        // holding the lock, no rewrite is in flight, so it is garbage.
        placement::remove_stale_siblings(dir.as_fd(), name, "new");
        // Likewise the temporary siblings of its anchor and ack files (each
        // is written whole through one, only by this journal's holder).
        let mut anchor_file = name.to_os_string();
        anchor_file.push(".anchor");
        placement::remove_stale_siblings(dir.as_fd(), &anchor_file, "tmp");
        let mut ack = name.to_os_string();
        ack.push(".ack");
        placement::remove_stale_siblings(dir.as_fd(), &ack, "tmp");
        // Holding the lock: what the file is checked against is read now.
        let (candidates, found) = anchors()?;
        if size > spec.max_bytes {
            // Refuse before reading an unbounded amount.
            if candidates.is_empty() || candidates.iter().all(|a| size >= a.byte_len) {
                return Err(JournalError::corrupt(
                    CorruptKind::BoundExceeded,
                    spec.max_bytes,
                ));
            }
        }
        let mut image = placement::read_exact(fd.as_fd(), size)?;
        let replayed = if candidates.is_empty() {
            replay_bytes(&image, spec, None)?
        } else {
            crate::anchor_file::open_matching(&candidates, |a| replay_bytes(&image, spec, Some(a)))?
        };
        let mut report = OpenReport::default();
        if let Some(torn) = replayed.torn {
            report.torn = Some(repair_torn(&dir, &fd, name, &dir_path, &image, torn)?);
            image.truncate(usize::try_from(torn.offset).unwrap_or(image.len()));
        }
        let Replayed {
            header,
            records,
            valid_len,
            head,
            ..
        } = replayed;
        let written = records.len() as u64;
        let journal = Journal::assemble(fd, dir, path, spec, header, valid_len, written, head);
        let opened = Opened {
            journal,
            report,
            image,
            records,
        };
        Ok((opened, found))
    }

    #[expect(clippy::too_many_arguments, reason = "private constructor")]
    fn assemble(
        file: OwnedFd,
        dir: OwnedFd,
        path: &Path,
        spec: &JournalSpec,
        header: Header,
        end: u64,
        written: u64,
        head: [u8; 32],
    ) -> Journal {
        let name = placement::split(path).1.to_os_string();
        Journal {
            file,
            dir,
            path: path.to_path_buf(),
            name,
            spec: *spec,
            header,
            commit: Commit::new(end, written, head),
        }
    }

    fn state(&self) -> Result<MutexGuard<'_, State>, JournalError> {
        self.commit.state()
    }

    /// Appends one record and returns once it is durable.
    pub fn append(&self, kind: u16, payload: &[u8]) -> Result<Appended, JournalError> {
        let (appended, st) = self.write(kind, payload)?;
        self.wait_durable(st, appended.seq)?;
        Ok(appended)
    }

    /// Queues one record without waiting for it to be durable: it is
    /// written and synced with the next [`append`](Self::append) (anyone's,
    /// in one batch) or [`flush`](Self::flush). Until then a crash may lose
    /// it (and only it and the records queued after it), and
    /// [`anchor`](Self::anchor) does not count it. For records nothing is
    /// released on, such as a connection's closing totals.
    pub fn queue(&self, kind: u16, payload: &[u8]) -> Result<Appended, JournalError> {
        let (appended, st) = self.write(kind, payload)?;
        drop(st);
        Ok(appended)
    }

    /// Returns once every record queued or appended so far is durable.
    /// For a single writer (the records' only appender): a batch it leads
    /// is written at once, never held to gather other appenders'.
    pub fn flush(&self) -> Result<(), JournalError> {
        let st = self.state()?;
        if st.poisoned {
            return Err(JournalError::Poisoned);
        }
        let last = st.written;
        let write_sync = |batch: &[u8], offset: u64| {
            placement::write_all_at(self.file.as_fd(), batch, offset)
                .map_err(|errno| (IoOp::Write, errno))?;
            fs::fdatasync(&self.file).map_err(|errno| (IoOp::Sync, errno))
        };
        self.commit.wait_durable_alone(st, last, &write_sync)
    }

    /// Queues one record (sequence number, offset and digest assigned)
    /// without writing it; keeps the lock for the wait that follows.
    fn write(
        &self,
        kind: u16,
        payload: &[u8],
    ) -> Result<(Appended, MutexGuard<'_, State>), JournalError> {
        let mut st = self.state()?;
        if st.poisoned {
            return Err(JournalError::Poisoned);
        }
        self.check_room(&st, kind, payload.len(), 1)?;
        let seq = st.written + 1;
        let offset = st.end;
        let head = st.head;
        let digest = encode_record(
            &mut st.pending,
            &self.header.salt,
            &head,
            kind,
            seq,
            payload,
        );
        st.end = offset + record_len(payload.len()) as u64;
        st.written = seq;
        st.head = digest;
        self.commit.queued(&st);
        let appended = Appended {
            seq,
            offset,
            digest,
        };
        Ok((appended, st))
    }

    fn check_room(
        &self,
        st: &State,
        kind: u16,
        payload_len: usize,
        extra_records: u64,
    ) -> Result<(), JournalError> {
        if !self.spec.carries(kind) {
            return Err(JournalError::KindRefused { kind });
        }
        let len = payload_len as u64;
        if len > u64::from(self.spec.max_payload) {
            return Err(JournalError::RecordTooLarge {
                len,
                max: u64::from(self.spec.max_payload),
            });
        }
        if st.written + extra_records > self.spec.max_records {
            return Err(JournalError::Full(Bound::Records));
        }
        if st.end + record_len(payload_len) as u64 > self.spec.max_bytes {
            return Err(JournalError::Full(Bound::Bytes));
        }
        Ok(())
    }

    /// Waits until a completed sync covers `seq`, leading a batch (one
    /// `pwrite` and one `fdatasync`) when no other thread does (see the
    /// `commit` module).
    fn wait_durable<'a>(&'a self, st: MutexGuard<'a, State>, seq: u64) -> Result<(), JournalError> {
        let write_sync = |batch: &[u8], offset: u64| {
            placement::write_all_at(self.file.as_fd(), batch, offset)
                .map_err(|errno| (IoOp::Write, errno))?;
            fs::fdatasync(&self.file).map_err(|errno| (IoOp::Sync, errno))
        };
        self.commit.wait_durable(st, seq, &write_sync)
    }

    /// How group commit has formed batches on this handle so far.
    pub fn commit_stats(&self) -> CommitStats {
        self.commit.stats()
    }

    /// Whether `count` more records with these payload lengths would fit.
    pub fn has_room(&self, payload_lens: &[usize]) -> bool {
        let Ok(st) = self.state() else {
            return false;
        };
        let bytes: u64 = payload_lens.iter().map(|l| record_len(*l) as u64).sum();
        st.written + payload_lens.len() as u64 <= self.spec.max_records
            && st.end + bytes <= self.spec.max_bytes
    }

    /// The anchor of what is durable: the records a completed sync covered.
    /// A record still queued, or one whose write or sync failed, is never
    /// counted, so an anchor taken at any moment describes a prefix that is
    /// on the disk.
    pub fn anchor(&self) -> Anchor {
        match self.commit.durable() {
            Ok((records, byte_len, head)) => Anchor {
                records,
                byte_len,
                head,
            },
            Err(_) => Anchor {
                records: 0,
                byte_len: HEADER_LEN as u64,
                head: self.header.digest,
            },
        }
    }

    /// Bytes used by the file (header and records).
    pub fn len_bytes(&self) -> u64 {
        self.state().map(|s| s.end).unwrap_or(0)
    }

    /// Records written.
    pub fn record_count(&self) -> u64 {
        self.state().map(|s| s.written).unwrap_or(0)
    }

    /// Whether an earlier failure poisoned this handle.
    pub fn is_poisoned(&self) -> bool {
        self.state().map(|s| s.poisoned).unwrap_or(true)
    }

    /// The journal's id (kept across compaction).
    pub fn journal_id(&self) -> [u8; 16] {
        self.header.journal_id
    }

    /// The journal's spec.
    pub fn spec(&self) -> &JournalSpec {
        &self.spec
    }

    /// The journal's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the journal with a new file holding exactly `records` (kind
    /// and payload; sequence numbers restart at 1), with a fresh salt and the
    /// same journal id. The new file is written and synced beside the old
    /// one, locked, renamed over it, and the directory is synced. On success
    /// the returned handle replaces `self`, which is poisoned (its file is
    /// no longer the journal, and `journal_poisoned` then means "replaced",
    /// not "failed"); a failure once the new file is being written poisons
    /// `self` too.
    pub fn rewrite<'a>(
        &self,
        records: impl IntoIterator<Item = (u16, &'a [u8])>,
    ) -> Result<Journal, JournalError> {
        self.rewrite_announced(records, |_| Ok(()))
    }

    /// [`rewrite`](Self::rewrite), calling `announce` with the new file's
    /// anchor before anything is written, so an owner can record the anchor
    /// the file is about to have (see [`crate::anchor_file`]). If `announce`
    /// fails nothing is rewritten.
    pub fn rewrite_announced<'a>(
        &self,
        records: impl IntoIterator<Item = (u16, &'a [u8])>,
        announce: impl FnOnce(&Anchor) -> Result<(), JournalError>,
    ) -> Result<Journal, JournalError> {
        if self.is_poisoned() {
            return Err(JournalError::Poisoned);
        }
        let header = Header::new(self.spec.kind, self.header.journal_id, placement::random()?);
        let (image, count, head) = build_image(&self.spec, &header, records)?;
        announce(&Anchor {
            records: count,
            byte_len: image.len() as u64,
            head,
        })?;
        let dir = fs::openat(
            &self.dir,
            ".",
            fs::OFlags::RDONLY | fs::OFlags::DIRECTORY | fs::OFlags::CLOEXEC,
            fs::Mode::empty(),
        )
        .map_err(JournalError::io(IoOp::OpenDir))?;
        let (fd, end) = match write_new(&dir, &self.name, &image, true) {
            Ok(v) => v,
            Err(e) => {
                if let Ok(mut st) = self.state() {
                    st.poisoned = true;
                }
                return Err(e);
            }
        };
        // The name now holds the new file: this handle's file is no
        // longer the journal, and an append through it would be lost.
        if let Ok(mut st) = self.state() {
            st.poisoned = true;
        }
        Ok(Journal::assemble(
            fd, dir, &self.path, &self.spec, header, end, count, head,
        ))
    }
}

#[cfg(test)]
mod tests;
