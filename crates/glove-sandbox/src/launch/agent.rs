//! The agent (pid 2): set up completely, then held until the release lets it execve.

use super::status::{ExecCmd, MAX_RELEASE_COMMAND, RELEASE_COMMAND, TAG_RELEASE};
use super::{ExecPrep, INSIDE_ID};
use crate::spec::{LaunchSpec, Terminal};
use crate::sys::process::{self};
use crate::sys::{caps, fd, mount, pty, trace, Errno};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

/// The agent: streams, descriptors, signals, limits, capabilities, seccomp,
/// `execve`.
/// What the agent restores or applies first, and how it talks to the
/// supervisor until its `execve`.
pub(super) struct AgentStart<'a> {
    pub(super) umask: libc::mode_t,
    pub(super) fallback: bool,
    pub(super) affinity: Option<&'a process::CpuSet>,
    /// The status channel: the agent sends PREPARED on it and reads the
    /// release (the init is suspended until the agent's `execve`).
    pub(super) sync: BorrowedFd<'a>,
    /// The PREPARED frame to send.
    pub(super) prepared: &'a [u8],
    /// Set right before the `execve` (the init reads it once the vfork
    /// wait ends).
    pub(super) exec_started: &'a std::sync::atomic::AtomicBool,
    /// The session cgroup's v1 `tasks` files: the agent moves itself in
    /// first (closed by its `execve`).
    pub(super) join: &'a [OwnedFd],
}

/// What the agent writes on the exec-status pipe: right before its
/// `execve`, and after it if the `execve` failed. The supervisor takes
/// exactly [`EXEC_STARTED`] followed by the pipe's close as success.
pub(super) const EXEC_STARTED: &[u8] = b"X";
pub(super) const EXEC_FAILED: &[u8] = b"F";

/// Why the agent did not `execve` (first word of its report to the init).
pub(super) const AGENT_FAILED_EXEC: u32 = 0;
pub(super) const AGENT_FAILED_COMMAND: u32 = 1;
pub(super) const AGENT_NOT_RELEASED: u32 = 2;
pub(super) const AGENT_FAILED_JOIN: u32 = 3;
pub(super) const AGENT_PIN_CHANGED: u32 = 4;

/// The release the agent waits for: the command to run (`None`: the
/// spec's) and the write end of the supervisor's exec-status pipe (closed
/// by the `execve`). `Err` with a report kind when there is none or it is
/// malformed (a byte on the exec-status pipe tells the supervisor then).
pub(super) fn read_release(
    sync: BorrowedFd<'_>,
) -> Result<(Option<ExecCmd>, OwnedFd), (u32, Errno)> {
    let gone = (AGENT_NOT_RELEASED, Errno(libc::EPIPE));
    let exec_w = match fd::recv_fds::<1>(sync) {
        Ok((TAG_RELEASE, fds)) if fds.len() == 1 => fds.into_iter().next().ok_or(gone)?,
        _ => return Err(gone),
    };
    let refuse = |kind: u32, e: Errno| {
        let _ = fd::write_all(exec_w.as_fd(), EXEC_FAILED);
        (kind, e)
    };
    let mut flags = [0u8; 1];
    if fd::read_full(sync, &mut flags) != Ok(1) {
        return Err(refuse(AGENT_NOT_RELEASED, Errno(libc::EPIPE)));
    }
    if flags[0] & RELEASE_COMMAND == 0 {
        return Ok((None, exec_w));
    }
    let mut len = [0u8; 4];
    if fd::read_full(sync, &mut len) != Ok(4) {
        return Err(refuse(AGENT_NOT_RELEASED, Errno(libc::EPIPE)));
    }
    let n = u32::from_le_bytes(len) as usize;
    if n > MAX_RELEASE_COMMAND {
        return Err(refuse(AGENT_FAILED_COMMAND, Errno(libc::E2BIG)));
    }
    let mut body = vec![0u8; n];
    if fd::read_full(sync, &mut body) != Ok(n) {
        return Err(refuse(AGENT_NOT_RELEASED, Errno(libc::EPIPE)));
    }
    match ExecCmd::decode(&body) {
        Some(c) => Ok((Some(c), exec_w)),
        None => Err(refuse(AGENT_FAILED_COMMAND, Errno(libc::EINVAL))),
    }
}

