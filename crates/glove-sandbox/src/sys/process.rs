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

/// Memory for the stack of a child started by [`spawn_shared`], with an
/// inaccessible guard page below it.
pub(crate) struct ChildStack {
    base: *mut libc::c_void,
    len: usize,
}

impl ChildStack {
    /// Maps `len` bytes (rounded up to pages) plus a guard page.
    pub(crate) fn new(len: usize) -> SysResult<Self> {
        let page = 4096;
        let len = len.div_ceil(page) * page + page;
        // SAFETY: an anonymous private mapping at an address of the kernel's
        // choosing; no existing memory is affected.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        // SAFETY: the first page of the mapping made above.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            let e = Errno::last();
            // SAFETY: unmaps exactly the mapping made above.
            unsafe { libc::munmap(base, len) };
            return Err(e);
        }
        Ok(ChildStack { base, len })
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; no child runs on
        // it any more (`spawn_shared` returns only after the child has left
        // it by `execve` or exit).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

// `body()` cannot return (it would have to produce an `Infallible`), which
// the compiler reports as unreachable code after it.
#[allow(unreachable_code)]
extern "C" fn shared_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `&mut &mut dyn FnMut() -> std::convert::Infallible` that `spawn_shared`
    // passed; it stays valid because the parent is suspended until this
    // child execs or exits.
    let body = unsafe { &mut *arg.cast::<&mut dyn FnMut() -> std::convert::Infallible>() };
    match body() {}
}

/// Runs `body` in a new process that shares this process's memory but not
/// its descriptor table, credentials or namespaces (`CLONE_VM |
/// CLONE_VFORK`, like `posix_spawn`): no page tables are copied, so it
/// starts in a few microseconds instead of a fork's hundreds. This call
/// returns, with the child's pid, only once the child has called `execve`
/// or exited; until then the caller is suspended.
///
/// Rules for `body`, which the signature partly enforces: it never returns
/// (it cannot produce an `Infallible`; it leaves with `execve` or
/// `exit_now`); it must not drop or free
/// anything the caller owns (it may only borrow; what it allocates itself
/// is simply left behind); the caller must be single-threaded, so that no
/// other thread sees the shared memory change under it.
pub(crate) fn spawn_shared(
    stack: &mut ChildStack,
    mut body: &mut dyn FnMut() -> std::convert::Infallible,
) -> SysResult<libc::pid_t> {
    // The stack grows down from the end of the mapping (16-byte aligned).
    let top = (stack.base as usize + stack.len) & !15;
    let arg: *mut &mut dyn FnMut() -> std::convert::Infallible = &mut body;
    // SAFETY: `top` is the aligned end of a writable mapping owned by
    // `stack`, which outlives the child's use of it (the parent is suspended
    // until the child leaves it); `arg` points at `body`, which lives on the
    // suspended caller's stack; the child runs `shared_child`, which never
    // returns into the caller's frames (the rules above).
    let pid = unsafe {
        libc::clone(
            shared_child,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            arg.cast(),
        )
    };
    check_int(pid)
}

/// A helper of the sandbox init that creates the sandbox's network
/// namespace on another core while the init builds the file system view.
///
/// It is started with `CLONE_VM` (no page tables are copied, so it costs
/// the init a few microseconds) but *without* `CLONE_VFORK`: it runs
/// alongside the init in the same memory. It therefore touches nothing but
/// its own stack, four descriptor numbers written before it starts and
/// string literals, and makes only raw system calls that never write
/// `errno` and cannot panic (rustix; the launch trace marks too), so it
/// cannot disturb the init. The init keeps it off the CPU it runs on
/// ([`keep_off_current_cpu`]).
///
/// It closes its copies of the init's pipe ends, calls
/// `unshare(CLONE_NEWNET)` (it is in the init's user namespace, where it
/// has every capability) and writes one byte: `N` on success, `E` on
/// failure. The init joins the namespace through the helper's pidfd, then
/// closes the second pipe ([`NetUnsharer::release`]), on which the helper
/// blocks meanwhile, and the helper exits; the init reaps it before the
/// agent exists ([`NetUnsharer::reap`]).
pub(crate) struct NetUnsharer {
    pid: libc::pid_t,
    pidfd: OwnedFd,
    ready: OwnedFd,
    hold: Option<OwnedFd>,
}

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

