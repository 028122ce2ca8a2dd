//! The new root's mount targets and copy destinations, reached through
//! descriptors only.
//!
//! A target may lie inside an earlier bind whose host directory another
//! user controls; a path resolved by name could then be redirected by a
//! link in that directory (onto `/proc`, or into the host's tree under
//! `/oldroot`). So every component is opened beneath the one before with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`
//! and created with `mkdirat` when missing, files are created with
//! `O_CREAT | O_EXCL | O_NOFOLLOW` relative to a held directory, and a
//! bind is made from one descriptor onto another (`open_tree` +
//! `mount_setattr` + `move_mount`), so no path is looked up twice. The
//! plain file operations (make a directory, create a file, a link, the
//! owner and mode) are the shared descriptor-relative layer's
//! (`glove_fs`); what stays here is what it does not have: resolving
//! beneath a root across mounts, and the mount API.

use super::{check, check_int, cstr, Errno, SysResult};
use std::ffi::OsStr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

const OPEN_TREE_CLONE: u32 = 0x1;
const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;
const PROC_SUPER_MAGIC: i64 = 0x9fa0;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

fn own(fd: libc::c_long) -> OwnedFd {
    // SAFETY: a fresh descriptor returned by the kernel, owned by nothing
    // else.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// Opens `name` (one component, or a relative path) beneath `dir` without
/// following any link and without leaving `dir`; mounts below may be
/// crossed.
pub(crate) fn open_beneath(dir: BorrowedFd<'_>, name: &str, flags: i32) -> SysResult<OwnedFd> {
    super::resolve::open_beneath_across_mounts(dir, name, flags)
}

/// The current root, as an `O_PATH` descriptor.
pub(crate) fn root() -> SysResult<OwnedFd> {
    // SAFETY: a literal NUL-terminated path; the result is owned at once.
    let fd = check_int(unsafe {
        libc::open(
            c"/".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    })?;
    Ok(own(fd as libc::c_long))
}

/// The shared layer's error as this module's.
fn fs_err(e: glove_fs::Errno) -> Errno {
    Errno(e.raw_os_error())
}

/// `mkdirat(dir, name, mode)`; an existing entry is an error (`EEXIST`).
pub(crate) fn mkdir(dir: BorrowedFd<'_>, name: &str, mode: libc::mode_t) -> SysResult<()> {
    glove_fs::mkdir_in(dir, OsStr::new(name), mode).map_err(fs_err)
}

/// Opens the directory `rel` (components separated by `/`) beneath `base`,
/// creating every missing component with `mode`; never follows a link.
/// Returns an `O_PATH` descriptor.
pub(crate) fn dir_creating(
    base: BorrowedFd<'_>,
    rel: &str,
    mode: libc::mode_t,
) -> SysResult<OwnedFd> {
    let mut cur = open_beneath(base, ".", libc::O_PATH | libc::O_DIRECTORY)?;
    for comp in rel.split('/').filter(|c| !c.is_empty()) {
        if comp == "." || comp == ".." {
            return Err(Errno(libc::EINVAL));
        }
        let flags = libc::O_PATH | libc::O_DIRECTORY;
        cur = match open_beneath(cur_fd(&cur), comp, flags) {
            Ok(fd) => fd,
            Err(Errno(libc::ENOENT)) => {
                match mkdir(cur_fd(&cur), comp, mode) {
                    Ok(()) | Err(Errno(libc::EEXIST)) => {}
                    Err(e) => return Err(e),
                }
                open_beneath(cur_fd(&cur), comp, flags)?
            }
            Err(e) => return Err(e),
        };
    }
    Ok(cur)
}

fn cur_fd(fd: &OwnedFd) -> BorrowedFd<'_> {
    std::os::fd::AsFd::as_fd(fd)
}

/// A directory mount target at the absolute `path` of the current root,
/// created as needed without following links; never on procfs.
pub(crate) fn target_dir(path: &str, mode: libc::mode_t) -> SysResult<OwnedFd> {
    let root = root()?;
    let fd = dir_creating(cur_fd(&root), path, mode)?;
    if fs_magic(cur_fd(&fd))? == PROC_SUPER_MAGIC {
        return Err(Errno(libc::EACCES));
    }
    Ok(fd)
}

/// A regular-file mount target at `path` (created empty, `mode`, if
/// missing), its parent made as [`target_dir`] does. Returns an `O_PATH`
/// descriptor of the file.
pub(crate) fn target_file(path: &str, mode: libc::mode_t) -> SysResult<OwnedFd> {
    let (parent, name) = split(path)?;
    let dir = target_dir(parent, 0o755)?;
    // A file already there is bound over as it is. It is never opened for
    // writing: that would fail with ETXTBSY while any process on the host
    // runs it (a pinned executable inside a bound directory is exactly
    // that), and a bind needs no more than a path.
    match open_beneath(cur_fd(&dir), name, libc::O_PATH) {
        Ok(fd) => return regular(fd),
        Err(Errno(libc::ENOENT)) => {}
        Err(e) => return Err(e),
    }
    // O_EXCL with O_CREAT: never opens anything that appeared meanwhile
    // (nor follows a link); O_NONBLOCK for good measure.
    let access = glove_fs::OFlags::WRONLY | glove_fs::OFlags::NONBLOCK;
    match glove_fs::create_in(cur_fd(&dir), OsStr::new(name), access, mode) {
        Ok(fd) => drop(fd),
        // Made since the look above: it is checked like any existing one.
        Err(glove_fs::Errno::EXIST) => {}
        Err(e) => return Err(fs_err(e)),
    }
    regular(open_beneath(cur_fd(&dir), name, libc::O_PATH)?)
}

/// `fd` when it is a regular file, `EINVAL` otherwise.
fn regular(fd: OwnedFd) -> SysResult<OwnedFd> {
    if super::resolve::meta(cur_fd(&fd))?.mode & libc::S_IFMT != libc::S_IFREG {
        return Err(Errno(libc::EINVAL));
    }
    Ok(fd)
}

/// Splits an absolute path into its parent and last component.
pub(crate) fn split(path: &str) -> SysResult<(&str, &str)> {
    let trimmed = path.trim_end_matches('/');
    match trimmed.rfind('/') {
        Some(i) if i + 1 < trimmed.len() => Ok((&trimmed[..i.max(1)], &trimmed[i + 1..])),
        _ => Err(Errno(libc::EINVAL)),
    }
}

/// Creates `name` in `dir` as a new regular file for writing (never
/// through a link, never an existing entry).
pub(crate) fn create_file(
    dir: BorrowedFd<'_>,
    name: &str,
    mode: libc::mode_t,
) -> SysResult<OwnedFd> {
    glove_fs::create_in(dir, OsStr::new(name), glove_fs::OFlags::WRONLY, mode).map_err(fs_err)
}

/// `symlinkat(target, dir, name)`.
pub(crate) fn symlink(target: &str, dir: BorrowedFd<'_>, name: &str) -> SysResult<()> {
    glove_fs::symlink_in(OsStr::new(target), dir, OsStr::new(name)).map_err(fs_err)
}

/// `fchownat(dir, name, uid, gid, AT_SYMLINK_NOFOLLOW)`; an empty `name`
/// changes `dir` itself (`AT_EMPTY_PATH`).
pub(crate) fn chown(dir: BorrowedFd<'_>, name: &str, uid: u32, gid: u32) -> SysResult<()> {
    glove_fs::chown_in(dir, OsStr::new(name), uid, gid).map_err(fs_err)
}

/// `fchmod` of an open (not `O_PATH`) descriptor.
pub(crate) fn chmod(fd: BorrowedFd<'_>, mode: libc::mode_t) -> SysResult<()> {
    glove_fs::chmod(fd, mode).map_err(fs_err)
}

/// The file system type (`f_type` of `fstatfs`).
pub(crate) fn fs_magic(fd: BorrowedFd<'_>) -> SysResult<i64> {
    // SAFETY: statfs is plain data; zeroed is a valid initial state.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out-parameter.
    check_int(unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) })?;
    Ok(st.f_type)
}