pub(super) fn agent_main(
    spec: &LaunchSpec,
    prep: &ExecPrep,
    start: AgentStart<'_>,
    stdio: &[OwnedFd; 3],
    err_w: &OwnedFd,
    old_mask: &libc::sigset_t,
) -> std::convert::Infallible {
    trace::mark("agent");
    // Into the session cgroup before anything else, by moving this thread
    // (the whole process: it has one) itself.
    for f in start.join {
        if let Err(e) = fd::write_all(f.as_fd(), b"0") {
            let mut msg = [0u8; 8];
            msg[..4].copy_from_slice(&AGENT_FAILED_JOIN.to_le_bytes());
            msg[4..].copy_from_slice(&e.0.to_le_bytes());
            let _ = fd::write_all(err_w.as_fd(), &msg);
            process::exit_now(127);
        }
    }
    if !start.join.is_empty() {
        trace::mark("cgroup joined");
    }
    if let Some(a) = start.affinity {
        a.apply_to(0);
        // The init (PID 1 here), pinned until this process leaves its
        // memory: it would otherwise be woken after the execve on the CPU
        // the agent then runs on.
        a.apply_to(1);
    }
    // Every descriptor the agent works with is first copied, close-on-exec,
    // above every number in use (and above the declared targets, at most
    // 255), so that no later placement can clobber one of them.
    let floor = stdio
        .iter()
        .chain(spec.extra_fds.iter().map(|(f, _)| f))
        .map(|f| f.as_raw_fd())
        .chain([
            err_w.as_raw_fd(),
            start.sync.as_raw_fd(),
            trace::TRACE_FD,
            255,
        ])
        .max()
        .unwrap_or(255)
        + 1;
    let Ok(err_fd) = fd::dup_above(err_w.as_raw_fd(), floor) else {
        process::exit_now(127)
    };
    let report_as = |kind: u32, e: Errno| -> ! {
        let mut msg = [0u8; 8];
        msg[..4].copy_from_slice(&kind.to_le_bytes());
        msg[4..].copy_from_slice(&e.0.to_le_bytes());
        let _ = fd::write_all(err_fd.as_fd(), &msg);
        process::exit_now(127)
    };
    let report = |e: Errno| -> ! { report_as(AGENT_FAILED_EXEC, e) };
    let high = |f: RawFd| fd::dup_above(f, floor).unwrap_or_else(|e| report(e));
    // The status channel, for PREPARED and the release.
    // (Owned copies made here are closed by the `execve`, or left open by
    // `exit_now`: none is dropped before either.)
    let sync_high = high(start.sync.as_raw_fd());
    let sync = sync_high.as_fd();
    let umask = start.umask;
    process::set_umask(umask);
    if let Err(e) = process::setsid() {
        report(e);
    }
    if matches!(spec.terminal, Terminal::Pty { .. }) {
        if let Err(e) = pty::make_controlling(stdio[0].as_fd()) {
            report(e);
        }
    }
    // Streams and declared descriptors: staged high, then everything from
    // 3 up is made close-on-exec, then each is put in place (a dup2 target
    // is not close-on-exec). So exactly 0-2 and the declared numbers
    // survive the execve.
    let streams = [
        high(stdio[0].as_raw_fd()),
        high(stdio[1].as_raw_fd()),
        high(stdio[2].as_raw_fd()),
    ];
    let staged: Vec<(OwnedFd, i32)> = spec
        .extra_fds
        .iter()
        .map(|(f, target)| (high(f.as_raw_fd()), *target))
        .collect();
    if let Err(e) = fd::cloexec_from(3) {
        report(e);
    }
    for (i, s) in streams.iter().enumerate() {
        if let Err(e) = fd::dup_to(s.as_raw_fd(), i as RawFd) {
            report(e);
        }
    }
    for (s, target) in &staged {
        if let Err(e) = fd::dup_to(s.as_raw_fd(), *target) {
            report(e);
        }
    }
    process::reset_signal_dispositions();
    if let Err(e) = process::set_signal_mask(old_mask) {
        report(e);
    }
    trace::mark("a:fds+sig");
    if let Err(e) = mount::chdir(&spec.working_directory) {
        report(e);
    }
    if let Err(e) = caps::set_no_new_privs().and_then(|_| caps::drop_bounding()) {
        report(e);
    }
    if prep.privileged {
        if let Err(e) = process::become_user(INSIDE_ID, INSIDE_ID) {
            report(e);
        }
    }
    trace::mark("a:nnp+bset+user");
    if let Err(e) = caps::clear_sets() {
        report(e);
    }
    trace::mark("a:clearcaps");
    // Last: installing a filter is itself a system call the list refuses.
    if seccompiler::apply_filter(&prep.filter).is_err() {
        report(Errno(libc::EPERM));
    }
    // Ready: report the sandbox as built and wait for the release (and
    // the command, if it comes with one).
    trace::mark("a:ready");
    if fd::write_all(sync, start.prepared).is_err() {
        report_as(AGENT_NOT_RELEASED, Errno(libc::EPIPE));
    }
    let (given, exec_w) = match read_release(sync) {
        Ok(r) => r,
        Err((kind, e)) => report_as(kind, e),
    };
    let cmd = given.as_ref().unwrap_or(&prep.cmd);
    // The pinned executable once more, right before the execve: its bind
    // sits on a host dentry when a bound directory holds the file, and a
    // host rename carries it away (an unlink detaches it), which a held
    // launch gives all the time it needs. What the path reaches now must
    // still be the inode that was checked.
    // (A release naming another command runs what it names; one naming
    // the pinned path gets the same check.)
    if let Some(pin) = &spec.executable_pin {
        if cmd.exe.as_bytes() == spec.executable.as_bytes() && !pin_holds(&spec.executable, pin) {
            let _ = fd::write_all(exec_w.as_fd(), EXEC_FAILED);
            report_as(AGENT_PIN_CHANGED, Errno(libc::ESTALE));
        }
    }
    // The fallback limits last: the release is read (and allocated)
    // before a memory rlimit could make that fail. (`prep.rlimits` the
    // init set on itself before anything else; the agent has them.)
    let extra: &[(libc::__rlimit_resource_t, u64)] = if start.fallback {
        &prep.fallback_rlimits
    } else {
        &[]
    };
    for (res, v) in extra {
        if let Err(e) = process::set_rlimit(*res, *v) {
            let _ = fd::write_all(exec_w.as_fd(), EXEC_FAILED);
            report(e);
        }
    }
    trace::mark("agent execve");
    // Both watchers learn that this process reached the execve: the
    // supervisor from the byte (and then the pipe's close by the execve),
    // the init from the flag (and its own pipe's close). An agent that
    // dies before this point is a failed launch for both.
    start
        .exec_started
        .store(true, std::sync::atomic::Ordering::Release);
    if fd::write_all(exec_w.as_fd(), EXEC_STARTED).is_err() {
        report(Errno(libc::EPIPE));
    }
    let e = process::execve(&cmd.exe, &cmd.argv, &cmd.envp);
    let _ = fd::write_all(exec_w.as_fd(), EXEC_FAILED);
    report(e)
}

/// Whether `exe`, opened without following links, is still the regular
/// file of identity `pin` ([`crate::identity::file_identity`]).
fn pin_holds(exe: &str, pin: &str) -> bool {
    let Ok(f) = crate::sys::resolve::open_no_links(exe, libc::O_PATH | libc::O_CLOEXEC) else {
        return false;
    };
    crate::sys::resolve::meta(f.as_fd()).is_ok_and(|m| {
        m.is_file() && crate::identity::file_identity(m.dev, m.ino, m.ctime_ns) == pin
    })
}
