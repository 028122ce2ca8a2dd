//! Mounts and the file-system view: `mount`, `pivot_root`,
//! `mount_setattr`, and the few path operations the new root needs.
//!
//! These run inside the sandbox's own mount namespace (the init process after
//! clone). Callers pass paths inside that namespace.

use super::{check, check_int, cstr, Errno, SysResult};
use std::ptr;

/// `mount(2)`. `fstype` and `data` may be empty.
pub(crate) fn mount(
    src: &str,
    target: &str,
    fstype: &str,
    flags: libc::c_ulong,
    data: &str,
) -> SysResult<()> {
    let (s, t, f, d) = (cstr(src)?, cstr(target)?, cstr(fstype)?, cstr(data)?);
    let sp = if src.is_empty() {
        ptr::null()
    } else {
        s.as_ptr()
    };
    let fp = if fstype.is_empty() {
        ptr::null()
    } else {
        f.as_ptr()
    };
    let dp = if data.is_empty() {
        ptr::null()
    } else {
        d.as_ptr().cast()
    };
    // SAFETY: every pointer is null or a NUL-terminated string alive for the call.
    check_int(unsafe { libc::mount(sp, t.as_ptr(), fp, flags, dp) })?;
    Ok(())
}

/// `pivot_root(2)`.
pub(crate) fn pivot_root(new_root: &str, put_old: &str) -> SysResult<()> {
    let (n, o) = (cstr(new_root)?, cstr(put_old)?);
    // SAFETY: both pointers are NUL-terminated strings alive for the call.
    check(unsafe { libc::syscall(libc::SYS_pivot_root, n.as_ptr(), o.as_ptr()) })?;
    Ok(())
}

/// `MOUNT_ATTR_RDONLY`.
pub(crate) const MOUNT_ATTR_RDONLY: u64 = 0x1;
/// `MOUNT_ATTR_NOSUID`.
pub(crate) const MOUNT_ATTR_NOSUID: u64 = 0x2;
/// `MOUNT_ATTR_NODEV`.
pub(crate) const MOUNT_ATTR_NODEV: u64 = 0x4;
/// `MOUNT_ATTR_NOEXEC`.
pub(crate) const MOUNT_ATTR_NOEXEC: u64 = 0x8;

/// `mkdir(2)`; an existing directory is fine.
pub(crate) fn mkdir(path: &str, mode: libc::mode_t) -> SysResult<()> {
    let p = cstr(path)?;
    // SAFETY: `p` is NUL-terminated and alive for the call.
    match check_int(unsafe { libc::mkdir(p.as_ptr(), mode) }) {
        Ok(_) | Err(Errno(libc::EEXIST)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates an empty regular file to bind a file over.
pub(crate) fn touch(path: &str, mode: libc::mode_t) -> SysResult<()> {
    let p = cstr(path)?;
    // SAFETY: `p` is NUL-terminated; the returned descriptor is closed at once.
    let fd = check_int(unsafe {
        libc::open(
            p.as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            mode as libc::c_uint,
        )
    })?;
    // SAFETY: `fd` was just returned by open and is owned here.
    unsafe { libc::close(fd) };
    Ok(())
}

/// Writes `bytes` to a file that must exist (a kernel knob).
pub(crate) fn write_existing(path: &str, bytes: &[u8]) -> SysResult<()> {
    write_with(
        path,
        bytes,
        libc::O_WRONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        0,
    )
}

fn write_with(path: &str, bytes: &[u8], flags: i32, mode: libc::mode_t) -> SysResult<()> {
    let p = cstr(path)?;
    // SAFETY: `p` is NUL-terminated; the descriptor is closed below.
    let fd = check_int(unsafe { libc::open(p.as_ptr(), flags, mode as libc::c_uint) })?;
    let mut rest = bytes;
    let mut result = Ok(());
    while !rest.is_empty() {
        // SAFETY: `rest` is valid for `rest.len()` bytes.
        let n = unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) };
        if n <= 0 {
            result = Err(Errno::last());
            break;
        }
        rest = rest.get(n as usize..).unwrap_or_default();
    }
    // SAFETY: `fd` is owned here and closed once.
    unsafe { libc::close(fd) };
    result
}

/// `symlink(2)`.
pub(crate) fn symlink(target: &str, link: &str) -> SysResult<()> {
    let (t, l) = (cstr(target)?, cstr(link)?);
    // SAFETY: both strings are NUL-terminated and alive for the call.
    check_int(unsafe { libc::symlink(t.as_ptr(), l.as_ptr()) })?;
    Ok(())
}

/// `chdir(2)`.
pub(crate) fn chdir(path: &str) -> SysResult<()> {
    let p = cstr(path)?;
    // SAFETY: `p` is NUL-terminated and alive for the call.
    check_int(unsafe { libc::chdir(p.as_ptr()) })?;
    Ok(())
}

/// `umount2(path, MNT_DETACH)`: detaches the tree mounted at `path`.
pub(crate) fn detach(path: &str) -> SysResult<()> {
    let c = cstr(path)?;
    rustix::mount::unmount(c.as_c_str(), rustix::mount::UnmountFlags::DETACH)
        .map_err(|e| Errno(e.raw_os_error()))
}

/// `rmdir(2)`.
pub(crate) fn rmdir(path: &str) -> SysResult<()> {
    let c = cstr(path)?;
    rustix::fs::rmdir(c.as_c_str()).map_err(|e| Errno(e.raw_os_error()))
}

/// Used bytes of the file system holding `path` (`statfs`).
pub(crate) fn used_bytes(path: &str) -> SysResult<u64> {
    let p = cstr(path)?;
    // SAFETY: statfs is plain data; zeroed is valid before the kernel fills it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `p` is NUL-terminated and `st` is a valid out-parameter.
    check_int(unsafe { libc::statfs(p.as_ptr(), &mut st) })?;
    let blocks = (st.f_blocks as u64).saturating_sub(st.f_bfree as u64);
    Ok(blocks.saturating_mul(st.f_bsize as u64))
}

/// The file-system magic number of `path` (`statfs().f_type`).
pub(crate) fn fs_magic(path: &str) -> Option<i64> {
    let p = cstr(path).ok()?;
    // SAFETY: statfs is plain data; zeroed is valid before the kernel fills it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `p` is NUL-terminated and `st` is a valid out-parameter.
    check_int(unsafe { libc::statfs(p.as_ptr(), &mut st) }).ok()?;
    Some(st.f_type)
}
