//! The operations that take a whole path. The kernel resolves every
//! component at each call, so a component another user controls could
//! redirect it: use them only where a file or directory is first found
//! (a configured directory, an operator's file), then continue from the
//! descriptor they return.

use super::{Errno, Facts, Fault, Mode, OFlags};
use rustix::fd::OwnedFd;
use rustix::fs::{self as rfs, CWD};
use std::io::Read;
use std::path::Path;

/// Opens the directory `path`; with `follow_last` false a link in its
/// last component is refused (`ELOOP`, or `ENOTDIR`).
pub fn open_dir(path: &Path, follow_last: bool) -> Result<OwnedFd, Errno> {
    let mut flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    if !follow_last {
        flags |= OFlags::NOFOLLOW;
    }
    rfs::openat(CWD, path, flags, Mode::empty())
}

/// Opens the file `path` with `access`, never following a link in its
/// last component, never blocking on a FIFO in its place (`O_NONBLOCK`).
pub fn open_file(path: &Path, access: OFlags) -> Result<OwnedFd, Errno> {
    rfs::openat(
        CWD,
        path,
        access | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
        Mode::empty(),
    )
}

/// `mkdir(path, mode)`, the mode then set exactly (the umask may have
/// cleared bits); an existing entry is `EEXIST`.
pub fn mkdir(path: &Path, mode: u32) -> Result<(), Errno> {
    rfs::mkdir(path, Mode::from_raw_mode(mode))?;
    rfs::chmod(path, Mode::from_raw_mode(mode))
}

/// The facts of `path` without following a final link (`lstat`).
pub fn facts(path: &Path) -> Result<Facts, Errno> {
    rfs::lstat(path).map(|st| Facts::of(&st))
}

/// Why [`read_protected`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadFault {
    /// The open failed (`ENOENT`, `ELOOP` for a link, …).
    Open(Errno),
    /// The file is not a private file (see [`Facts::private_file`]).
    Placement(Fault),
    /// Larger than the bound.
    TooLarge {
        /// Its size.
        size: u64,
    },
    /// A read or stat failed.
    Io(Errno),
    /// It changed while it was read (or was replaced under its name).
    Changed,
}

fn same_identity(a: &rfs::Stat, b: &rfs::Stat) -> bool {
    a.st_dev == b.st_dev
        && a.st_ino == b.st_ino
        && a.st_size == b.st_size
        && a.st_mode == b.st_mode
        && a.st_uid == b.st_uid
        && a.st_nlink == b.st_nlink
        && a.st_mtime == b.st_mtime
        && a.st_mtime_nsec == b.st_mtime_nsec
        && a.st_ctime == b.st_ctime
        && a.st_ctime_nsec == b.st_ctime_nsec
}

/// Reads an operator's protected file: a regular file of this user with
/// exactly `mode`, one link, at most `max_bytes`, read whole from one
/// descriptor, and the same file (same identity, size and times) after
/// the read as before it and still under its name.
pub fn read_protected(path: &Path, mode: u32, max_bytes: u64) -> Result<Vec<u8>, ReadFault> {
    let fd = open_file(path, OFlags::RDONLY).map_err(ReadFault::Open)?;
    let before = rfs::fstat(&fd).map_err(ReadFault::Io)?;
    let facts = Facts::of(&before);
    facts.private_file(mode).map_err(ReadFault::Placement)?;
    if facts.size > max_bytes {
        return Err(ReadFault::TooLarge { size: facts.size });
    }
    let mut file = std::fs::File::from(fd);
    let mut buf = Vec::new();
    (&mut file)
        .take(max_bytes + 1)
        .read_to_end(&mut buf)
        .map_err(|e| ReadFault::Io(Errno::from_io_error(&e).unwrap_or(Errno::IO)))?;
    let after = rfs::fstat(&file).map_err(ReadFault::Io)?;
    let again = rfs::lstat(path).map_err(ReadFault::Io)?;
    let read_len = u64::try_from(buf.len()).unwrap_or(u64::MAX);
    if !same_identity(&before, &after)
        || again.st_dev != after.st_dev
        || again.st_ino != after.st_ino
        || read_len != Facts::of(&after).size
    {
        return Err(ReadFault::Changed);
    }
    Ok(buf)
}

/// Opens the directory `path` (absolute) with no symbolic or magic link
/// anywhere in it (`openat2(RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`):
/// the way a source that is copied or exposed is first found.
pub fn open_dir_no_links(path: &Path) -> Result<OwnedFd, Errno> {
    use rustix::fs::ResolveFlags;
    rfs::openat2(
        CWD,
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
}
