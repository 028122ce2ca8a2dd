//! Path resolution with `openat2`: never following links
//! (`RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, plus `RESOLVE_BENEATH |
//! RESOLVE_NO_XDEV` below an already opened root), or following them
//! confined to an opened root (`RESOLVE_IN_ROOT`); `fstat` of the result,
//! and whole-file reads through one descriptor.

use super::{check, check_int, cstr, Errno, SysResult};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// What `fstat` says about an opened object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Meta {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) mode: u32,
    pub(crate) uid: u32,
    pub(crate) nlink: u64,
    pub(crate) size: u64,
    pub(crate) mtime_ns: i128,
    pub(crate) ctime_ns: i128,
}

impl Meta {
    pub(crate) fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }
    pub(crate) fn is_file(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }
    pub(crate) fn is_socket(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFSOCK
    }
}

/// `struct open_how` (libc marks its own copy non-exhaustive).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

fn openat2(
    dir: Option<BorrowedFd<'_>>,
    path: &str,
    flags: i32,
    resolve: u64,
) -> SysResult<OwnedFd> {
    let p = cstr(path)?;
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve,
    };
    let dirfd = dir.map(|d| d.as_raw_fd()).unwrap_or(libc::AT_FDCWD);
    // EAGAIN: a rename raced a scoped lookup; retried, but not forever.
    let mut tries = 0;
    loop {
        tries += 1;
        // SAFETY: `p` is NUL-terminated, `how` is a valid open_how whose
        // size we pass; both outlive the call.
        let r = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dirfd,
                p.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        match check(r) {
            Err(Errno(libc::EAGAIN)) | Err(Errno(libc::EINTR)) if tries < 64 => continue,
            Err(e) => return Err(e),
            // SAFETY: a successful openat2 returns a fresh descriptor we own.
            Ok(fd) => return Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) }),
        }
    }
}

/// Opens an absolute path with no symlink or magic-link anywhere in it.
pub(crate) fn open_no_links(path: &str, flags: i32) -> SysResult<OwnedFd> {
    openat2(
        None,
        path,
        flags | libc::O_NOFOLLOW,
        libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    )
}

/// Opens `rel` beneath `root`: no links, no `..` escape, no mount crossing.
pub(crate) fn open_beneath(root: BorrowedFd<'_>, rel: &str, flags: i32) -> SysResult<OwnedFd> {
    openat2(
        Some(root),
        rel,
        flags | libc::O_NOFOLLOW,
        libc::RESOLVE_BENEATH
            | libc::RESOLVE_NO_SYMLINKS
            | libc::RESOLVE_NO_MAGICLINKS
            | libc::RESOLVE_NO_XDEV,
    )
}

/// Opens `path` (absolute) of the tree below `root` as if `root` were `/`:
/// symbolic links are followed, absolute ones resolved against `root` too,
/// and nothing escapes it (`RESOLVE_IN_ROOT`); magic links are refused.
pub(crate) fn open_in_root(root: BorrowedFd<'_>, path: &str, flags: i32) -> SysResult<OwnedFd> {
    openat2(
        Some(root),
        path,
        flags,
        libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS,
    )
}

/// Opens the object an `O_PATH` descriptor refers to, with `flags`
/// (through `/proc/self/fd`, which must be the sandbox's own procfs).
pub(crate) fn reopen(at: BorrowedFd<'_>, flags: i32) -> SysResult<OwnedFd> {
    let p = cstr(&proc_path(at))?;
    // SAFETY: `p` is NUL-terminated and alive for the call; the result is
    // owned at once.
    let fd = check_int(unsafe { libc::open(p.as_ptr(), flags | libc::O_CLOEXEC) })?;
    // SAFETY: a fresh descriptor from open.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fstat`.
pub(crate) fn meta(fd: BorrowedFd<'_>) -> SysResult<Meta> {
    // SAFETY: stat is plain data; zeroed is valid before the kernel fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out-parameter for the descriptor.
    check_int(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(Meta {
        dev: st.st_dev,
        ino: st.st_ino,
        mode: st.st_mode,
        uid: st.st_uid,
        nlink: st.st_nlink,
        size: st.st_size as u64,
        mtime_ns: i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec),
        ctime_ns: i128::from(st.st_ctime) * 1_000_000_000 + i128::from(st.st_ctime_nsec),
    })
}

/// Reads a whole file through its descriptor, at most `max` bytes (one more
/// byte is an error: `EFBIG`).
pub(crate) fn read_all(fd: BorrowedFd<'_>, max: usize) -> SysResult<Vec<u8>> {
    read_all_sized(fd, 64 * 1024, max)
}

/// [`read_all`] into a buffer sized for `expected` bytes (the size `fstat`
/// reported): one read fills it, a second one sees the end.
pub(crate) fn read_all_sized(
    fd: BorrowedFd<'_>,
    expected: usize,
    max: usize,
) -> SysResult<Vec<u8>> {
    let mut out = vec![0u8; expected.min(max).saturating_add(1)];
    let mut len = 0;
    loop {
        if len == out.len() {
            if len > max {
                return Err(Errno(libc::EFBIG));
            }
            out.resize(len.saturating_add(64 * 1024).min(max.saturating_add(1)), 0);
        }
        let n = super::fd::read(fd, &mut out[len..])?;
        if n == 0 {
            out.truncate(len);
            return Ok(out);
        }
        len += n;
        if len > max {
            return Err(Errno(libc::EFBIG));
        }
    }
}

/// The `/proc/self/fd/N` path of a descriptor (for bind mounts from a
/// held descriptor).
pub(crate) fn proc_path(fd: BorrowedFd<'_>) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// The target of the symbolic link an `O_PATH | O_NOFOLLOW` descriptor
/// refers to (`readlinkat(fd, "")`), at most `PATH_MAX` bytes.
pub(crate) fn read_link(fd: BorrowedFd<'_>) -> SysResult<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: the empty path is NUL-terminated; `buf` is valid for its
    // length, which is passed.
    let n = unsafe {
        libc::readlinkat(
            fd.as_raw_fd(),
            c"".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let n = check(n as libc::c_long)? as usize;
    if n >= buf.len() {
        return Err(Errno(libc::ENAMETOOLONG));
    }
    buf.truncate(n);
    Ok(buf)
}

/// Opens `rel` beneath `root` without following any link and without a
/// `..` escape, crossing mounts below it (for a walk of a recursive bind).
pub(crate) fn open_beneath_across_mounts(
    root: BorrowedFd<'_>,
    rel: &str,
    flags: i32,
) -> SysResult<OwnedFd> {
    openat2(
        Some(root),
        rel,
        flags | libc::O_NOFOLLOW,
        libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    )
}
