//! The supervisor's loop: move bytes between the caller and the agent,
//! count terminal output, enforce wall time and CPU time, and assemble the
//! [`Outcome`] from the kernel's accounting once the sandbox is gone.

use crate::error::SandboxError;
use crate::launch::{Running, Streams};
use crate::outcome::{ExitStatus, Limit, Outcome, Usage};
use crate::sys::fd::{self, PollEntry};
use crate::sys::process;
use crate::sys::{pty, Errno};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

mod end;
mod thrash;

pub use end::Remains;
use end::{read_exit, Inside};
pub use thrash::{ThrashWatch, THRASH_MIN_PAGES, THRASH_SECONDS};

/// Which agent stream bytes came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Standard output, or the terminal.
    Stdout,
    /// Standard error (pipes mode only).
    Stderr,
}

/// What the caller asks of a running session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Bytes for the agent's input.
    Input(Vec<u8>),
    /// A new terminal size (rows, columns).
    Resize(u16, u16),
    /// A signal for the agent (forwarded by the sandbox init).
    Signal(i32),
    /// Stop: `SIGTERM` now, `SIGKILL` after the grace period.
    Stop {
        /// Grace period in milliseconds.
        grace_ms: u64,
    },
}

/// What to do when the caller's input descriptor reaches end of file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputEnd {
    /// Close the agent's input (pipes) — `glove exec` with redirected stdin.
    CloseAgentInput,
    /// Keep the session running without a caller (a supervisor whose
    /// controller went away still enforces every limit).
    KeepRunning,
}

/// The caller's side of the agent's streams.
pub trait StreamIo {
    /// A descriptor whose bytes carry the caller's input, if any.
    fn input(&self) -> Option<BorrowedFd<'_>>;
    /// Turns bytes read from [`StreamIo::input`] into commands. The default
    /// treats them as agent input.
    fn decode_input(&mut self, bytes: &[u8], out: &mut Vec<Command>) {
        out.push(Command::Input(bytes.to_vec()));
    }
    /// What end of file on the input means.
    fn input_end(&self) -> InputEnd {
        InputEnd::CloseAgentInput
    }
    /// Receives agent output (already counted, never beyond the limit).
    fn output(&mut self, stream: Stream, bytes: &[u8]);
    /// Bytes of output the caller's side holds that it could not write
    /// yet. From [`crate::sink::QUEUE_MAX`] on, the supervisor stops
    /// reading the agent's output (the agent then waits on its own pipe)
    /// and goes on enforcing every limit.
    fn output_backlog(&self) -> usize {
        0
    }
    /// Descriptors to poll for room while output waits (`POLLOUT`).
    fn output_waits(&self, _fds: &mut Vec<RawFd>) {}
    /// Called on every round of the loop: write what can be written now,
    /// without blocking.
    fn output_ready(&mut self) {}
    /// The current window size to mirror onto the agent's terminal.
    fn window_size(&self) -> Option<(u16, u16)> {
        None
    }
}

/// Supervision settings.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// How often limits are sampled.
    pub tick: Duration,
    /// The caller exits right after the session and ends it with
    /// [`Remains::finish_detached`]: the helper that removes the cgroup is
    /// started while the session runs (it also removes the cgroup if the
    /// caller dies first). Only for a single-threaded caller that does not
    /// go on running.
    pub exit_after: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            tick: Duration::from_millis(20),
            exit_after: false,
        }
    }
}

const PENDING_MAX: usize = 64 * 1024;
/// How long the init has to report after it was asked to end the sandbox.
pub const HARD_KILL_GRACE: Duration = Duration::from_secs(2);

impl Running {
    /// Runs the session to its end and returns the outcome; the session's
    /// cgroup is removed before returning.
    pub fn supervise(
        self,
        io: &mut dyn StreamIo,
        settings: Settings,
    ) -> Result<Outcome, SandboxError> {
        self.supervise_keeping(io, settings).map(|(o, _)| o)
    }

