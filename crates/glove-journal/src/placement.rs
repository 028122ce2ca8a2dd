//! Protected placement and the few file operations the journals need.
//!
//! A journal lives in a directory of mode 0700 owned by the effective user;
//! the file itself is a regular file of mode 0600, owned by that user, with
//! exactly one hard link, opened with `O_NOFOLLOW` so a symbolic link in the
//! last component is refused. Every file is opened relative to a descriptor
//! of its directory, so the checks and the later operations see the same
//! directory. The discipline itself is `glove_fs`'s, shared with the
//! control core and the sandbox; this module maps its faults to the
//! journal's errors.

use crate::error::{IoOp, JournalError, Placement};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{self, FlockOperation, OFlags};
use rustix::io::Errno;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Splits a journal path into its directory and file name.
pub(crate) fn split(path: &Path) -> (PathBuf, &OsStr) {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    (dir, path.file_name().unwrap_or_else(|| OsStr::new("")))
}

fn placement(f: glove_fs::Fault) -> JournalError {
    use glove_fs::Fault as F;
    JournalError::Placement(match f {
        F::NotDirectory => Placement::DirNotDirectory,
        F::NotRegular => Placement::NotRegular,
        F::WrongOwner { uid } => Placement::FileWrongOwner { uid },
        F::BadMode { mode } => Placement::FileBadMode { mode },
        F::LinkCount { links } => Placement::LinkCount { links },
    })
}

/// Opens the parent directory and checks mode 0700 and ownership.
pub(crate) fn open_dir(dir: &Path) -> Result<OwnedFd, JournalError> {
    let fd = glove_fs::unconfined::open_dir(dir, true).map_err(|e| match e {
        Errno::NOENT => JournalError::NotFound,
        Errno::NOTDIR => JournalError::Placement(Placement::DirNotDirectory),
        e => JournalError::Io {
            op: IoOp::OpenDir,
            errno: e,
        },
    })?;
    let facts = glove_fs::facts(fd.as_fd()).map_err(JournalError::io(IoOp::Stat))?;
    facts.private_dir(0o700).map_err(|f| match f {
        glove_fs::Fault::BadMode { mode } => {
            JournalError::Placement(Placement::DirBadMode { mode })
        }
        glove_fs::Fault::WrongOwner { uid } => {
            JournalError::Placement(Placement::DirWrongOwner { uid })
        }
        f => placement(f),
    })?;
    Ok(fd)
}

/// Checks a journal file's type, mode, owner and link count; returns its size.
pub(crate) fn check_file(fd: BorrowedFd<'_>) -> Result<u64, JournalError> {
    let facts = glove_fs::facts(fd).map_err(JournalError::io(IoOp::Stat))?;
    facts.private_file(0o600).map_err(placement)?;
    Ok(facts.size)
}

fn map_open_error(e: Errno) -> JournalError {
    match e {
        Errno::NOENT => JournalError::NotFound,
        Errno::EXIST => JournalError::Exists,
        // O_NOFOLLOW on a final symlink fails with ELOOP.
        Errno::LOOP | Errno::MLINK => JournalError::Placement(Placement::Symlink),
        e => JournalError::Io {
            op: IoOp::Open,
            errno: e,
        },
    }
}

/// Opens an existing file in `dir` without following a final symlink.
pub(crate) fn open_in(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    write: bool,
) -> Result<OwnedFd, JournalError> {
    let access = if write { OFlags::RDWR } else { OFlags::RDONLY };
    glove_fs::open_in(dir, name, access).map_err(map_open_error)
}

/// Opens a file by path for reading only, refusing a final symlink. Used by
/// the offline verifier, which makes no placement demands.
pub(crate) fn open_readonly(path: &Path) -> Result<OwnedFd, JournalError> {
    // Non-blocking, so a FIFO in its place is refused below instead of
    // waiting for a writer (reads of a regular file are unaffected).
    let fd = glove_fs::unconfined::open_file(path, OFlags::RDONLY).map_err(map_open_error)?;
    let facts = glove_fs::facts(fd.as_fd()).map_err(JournalError::io(IoOp::Stat))?;
    if facts.kind != glove_fs::FileType::RegularFile {
        return Err(JournalError::Placement(Placement::NotRegular));
    }
    Ok(fd)
}