/// Whether `fd` lies on a kernel file system (procfs, sysfs, cgroupfs,
/// debugfs, tracefs, securityfs, bpffs): never a bind or grant source,
/// since its links (`/proc/PID/root`, `fd/*`) and knobs lead outside any
/// read-only view.
pub(crate) fn on_kernel_fs(fd: BorrowedFd<'_>) -> SysResult<bool> {
    const KERNEL_FS: &[i64] = &[
        PROC_SUPER_MAGIC,
        0x6265_6572, // sysfs
        0x0027_e0eb, // cgroup
        0x6367_7270, // cgroup2
        0x6462_6720, // debugfs
        0x7472_6163, // tracefs
        0x7363_6673, // securityfs
        0xcafe_4a11, // bpf
    ];
    Ok(KERNEL_FS.contains(&fs_magic(fd)?))
}

/// Binds the tree at `src` (recursively) onto `target` with `attrs`
/// (`MOUNT_ATTR_*`) set on every mount of the new tree, from descriptor
/// to descriptor: the copy is made detached (`open_tree(OPEN_TREE_CLONE |
/// AT_RECURSIVE)`), given its attributes, then attached (`move_mount`).
pub(crate) fn bind_tree(src: BorrowedFd<'_>, target: BorrowedFd<'_>, attrs: u64) -> SysResult<()> {
    // SAFETY: the empty path is NUL-terminated; flags are plain values.
    let tree = check(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            src.as_raw_fd(),
            c"".as_ptr(),
            (OPEN_TREE_CLONE
                | libc::O_CLOEXEC as u32
                | libc::AT_RECURSIVE as u32
                | libc::AT_EMPTY_PATH as u32) as libc::c_uint,
        )
    })
    .map(own)?;
    if attrs != 0 {
        let attr = MountAttr {
            attr_set: attrs,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        // SAFETY: `attr` is a correctly laid out `struct mount_attr` whose
        // size is passed; the empty path is NUL-terminated.
        check(unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                tree.as_raw_fd(),
                c"".as_ptr(),
                (libc::AT_EMPTY_PATH | libc::AT_RECURSIVE) as libc::c_uint,
                &attr as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            )
        })?;
    }
    attach(cur_fd(&tree), target)
}

