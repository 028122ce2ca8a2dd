//! Processes: `clone3` into new namespaces, waiting, signals, identity,
//! resource limits and `execve`.
//!
//! [`clone_into_namespaces`] must only be called from a single-threaded
//! process: the child is a copy of the caller without `CLONE_VM`, and only a
//! single-threaded parent guarantees that no lock (allocator, stdio) was held
//! by another thread at the time of the copy.

use super::{check, check_int, Errno, SysResult};
use std::ffi::CString;

#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// Where a `clone` returned.
pub(crate) enum Forked {
    /// In the parent, with the child's pid.
    Parent(libc::pid_t),
    /// In the child.
    Child,
}

/// `CLONE_INTO_CGROUP` (libc 0.2 truncates it to 0 on x86_64).
pub(crate) const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `clone3` with the given namespace flags, fork-like (own stack copy), the
/// child reporting `SIGCHLD` on exit. `cgroup_fd`, when given, places the
/// child in that cgroup v2 directory atomically.
pub(crate) fn clone_into_namespaces(flags: u64, cgroup_fd: Option<i32>) -> SysResult<Forked> {
    let mut args = CloneArgs {
        flags,
        exit_signal: libc::SIGCHLD as u64,
        ..CloneArgs::default()
    };
    if let Some(fd) = cgroup_fd {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = fd as u64;
    }
    // SAFETY: without CLONE_VM the child gets its own copy of the address
    // space and continues on its copy of this stack, like fork(); the caller
    // guarantees the process is single-threaded (module docs).
    let r = check(unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    })?;
    Ok(if r == 0 {
        Forked::Child
    } else {
        Forked::Parent(r as libc::pid_t)
    })
}

/// Plain `fork()` for use inside the sandbox's init (single-threaded).
pub(crate) fn fork() -> SysResult<Forked> {
    // SAFETY: called only from the sandbox init, which is single-threaded.
    let r = check_int(unsafe { libc::fork() })?;
    Ok(if r == 0 {
        Forked::Child
    } else {
        Forked::Parent(r)
    })
}

/// How a waited-for process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// `exit(code)`.
    Code(i32),
    /// Killed by a signal.
    Signal(i32),
}

/// Resource usage of a reaped child and its reaped descendants.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Usage {
    /// User + system CPU time, microseconds.
    pub(crate) cpu_us: u64,
    /// Largest resident set of any one process, bytes.
    pub(crate) max_rss_bytes: u64,
}

fn decode(status: libc::c_int) -> Exit {
    if libc::WIFSIGNALED(status) {
        Exit::Signal(libc::WTERMSIG(status))
    } else {
        Exit::Code(libc::WEXITSTATUS(status))
    }
}

/// `wait4(pid, 0)` (blocking, retries `EINTR`), with the child's usage.
pub(crate) fn wait(pid: libc::pid_t) -> SysResult<(Exit, Usage)> {
    let mut status = 0;
    // SAFETY: rusage is plain data; zeroed is valid before the kernel fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `status` and `ru` are valid out-parameters.
        match check_int(unsafe { libc::wait4(pid, &mut status, 0, &mut ru) }) {
            Err(Errno(libc::EINTR)) => continue,
            Err(e) => return Err(e),
            Ok(_) => break,
        }
    }
    let tv = |t: libc::timeval| {
        (t.tv_sec as u64)
            .saturating_mul(1_000_000)
            .saturating_add(t.tv_usec as u64)
    };
    Ok((
        decode(status),
        Usage {
            cpu_us: tv(ru.ru_utime).saturating_add(tv(ru.ru_stime)),
            max_rss_bytes: (ru.ru_maxrss as u64).saturating_mul(1024),
        },
    ))
}

/// Non-blocking `waitpid(-1, WNOHANG)`: `Some((pid, exit))` for one reaped child.
pub(crate) fn reap_any() -> SysResult<Option<(libc::pid_t, Exit)>> {
    let mut status = 0;
    // SAFETY: `status` is a valid out-parameter.
    let r = check_int(unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) })?;
    Ok(if r == 0 {
        None
    } else {
        Some((r, decode(status)))
    })
}

