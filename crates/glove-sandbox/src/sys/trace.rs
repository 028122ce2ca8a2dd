//! Launch phase marks, for measuring where a launch spends its time.
//!
//! Off unless `GLOVE_LAUNCH_TRACE` is set in the supervisor's environment
//! when [`init`] runs. Then the supervisor keeps a duplicate of its standard
//! error at a fixed high descriptor, which the sandbox init keeps and the
//! agent closes at `execve`, and every [`mark`] writes one line
//! `glove-trace <pid>@<cpu> <monotonic ns> <label>` to it without allocating (safe
//! in a freshly cloned child).

use std::sync::atomic::{AtomicBool, Ordering};

/// The descriptor the marks are written to.
pub(crate) const TRACE_FD: i32 = 1000;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Turns tracing on if the environment asks for it (call in the supervisor,
/// before cloning).
pub(crate) fn init() {
    if ENABLED.load(Ordering::Relaxed) || std::env::var_os("GLOVE_LAUNCH_TRACE").is_none() {
        return;
    }
    // SAFETY: dup3 of the caller's stderr onto a fixed number; no memory is
    // touched, and a failure only leaves tracing off.
    if unsafe { libc::dup3(2, TRACE_FD, libc::O_CLOEXEC) } == TRACE_FD {
        ENABLED.store(true, Ordering::Relaxed);
    }
}

/// Whether marks are written (the init must keep [`TRACE_FD`]).
pub(crate) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Writes one mark.
pub(crate) fn mark(label: &str) {
    if !enabled() {
        return;
    }
    // rustix's raw system calls never write `errno`, so a mark is safe even
    // in a helper that shares the init's memory (and thread-local errno).
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let pid = rustix::process::getpid().as_raw_nonzero().get();
    let ns = (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64);
    let mut buf = [0u8; 160];
    let mut n = 0;
    for part in [
        b"glove-trace ".as_slice(),
        itoa(pid as u64, &mut [0u8; 20]),
        b"@",
        itoa(rustix::thread::sched_getcpu() as u64, &mut [0u8; 20]),
        b" ",
        itoa(ns, &mut [0u8; 20]),
        b" ",
        label.as_bytes(),
        b"\n",
    ] {
        let take = part.len().min(buf.len() - n);
        buf[n..n + take].copy_from_slice(&part[..take]);
        n += take;
    }
    // SAFETY: TRACE_FD stays open for as long as tracing is enabled (the
    // init keeps it; the agent loses it only at execve).
    let fd = unsafe { rustix::fd::BorrowedFd::borrow_raw(TRACE_FD) };
    let _ = rustix::io::write(fd, &buf[..n]);
}

fn itoa(mut v: u64, out: &mut [u8; 20]) -> &[u8] {
    let mut i = out.len();
    loop {
        i -= 1;
        out[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    &out[i..]
}
