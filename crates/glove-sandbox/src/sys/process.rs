//! Processes: `clone3` into new namespaces, waiting, signals, identity,
//! resource limits and `execve`.
//!
//! [`clone_into_namespaces`] must only be called from a single-threaded
//! process: the child is a copy of the caller without `CLONE_VM`, and only a
//! single-threaded parent guarantees that no lock (allocator, stdio) was held
//! by another thread at the time of the copy. The sandbox init's own
//! children do share its memory: the agent ([`spawn_shared`], the init
//! suspended until the agent's `execve`) and the network helper
//! ([`NetUnsharer`], raw system calls only).

use super::{check, check_int, Errno, SysResult};
use std::ffi::CString;

mod remover;
mod shared;

pub(crate) use remover::Remover;
pub(crate) use shared::{spawn_shared, ChildStack, NetUnsharer};

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

/// Evidence that this process had one thread when it was checked. It
/// cannot leave the thread that made it (neither `Send` nor `Sync`), and
/// nothing in the launch starts a thread between the check and the
/// `clone3` that needs it.
pub(crate) struct SingleThreaded(std::marker::PhantomData<*const ()>);

impl SingleThreaded {
    /// `Ok` when `threads` (this process's thread count, as
    /// [`crate::launch::thread_count`] reads it) is exactly one; otherwise
    /// the count.
    pub(crate) fn check(threads: u32) -> Result<SingleThreaded, u32> {
        if threads == 1 {
            Ok(SingleThreaded(std::marker::PhantomData))
        } else {
            Err(threads)
        }
    }
}

/// `clone3` with the given namespace flags, fork-like (own stack copy), the
/// child reporting `SIGCHLD` on exit. `cgroup_fd`, when given, places the
/// child in that cgroup v2 directory atomically. Only for a single-threaded
/// process: the child then runs ordinary code (it allocates), which is
/// sound only if no other thread held a lock or was midway through an
/// allocation at the copy (a raw `clone3` runs no `atfork` handlers).
pub(crate) fn clone_into_namespaces(
    _one_thread: &SingleThreaded,
    flags: u64,
    cgroup_fd: Option<i32>,
) -> SysResult<Forked> {
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
    // space and continues on its copy of this stack, like fork(); the
    // process is single-threaded (the `SingleThreaded` evidence), so no
    // other thread's half-done work is copied.
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

/// A signal taken by [`wait_signal`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Taken {
    /// The signal number.
    pub(crate) signo: i32,
    /// Sent with `kill()` (`SI_USER`) by a process outside this process's
    /// pid namespace (its pid reads as 0 here). `rt_sigqueueinfo` cannot
    /// forge this: the kernel refuses a non-negative `si_code` from a
    /// sender to another process.
    pub(crate) from_outside: bool,
}

/// Waits up to `timeout_ms` for a blocked signal.
pub(crate) fn wait_signal(timeout_ms: u64) -> SysResult<Option<Taken>> {
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
            Ok(sig) => Ok(Some(Taken {
                signo: sig,
                from_outside: info.si_code == libc::SI_USER && info.si_pid() == 0,
            })),
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

/// `setns(fd, nstype)`: joins the namespace `fd` refers to.
pub(crate) fn setns(fd: std::os::fd::BorrowedFd<'_>, nstype: i32) -> SysResult<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: setns takes a descriptor and a flag; no memory is passed.
    check_int(unsafe { libc::setns(fd.as_raw_fd(), nstype) })?;
    Ok(())
}

/// This process's CPU mask, and the same mask without the CPU it runs on
/// now; `None` when it may not run anywhere else.
fn mask_and_others() -> Option<(libc::cpu_set_t, libc::cpu_set_t)> {
    let here = rustix::thread::sched_getcpu();
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut mask: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `mask` is a valid out-parameter of `size` bytes.
    if unsafe { libc::sched_getaffinity(0, size, &mut mask) } != 0 {
        return None;
    }
    let mut others = mask;
    // SAFETY: plain bit operations on valid sets (`here` is checked against
    // the set's size first).
    unsafe {
        if here >= libc::CPU_SETSIZE as usize || !libc::CPU_ISSET(here, &others) {
            return None;
        }
        libc::CPU_CLR(here, &mut others);
        (libc::CPU_COUNT(&others) > 0).then_some((mask, others))
    }
}

/// Moves the calling process off the CPU it runs on (when it may use
/// another) without narrowing its mask for good: the mask without that CPU
/// migrates it, then its own mask is set again (it stays where it is).
/// Only an optimisation; a failure changes nothing.
pub(crate) fn move_off_current_cpu() {
    let Some((mask, others)) = mask_and_others() else {
        return;
    };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: both sets are valid for `size` bytes.
    unsafe {
        if libc::sched_setaffinity(0, size, &others) == 0 {
            libc::sched_setaffinity(0, size, &mask);
        }
    }
}

/// Keeps `pid` off the CPU the caller runs on now, when the caller may use
/// another: a helper started to work *alongside* its parent is otherwise
/// often queued behind it on the same CPU (the scheduler places a new task
/// before the other CPU falls idle, and does not move it soon after). Only
/// an optimisation: the helper exits long before anything of the agent
/// exists, and a failure changes nothing.
pub(crate) fn keep_off_current_cpu(pid: libc::pid_t) {
    let Some((_, others)) = mask_and_others() else {
        return;
    };
    // SAFETY: `others` is valid for the size given.
    unsafe { libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &others) };
}

