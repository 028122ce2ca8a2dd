//! Children that share the caller's memory (`CLONE_VM`): the agent started
//! by [`spawn_shared`] and the network helper [`NetUnsharer`].

use super::super::{check_int, Errno, SysResult};
use super::wait;

/// Memory for the stack of a child started by [`spawn_shared`], with an
/// inaccessible guard page below it.
pub(crate) struct ChildStack {
    pub(super) base: *mut libc::c_void,
    pub(super) len: usize,
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
    super::super::trace::mark("h:start");
    // SAFETY: NEWNET only affects this process's own network namespace.
    let made = unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET) };
    super::super::trace::mark("h:unshared");
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
        let (ready_r, ready_w) = super::super::fd::pipe()?;
        let (hold_r, hold_w) = super::super::fd::pipe()?;
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
        match super::super::fd::read(self.ready.as_fd(), &mut byte)? {
            1 if byte[0] == b'N' => Ok(()),
            _ => Err(Errno(libc::ENETDOWN)),
        }
    }

    /// The helper's pidfd (for `setns(…, CLONE_NEWNET)`).
    pub(crate) fn pidfd(&self) -> BorrowedFd<'_> {
        self.pidfd.as_fd()
    }
}
