//! Copying a host directory into the sandbox, inside the sandbox's mount
//! namespace, through descriptors only (`--rw-copy` and copy grants alike).
//!
//! Every entry is opened beneath the already opened source directory with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
//! RESOLVE_NO_XDEV)` as an `O_PATH | O_NOFOLLOW` descriptor, and what it is
//! comes from `fstat` of that descriptor, never from the listing or from a
//! path: a file swapped for a link or a FIFO after it was listed is seen as
//! what it now is. Directories are recreated, regular files reopened from
//! their descriptor (`O_NONBLOCK | O_NOCTTY`) and streamed in 64 KiB blocks
//! (never held whole in memory), symbolic links recreated as links (never
//! followed); anything else, or a mount point below the source, fails the
//! copy. The destination is reached through descriptors too
//! ([`crate::sys::at`]): entries are made relative to held directories and
//! an existing entry fails the copy. The destination's tmpfs quota bounds
//! the bytes (`ENOSPC`).

use crate::sys::at as sys_at;
use crate::sys::resolve::{self, Meta};
use crate::sys::{fd, Errno};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Deepest directory nesting copied.
pub(crate) const MAX_DEPTH: usize = 128;

/// Entries copied at most (the tmpfs inode count is a second bound).
pub(crate) const MAX_ENTRIES: u64 = 1 << 20;

type Step = (String, Errno);

/// Opens the copy source `host_path` (absolute, under `/oldroot`) without
/// following any link in it; it must be a directory.
pub(crate) fn open_source(host_path: &str) -> Result<OwnedFd, Errno> {
    let fd = resolve::open_no_links(
        &format!("/oldroot{host_path}"),
        libc::O_PATH | libc::O_DIRECTORY,
    )?;
    if !resolve::meta(fd.as_fd())?.is_dir() {
        return Err(Errno(libc::ENOTDIR));
    }
    Ok(fd)
}

/// Copies the tree below the directory `root` into the directory `dst`
/// (a descriptor: every entry is made relative to a held directory, never
/// through a path, and an entry that already exists fails the copy, so a
/// link the copy made itself is never written through); every created
/// entry is given to `owner` (uid, gid) when set.
pub(crate) fn copy_tree(
    root: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    owner: Option<(u32, u32)>,
) -> Result<(), Step> {
    let mut count = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    copy_dir(root, "", dst, owner, 0, &mut count, &mut buf)
}

fn copy_dir(
    root: BorrowedFd<'_>,
    rel: &str,
    dst: BorrowedFd<'_>,
    owner: Option<(u32, u32)>,
    depth: usize,
    count: &mut u64,
    buf: &mut [u8],
) -> Result<(), Step> {
    let (here, _dir, listing) = list(root, rel, depth, false)?;
    let io = |e: std::io::Error| (here.clone(), Errno(e.raw_os_error().unwrap_or(libc::EIO)));
    for entry in listing {
        let entry = entry.map_err(io)?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            return Err((format!("{here}/<non-UTF-8 name>"), Errno(libc::EILSEQ)));
        };
        *count += 1;
        if *count > MAX_ENTRIES {
            return Err(("too many entries".into(), Errno(libc::EFBIG)));
        }
        let child = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let at =
            resolve::open_beneath(root, &child, libc::O_PATH).map_err(|e| (child.clone(), e))?;
        let m = resolve::meta(at.as_fd()).map_err(|e| (child.clone(), e))?;
        let fail = |e: Errno| (child.clone(), e);
        match m.mode & libc::S_IFMT {
            libc::S_IFDIR => {
                sys_at::mkdir(dst, &name, (m.mode & 0o777) | 0o700).map_err(fail)?;
                give(dst, &name, owner).map_err(fail)?;
                let sub = sys_at::open_beneath(dst, &name, libc::O_PATH | libc::O_DIRECTORY)
                    .map_err(fail)?;
                copy_dir(root, &child, sub.as_fd(), owner, depth + 1, count, buf)?;
            }
            libc::S_IFREG => {
                let out = copy_file(at.as_fd(), &m, dst, &name, buf).map_err(fail)?;
                if let Some((u, g)) = owner {
                    sys_at::chown(out.as_fd(), "", u, g).map_err(fail)?;
                }
            }
            libc::S_IFLNK => {
                let target = resolve::read_link(at.as_fd()).map_err(fail)?;
                let t = std::str::from_utf8(&target).map_err(|_| fail(Errno(libc::EILSEQ)))?;
                sys_at::symlink(t, dst, &name).map_err(fail)?;
                give(dst, &name, owner).map_err(fail)?;
            }
            _ => return Err((format!("{child} is a special file"), Errno(libc::EPERM))),
        }
    }
    Ok(())
}