/// `kill(2)`; a vanished target is not an error.
pub(crate) fn kill(pid: libc::pid_t, sig: i32) -> SysResult<()> {
    // SAFETY: kill has no memory effects.
    match check_int(unsafe { libc::kill(pid, sig) }) {
        Ok(_) | Err(Errno(libc::ESRCH)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// `setsid(2)`.
pub(crate) fn setsid() -> SysResult<()> {
    // SAFETY: setsid has no memory effects.
    check_int(unsafe { libc::setsid() })?;
    Ok(())
}

/// `sethostname(2)`.
pub(crate) fn sethostname(name: &str) -> SysResult<()> {
    // SAFETY: the pointer/length pair describes `name`'s bytes.
    check_int(unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) })?;
    Ok(())
}

/// Drops supplementary groups, then sets real, effective and saved gid and
/// uid (in that order: the uid change ends the right to change groups).
pub(crate) fn become_user(uid: u32, gid: u32) -> SysResult<()> {
    // SAFETY: an empty group list with a null pointer is valid for setgroups.
    check_int(unsafe { libc::setgroups(0, std::ptr::null()) })?;
    // SAFETY: id changes have no memory effects.
    check_int(unsafe { libc::setresgid(gid, gid, gid) })?;
    // SAFETY: as above.
    check_int(unsafe { libc::setresuid(uid, uid, uid) })?;
    Ok(())
}

/// `setrlimit(2)` with soft = hard = `value`.
pub(crate) fn set_rlimit(resource: libc::__rlimit_resource_t, value: u64) -> SysResult<()> {
    let lim = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: `lim` is a valid rlimit for the call.
    check_int(unsafe { libc::setrlimit(resource, &lim) })?;
    Ok(())
}

/// `prctl(PR_SET_PDEATHSIG, sig)`.
pub(crate) fn set_parent_death_signal(sig: i32) -> SysResult<()> {
    // SAFETY: prctl with integer arguments has no memory effects.
    check_int(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) })?;
    Ok(())
}

/// `prctl(PR_SET_DUMPABLE, 0)`: nobody of the same uid may ptrace or read
/// this process's memory.
pub(crate) fn set_not_dumpable() -> SysResult<()> {
    // SAFETY: prctl with integer arguments has no memory effects.
    check_int(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) })?;
    Ok(())
}

/// Blocks every blockable signal; returns the previous mask.
pub(crate) fn block_all_signals() -> SysResult<libc::sigset_t> {
    // SAFETY: sigset_t is plain data, initialised by sigfillset/sigprocmask.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        check_int(libc::sigprocmask(libc::SIG_SETMASK, &all, &mut old))?;
        Ok(old)
    }
}

/// Restores a signal mask.
pub(crate) fn set_signal_mask(mask: &libc::sigset_t) -> SysResult<()> {
    // SAFETY: `mask` is a valid sigset_t.
    check_int(unsafe { libc::sigprocmask(libc::SIG_SETMASK, mask, std::ptr::null_mut()) })?;
    Ok(())
}

/// Resets every catchable signal's disposition to the default.
pub(crate) fn reset_signal_dispositions() {
    for sig in 1..libc::SIGRTMAX() {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: setting SIG_DFL installs no Rust code as a handler.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
}

/// Waits up to `timeout_ms` for a blocked signal; `Some(signo)` if one came.
pub(crate) fn wait_signal(timeout_ms: u64) -> SysResult<Option<i32>> {
    // SAFETY: sigset_t and siginfo_t are plain data filled by the kernel.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        let ts = libc::timespec {
            tv_sec: (timeout_ms / 1000) as libc::time_t,
            tv_nsec: ((timeout_ms % 1000) * 1_000_000) as libc::c_long,
        };
        let mut info: libc::siginfo_t = std::mem::zeroed();
        match check_int(libc::sigtimedwait(&all, &mut info, &ts)) {
            Ok(sig) => Ok(Some(sig)),
            Err(Errno(libc::EAGAIN)) | Err(Errno(libc::EINTR)) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// `execve`; returns only on failure.
pub(crate) fn execve(path: &CString, argv: &[CString], envp: &[CString]) -> Errno {
    let mut a: Vec<*const libc::c_char> = argv.iter().map(|s| s.as_ptr()).collect();
    a.push(std::ptr::null());
    let mut e: Vec<*const libc::c_char> = envp.iter().map(|s| s.as_ptr()).collect();
    e.push(std::ptr::null());
    // SAFETY: `path`, and every element of the NULL-terminated `a` and `e`
    // arrays, are NUL-terminated strings that outlive the call.
    unsafe { libc::execve(path.as_ptr(), a.as_ptr(), e.as_ptr()) };
    Errno::last()
}

/// `_exit(2)`: leaves without running destructors or atexit handlers (the
/// right way out of a forked child).
pub(crate) fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no Rust state.
    unsafe { libc::_exit(code) }
}

/// This process's pid.
pub(crate) fn getpid() -> libc::pid_t {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

/// Effective uid and gid.
pub(crate) fn effective_ids() -> (u32, u32) {
    // SAFETY: geteuid/getegid have no preconditions.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// `umask(2)`; returns the previous mask.
pub(crate) fn set_umask(mask: libc::mode_t) -> libc::mode_t {
    // SAFETY: umask has no preconditions.
    unsafe { libc::umask(mask) }
}
