//! The sandbox init (pid 1 of the new pid namespace): builds the sandbox, starts the agent, supervises it and reports its end.

use super::agent::{
    agent_main, AgentStart, AGENT_FAILED_COMMAND, AGENT_FAILED_EXEC, AGENT_FAILED_JOIN,
    AGENT_PIN_CHANGED,
};
use super::mounts::setup_fs;
use super::status::{fail, RELEASE_FALLBACK, TAG_EXIT, TAG_GO, TAG_JOINED, TAG_PREPARED, TAG_PTY};
use super::{ExecPrep, INSIDE_ID, KILL_REQUEST, PTY_MODE};
use crate::spec::{LaunchSpec, Terminal};
use crate::sys::process::{self, Exit};
use crate::sys::{fd, mount, pty, trace, Errno};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

/// The sandbox's PID 1.
pub(super) fn init_main(
    spec: &LaunchSpec,
    prep: &ExecPrep,
    sync: OwnedFd,
    pipes: Option<(OwnedFd, OwnedFd, OwnedFd)>,
) -> ! {
    trace::mark("init");
    let _ = process::set_parent_death_signal(libc::SIGKILL);
    // The per-user budgets hold for the init too: signals queued to it are
    // counted against its own limit (and, launched by an ordinary user,
    // it shares its user with the agent).
    for (res, v) in &prep.rlimits {
        if process::set_rlimit(*res, *v).is_err() {
            process::exit_now(1);
        }
    }
    // The init carries a copy of the supervisor's memory, including its
    // command line: `/proc/1/cmdline` must not show it inside.
    if process::clear_own_arguments(b"glove-init").is_err() {
        process::exit_now(1);
    }
    // First, so that it runs on the other core while this one works;
    // unless the init was born in a namespace made ahead.
    let mut net = if prep.net_pooled {
        None
    } else {
        let n = match process::NetUnsharer::spawn() {
            Ok(n) => n,
            Err(e) => fail(&sync, "network namespace", e),
        };
        process::keep_off_current_cpu(n.pid());
        trace::mark("i:helper spawned");
        Some(n)
    };
    // Nothing the supervisor holds (its own standard streams, a service
    // socket) stays open in the sandbox: keep the status channel, the
    // agent's pipes and the declared descriptors, close the rest.
    let mut keep: Vec<RawFd> = vec![sync.as_raw_fd()];
    keep.extend(net.iter().flat_map(|n| n.descriptors()));
    if let Some((a, b, c)) = &pipes {
        keep.extend([a.as_raw_fd(), b.as_raw_fd(), c.as_raw_fd()]);
    }
    keep.extend(spec.extra_fds.iter().map(|(f, _)| f.as_raw_fd()));
    keep.extend(spec.egress.iter().map(|e| e.channel.as_raw_fd()));
    keep.extend(spec.retained.iter().map(|r| r.mount.as_raw_fd()));
    keep.extend(spec.exposures.iter().map(|x| x.source.as_raw_fd()));
    if trace::enabled() {
        keep.push(trace::TRACE_FD);
    }
    if fd::close_all_except(&mut keep).is_err() || fd::fill_standard_streams().is_err() {
        process::exit_now(1);
    }
    trace::mark("i:fds closed");
    // GO carries the supervisor's network namespace (measured there while
    // the init started), which the init must not be in (born there without
    // a pooled namespace, and leaving it) before the agent exists.
    let mut go = [0u8; 9];
    if fd::read_full(sync.as_fd(), &mut go) != Ok(go.len()) || go[0] != TAG_GO {
        process::exit_now(1);
    }
    let mut ino = [0u8; 8];
    ino.copy_from_slice(&go[1..]);
    let born_in_net = u64::from_le_bytes(ino);
    trace::mark("go received");
    // Modes given to mkdir are meant literally (1777 for /tmp).
    let umask = process::set_umask(0);
    // The view; the network namespace is joined on the way (while the init
    // is still dumpable: joining through the helper's pidfd needs
    // ptrace-read access to it), and the helper let go.
    let mut leases = Vec::new();
    let facts = match setup_fs(
        spec,
        prep.privileged,
        net.as_mut(),
        born_in_net,
        &mut leases,
    ) {
        Ok(f) => f,
        Err((step, e)) => fail(&sync, &step, e),
    };
    if let Err(e) = process::sethostname(&spec.hostname) {
        fail(&sync, "sethostname", e);
    }
    trace::mark("view built");
    // Egress mode: `lo` up and the forwarder's listeners, made with the
    // init's capabilities over the namespace it joined.
    let listeners = match &spec.egress {
        Some(e) => match super::egress::Listeners::open(&e.ports) {
            Ok(l) => Some(l),
            Err((step, e)) => fail(&sync, &step, e),
        },
        None => None,
    };
    let _ = process::set_not_dumpable();

    let stdio: [OwnedFd; 3] = match (&spec.terminal, pipes) {
        (Terminal::Pty { rows, cols }, _) => {
            let (master, slave) = match pty::open_pair("/dev/pts/ptmx", "/dev/pts") {
                Ok(p) => p,
                Err(e) => fail(&sync, "open pty", e),
            };
            // The slave is the agent's (which reopens it: `/dev/tty`,
            // `ttyname(0)`), and no one else's: not the init's identity
            // (root inside for a root launch), no group access.
            if let Err(e) = pty::give_to(slave.as_fd(), INSIDE_ID, INSIDE_ID, PTY_MODE) {
                fail(&sync, "give pty to the agent", e);
            }
            let _ = pty::set_size(slave.as_fd(), *rows, *cols);
            if let Err(e) = fd::send_fds(
                sync.as_fd(),
                TAG_PTY,
                &[master.as_raw_fd(), slave.as_raw_fd()],
            ) {
                fail(&sync, "send pty", e);
            }
            drop(master);
            let a = slave.try_clone();
            let b = slave.try_clone();
            match (a, b) {
                (Ok(a), Ok(b)) => [slave, a, b],
                _ => fail(&sync, "dup pty", Errno(libc::EMFILE)),
            }
        }
        (Terminal::Pipes, Some((i, o, e))) => [i, o, e],
        (Terminal::Pipes, None) => fail(&sync, "pipes", Errno(libc::EBADF)),
    };

    // The supervisor reports the cgroup join (or that there is none, and
    // the agent applies rlimits instead): the agent is born inside.
    // With a v1 cgroup, JOINED carries its `tasks` files: the agent moves
    // itself in with them before anything else.
    let join_files = match fd::recv_fds::<4>(sync.as_fd()) {
        Ok((TAG_JOINED, files)) => files,
        _ => process::exit_now(1),
    };
    let mut flags = [0u8; 1];
    if fd::read_full(sync.as_fd(), &mut flags) != Ok(1) {
        process::exit_now(1);
    }
    let fallback = flags[0] & RELEASE_FALLBACK != 0;
    // The forwarder, born before the agent and moved into its cgroup the
    // same way (counted in the session's pid limit).
    if let (Some(l), Some(e)) = (listeners, &spec.egress) {
        if let Err(err) = l.spawn(&e.channel, &join_files, &prep.filter) {
            fail(&sync, "egress forwarder", err);
        }
        trace::mark("i:forwarder forked");
    }
    // What was built, sent by the agent once it is ready to `execve`.
    let body = serde_json::to_vec(&facts).unwrap_or_default();
    let mut prepared_msg = vec![TAG_PREPARED];
    prepared_msg.extend_from_slice(&(body.len() as u32).to_le_bytes());
    prepared_msg.extend_from_slice(&body);
    let old_mask = match process::block_all_signals() {
        Ok(m) => m,
        Err(e) => fail(&sync, "sigprocmask", e),
    };
    let (err_r, err_w) = match fd::pipe() {
        Ok(p) => p,
        Err(e) => fail(&sync, "pipe", e),
    };
    // The agent shares the init's memory until its execve (the init is
    // suspended meanwhile): no page tables are copied and the execve has
    // no copied address space to tear down. `agent_main` only borrows.
    let mut stack = match process::ChildStack::new(256 * 1024) {
        Ok(s) => s,
        Err(e) => fail(&sync, "agent stack", e),
    };
    // What the copies put on the scratch, before the agent writes.
    let disk_at_start = spec
        .writable_dirs
        .first()
        .and_then(|p| mount::used_bytes(p).ok())
        .unwrap_or(0);
    // The helper was let go once the namespace was joined and has normally
    // exited by now; it is reaped before anything of the agent exists.
    if let Some(net) = net {
        trace::mark("i:reaping helper");
        net.reap();
        trace::mark("i:helper reaped");
    }
    // Started on this CPU, which the vfork wait leaves free (see
    // `CpuSet::pin_here`); the agent widens its mask again at once.
    let affinity = process::CpuSet::pin_here();
    let exec_started = std::sync::atomic::AtomicBool::new(false);
    let mut body = || {
        agent_main(
            spec,
            prep,
            AgentStart {
                umask,
                fallback,
                affinity: affinity.as_ref(),
                sync: sync.as_fd(),
                prepared: &prepared_msg,
                exec_started: &exec_started,
                join: &join_files,
            },
            &stdio,
            &err_w,
            &old_mask,
        )
    };
    let spawned = process::spawn_shared(&mut stack, &mut body);
    if let Some(a) = &affinity {
        a.apply_to(0);
    }
    let agent = match spawned {
        Ok(pid) => pid,
        Err(e) => fail(&sync, "fork", e),
    };
    trace::mark("agent forked");
    // The cgroup's files are the agent's business only (and gone with its
    // execve): the init keeps nothing opened with the launcher's rights.
    drop(join_files);
    drop(err_w);
    drop(stdio);
    let mut buf = [0u8; 8];
    match fd::read_full(err_r.as_fd(), &mut buf) {
        Ok(0) if exec_started.load(std::sync::atomic::Ordering::Acquire) => {}
        Ok(0) => {
            // Gone without a word before its execve (killed, or aborted).
            let _ = process::wait(agent);
            fail(&sync, "agent ended before execve", Errno(libc::ECHILD));
        }
        Ok(8) => {
            let _ = process::wait(agent);
            let kind = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
            let errno = Errno(i32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]));
            match kind {
                AGENT_FAILED_EXEC => fail(&sync, "execve", errno),
                AGENT_FAILED_COMMAND => fail(&sync, "release command", errno),
                AGENT_FAILED_JOIN => fail(&sync, "cgroup join", errno),
                AGENT_PIN_CHANGED => fail(&sync, "pinned executable changed before execve", errno),
                // No release: the supervisor withdrew the launch.
                _ => process::exit_now(1),
            }
        }
        Ok(_) => fail(&sync, "exec status", Errno(libc::EIO)),
        Err(e) => fail(&sync, "exec status", e),
    }
    drop(err_r);
    trace::mark("agent execed");
    supervise_inside(spec, &sync, agent, disk_at_start, &leases)
}