/// Creates a new file with `O_EXCL`, mode 0600 regardless of the umask.
pub(crate) fn create_in(dir: BorrowedFd<'_>, name: &OsStr) -> Result<OwnedFd, JournalError> {
    let fd = glove_fs::create_in(dir, name, OFlags::RDWR, 0o600).map_err(map_open_error)?;
    glove_fs::chmod(fd.as_fd(), 0o600).map_err(JournalError::io(IoOp::Chmod))?;
    Ok(fd)
}

/// After waiting for the lock: whether `fd` is still the file named `name`
/// in `dir`. A writer that held the lock meanwhile may have compacted the
/// journal (renamed a new file over the name, leaving `fd` on the unlinked
/// old one); that is another writer at work, so `Locked`.
pub(crate) fn still_named(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    fd: BorrowedFd<'_>,
) -> Result<(), JournalError> {
    let ours = fs::fstat(fd).map_err(JournalError::io(IoOp::Stat))?;
    match fs::statat(dir, name, fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(named) if named.st_dev == ours.st_dev && named.st_ino == ours.st_ino => Ok(()),
        Ok(_) => Err(JournalError::Locked),
        Err(e) if e == Errno::NOENT => Err(JournalError::Locked),
        Err(e) => Err(JournalError::Io {
            op: IoOp::Stat,
            errno: e,
        }),
    }
}

/// How long [`lock`] waits out a held lock before it reports `Locked`.
pub(crate) const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Takes the exclusive writer lock, waiting at most [`LOCK_WAIT`].
///
/// A lock can outlive the handle that took it: a process forked from the
/// writer's process (any child it spawns, from any thread) holds a copy of
/// the descriptor, and with it the lock, until its `exec` closes it. A
/// journal closed and reopened at once would find that copy's lock. So a
/// held lock is retried for a short, bounded time; a real second writer is
/// still refused, only later.
pub(crate) fn lock(fd: BorrowedFd<'_>) -> Result<(), JournalError> {
    lock_within(fd, LOCK_WAIT)
}

pub(crate) fn lock_within(
    fd: BorrowedFd<'_>,
    wait: std::time::Duration,
) -> Result<(), JournalError> {
    let deadline = std::time::Instant::now() + wait;
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        match fs::flock(fd, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(()),
            Err(e) if e == Errno::WOULDBLOCK || e == Errno::AGAIN => {
                let now = std::time::Instant::now();
                if now >= deadline {
                    return Err(JournalError::Locked);
                }
                std::thread::sleep(pause.min(deadline - now));
                pause = (pause * 2).min(std::time::Duration::from_millis(50));
            }
            Err(e) if e == Errno::INTR => {}
            Err(e) => {
                return Err(JournalError::Io {
                    op: IoOp::Lock,
                    errno: e,
                })
            }
        }
    }
}

/// `fsync` of a directory, making a create, rename or unlink durable.
pub(crate) fn sync_dir(dir: BorrowedFd<'_>) -> Result<(), JournalError> {
    glove_fs::sync_dir(dir).map_err(JournalError::io(IoOp::SyncDir))
}

/// Renames `from` to `to` in `dir`; with `no_replace`, fails if `to` exists.
pub(crate) fn rename_in(
    dir: BorrowedFd<'_>,
    from: &OsStr,
    to: &OsStr,
    no_replace: bool,
) -> Result<(), JournalError> {
    glove_fs::rename_in(dir, from, to, no_replace).map_err(|e| match e {
        Errno::EXIST => JournalError::Exists,
        e => JournalError::Io {
            op: IoOp::Rename,
            errno: e,
        },
    })
}

/// Removes a file from `dir`, ignoring a missing one.
pub(crate) fn unlink_in(dir: BorrowedFd<'_>, name: &OsStr) {
    let _ = glove_fs::unlink_in(dir, name);
}