extern "C" fn net_unsharer_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` points at four descriptor numbers written into the
    // helper's own mapping before it started and never changed after.
    let [ready, hold, init_ready, init_hold] = unsafe { arg.cast::<[RawFd; 4]>().read() };
    // The helper's table is a copy of the init's at the clone: drop its
    // copies of the init's ends, or the pipe it waits on would never report
    // the init's close.
    // SAFETY: these numbers are open in this process's own table and
    // nothing here uses them.
    unsafe {
        let _ = rustix::io::try_close(init_ready);
        let _ = rustix::io::try_close(init_hold);
    }
    // SAFETY: both are open in this process's own descriptor table (copied
    // at clone: no CLONE_FILES) for as long as it runs.
    let (ready, hold) = unsafe { (BorrowedFd::borrow_raw(ready), BorrowedFd::borrow_raw(hold)) };
    // Its working directory is the supervisor's, somewhere in the old root:
    // at `/`, `pivot_root` moves it to the new root with the init's, and it
    // holds nothing of the old tree (which the init detaches; a reference
    // here would make this helper's exit pay for tearing that tree down).
    let _ = rustix::process::chdir(c"/");
    super::trace::mark("h:start");
    // SAFETY: NEWNET only affects this process's own network namespace.
    let made = unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET) };
    super::trace::mark("h:unshared");
    let _ = rustix::io::write(ready, if made.is_ok() { b"N" } else { b"E" });
    // Until the init has joined the namespace (and closes its end).
    let mut byte = [0u8; 1];
    let _ = rustix::io::read(hold, &mut byte);
    // Returning makes glibc's clone call the exit system call for this
    // process alone.
    0
}

impl NetUnsharer {
    /// Starts the helper (call in the single-threaded init).
    pub(crate) fn spawn() -> SysResult<Self> {
        let (ready_r, ready_w) = super::fd::pipe()?;
        let (hold_r, hold_w) = super::fd::pipe()?;
        // The helper's stack is never unmapped: it may still be on it,
        // leaving, after the init has moved on (16 KiB for the life of
        // the init).
        let stack = ChildStack::new(16 * 1024)?;
        let args = [
            ready_w.as_raw_fd(),
            hold_r.as_raw_fd(),
            ready_r.as_raw_fd(),
            hold_w.as_raw_fd(),
        ];
        // The arguments sit just above the guard page, far below where the
        // stack starts.
        let arg_at = (stack.base as usize + 4096) as *mut [RawFd; 4];
        // SAFETY: `arg_at` is inside the writable part of the fresh mapping
        // and suitably aligned (page-aligned).
        unsafe { arg_at.write(args) };
        let top = (stack.base as usize + stack.len) & !15;
        std::mem::forget(stack);
        let mut pidfd: libc::c_int = -1;
        // SAFETY: the child runs `net_unsharer_main` on its own stack (the
        // leaked mapping above) and touches only that mapping and raw
        // system calls (see the type's docs); `pidfd` is a valid out
        // parameter for CLONE_PIDFD (the parent_tid argument).
        let pid = unsafe {
            libc::clone(
                net_unsharer_main,
                top as *mut libc::c_void,
                libc::CLONE_VM | libc::CLONE_PIDFD | libc::SIGCHLD,
                arg_at.cast(),
                &mut pidfd as *mut libc::c_int,
            )
        };
        let pid = check_int(pid)?;
        // The helper has its own copies of its two ends.
        drop((ready_w, hold_r));
        Ok(NetUnsharer {
            pid,
            // SAFETY: CLONE_PIDFD stored a fresh descriptor we now own.
            pidfd: unsafe { OwnedFd::from_raw_fd(pidfd) },
            ready: ready_r,
            hold: Some(hold_w),
        })
    }

    /// The helper's pid.
    pub(crate) fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// The descriptors the init must keep open while the helper runs.
    pub(crate) fn descriptors(&self) -> Vec<RawFd> {
        let mut fds = vec![self.pidfd.as_raw_fd(), self.ready.as_raw_fd()];
        fds.extend(self.hold.as_ref().map(|h| h.as_raw_fd()));
        fds
    }

    /// Lets the helper go (after joining its namespace): it exits.
    pub(crate) fn release(&mut self) {
        self.hold.take();
    }

    /// Reaps the helper (waiting for its exit if it has not left yet).
    pub(crate) fn reap(mut self) {
        self.hold.take();
        let _ = wait(self.pid);
    }

    /// Blocks until the helper reports; an error unless it created the
    /// namespace.
    pub(crate) fn wait_ready(&self) -> SysResult<()> {
        let mut byte = [0u8; 1];
        match super::fd::read(self.ready.as_fd(), &mut byte)? {
            1 if byte[0] == b'N' => Ok(()),
            _ => Err(Errno(libc::ENETDOWN)),
        }
    }

    /// The helper's pidfd (for `setns(…, CLONE_NEWNET)`).
    pub(crate) fn pidfd(&self) -> BorrowedFd<'_> {
        self.pidfd.as_fd()
    }
}

/// A helper process that removes the session's cgroup directories once
/// its starter has exited (or dropped it), so that a caller about to exit
/// (`glove exec`) does not wait for the kernel to take the cgroups down. It
/// is started ahead, while the session runs, so that the end costs
/// nothing ([`Remover::at_exit`]); it also removes the cgroup if its
/// starter dies first.
///
/// Started like the network helper: `CLONE_VM` without `CLONE_VFORK`, its
/// own leaked stack, and only raw system calls that neither write `errno`
/// nor panic (a panic would allocate in the shared memory). Everything it
/// reads (paths, descriptor numbers) is leaked too, so nothing it uses is
/// freed while it runs, even after the caller has exited (it keeps the
/// shared memory alive). Its first act is to close its copies of every
/// descriptor the caller had open but the pipe's read end (listed by the
/// caller, so only open numbers are closed; a failing close is ignored):
/// nobody waiting for the end of the caller's output, or of a pipe into the
/// sandbox, waits for it. It starts with every signal blocked, so a signal
/// to the caller's process group spares it. Then it
/// blocks on the pipe; a byte or the end of file (the caller exited or
/// dropped it) starts the removal 5 ms later (out of the way of the
/// caller's parent, woken by the exit), retrying a busy directory every 2 ms for
/// at most 200 ms (a task of the session may still be leaving). Its parent
/// is then whoever inherited it: only for a caller about to exit, which
/// must be single-threaded (the descriptor list must not change before the
/// clone).
///
/// After the removal it makes the network namespace pool entries it was
/// given (the pool's refill, [`crate::net_pool`]), at nice 19: for each,
/// if a slot is free, a new namespace (`unshare(CLONE_NEWNET)` of itself),
/// the temporary directory and its `ns` file created exclusively, the
/// namespace bound onto the file, and the directory renamed into the first
/// free slot without replacing anything. What was made is taken down again
/// when that fails; a failure, or no free slot, ends the refill.
#[derive(Debug)]
pub(crate) struct Remover {
    go: OwnedFd,
}

/// What the remover works on (leaked: never freed).
struct RemoverArgs {
    paths: &'static [std::ffi::CString],
    /// Pool entries to make after the removal: temporary directory and its
    /// `ns` file.
    netns: &'static [[std::ffi::CString; 2]],
    /// The pool's slots.
    slots: &'static [std::ffi::CString],
    /// Descriptors open in the caller when it started the remover, to close.
    close: &'static [RawFd],
    /// The pipe's read end.
    wait: RawFd,
}

impl Remover {
    /// Starts the remover for `dirs`, which then makes the network
    /// namespace pool entries of `refill`; `None` when it cannot be started.
    pub(crate) fn start(
        dirs: &[std::path::PathBuf],
        refill: &crate::net_pool::Refill,
    ) -> Option<Remover> {
        use crate::net_pool::c_path;
        let paths: Vec<std::ffi::CString> =
            dirs.iter().map(|d| c_path(d)).collect::<Option<_>>()?;
        let netns: Vec<[std::ffi::CString; 2]> = refill
            .entries
            .iter()
            .map(|e| Some([c_path(&e.making)?, c_path(&e.making_ns)?]))
            .collect::<Option<_>>()?;
        let slots: Vec<std::ffi::CString> = refill
            .slots
            .iter()
            .map(|d| c_path(d))
            .collect::<Option<_>>()?;
        let (wait, go) = super::fd::pipe().ok()?;
        // Listed after the pipe exists: its write end is closed too.
        let listed: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")
            .ok()?
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<RawFd>().ok())
            .collect();
        // Checked once the listing's own descriptor is closed (it is
        // listed too): only numbers open at the clone may be closed there.
        let close: Vec<RawFd> = listed
            .into_iter()
            .filter(|fd| *fd != wait.as_raw_fd())
            // SAFETY: F_GETFD only reads this process's descriptor flags.
            .filter(|fd| unsafe { libc::fcntl(*fd, libc::F_GETFD) } >= 0)
            .collect();
        let args: &'static RemoverArgs = Box::leak(Box::new(RemoverArgs {
            paths: Box::leak(paths.into_boxed_slice()),
            netns: Box::leak(netns.into_boxed_slice()),
            slots: Box::leak(slots.into_boxed_slice()),
            close: Box::leak(close.into_boxed_slice()),
            wait: wait.as_raw_fd(),
        }));
        let stack = ChildStack::new(16 * 1024).ok()?;
        let top = (stack.base as usize + stack.len) & !15;
        std::mem::forget(stack);
        // Born with every signal blocked, so that what ends the caller (a
        // Ctrl-C or hang-up sent to its process group) does not end the
        // remover too; SIGKILL aside, it always gets to remove.
        let mask = block_all_signals().ok()?;
        // SAFETY: the child runs `remover_main` on its own leaked stack and
        // reads only the leaked arguments (see above); it never returns into
        // this function's frames.
        let pid = unsafe {
            libc::clone(
                remover_main,
                top as *mut libc::c_void,
                libc::CLONE_VM | libc::SIGCHLD,
                (args as *const RemoverArgs).cast_mut().cast(),
            )
        };
        let _ = set_signal_mask(&mask);
        // The child has its own copy of the read end.
        drop(wait);
        (pid > 0).then_some(Remover { go })
    }

    /// Leaves the helper to start when this process exits (its end of the
    /// pipe closes then): nothing is woken now, and the exit does not wait
    /// for the removal.
    pub(crate) fn at_exit(self) {
        use std::os::fd::IntoRawFd;
        // Deliberately left open until the exit.
        let _ = self.go.into_raw_fd();
    }
}

/// How long the remover waits before it starts.
const START_DELAY_NS: i64 = 5_000_000;

extern "C" fn remover_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the leaked value made by `Remover::start`, never
    // freed.
    let RemoverArgs {
        paths,
        netns,
        slots,
        close,
        wait,
    } = unsafe { &*arg.cast::<RemoverArgs>() };
    for fd in close.iter() {
        // `try_close`: a failing close (EIO, EINTR) is ignored instead of
        // asserted on, as `close` does in debug builds.
        // SAFETY: closes this process's own copy (no CLONE_FILES) of a
        // descriptor that was open at the clone and that nothing here uses.
        let _ = unsafe { rustix::io::try_close(*fd) };
    }
    // SAFETY: the read end, open in this process's own table until it exits.
    let wait = unsafe { BorrowedFd::borrow_raw(*wait) };
    let mut byte = [0u8; 1];
    // The end of file (the starter exited or dropped its end), a byte or
    // an error: remove now either way.
    let _ = rustix::io::read(wait, &mut byte);
    // First out of the way: the starter's parent, woken by the exit, runs
    // first (a long stretch in the kernel here, such as a cgroup removal,
    // would delay it on this CPU).
    let _ = rustix::thread::nanosleep(&rustix::thread::Timespec {
        tv_sec: 0,
        tv_nsec: START_DELAY_NS,
    });
    let pause = rustix::thread::Timespec {
        tv_sec: 0,
        tv_nsec: 2_000_000,
    };
    for p in paths.iter() {
        for _ in 0..100 {
            match rustix::fs::rmdir(p.as_c_str()) {
                Err(rustix::io::Errno::BUSY) | Err(rustix::io::Errno::AGAIN) => {
                    let _ = rustix::thread::nanosleep(&pause);
                }
                _ => break,
            }
        }
    }
    // The refill is for later launches: it yields to everything else.
    if !netns.is_empty() {
        let _ = rustix::process::setpriority_process(None, 19);
    }
    for [dir, ns] in netns.iter() {
        if make_pool_entry(dir, ns, slots).is_err() {
            break;
        }
    }
    0
}

/// One network namespace pool entry (see [`Remover`]); raw system calls
/// only.
fn make_pool_entry(
    dir: &std::ffi::CStr,
    ns: &std::ffi::CStr,
    slots: &[std::ffi::CString],
) -> rustix::io::Result<()> {
    use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags, CWD};
    // No namespace is made for a full pool.
    let free = |s: &std::ffi::CString| {
        rustix::fs::statat(CWD, s.as_c_str(), AtFlags::SYMLINK_NOFOLLOW).err()
            == Some(rustix::io::Errno::NOENT)
    };
    if !slots.iter().any(free) {
        return Err(rustix::io::Errno::EXIST);
    }
    // Stops here on failure: binding below would otherwise bind the
    // previous entry's namespace a second time.
    // SAFETY: NEWNET only affects this process's own network namespace.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET)? };
    rustix::fs::mkdir(dir, Mode::RWXU)?;
    let made = rustix::fs::open(
        ns,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::RUSR,
    )
    .map(|file| {
        // SAFETY: the descriptor was just opened here and nothing else
        // uses it.
        let _ = unsafe { rustix::io::try_close(std::os::fd::IntoRawFd::into_raw_fd(file)) };
    })
    .and_then(|()| rustix::mount::mount_bind(c"/proc/thread-self/ns/net", ns))
    .and_then(|()| {
        // Into the first free slot; never over another entry.
        let mut result = Err(rustix::io::Errno::EXIST);
        for slot in slots.iter() {
            result =
                rustix::fs::renameat_with(CWD, dir, CWD, slot.as_c_str(), RenameFlags::NOREPLACE);
            if result != Err(rustix::io::Errno::EXIST) {
                break;
            }
        }
        result
    });
    if let Err(e) = made {
        let _ = rustix::mount::unmount(ns, rustix::mount::UnmountFlags::DETACH);
        let _ = rustix::fs::unlink(ns);
        let _ = rustix::fs::rmdir(dir);
        return Err(e);
    }
    Ok(())
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