    /// Like [`Running::supervise`], but hands back the session's cgroup, so
    /// that a caller can remove it only after the outcome is durably
    /// recorded.
    pub fn supervise_keeping(
        mut self,
        io: &mut dyn StreamIo,
        settings: Settings,
    ) -> Result<(Outcome, Remains), SandboxError> {
        let limits = self.limits;
        let wall = Duration::from_millis(limits.wall_time_ms);
        // Copies of the agent's output ends, owned here: the loop looks
        // them up by number (poll reports numbers) without borrowing
        // `self` for its whole length.
        let dup = |f: BorrowedFd<'_>| {
            f.try_clone_to_owned().map_err(|e| SandboxError::Io {
                detail: format!("dup: {e}"),
            })
        };
        let (out_own, err_own, mut in_fd): (OwnedFd, Option<OwnedFd>, Option<OwnedFd>) =
            match &mut self.streams {
                Streams::Pipes {
                    stdin,
                    stdout,
                    stderr,
                } => (
                    dup(stdout.as_fd())?,
                    Some(dup(stderr.as_fd())?),
                    stdin.take(),
                ),
                Streams::Pty { master, .. } => {
                    (dup(master.as_fd())?, None, master.try_clone().ok())
                }
            };
        let out_fd = out_own.as_raw_fd();
        let err_fd = err_own.as_ref().map(|f| f.as_raw_fd());
        let output_end = |n: RawFd| -> Option<BorrowedFd<'_>> {
            if n == out_fd {
                Some(out_own.as_fd())
            } else {
                err_own
                    .as_ref()
                    .filter(|e| e.as_raw_fd() == n)
                    .map(|e| e.as_fd())
            }
        };
        let is_pty = matches!(self.streams, Streams::Pty { .. });
        // While the agent starts: what the watchdog and the end will read,
        // and (for a caller about to exit) the cgroup's remover.
        if let Some(cg) = &mut self.cgroup {
            cg.open_counters();
            if settings.exit_after {
                cg.prepare_detached_removal(&self.net_refill);
            }
        }
        for f in [Some(&out_own), err_own.as_ref()].into_iter().flatten() {
            let _ = fd::set_nonblocking(f.as_fd());
        }
        if let Some(f) = &in_fd {
            let _ = fd::set_nonblocking(f.as_fd());
        }

        let mut terminal_bytes = 0u64;
        let mut output_complete = true;
        let mut ended_by: Option<Limit> = None;
        let mut pending: Vec<u8> = Vec::new();
        let mut input_open = io.input().is_some();
        let mut outputs_open = [true, err_fd.is_some()];
        let mut inside: Option<Inside> = None;
        let mut sync_open = true;
        let mut pids_peak_sampled = 0u64;
        let mut last_size = None;
        let mut buf = vec![0u8; 64 * 1024];
        let mut commands: Vec<Command> = Vec::new();
        let mut stop_deadline: Option<Instant> = None;
        let mut stopped = false;
        let mut hard_kill_at: Option<Instant> = None;
        let mut waits: Vec<RawFd> = Vec::new();
        let mut thrash = ThrashWatch::new(limits.memory_bytes);
        // The first refault sample a quarter of a second in (a short
        // session never pays for reading `memory.stat`).
        let mut next_thrash_check = Instant::now() + Duration::from_millis(250);

        while sync_open {
            if let (true, Some(size)) = (is_pty, io.window_size()) {
                if last_size != Some(size) {
                    last_size = Some(size);
                    let _ = pty::set_size(out_own.as_fd(), size.0, size.1);
                }
            }
            let mut entries = vec![PollEntry {
                fd: self.sync.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            // While the caller's side is full, the agent's output waits in
            // its pipe; the loop still wakes for room and for the limits.
            let reading = io.output_backlog() < crate::sink::QUEUE_MAX;
            waits.clear();
            io.output_waits(&mut waits);
            for w in &waits {
                entries.push(PollEntry {
                    fd: *w,
                    events: libc::POLLOUT,
                    revents: 0,
                });
            }
            if outputs_open[0] && reading {
                entries.push(PollEntry {
                    fd: out_fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            if let (true, true, Some(e)) = (outputs_open[1], reading, err_fd) {
                entries.push(PollEntry {
                    fd: e,
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            let input_raw = io.input().map(|f| f.as_raw_fd());
            if let (true, Some(i), true) = (input_open, input_raw, pending.len() < PENDING_MAX) {
                entries.push(PollEntry {
                    fd: i,
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            if let (false, Some(f)) = (pending.is_empty(), &in_fd) {
                entries.push(PollEntry {
                    fd: f.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                });
            }
            let timeout = settings.tick.as_millis().min(1000) as i32;
            fd::poll(&mut entries, timeout).map_err(|e| io_err("poll", e))?;
            io.output_ready();

            for e in &entries {
                if e.revents == 0 || e.events == libc::POLLOUT && waits.contains(&e.fd) {
                    continue;
                }
                if e.fd == self.sync.as_raw_fd() {
                    if let Ok(Some(x)) = read_exit(&self.sync) {
                        inside = Some(x);
                    }
                    sync_open = false;
                } else if e.fd == out_fd || Some(e.fd) == err_fd {
                    let stream = if e.fd == out_fd {
                        Stream::Stdout
                    } else {
                        Stream::Stderr
                    };
                    let idx = usize::from(stream == Stream::Stderr);
                    match output_end(e.fd).map_or(Ok(0), |f| drain_once(f, &mut buf)) {
                        Ok(0) => outputs_open[idx] = false,
                        Ok(n) => {
                            let room = limits.terminal_output_bytes.saturating_sub(terminal_bytes);
                            let take = (n as u64).min(room) as usize;
                            output_complete &= take == n;
                            terminal_bytes += n as u64;
                            io.output(stream, &buf[..take]);
                            if terminal_bytes > limits.terminal_output_bytes && ended_by.is_none() {
                                ended_by = Some(Limit::TerminalOutput);
                                self.end(&mut hard_kill_at);
                            }
                        }
                        Err(Errno(libc::EAGAIN)) => {}
                        Err(_) => outputs_open[idx] = false,
                    }
                } else if Some(e.fd) == input_raw {
                    let room = PENDING_MAX - pending.len();
                    let read = io.input().map_or(Ok(0), |i| fd::read(i, &mut buf[..room]));
                    match read {
                        Ok(0) | Err(_) => {
                            input_open = false;
                            if io.input_end() == InputEnd::CloseAgentInput
                                && !is_pty
                                && pending.is_empty()
                            {
                                in_fd = None;
                            }
                        }
                        Ok(n) => io.decode_input(&buf[..n], &mut commands),
                    }
                    for c in commands.drain(..) {
                        match c {
                            Command::Input(bytes) => {
                                let room = PENDING_MAX.saturating_sub(pending.len());
                                pending.extend_from_slice(&bytes[..bytes.len().min(room)]);
                            }
                            Command::Resize(rows, cols) => {
                                if is_pty {
                                    let _ = pty::set_size(out_own.as_fd(), rows, cols);
                                }
                            }
                            Command::Signal(sig) => {
                                let _ = process::kill(self.init_pid, sig);
                            }
                            Command::Stop { grace_ms } => {
                                if !stopped {
                                    stopped = true;
                                    let _ = process::kill(self.init_pid, libc::SIGTERM);
                                    stop_deadline =
                                        Some(Instant::now() + Duration::from_millis(grace_ms));
                                }
                            }
                        }
                    }
                } else if let Some(f) = &in_fd {
                    if e.fd == f.as_raw_fd() {
                        // SAFETY-free write of what is pending; partial writes keep the rest.
                        match fd::write_once(f.as_fd(), &pending) {
                            Ok(n) => {
                                pending.drain(..n);
                            }
                            Err(Errno(libc::EAGAIN)) => {}
                            Err(_) => pending.clear(),
                        }
                        if pending.is_empty() && !input_open && !is_pty {
                            in_fd = None;
                        }
                    }
                }
            }

            // Watchdogs.
            if hard_kill_at.is_some_and(|d| Instant::now() >= d) {
                // The init did not report within the grace period.
                hard_kill_at = Some(Instant::now() + Duration::from_secs(3600));
                self.kill_sandbox();
            }
            if stop_deadline.is_some_and(|d| Instant::now() >= d) {
                stop_deadline = None;
                self.end(&mut hard_kill_at);
            }
            if ended_by.is_none() && self.started.elapsed() >= wall {
                ended_by = Some(Limit::WallTime);
                self.end(&mut hard_kill_at);
            }
            if let Some(cg) = &self.cgroup {
                if let Some(p) = cg.pids_current() {
                    pids_peak_sampled = pids_peak_sampled.max(p);
                }
                if ended_by.is_none() && next_thrash_check <= Instant::now() {
                    next_thrash_check = Instant::now() + Duration::from_millis(250);
                    if let Some(r) = cg.memory_refaults() {
                        if thrash.observe(Instant::now(), r) {
                            ended_by = Some(Limit::Memory);
                            self.end(&mut hard_kill_at);
                        }
                    }
                }
                if ended_by.is_none()
                    && cg.cpu_ns().unwrap_or(0) > limits.cpu_time_ms.saturating_mul(1_000_000)
                {
                    ended_by = Some(Limit::CpuTime);
                    self.end(&mut hard_kill_at);
                }
            }
        }

        crate::sys::trace::mark("exit received");
        // Drain what is left without blocking (the terminal never reports
        // EOF while we hold its slave).
        for (idx, f) in [Some(out_fd), err_fd].into_iter().enumerate() {
            let Some(f) = f else { continue };
            if !outputs_open[idx] {
                continue;
            }
            let stream = if idx == 0 {
                Stream::Stdout
            } else {
                Stream::Stderr
            };
            let deadline = Instant::now() + Duration::from_millis(200);
            let mut drained = false;
            while Instant::now() < deadline {
                match output_end(f).map_or(Ok(0), |f| drain_once(f, &mut buf)) {
                    Ok(0) => {
                        drained = true;
                        break;
                    }
                    Ok(n) => {
                        let room = limits.terminal_output_bytes.saturating_sub(terminal_bytes);
                        let take = (n as u64).min(room) as usize;
                        output_complete &= take == n;
                        terminal_bytes += n as u64;
                        io.output(stream, &buf[..take]);
                        if terminal_bytes > limits.terminal_output_bytes && ended_by.is_none() {
                            ended_by = Some(Limit::TerminalOutput);
                        }
                    }
                    // Nothing more to read now (the terminal never says
                    // EOF while its slave is held), or the end hung up.
                    Err(_) => {
                        drained = true;
                        break;
                    }
                }
            }
            // Out of time with output still coming: what was left unread
            // is lost, and the outcome says so.
            output_complete &= drained;
        }

        crate::sys::trace::mark("drained");
        // With the init outside the cgroup, the cgroup's counters are final
        // now (every agent process is gone: the init killed and reaped them
        // before reporting); the init is reaped with the remains.
        let reap_later = self.init_outside_cgroup && self.cgroup.is_some() && inside.is_some();
        let rusage = if reap_later {
            process::Usage::default()
        } else {
            process::wait(self.init_pid)
                .map_err(|e| io_err("wait for the sandbox", e))?
                .1
        };
        crate::sys::trace::mark("init reaped");
        let elapsed = self.started.elapsed();
        let stats = self.cgroup.as_ref().map(|c| c.stats());
        crate::sys::trace::mark("cgroup stats read");
        let inside = inside.unwrap_or(Inside {
            exit: ExitStatus::Signaled {
                signal: libc::SIGKILL,
            },
            disk_peak: 0,
            pids_peak: 0,
        });

        let cpu_ms = match &stats {
            Some(s) => s.cpu_ns / 1_000_000,
            None => rusage.cpu_us / 1000,
        };
        let mut reached: Vec<Limit> = Vec::new();
        let killed = matches!(
            inside.exit,
            ExitStatus::Signaled {
                signal: libc::SIGKILL
            }
        ) || matches!(inside.exit, ExitStatus::Exited { code: 137 });
        if let Some(s) = &stats {
            if s.oom_kills > 0 || s.memory_failcnt > 0 {
                reached.push(Limit::Memory);
                if ended_by.is_none() && killed && s.oom_kills > 0 {
                    ended_by = Some(Limit::Memory);
                }
            }
            if s.pids_max_events > 0 {
                reached.push(Limit::Pids);
            }
        }
        if ended_by.is_none()
            && (matches!(
                inside.exit,
                ExitStatus::Signaled {
                    signal: libc::SIGXCPU
                }
            ) || (killed && cpu_ms >= limits.cpu_time_ms))
        {
            ended_by = Some(Limit::CpuTime);
        }
        if inside.disk_peak.saturating_add(64 * 1024) >= limits.disk_bytes {
            reached.push(Limit::Disk);
        }
        if let Some(l) = ended_by {
            if !reached.contains(&l) {
                reached.push(l);
            }
        }
        let pids_peak = stats
            .as_ref()
            .and_then(|s| s.pids_peak)
            .unwrap_or(0)
            .max(pids_peak_sampled)
            .max(inside.pids_peak.saturating_sub(1));
        let outcome = Outcome {
            exit: inside.exit,
            ended_by,
            limits_reached: Limit::ALL
                .into_iter()
                .filter(|l| reached.contains(l))
                .collect(),
            usage: Usage {
                cpu_time_ms: cpu_ms,
                peak_memory_bytes: stats
                    .as_ref()
                    .map(|s| s.memory_peak)
                    .unwrap_or(rusage.max_rss_bytes),
                pids_peak,
                wall_time_ms: elapsed.as_millis() as u64,
                disk_bytes: inside.disk_peak,
                terminal_bytes,
            },
            enforcement: self.mechanisms,
            stopped,
            output_complete,
        };
        let remains = Remains {
            cgroup: self.cgroup.take(),
            init: reap_later.then_some(self.init_pid),
        };
        Ok((outcome, remains))
    }

    /// Sends a signal to the agent (through the init, which forwards it).
    pub fn signal(&self, sig: i32) -> Result<(), SandboxError> {
        process::kill(self.init_pid, sig).map_err(|e| io_err("signal", e))
    }

    /// Kills the sandbox and reaps its init (used when a launch is abandoned).
    pub(crate) fn kill_now(&self) {
        self.kill_sandbox();
        let _ = process::wait(self.init_pid);
    }

    /// Ends the session because a limit or a stop said so: the init is
    /// asked to kill every process of the sandbox and then reports, as on
    /// any other end, the exit and the usage it measured (the scratch
    /// file system's use is read before the mounts go away); the agent's
    /// cgroup is killed at once when the init is not in it. If no report
    /// has come within [`HARD_KILL_GRACE`], the sandbox is killed outright.
    fn end(&self, hard_kill_at: &mut Option<Instant>) {
        let _ = process::kill(self.init_pid, crate::launch::KILL_REQUEST);
        if self.init_outside_cgroup {
            if let Some(cg) = &self.cgroup {
                cg.kill_all();
            }
        }
        hard_kill_at.get_or_insert(Instant::now() + HARD_KILL_GRACE);
    }

    fn kill_sandbox(&self) {
        let _ = process::kill(self.init_pid, libc::SIGKILL);
        if let Some(cg) = &self.cgroup {
            cg.kill_all();
        }
    }
}

fn io_err(what: &str, e: Errno) -> SandboxError {
    SandboxError::Io {
        detail: format!("{what}: {e}"),
    }
}

fn drain_once(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Result<usize, Errno> {
    match fd::read(fd, buf) {
        // A terminal whose slave side is gone reads as EIO: that is EOF.
        Err(Errno(libc::EIO)) => Ok(0),
        other => other,
    }
}
