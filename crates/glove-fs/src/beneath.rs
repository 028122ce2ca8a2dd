//! Resolution confined beneath a held directory, for walking a tree that
//! someone else controls (a retained workspace, a copy source): every
//! open is `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV` (no `..` out, no link in any
//! component, no mount crossed: `EXDEV`), plus `O_NOFOLLOW | O_CLOEXEC |
//! O_NOCTTY` (but for `O_PATH`); listings, link targets and attribute names are read from the
//! descriptors so opened.

use super::{Errno, Mode, OFlags};
use rustix::fd::{BorrowedFd, OwnedFd};
use rustix::fs::{self as rfs, ResolveFlags};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// The resolution flags every open here uses.
pub const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_XDEV);

/// Opens `path` (one name, or several `/`-separated; `.` for `dir`
/// itself) beneath `dir` with `access` (see the module docs): a link in any
/// component is `ELOOP`, a `..` leaving `dir` is `EXDEV`, a mount point
/// crossed is `EXDEV`.
pub fn open_beneath<P: AsRef<OsStr>>(
    dir: BorrowedFd<'_>,
    path: P,
    access: OFlags,
) -> Result<OwnedFd, Errno> {
    // openat2 refuses (EINVAL) any flag beside O_DIRECTORY, O_NOFOLLOW and
    // O_CLOEXEC with O_PATH, where O_NOCTTY means nothing anyway.
    let mut flags = access | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    if !access.contains(OFlags::PATH) {
        flags |= OFlags::NOCTTY;
    }
    loop {
        match rfs::openat2(dir, path.as_ref(), flags, Mode::empty(), RESOLVE) {
            // openat2 may ask for a retry when a rename raced the lookup.
            Err(Errno::AGAIN) | Err(Errno::INTR) => continue,
            other => return other,
        }
    }
}

/// The names in the directory `dir` (any descriptor of it, `O_PATH` too),
/// without `.` and `..`, in the order the file system gives them.
pub fn list_dir(dir: BorrowedFd<'_>) -> Result<Vec<OsString>, Errno> {
    let mut out = Vec::new();
    for entry in rfs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push(OsStr::from_bytes(name).to_owned());
        }
    }
    Ok(out)
}

/// The target of the symbolic link open as `fd` (an `O_PATH |
/// O_NOFOLLOW` descriptor of it), as bytes.
pub fn read_link(fd: BorrowedFd<'_>) -> Result<Vec<u8>, Errno> {
    rfs::readlinkat(fd, c"", Vec::new()).map(|c| c.into_bytes())
}

/// The extended attribute names of the open (readable, not `O_PATH`)
/// file or directory `fd` (none where the file system has none).
pub fn xattr_names(fd: BorrowedFd<'_>) -> Result<Vec<Vec<u8>>, Errno> {
    // Most files have none: one size query, no buffer.
    match rfs::flistxattr_query(fd) {
        Ok(0) | Err(Errno::NOTSUP) => return Ok(Vec::new()),
        Ok(_) => {}
        Err(e) => return Err(e),
    }
    // XATTR_LIST_MAX: the kernel never returns a longer list, so a list
    // grown since the query still fits.
    let mut buf = vec![0u8; 65536];
    let n = match rfs::flistxattr(fd, &mut buf[..]) {
        Ok(n) => n,
        Err(Errno::NOTSUP) => 0,
        Err(e) => return Err(e),
    };
    let list = buf.get(..n).unwrap_or(&[]);
    Ok(list
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}

/// Reads into `buf` from `fd`, retrying on `EINTR`; 0 at the end.
pub fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Result<usize, Errno> {
    loop {
        match rustix::io::read(fd, &mut *buf) {
            Err(Errno::INTR) => continue,
            other => return other,
        }
    }
}