/// Opens the directory `rel` beneath `root` (no links; mounts below are
/// crossed only when `across_mounts`) and lists it: its display name, the
/// open directory (keep it while the listing is read) and the listing.
fn list(
    root: BorrowedFd<'_>,
    rel: &str,
    depth: usize,
    across_mounts: bool,
) -> Result<(String, OwnedFd, std::fs::ReadDir), Step> {
    if depth > MAX_DEPTH {
        return Err(("directory nesting too deep".into(), Errno(libc::ELOOP)));
    }
    let here = if rel.is_empty() { "." } else { rel }.to_owned();
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NONBLOCK;
    let dir = if across_mounts {
        resolve::open_beneath_across_mounts(root, &here, flags)
    } else {
        resolve::open_beneath(root, &here, flags)
    }
    .map_err(|e| (here.clone(), e))?;
    let listing = std::fs::read_dir(resolve::proc_path(dir.as_fd()))
        .map_err(|e| (here.clone(), Errno(e.raw_os_error().unwrap_or(libc::EIO))))?;
    Ok((here, dir, listing))
}

/// Streams the regular file `at` (an `O_PATH` descriptor whose `fstat` is
/// `m`) into a new file `name` of `dst`; returns the new file.
fn copy_file(
    at: BorrowedFd<'_>,
    m: &Meta,
    dst: BorrowedFd<'_>,
    name: &str,
    buf: &mut [u8],
) -> Result<OwnedFd, Errno> {
    let src = resolve::reopen(at, libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY)?;
    // The reopened descriptor is the same inode: check it is still a file.
    if !resolve::meta(src.as_fd())?.is_file() {
        return Err(Errno(libc::EPERM));
    }
    let out = sys_at::create_file(dst, name, (m.mode & 0o777) as libc::mode_t)?;
    loop {
        let n = fd::read(src.as_fd(), buf)?;
        if n == 0 {
            return Ok(out);
        }
        fd::write_all(out.as_fd(), &buf[..n])?;
    }
}

fn give(dir: BorrowedFd<'_>, name: &str, owner: Option<(u32, u32)>) -> Result<(), Errno> {
    match owner {
        Some((u, g)) => sys_at::chown(dir, name, u, g),
        None => Ok(()),
    }
}

/// Entries a socket scan looks at, at most; a larger tree is refused.
pub(crate) const SCAN_MAX_ENTRIES: u64 = 250_000;

/// Looks for a Unix socket anywhere below the directory `root` (mounts
/// below it included, links not followed); returns its relative path.
/// Read-only binds cannot stop a `connect()` to a socket they expose, so a
/// bind that holds one is refused. A tree of more than
/// [`SCAN_MAX_ENTRIES`] entries or deeper than [`MAX_DEPTH`] is refused
/// too (`EFBIG`, `ELOOP`): it cannot be checked in bounded time.
pub(crate) fn find_socket(root: BorrowedFd<'_>) -> Result<Option<String>, Step> {
    let mut count = 0u64;
    scan_dir(root, "", 0, &mut count)
}

fn scan_dir(
    root: BorrowedFd<'_>,
    rel: &str,
    depth: usize,
    count: &mut u64,
) -> Result<Option<String>, Step> {
    let (here, dir, listing) = list(root, rel, depth, true)?;
    let io = |e: std::io::Error| (here.clone(), Errno(e.raw_os_error().unwrap_or(libc::EIO)));
    let mut subdirs = Vec::new();
    for entry in listing {
        let entry = entry.map_err(io)?;
        *count += 1;
        if *count > SCAN_MAX_ENTRIES {
            return Err((
                "too many entries to check for sockets".into(),
                Errno(libc::EFBIG),
            ));
        }
        // The listing's type (or an lstat of the entry where the file
        // system gives none): a socket swapped in later is a new inode in
        // a directory the agent cannot write (the bind is read-only), but
        // the host may; see docs/sandbox.md.
        let ft = entry.file_type().map_err(io)?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let child = if rel.is_empty() {
            name.into_owned()
        } else {
            format!("{rel}/{name}")
        };
        if std::os::unix::fs::FileTypeExt::is_socket(&ft) {
            return Ok(Some(child));
        }
        if ft.is_dir() {
            subdirs.push(child);
        }
    }
    drop(dir);
    for d in subdirs {
        if let Some(found) = scan_dir(root, &d, depth + 1, count)? {
            return Ok(Some(found));
        }
    }
    Ok(None)
}