/// The init's loop: reap, forward signals, sample disk and pids, report the
/// agent's end, then kill whatever is left.
pub(super) fn supervise_inside(
    spec: &LaunchSpec,
    sync: &OwnedFd,
    agent: libc::pid_t,
    disk_at_start: u64,
    leases: &[super::mounts::HeldLease],
) -> ! {
    let disk_path = spec.writable_dirs.first().cloned();
    let mut disk_peak = disk_at_start;
    // The init and the agent.
    let mut pids_peak = 2u64;
    let mut status: Option<Exit> = None;
    // Waits first: the agent has just started, and the CPU is better left
    // to it (and to the supervisor) than spent on sampling.
    loop {
        match process::wait_signal(20) {
            // Only a `kill()` from outside the sandbox (the supervisor) is
            // obeyed; what the agent sends the init (it can, when both run
            // as the launching user), and anything queued with forged
            // sender fields, is dropped.
            Ok(Some(t)) if !t.from_outside => {}
            Ok(Some(t)) if t.signo == KILL_REQUEST => {
                // The supervisor ends the session: every process but this
                // one; the agent's end is then reaped and reported below.
                let _ = process::kill(-1, libc::SIGKILL);
            }
            Ok(Some(t)) if t.signo != libc::SIGCHLD => {
                let sig = t.signo;
                let _ = process::kill(-agent, sig);
                let _ = process::kill(agent, sig);
            }
            _ => {}
        }
        while let Ok(Some((pid, exit))) = process::reap_any() {
            if pid == agent {
                status = Some(exit);
            }
        }
        if status.is_some() {
            break;
        }
        if let Some(p) = &disk_path {
            disk_peak = disk_peak.max(mount::used_bytes(p).unwrap_or(0));
        }
        pids_peak = pids_peak.max(count_processes());
    }
    if let Some(p) = &disk_path {
        disk_peak = disk_peak.max(mount::used_bytes(p).unwrap_or(0));
    }
    trace::mark("agent reaped");
    let _ = process::kill(-1, libc::SIGKILL);
    while let Ok(Some(_)) = process::reap_any() {}
    // The leases go back once nothing of the agent is left to race with:
    // every killed process reaped (`reap_any` does not wait for one still
    // dying), for at most a second; otherwise they are not taken back.
    if !leases.is_empty() {
        let mut alone = false;
        for _ in 0..200 {
            while let Ok(Some(_)) = process::reap_any() {}
            if count_processes_checked().is_some_and(|n| n <= 1) {
                alone = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        if alone {
            super::mounts::take_back(leases);
        }
    }
    let (kind, value) = match status {
        Some(Exit::Code(c)) => (0u8, c),
        Some(Exit::Signal(s)) => (1u8, s),
        None => (1u8, libc::SIGKILL),
    };
    let mut msg = vec![TAG_EXIT, kind];
    msg.extend_from_slice(&value.to_le_bytes());
    msg.extend_from_slice(&disk_peak.to_le_bytes());
    msg.extend_from_slice(&pids_peak.to_le_bytes());
    let _ = fd::write_all(sync.as_fd(), &msg);
    trace::mark("init exiting");
    process::exit_now(0)
}

/// Processes visible in the sandbox's `/proc`, `None` when it cannot be
/// read (never taken for "none left").
fn count_processes_checked() -> Option<u64> {
    let d = std::fs::read_dir("/proc").ok()?;
    let mut n = 0u64;
    for e in d {
        let e = e.ok()?;
        if e.file_name()
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        {
            n += 1;
        }
    }
    Some(n)
}

/// Processes visible in the sandbox's `/proc` (its pid namespace).
pub(super) fn count_processes() -> u64 {
    count_processes_checked().unwrap_or(0)
}