/// Writes all of `buf` at `offset`, retrying short writes and `EINTR`.
pub(crate) fn write_all_at(
    fd: BorrowedFd<'_>,
    mut buf: &[u8],
    mut offset: u64,
) -> Result<(), Errno> {
    while !buf.is_empty() {
        match rustix::io::pwrite(fd, buf, offset) {
            Ok(0) => return Err(Errno::IO),
            Ok(n) => {
                buf = buf.get(n..).unwrap_or(&[]);
                offset += n as u64;
            }
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads exactly `len` bytes from the start of the file (no more: a file
/// that grows meanwhile is read only up to the size checked before).
pub(crate) fn read_exact(fd: BorrowedFd<'_>, len: u64) -> Result<Vec<u8>, JournalError> {
    let n = usize::try_from(len).map_err(|_| JournalError::Io {
        op: IoOp::Read,
        errno: Errno::FBIG,
    })?;
    let mut buf = vec![0u8; n];
    let mut done = 0usize;
    while done < n {
        let Some(rest) = buf.get_mut(done..) else {
            break;
        };
        match rustix::io::pread(fd, rest, done as u64) {
            Ok(0) => {
                // The file shrank under us: read what is there.
                buf.truncate(done);
                break;
            }
            Ok(k) => done += k,
            Err(Errno::INTR) => {}
            Err(e) => {
                return Err(JournalError::Io {
                    op: IoOp::Read,
                    errno: e,
                })
            }
        }
    }
    Ok(buf)
}

/// Random bytes from the operating system.
pub(crate) fn random<const N: usize>() -> Result<[u8; N], JournalError> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| JournalError::Io {
        op: IoOp::Random,
        errno: e.raw_os_error().map_or(Errno::IO, Errno::from_raw_os_error),
    })?;
    Ok(b)
}

/// A fresh sibling name: `.<name>.<tag>.<random hex>`.
pub(crate) fn sibling_name(name: &OsStr, tag: &str) -> Result<std::ffi::OsString, JournalError> {
    let r: [u8; 8] = random()?;
    let mut s = std::ffi::OsString::from(".");
    s.push(name);
    s.push(format!(".{tag}.{}", glove_types::digest::to_hex(&r)));
    Ok(s)
}

/// Removes the siblings `.<name>.<tag>.<16 hex>` that [`sibling_name`]
/// made for a rewrite a crash interrupted before its rename (the journal's
/// owner calls it holding the journal's lock, so no rewrite is in flight).
/// Best effort: a name that cannot be listed or removed is left. Returns
/// how many were removed.
pub(crate) fn remove_stale_siblings(dir: BorrowedFd<'_>, name: &OsStr, tag: &str) -> usize {
    let mut prefix = b".".to_vec();
    prefix.extend_from_slice(name.as_encoded_bytes());
    prefix.push(b'.');
    prefix.extend_from_slice(tag.as_bytes());
    prefix.push(b'.');
    let Ok(listing) = fs::Dir::read_from(dir) else {
        return 0;
    };
    let mut stale = Vec::new();
    for entry in listing.flatten() {
        let n = entry.file_name().to_bytes();
        let Some(suffix) = n.strip_prefix(&prefix[..]) else {
            continue;
        };
        if suffix.len() == 16 && suffix.iter().all(|c| c.is_ascii_hexdigit()) {
            stale.push(entry.file_name().to_owned());
        }
    }
    let mut removed = 0;
    for n in &stale {
        if fs::unlinkat(dir, n.as_c_str(), fs::AtFlags::empty()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Writes a small file atomically: a new sibling with `O_EXCL`, its bytes,
/// `fsync`, rename over `name`, `fsync` of the directory.
pub(crate) fn replace_file(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    bytes: &[u8],
) -> Result<(), JournalError> {
    let tmp = sibling_name(name, "tmp")?;
    let fd = create_in(dir, &tmp)?;
    let result = (|| {
        write_all_at(fd.as_fd(), bytes, 0).map_err(JournalError::io(IoOp::Write))?;
        fs::fsync(&fd).map_err(JournalError::io(IoOp::Sync))?;
        rename_in(dir, &tmp, name, false)?;
        sync_dir(dir)
    })();
    if result.is_err() {
        unlink_in(dir, &tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn two_descriptions() -> (tempfile::TempDir, OwnedFd, OwnedFd) {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join("j");
        std::fs::write(&p, b"").expect("write");
        let open = || {
            fs::open(
                &p,
                OFlags::RDWR | OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .expect("open")
        };
        let (a, b) = (open(), open());
        (d, a, b)
    }

    #[test]
    fn a_lock_released_soon_after_is_waited_out() {
        let (_d, first, second) = two_descriptions();
        lock(first.as_fd()).expect("first lock");
        // Like a forked child's copy of the descriptor, closed at its exec.
        let holder = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(first);
        });
        lock(second.as_fd()).expect("the lock is taken once released");
        holder.join().expect("holder");
    }

    #[test]
    fn a_lock_held_throughout_is_refused_after_the_wait() {
        let (_d, first, second) = two_descriptions();
        lock(first.as_fd()).expect("first lock");
        let e = lock_within(second.as_fd(), Duration::from_millis(30)).unwrap_err();
        assert!(matches!(e, JournalError::Locked), "{e:?}");
        drop(first);
        lock_within(second.as_fd(), Duration::ZERO).expect("free now");
    }
}