/// `move_mount` of the detached mount `tree` onto `target`.
pub(crate) fn attach(tree: BorrowedFd<'_>, target: BorrowedFd<'_>) -> SysResult<()> {
    // SAFETY: both paths are the empty NUL-terminated string; descriptors
    // are borrowed for the call.
    check(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            target.as_raw_fd(),
            c"".as_ptr(),
            (MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) as libc::c_uint,
        )
    })?;
    Ok(())
}

/// A new, detached tmpfs (`fsopen`/`fsconfig`/`fsmount`) with the given
/// string options and mount attributes; returns the descriptor of its
/// root, for [`attach`] and for `*at` calls.
pub(crate) fn tmpfs(options: &[(&str, String)], attrs: u64) -> SysResult<OwnedFd> {
    new_mount(c"tmpfs", options, &[], attrs)
}

/// A new, detached mount of file system type `fstype` (`fsopen`,
/// `fsconfig` with the string options and flags, `fsmount` with the mount
/// attributes); returns the descriptor of its root. Nothing is attached
/// anywhere: the mount lives as long as a descriptor of it (or a later
/// [`attach`]) does.
pub(crate) fn new_mount(
    fstype: &std::ffi::CStr,
    options: &[(&str, String)],
    flags: &[&str],
    attrs: u64,
) -> SysResult<OwnedFd> {
    const FSCONFIG_SET_FLAG: u32 = 0;
    const FSCONFIG_SET_STRING: u32 = 1;
    const FSCONFIG_CMD_CREATE: u32 = 6;
    const FSOPEN_CLOEXEC: libc::c_uint = 1;
    const FSMOUNT_CLOEXEC: libc::c_uint = 1;
    // SAFETY: a NUL-terminated file system name alive for the call.
    let ctx = check(unsafe { libc::syscall(libc::SYS_fsopen, fstype.as_ptr(), FSOPEN_CLOEXEC) })
        .map(own)?;
    for (key, value) in options {
        let (k, v) = (cstr(key)?, cstr(value)?);
        // SAFETY: both strings are NUL-terminated and alive for the call.
        check(unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                ctx.as_raw_fd(),
                FSCONFIG_SET_STRING,
                k.as_ptr(),
                v.as_ptr(),
                0,
            )
        })?;
    }
    for flag in flags {
        let k = cstr(flag)?;
        // SAFETY: the key is NUL-terminated and alive for the call; a flag
        // takes no value.
        check(unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                ctx.as_raw_fd(),
                FSCONFIG_SET_FLAG,
                k.as_ptr(),
                std::ptr::null::<libc::c_void>(),
                0,
            )
        })?;
    }
    // SAFETY: no pointers are passed.
    check(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            ctx.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    })?;
    // SAFETY: no pointers are passed.
    check(unsafe {
        libc::syscall(
            libc::SYS_fsmount,
            ctx.as_raw_fd(),
            FSMOUNT_CLOEXEC,
            attrs as libc::c_uint,
        )
    })
    .map(own)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_names_parent_and_last() {
        assert_eq!(split("/a/b/c").ok(), Some(("/a/b", "c")));
        assert_eq!(split("/a").ok(), Some(("/", "a")));
        assert!(split("/").is_err());
        assert!(split("").is_err());
    }
}
