//! The cgroup remover: a helper started ahead that removes the session's
//! cgroup directories once its starter has exited, then refills the
//! network namespace pool.

use super::{block_all_signals, set_signal_mask, ChildStack};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

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
        let (wait, go) = super::super::fd::pipe().ok()?;
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
