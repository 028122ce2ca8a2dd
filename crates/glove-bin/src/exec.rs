//! `glove exec`: contain one command with the built-in default profile.
//!
//! Exit status: the command's own status; 128 + N when a signal N killed
//! it; a fixed status when a limit ended it (below); 125 when Glove could
//! not launch it (the printed code says why).

use crate::report::{error_json, error_line, print_json};
use clap::Args;
use glove_control::assembly::local::{self, LocalDoor};
use glove_control::assembly::mcp::McpInput;
use glove_control::assembly::{self, Fault, Inputs};
use glove_sandbox::outcome::{ExitStatus, Limit, Outcome};
use glove_sandbox::profile::{exec_spec, ExecRequest, DEFAULT_LIMITS};
use glove_sandbox::sink::Sink;
use glove_sandbox::spec::{Bind, LaunchSpec};
use glove_sandbox::supervise::{Settings, Stream, StreamIo};
use glove_sandbox::{tty, SandboxError};
use glove_types::ids::SessionId;
use glove_types::policy::ResourceLimits;
use glove_types::Rejection;
use std::os::fd::{AsFd, BorrowedFd};

/// Exit status when Glove could not launch the command.
pub const EXIT_LAUNCH_FAILED: i32 = 125;

/// Exit status when `limit` ended the run.
pub const fn limit_exit_status(limit: Limit) -> i32 {
    match limit {
        Limit::CpuTime => 201,
        Limit::Memory => 202,
        Limit::Pids => 203,
        Limit::WallTime => 204,
        Limit::Disk => 205,
        Limit::TerminalOutput => 206,
    }
}