/// A CPU affinity mask saved by [`CpuSet::pin_here`].
pub(crate) struct CpuSet(libc::cpu_set_t);

impl CpuSet {
    /// Narrows this process to the CPU it runs on now and returns the mask
    /// it had (`None`, changing nothing, when that cannot be done). Used
    /// around starting the agent: a new task is otherwise often placed on
    /// the *other*, idle CPU while this one idles in the vfork wait, and on
    /// a virtual machine waking an idle vCPU costs 0.1–0.2 ms. The agent
    /// applies the saved mask to itself and to the init (suspended until
    /// the agent's `execve`, which may come much later) first thing.
    pub(crate) fn pin_here() -> Option<CpuSet> {
        // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
        let mut saved: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: `saved` is a valid out-parameter of `size` bytes.
        if unsafe { libc::sched_getaffinity(0, size, &mut saved) } != 0 {
            return None;
        }
        // SAFETY: sched_getcpu has no preconditions.
        let here = unsafe { libc::sched_getcpu() };
        if here < 0 || here as usize >= libc::CPU_SETSIZE as usize {
            return None;
        }
        // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
        let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `here` is below CPU_SETSIZE (checked above).
        unsafe { libc::CPU_SET(here as usize, &mut one) };
        // SAFETY: `one` is valid for `size` bytes.
        if unsafe { libc::sched_setaffinity(0, size, &one) } != 0 {
            return None;
        }
        Some(CpuSet(saved))
    }

    /// Sets the mask of process `pid` (0: this one); a failure leaves it
    /// as it is.
    pub(crate) fn apply_to(&self, pid: libc::pid_t) {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: the mask is valid for `size` bytes.
        unsafe { libc::sched_setaffinity(pid, size, &self.0) };
    }
}

/// Overwrites this process's command-line area (what `/proc/PID/cmdline`
/// shows) with `name` and NUL bytes. The sandbox init is a copy of its
/// supervisor, whose arguments (possibly `--env SECRET=…`) must not be
/// readable inside. The area's bounds come from `/proc/self/stat`.
pub(crate) fn clear_own_arguments(name: &[u8]) -> SysResult<()> {
    let stat = std::fs::read("/proc/self/stat").map_err(|_| Errno(libc::EIO))?;
    let (start, end) = arg_area(&stat).ok_or(Errno(libc::EINVAL))?;
    if end <= start || end - start > 1 << 21 {
        return Err(Errno(libc::EINVAL));
    }
    let len = end - start;
    let take = name.len().min(len.saturating_sub(1));
    // SAFETY: the kernel reports [start, end) as this process's argument
    // area: mapped, writable stack memory of its own (the init is not a
    // CLONE_VM child, so no other process shares it). No Rust reference
    // into it is alive; std only keeps raw pointers to the C strings there,
    // which remain NUL-terminated (empty) after this.
    unsafe {
        let p = start as *mut u8;
        std::ptr::write_bytes(p, 0, len);
        std::ptr::copy_nonoverlapping(name.as_ptr(), p, take);
    }
    Ok(())
}

/// Fields 48 and 49 of `/proc/PID/stat` (`arg_start`, `arg_end`).
pub(crate) fn arg_area(stat: &[u8]) -> Option<(usize, usize)> {
    let close = stat.iter().rposition(|b| *b == b')')?;
    let rest = std::str::from_utf8(stat.get(close + 1..)?).ok()?;
    let mut fields = rest.split_ascii_whitespace().skip(48 - 3);
    let start = fields.next()?.parse().ok()?;
    let end = fields.next()?.parse().ok()?;
    Some((start, end))
}

/// `fork(2)`, for the sandbox init only, which is single-threaded: the
/// child is a full copy that may allocate, and leaves with [`exit_now`].
pub(crate) fn fork_single_threaded() -> SysResult<Forked> {
    // SAFETY: the caller (the init) has exactly one thread, so the child's
    // copy of the allocator and every lock is consistent.
    match check_int(unsafe { libc::fork() })? {
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid)),
    }
}

#[cfg(test)]
mod arg_area_tests {
    use super::arg_area;
    use proptest::prelude::*;

    #[test]
    fn fields_48_and_49_after_the_last_parenthesis() {
        // A command name with spaces and parentheses, as the kernel shows it.
        let mut line = String::from("42 (a) b (c) S");
        for i in 4..=52 {
            line.push_str(&format!(" {i}"));
        }
        assert_eq!(arg_area(line.as_bytes()), Some((48, 49)));
        assert_eq!(arg_area(b"42 (x) S 1 2"), None);
        assert_eq!(arg_area(b"no parenthesis"), None);
        assert_eq!(arg_area(b""), None);
    }

    proptest! {
        #[test]
        fn never_panics(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let _ = arg_area(&bytes);
        }
    }
}