/// Arguments of `glove exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// CPU time limit in milliseconds [default: 60000].
    #[arg(long, value_name = "MS")]
    pub cpu_ms: Option<u64>,
    /// Memory limit in bytes; K, M, G suffixes are binary [default: 1G].
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    pub memory: Option<u64>,
    /// Maximum processes and threads [default: 256].
    #[arg(long, value_name = "N")]
    pub pids: Option<u64>,
    /// Wall-clock limit in milliseconds [default: 600000].
    #[arg(long, value_name = "MS")]
    pub wall_ms: Option<u64>,
    /// Writable disk (/tmp, /workspace, /home/agent together) [default: 1G].
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    pub disk: Option<u64>,
    /// Terminal output limit in bytes [default: 64M].
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    pub output: Option<u64>,
    /// CPU rate limit in thousandths of a CPU (cgroup v2 `cpu.max`; 500 is
    /// half a CPU) [default: none].
    #[arg(long, value_name = "MILLICPUS")]
    pub cpu_rate: Option<u64>,
    /// Expose a host path read-only, at the same path or at DST.
    #[arg(long = "ro-bind", value_name = "SRC[:DST]")]
    pub ro_bind: Vec<String>,
    /// Copy a host directory into /workspace first (links are not followed).
    #[arg(long, value_name = "DIR", conflicts_with = "workspace")]
    pub rw_copy: Option<String>,
    /// Stage a host directory as /workspace. Retained by default: the
    /// command works on an ext4 image filled from DIR (links are not
    /// followed), DIR itself is never written, and the image is kept for
    /// `glove diff` and `glove apply`; its size is --disk.
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<std::path::PathBuf>,
    /// `retained` (kept for review and apply) or `ephemeral` (a throw-away
    /// copy in memory, discarded at the end) [default: retained].
    #[arg(long, value_name = "MODE", requires = "workspace")]
    pub workspace_mode: Option<crate::workspace::WorkspaceMode>,
    /// Set an environment variable (nothing is inherited).
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Give the command a terminal instead of pipes.
    #[arg(long)]
    pub pty: bool,
    /// Refuse to run unless cgroups enforce cpu, memory and pids.
    #[arg(long)]
    pub strict_limits: bool,
    /// After the command's output, print the outcome record as one JSON line
    /// (control sequences in the output are always shown, not obeyed).
    #[arg(long)]
    pub json: bool,
    /// Pass the command's terminal control sequences through unchanged (by
    /// default they are shown, not obeyed, when output goes to a terminal;
    /// --pty passes them).
    #[arg(long, conflicts_with = "json")]
    pub raw_output: bool,
    /// Give the command audited egress under this egress policy file
    /// (docs/egress.md): TCP through the session's proxy to the endpoints
    /// it lists, nothing else [default: offline].
    #[arg(long, value_name = "POLICY_FILE")]
    pub egress: Option<std::path::PathBuf>,
    /// Where the egress journal is written (a new file in an existing
    /// directory of mode 0700) [default: a new file in
    /// $XDG_STATE_HOME/glove/egress].
    #[arg(long, value_name = "FILE", requires = "egress")]
    pub egress_journal: Option<std::path::PathBuf>,
    /// Also trust this CA (a PEM file, mode 0600, at most 1 MiB) for the
    /// upstreams the proxy reaches over TLS, besides the system bundle;
    /// repeatable, at most 16 (with --egress, or `glove run --agent`).
    #[arg(long, value_name = "FILE")]
    pub egress_ca: Vec<std::path::PathBuf>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Parses `123`, `64K`, `16M`, `1G` (binary multiples).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (num, mul) = match s.char_indices().last() {
        Some((i, 'K' | 'k')) => (&s[..i], 1u64 << 10),
        Some((i, 'M' | 'm')) => (&s[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{s:?} is not a positive size (digits with an optional K, M or G)"))
}

struct Stdio {
    stdin: std::io::Stdin,
    /// Whether the last byte written to stdout ended a line.
    at_line_start: bool,
    forward_input: bool,
    pty: bool,
    out: Sink,
    err: Sink,
    err_to_out: bool,
}

/// Whether both descriptors may reach one reader: the same file (a pipe
/// given as `2>&1`), or both terminals (they may be one terminal under two
/// devices, such as a pty and `/dev/tty`).
fn same_sink(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> bool {
    if tty::is_tty(a) && tty::is_tty(b) {
        return true;
    }
    match (rustix::fs::fstat(a), rustix::fs::fstat(b)) {
        (Ok(x), Ok(y)) => x.st_dev == y.st_dev && x.st_ino == y.st_ino,
        _ => false,
    }
}

impl StreamIo for Stdio {
    fn input(&self) -> Option<BorrowedFd<'_>> {
        self.forward_input.then(|| self.stdin.as_fd())
    }

    fn output(&mut self, stream: Stream, bytes: &[u8]) {
        match stream {
            Stream::Stdout => {
                if let Some(last) = bytes.last() {
                    self.at_line_start = *last == b'\n';
                }
                self.out.push(bytes);
            }
            // One reader behind both streams (a terminal, a pipe): one
            // queue and one neutraliser, so that the two streams' writes
            // (partial ones included) can never interleave into a control
            // sequence.
            Stream::Stderr if self.err_to_out => self.out.push(bytes),
            Stream::Stderr => self.err.push(bytes),
        }
    }

    fn output_backlog(&self) -> usize {
        self.out.backlog().max(self.err.backlog())
    }

    fn output_waits(&self, fds: &mut Vec<std::os::fd::RawFd>) {
        fds.extend(self.out.wants_poll());
        fds.extend(self.err.wants_poll());
    }

    fn output_ready(&mut self) {
        self.out.flush();
        self.err.flush();
    }

    fn window_size(&self) -> Option<(u16, u16)> {
        if self.pty {
            tty::size(std::io::stdout().as_fd()).or_else(|| tty::size(self.stdin.as_fd()))
        } else {
            None
        }
    }
}

fn binds(specs: &[String]) -> Result<Vec<Bind>, SandboxError> {
    specs
        .iter()
        .map(|s| {
            let (src, dst) = s.split_once(':').unwrap_or((s, s));
            let canon = std::fs::canonicalize(src).map_err(|e| SandboxError::Spec {
                detail: format!("--ro-bind {src}: {e}"),
            })?;
            Ok(Bind {
                source: canon.display().to_string(),
                target: dst.to_owned(),
            })
        })
        .collect()
}

fn fail(e: &SandboxError, json: bool) -> i32 {
    fail_with(&Rejection::new(e.code(), e.to_string()), json)
}

fn fail_with(r: &Rejection, json: bool) -> i32 {
    let r = r.clone();
    if json {
        print_json(&error_json(&r));
    } else {
        eprintln!("{}", error_line(&r));
    }
    EXIT_LAUNCH_FAILED
}

/// A host directory named by the environment variable `var`: an absolute
/// path, `off` (none), or unset or empty for `default`; anything else is
/// refused with `sandbox_spec_invalid`.
fn dir_from_env(
    var: &str,
    default: Option<std::path::PathBuf>,
) -> Result<Option<std::path::PathBuf>, SandboxError> {
    match std::env::var_os(var) {
        None => Ok(default),
        Some(v) if v.is_empty() => Ok(default),
        Some(v) if v == "off" => Ok(None),
        Some(v) if std::path::Path::new(&v).is_absolute() => Ok(Some(v.into())),
        Some(v) => Err(SandboxError::Spec {
            detail: format!(
                "{var}={} is neither an absolute directory nor \"off\"",
                v.to_string_lossy()
            ),
        }),
    }
}

/// Where `/etc` snapshots are kept: `GLOVE_ETC_SNAPSHOTS` (or `off` to copy
/// `/etc` into every sandbox), by default `/run/glove/etc` for root and
/// `$XDG_RUNTIME_DIR/glove/etc` otherwise.
fn etc_snapshots() -> Result<Option<std::path::PathBuf>, SandboxError> {
    dir_from_env(
        "GLOVE_ETC_SNAPSHOTS",
        glove_sandbox::etc_snapshot::default_dir(),
    )
}

/// Where network namespaces are made ahead for root launches:
/// `GLOVE_NET_POOL` (or `off` to make the namespace during every launch),
/// by default `/run/glove/netns` for root.
fn network_pool() -> Result<Option<std::path::PathBuf>, SandboxError> {
    dir_from_env("GLOVE_NET_POOL", glove_sandbox::net_pool::default_dir())
}

/// Runs `glove exec` and returns the exit status.
pub fn run(a: ExecArgs) -> i32 {
    match local::session_id("exec") {
        Ok(id) => run_with(a, id, None, None),
        Err(r) => fail_with(&r, a.json),
    }
}

/// Runs `glove run` (`glove exec` with the MCP mediator) and returns the
/// exit status.
pub fn run_mcp(a: crate::run::RunArgs) -> i32 {
    let json = a.exec.json;
    let input =
        local::session_id("run").and_then(|id| crate::run::mcp_input(&a, &id).map(|m| (id, m)));
    match input {
        Ok((id, m)) => run_with(a.exec, id, Some(m), None),
        Err(r) => fail_with(&r, json),
    }
}

/// Runs `glove run --agent` (`crate::agent`): the flags the preset filled
/// in, its egress part and private home, and its end.
pub(crate) fn run_preset(
    a: ExecArgs,
    id: SessionId,
    mcp: Option<McpInput>,
    preset: crate::agent::Preset,
) -> i32 {
    run_with(a, id, mcp, Some(preset))
}

/// The six limits from the flags and the defaults.
fn limits_of(a: &ExecArgs) -> ResourceLimits {
    ResourceLimits {
        cpu_time_ms: a.cpu_ms.unwrap_or(DEFAULT_LIMITS.cpu_time_ms),
        memory_bytes: a.memory.unwrap_or(DEFAULT_LIMITS.memory_bytes),
        pids: a.pids.unwrap_or(DEFAULT_LIMITS.pids),
        wall_time_ms: a.wall_ms.unwrap_or(DEFAULT_LIMITS.wall_time_ms),
        disk_bytes: a.disk.unwrap_or(DEFAULT_LIMITS.disk_bytes),
        terminal_output_bytes: a.output.unwrap_or(DEFAULT_LIMITS.terminal_output_bytes),
    }
}

/// The session's spec from the flags, before its parts are attached.
fn spec_of(a: &ExecArgs, stdin: &std::io::Stdin) -> Result<LaunchSpec, SandboxError> {
    let limits = limits_of(a);
    let size = if a.pty {
        Some(
            tty::size(std::io::stdout().as_fd())
                .or_else(|| tty::size(stdin.as_fd()))
                .unwrap_or((24, 80)),
        )
    } else {
        None
    };
    exec_spec(ExecRequest {
        command: a.command.clone(),
        env: a.env.clone(),
        ro_binds: binds(&a.ro_bind)?,
        rw_copy: crate::workspace::ephemeral_copy(a),
        limits,
        pty: size,
        strict_limits: a.strict_limits,
        term: std::env::var("TERM").ok(),
        etc_snapshots: etc_snapshots()?,
        network_pool: network_pool()?,
        cpu_rate_millicpus: a.cpu_rate,
    })
}

fn run_with(
    a: ExecArgs,
    session_id: SessionId,
    mcp: Option<McpInput>,
    mut preset: Option<crate::agent::Preset>,
) -> i32 {
    glove_sandbox::launch::trace_mark("exec start");
    let stdin = std::io::stdin();
    let stdin_tty = tty::is_tty(stdin.as_fd());
    let mut spec = match spec_of(&a, &stdin) {
        Ok(s) => s,
        Err(e) => return fail(&e, a.json),
    };
    for d in preset.iter().flat_map(|p| p.home_dirs.iter()) {
        assembly::SpecParts::seed_dir(&mut spec, d.clone());
    }
    let retained = match crate::workspace::retained_input(&a, &session_id) {
        Ok(r) => r,
        Err(r) => return fail_with(&r, a.json),
    };
    let egress = match (&a.egress, preset.as_mut()) {
        (_, Some(p)) => p.egress.take(),
        (Some(file), None) => {
            match crate::egress::input(file, a.egress_journal.as_deref(), &a.egress_ca, &session_id)
            {
                Ok(e) => Some(e),
                Err(r) => return fail_with(&r, a.json),
            }
        }
        (None, None) if !a.egress_ca.is_empty() => return fail_with(
            &glove_types::Rejection::new(
                glove_types::codes::egress::EGRESS_TRUST_ROOTS_INVALID,
                "--egress-ca is for the egress proxy: give --egress FILE (or glove run --agent)",
            ),
            a.json,
        ),
        (None, None) => None,
    };
    glove_sandbox::launch::trace_mark("spec built");
    // The one assembly: the parts prepared on the spec, the sandbox built
    // (held while the MCP mediator starts: the command never runs when its
    // tools cannot), the parts started, the command released.
    let inputs = Inputs {
        session_id,
        egress,
        mcp,
        leases: Vec::new(),
        retained: retained.into_iter().collect(),
    };
    let assembled = assembly::assemble(&mut LocalDoor, inputs, spec);
    // The proxy has read a key of glove's own (or failed): it goes now.
    drop(preset.as_mut().and_then(|p| p.temp_key.take()));
    let (running, parts) = match assembled {
        Ok(v) => v,
        Err(f) => {
            return match &f.fault {
                Fault::Attachment(e) => fail_with(&e.local(), a.json),
                Fault::Door(e) => fail(e, a.json),
            }
        }
    };
    // From here the command runs: a TERM, INT or HUP for glove goes to it
    // (the init forwards it), and glove ends as it ends, with its record,
    // its summaries and its clean-up.
    let forwarding = forward_signals(running.init_pid());
    let raw = if a.pty && stdin_tty {
        tty::make_raw(stdin.as_fd())
    } else {
        None
    };
    // Control sequences are shown, not obeyed, where a person would see
    // them (a terminal, unless the command was given one or raw output was
    // asked for) and always next to the JSON record.
    let neutralize = |fd: BorrowedFd<'_>| a.json || (!a.raw_output && !a.pty && tty::is_tty(fd));
    let (stdout, stderr) = (std::io::stdout(), std::io::stderr());
    let mut io = Stdio {
        stdin,
        at_line_start: true,
        forward_input: true,
        pty: a.pty,
        out: Sink::new(stdout.as_fd(), neutralize(stdout.as_fd())),
        err: Sink::new(stderr.as_fd(), neutralize(stderr.as_fd())),
        err_to_out: same_sink(stdout.as_fd(), stderr.as_fd()),
    };
    // The sandbox init has reported the end and is tearing its namespaces
    // down, and the session cgroup (empty, its counters read) is removed by
    // a detached helper: this process waits for neither (it exits at once;
    // the init and the helper are reaped by whoever inherits them).
    let result = running
        .supervise_keeping(
            &mut io,
            Settings {
                exit_after: true,
                ..Settings::default()
            },
        )
        .map(|(outcome, remains)| {
            remains.finish_detached();
            outcome
        });
    // The command has ended (its init may be reaped and its pid free for
    // another process): a signal from now on ends glove itself.
    forwarding.store(false, std::sync::atomic::Ordering::SeqCst);
    // The session is over: what the reader has not taken yet is written
    // now, waiting for it as a pipeline would.
    io.out.finish(None);
    io.err.finish(None);
    if let Some(mode) = &raw {
        tty::restore(io.stdin.as_fd(), mode);
    }
    let reports = parts.finish();
    let egress = reports.egress.as_ref().map(crate::egress::summary_json);
    let mcp = reports.mcp.as_ref().map(crate::run::summary_json);
    let workspace = reports.retained.first().map(crate::workspace::summary_json);
    match result {
        Ok(outcome) => {
            if a.json {
                if !io.at_line_start {
                    println!();
                }
                match serde_json::to_value(&outcome) {
                    Ok(mut v) => {
                        if let (Some(e), Some(m)) = (&egress, v.as_object_mut()) {
                            m.insert("egress".into(), e.clone());
                        }
                        if let (Some(e), Some(m)) = (&mcp, v.as_object_mut()) {
                            m.insert("mcp".into(), e.clone());
                        }
                        if let (Some(w), Some(m)) = (&workspace, v.as_object_mut()) {
                            m.insert("workspace".into(), w.clone());
                        }
                        print_json(&v)
                    }
                    Err(e) => eprintln!("error[sandbox_io_failed]: {e}"),
                }
            } else {
                if let Some(e) = &egress {
                    eprintln!("{}", crate::egress::summary_line(e));
                }
                if let Some(m) = &mcp {
                    eprintln!("{}", crate::run::summary_line(m));
                }
                if let Some(w) = reports.retained.first() {
                    eprintln!("{}", crate::workspace::summary_line(w));
                }
                if let Some(l) = outcome.ended_by {
                    eprintln!(
                        "glove: {} ended the command (exit status {})",
                        crate::words::limit_in_words(l, &limits_of(&a)),
                        limit_exit_status(l)
                    );
                }
            }
            if let (Some(p), false) = (&preset, a.json) {
                crate::agent::report_end(p.id, exit_status(&outcome), workspace.as_ref());
            }
            glove_sandbox::launch::trace_mark("exec end");
            exit_status(&outcome)
        }
        Err(e) => fail(&e, a.json),
    }
}

/// Forwards SIGTERM, SIGINT and SIGHUP sent to this process to the
/// sandbox's init (which passes them to the command), from a thread of its
/// own, while the returned flag is set; once it is cleared (the command
/// ended), such a signal ends this process at once (status 128 + N), as it
/// would without the forwarding, so a glove stuck writing its output can
/// still be stopped.
pub(crate) fn forward_signals(init_pid: i32) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    use rustix::process::{kill_process, Pid, Signal};
    use std::sync::atomic::{AtomicBool, Ordering};
    let forwarding = std::sync::Arc::new(AtomicBool::new(true));
    let Some(pid) = Pid::from_raw(init_pid) else {
        return forwarding;
    };
    let on = forwarding.clone();
    // The handlers are installed here, before this returns; the thread only
    // waits on them.
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
    else {
        return forwarding;
    };
    let streams = {
        use tokio::signal::unix::{signal, SignalKind};
        let _in = rt.enter();
        (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::hangup()),
        )
    };
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = streams else {
        return forwarding;
    };
    let _ = std::thread::Builder::new()
        .name("glove-signals".into())
        .spawn(move || {
            rt.block_on(async move {
                loop {
                    let (sig, n) = tokio::select! {
                        Some(()) = term.recv() => (Signal::TERM, libc_sig::TERM),
                        Some(()) = int.recv() => (Signal::INT, libc_sig::INT),
                        Some(()) = hup.recv() => (Signal::HUP, libc_sig::HUP),
                        else => break,
                    };
                    if !on.load(Ordering::SeqCst) {
                        std::process::exit(128 + n);
                    }
                    let _ = kill_process(pid, sig);
                }
            });
        });
    forwarding
}

/// The signal numbers, for the exit status.
mod libc_sig {
    pub(super) const HUP: i32 = 1;
    pub(super) const INT: i32 = 2;
    pub(super) const TERM: i32 = 15;
}

/// The exit status `glove exec` reports for an outcome.
pub fn exit_status(o: &Outcome) -> i32 {
    match (o.ended_by, o.exit) {
        (Some(l), _) => limit_exit_status(l),
        (None, ExitStatus::Exited { code }) => code,
        (None, ExitStatus::Signaled { signal }) => 128 + signal,
    }
}

#[cfg(test)]
mod sink_tests {
    use super::same_sink;
    use std::os::fd::AsFd;

    #[test]
    fn streams_share_a_queue_only_when_they_reach_one_reader() {
        let (r1, w1) = std::io::pipe().expect("pipe");
        let (_r2, w2) = std::io::pipe().expect("pipe");
        let w1b = w1.try_clone().expect("dup");
        // `2>&1`: the same pipe.
        assert!(same_sink(w1.as_fd(), w1b.as_fd()));
        // Two different pipes.
        assert!(!same_sink(w1.as_fd(), w2.as_fd()));
        drop(r1);
    }
}
