//! Launching: the supervisor side (this process), the sandbox init (PID 1
//! of the new pid namespace) and the agent (its child).
//!
//! ```text
//! supervisor ──clone3(NEWUSER|NEWNS|NEWPID|NEWIPC|NEWUTS|NEWCGROUP)──► init (pid 1)
//!   writes uid/gid maps, sends GO ─────────────────────────────────────► │ net helper, mounts,
//!   joins the cgroup, sends JOINED ─────────────────────────────────────► │ pivot_root, /etc, PTY
//!   ◄── PTY master+slave (SCM_RIGHTS) ─────────────────────────────────── │
//!                                                                          └─clone(VM|VFORK)──► agent (pid 2)
//!   ◄── PREPARED (what was built) ──────────────────────────────────────────── setsid, stdio, caps, rlimits,
//!   RELEASE [+ command] + exec-status pipe (SCM_RIGHTS) ────────────────────► seccomp; then execve
//!   ◄── end of file on the exec-status pipe (execve done), or a byte and the init's ERROR
//!   ◄── EXIT(status, disk peak, pids peak) when the agent ends; init kills the rest and exits
//! ```
//!
//! The agent is set up completely before the release; the release only
//! lets it `execve` (with the spec's command or one given then).
//!
//! The launch must happen in a single-threaded process (checked): the init
//! is a copy of it (`clone3` without `CLONE_VM`). The init's own children,
//! the network helper and the agent, share the init's memory (`CLONE_VM`);
//! see `sys::process` for what each may touch.
//!
//! One file per process role: this file is the supervisor (prepare, wait),
//! with `release` its side of a built sandbox (release or abort); `init`
//! is the sandbox init, `agent` the agent before its `execve`, `mounts`
//! the file system the init builds, and `status` the channel between
//! supervisor and init (tags, release command, prepared facts, errors).

mod agent;
mod egress;
mod fuzz;
mod init;
mod mounts;
mod release;
mod status;

pub use fuzz::{fuzz_proc_stat, fuzz_release_command};
pub(crate) use mounts::refuse_sockets;
pub use release::{Prepared, PreparedFacts};
pub(crate) use status::TAG_ERROR;
pub(crate) use status::TAG_EXIT;
pub(crate) use status::TAG_GO;
pub(crate) use status::TAG_JOINED;
pub(crate) use status::TAG_PREPARED;
pub(crate) use status::TAG_PTY;

use self::init::init_main;
use self::status::{read_error_body, read_facts, send_release, ExecCmd, RELEASE_FALLBACK};
use crate::cgroup::Cgroup;
use crate::error::SandboxError;
use crate::outcome::{Enforcement as Mechanisms, Mechanism};
use crate::seccomp;
use crate::spec::{Enforcement, LaunchSpec, Terminal};
use crate::sys::process::{self, Forked};
use crate::sys::{fd, trace, Errno};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::time::Instant;

/// The uid and gid the agent has inside the sandbox.
pub const INSIDE_ID: u32 = 1000;

/// The host uid and gid the agent runs as when the launcher is root: an
/// unprivileged identity, so nothing owned by the host's root is ever the
/// agent's (see `docs/sandbox.md`, "Identities").
pub const PRIVILEGED_AGENT_HOST_ID: u32 = 65534;

/// The namespaces the init is cloned into. The network namespace is not
/// among them: creating one is the most expensive part of the clone (the
/// kernel initialises every network subsystem for it), so the init's first
/// act is to start a tiny helper that shares its memory and creates the
/// network namespace on the other core while the init builds the file
/// system view; the init joins it before the agent exists (see
/// [`mounts::join_net`]).
const NS_FLAGS: u64 = (libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWCGROUP) as u64;

/// Where the init mounts the scratch file system while it carves the
/// writable directories out of it: over the old root's `/proc`, so that it
/// disappears with the old root in one detach (each detach of a mount costs
/// an RCU grace period; a separate detach of the scratch cost ≈ 0.45 ms).
const SCRATCH: &str = "/oldroot/proc";

/// The agent's standard streams as the supervisor holds them.
#[derive(Debug)]
pub enum Streams {
    /// Pipes: write end of stdin, read ends of stdout and stderr.
    Pipes {
        /// Agent's stdin.
        stdin: Option<OwnedFd>,
        /// Agent's stdout.
        stdout: OwnedFd,
        /// Agent's stderr.
        stderr: OwnedFd,
    },
    /// A pseudo-terminal.
    Pty {
        /// The master side.
        master: OwnedFd,
        /// A slave kept open until the agent exits, so reads of the master
        /// do not fail with EIO while the agent still runs.
        slave: OwnedFd,
    },
}

/// A launched sandbox, released and running.
#[derive(Debug)]
pub struct Running {
    pub(crate) init_pid: libc::pid_t,
    pub(crate) sync: OwnedFd,
    pub(crate) streams: Streams,
    pub(crate) cgroup: Option<Cgroup>,
    pub(crate) started: Instant,
    pub(crate) limits: glove_types::policy::ResourceLimits,
    pub(crate) mechanisms: Mechanisms,
    /// The init was moved out of the (v1) cgroup once the agent ran: the
    /// cgroup holds only the agent's processes, so the outcome is final
    /// (and the cgroup removable) without waiting for the init's exit.
    pub(crate) init_outside_cgroup: bool,
    /// Network namespace pool entries to make once the session is over
    /// ([`crate::net_pool::Claim::refill`]).
    pub(crate) net_refill: crate::net_pool::Refill,
}

impl Running {
    /// The init process's pid (in the supervisor's pid namespace).
    pub fn init_pid(&self) -> i32 {
        self.init_pid
    }
    /// The agent's streams.
    pub fn streams(&self) -> &Streams {
        &self.streams
    }
    /// How each limit is enforced.
    pub fn mechanisms(&self) -> &Mechanisms {
        &self.mechanisms
    }
}

/// Threads in this process: the link count of `/proc/self/task` is two
/// plus the number of threads (one `stat` instead of formatting and parsing
/// `/proc/self/status`); the status file when that count looks wrong. 0
/// when neither can be read.
pub fn thread_count() -> u32 {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata("/proc/self/task").map(|m| m.nlink()) {
        Ok(n) if n >= 3 => (n - 2) as u32,
        _ => std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Threads:").map(|v| v.trim().parse().ok()))
                    .flatten()
            })
            .unwrap_or(0),
    }
}

fn io_err(what: &str, e: Errno) -> SandboxError {
    SandboxError::Io {
        detail: format!("{what}: {e}"),
    }
}

/// Everything the children need, prepared (and allocated) before cloning.
struct ExecPrep {
    cmd: ExecCmd,
    filter: seccompiler::BpfProgram,
    rlimits: Vec<(libc::__rlimit_resource_t, u64)>,
    /// Applied as well when no cgroup enforces memory, pids and CPU.
    fallback_rlimits: Vec<(libc::__rlimit_resource_t, u64)>,
    /// Launched by root: init is inside uid 0 (host root, to read the host
    /// paths it binds and copies), the agent is inside 1000 = host 65534.
    privileged: bool,
    /// The init is born in a network namespace taken from the pool: it
    /// makes none.
    net_pooled: bool,
}

/// Validates the spec and builds the sandbox; the agent does not run until
/// [`Prepared::release`] (or fails with the step that did not work).
pub fn prepare(spec: LaunchSpec) -> Result<Prepared, SandboxError> {
    prepare_inner(spec, false)
}

fn prepare_inner(spec: LaunchSpec, release_early: bool) -> Result<Prepared, SandboxError> {
    trace::init();
    trace::mark("prepare");
    spec.validate()?;
    let single = process::SingleThreaded::check(thread_count())
        .map_err(|threads| SandboxError::Multithreaded { threads })?;
    trace::mark("p:validated");
    let limits = spec.limits;

    // Limits. A delegated cgroup v2 is created before cloning and joined
    // atomically (CLONE_INTO_CGROUP). Otherwise a cgroup v1 is created and
    // the init joined to it *while* the init builds the file system view:
    // joining a v1 cgroup waits for an RCU grace period (milliseconds on an
    // idle machine), which then overlaps with the init's own work. The
    // agent is started only after the supervisor reports the join (JOINED),
    // so it is born inside. Without any cgroup, unless strict, per-process
    // rlimits are applied instead (JOINED says so).
    let name = format!("glove-{}-{}", process::getpid(), nanos());
    let cgroup_v2 = Cgroup::create_v2(&name, limits.memory_bytes, limits.pids).ok();
    let mut cgroup_v2 = cgroup_v2;
    if let (Some(rate), Some(cg)) = (spec.cpu_rate_millicpus, cgroup_v2.as_mut()) {
        cg.set_cpu_rate(&name, rate)?;
    }
    let cpu_secs = limits.cpu_time_ms.div_ceil(1000);
    let fallback_rlimits = vec![
        (libc::RLIMIT_AS, limits.memory_bytes),
        (libc::RLIMIT_NPROC, limits.pids),
        (libc::RLIMIT_CPU, cpu_secs),
    ];
    // Per-user kernel budgets: the sandbox's processes are charged to its
    // own user and, above it, to the launcher's user (host root for a
    // privileged launch). These bound what one sandbox can take of them.
    let rlimits = vec![
        (libc::RLIMIT_CORE, 0),
        (libc::RLIMIT_SIGPENDING, SIGPENDING_MAX),
        (libc::RLIMIT_MSGQUEUE, MSGQUEUE_BYTES_MAX),
        (libc::RLIMIT_MEMLOCK, MEMLOCK_BYTES_MAX),
    ];
    trace::mark("p:v2 tried");
    let privileged = process::effective_ids().0 == 0;

    let mut prepared = ExecPrep {
        cmd: ExecCmd::new(&spec.executable, &spec.arguments, &spec.environment)?,
        filter: seccomp::build_for(if spec.egress.is_some() {
            seccomp::Network::Egress
        } else {
            seccomp::Network::Offline
        })
        .map_err(|e| SandboxError::Seccomp {
            detail: e.to_string(),
        })?,
        rlimits,
        fallback_rlimits,
        privileged,
        net_pooled: false,
    };
    trace::mark("p:filter built");
    // A network namespace made ahead (root only); without one, the init
    // makes its own. The pool is an optimisation: when it cannot be used,
    // the launch goes on without it. (Claimed once the command and the
    // filter are known to be good: a claimed namespace is never reused.)
    let crate::net_pool::Claim {
        namespace: pooled_net,
        used: net_used,
        refill: net_refill,
    } = match spec
        .network_pool
        .as_deref()
        .filter(|_| privileged && spec.egress.is_none())
    {
        Some(dir) => crate::net_pool::claim(dir).unwrap_or_default(),
        None => Default::default(),
    };
    trace::mark("p:net claimed");

    let (sync_parent, sync_child) = fd::socketpair().map_err(|e| io_err("socketpair", e))?;
    let pipes = match spec.terminal {
        Terminal::Pipes => Some((
            fd::pipe().map_err(|e| io_err("pipe", e))?,
            fd::pipe().map_err(|e| io_err("pipe", e))?,
            fd::pipe().map_err(|e| io_err("pipe", e))?,
        )),
        Terminal::Pty { .. } => None,
    };
    let cgroup_dir = match cgroup_v2.as_ref().and_then(|c| c.v2_dir()) {
        Some(d) => Some(std::fs::File::open(d).map_err(|e| SandboxError::Cgroup {
            detail: format!("open {}: {e}", d.display()),
        })?),
        None => None,
    };

    // The init is born in the pooled namespace: this process enters it for
    // the clone and leaves again right after.
    // (Without a way back, the pool is not used.)
    let host_net = pooled_net.as_ref().and_then(|ns| {
        let host = std::fs::File::open("/proc/thread-self/ns/net").ok()?;
        process::setns(ns.as_fd(), libc::CLONE_NEWNET).ok()?;
        Some(host)
    });
    prepared.net_pooled = host_net.is_some();

    trace::mark("p:clone3");
    let forked = process::clone_into_namespaces(
        &single,
        NS_FLAGS,
        cgroup_dir.as_ref().map(|f| f.as_raw_fd()),
    );
    // Back into this process's own network namespace. Failing that, this
    // process ends (fails closed): it must not go on in the sandbox's, and
    // nothing could take it back.
    if !matches!(forked, Ok(Forked::Child)) {
        if let Some(host) = &host_net {
            if process::setns(host.as_fd(), libc::CLONE_NEWNET).is_err() {
                if let Ok(Forked::Parent(pid)) = forked {
                    let _ = process::kill(pid, libc::SIGKILL);
                }
                eprintln!("glove: cannot leave the pooled network namespace; aborting");
                std::process::abort();
            }
        }
    }
    let forked = forked.map_err(|e| SandboxError::Clone {
        detail: e.to_string(),
    })?;
    let pid = match forked {
        Forked::Child => {
            drop(sync_parent);
            let child_pipes = pipes.map(|((in_r, in_w), (out_r, out_w), (err_r, err_w))| {
                drop((in_w, out_r, err_r));
                (in_r, out_w, err_w)
            });
            init_main(&spec, &prepared, sync_child, child_pipes)
        }
        Forked::Parent(pid) => pid,
    };
    trace::mark("cloned");
    drop((host_net, pooled_net));
    drop(sync_child);
    drop(cgroup_dir);
    let streams_pipes = pipes.map(|((in_r, in_w), (out_r, out_w), (err_r, err_w))| {
        drop((in_r, out_w, err_w));
        (in_w, out_r, err_r)
    });

    let abort = |e: SandboxError| {
        let _ = process::kill(pid, libc::SIGKILL);
        let _ = process::wait(pid);
        e
    };

    // Identity maps, cgroup membership, then release the init.
    let (euid, egid) = process::effective_ids();
    let proc_dir = format!("/proc/{pid}");
    let maps = if prepared.privileged {
        let h = PRIVILEGED_AGENT_HOST_ID;
        vec![
            ("uid_map", format!("0 {euid} 1\n{INSIDE_ID} {h} 1\n")),
            ("gid_map", format!("0 {egid} 1\n{INSIDE_ID} {h} 1\n")),
        ]
    } else {
        vec![
            ("setgroups", "deny".to_owned()),
            ("uid_map", format!("{INSIDE_ID} {euid} 1")),
            ("gid_map", format!("{INSIDE_ID} {egid} 1")),
        ]
    };
    for (file, body) in maps {
        if let Err(e) = std::fs::write(format!("{proc_dir}/{file}"), body) {
            return Err(abort(SandboxError::Setup {
                step: format!("write {file}"),
                detail: e.to_string(),
            }));
        }
    }
    let own_net = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self/ns/net")
            .map(|m| m.ino())
            .map_err(|e| {
                abort(io_err(
                    "network namespace",
                    Errno(e.raw_os_error().unwrap_or(libc::EIO)),
                ))
            })?
    };
    let mut go = [TAG_GO; 9];
    go[1..].copy_from_slice(&own_net.to_le_bytes());
    fd::write_all(sync_parent.as_fd(), &go).map_err(|e| abort(io_err("release", e)))?;
    trace::mark("go sent");
    // The init was most likely started on this CPU (the scheduler here
    // places a new task with its parent) and now has all it needs to build
    // the view: leave the CPU to it. What is left here until PREPARED (the
    // cgroup) is off the critical path, so this process rather than the
    // init pays for waking the other, idle CPU (0.1–0.5 ms on this VM).
    process::move_off_current_cpu();
    trace::mark("supervisor moved");

    // While the init builds the view: the v1 cgroup, or the fallback.
    let joined = match cgroup_v2 {
        Some(cg) => Ok((cg, Vec::new())),
        // The agent moves itself in (no migration of another process,
        // which would wait for an RCU grace period): it gets the `tasks`
        // files, opened here, with JOINED.
        None => Cgroup::create_v1(&name, limits.memory_bytes, limits.pids).and_then(|mut cg| {
            if let Some(rate) = spec.cpu_rate_millicpus {
                cg.set_cpu_rate(&name, rate)?;
            }
            let files = cg.self_join_files()?;
            Ok((cg, files))
        }),
    };
    trace::mark("cgroup made");
    let (joined, join_files) = match joined {
        Ok((cg, files)) => (Ok(cg), files),
        Err(e) => (Err(e), Vec::new()),
    };
    let mechanism = |m: Mechanism| Mechanisms {
        cpu_time: if m == Mechanism::Rlimit {
            Mechanism::Rlimit
        } else {
            Mechanism::Watchdog
        },
        memory: m,
        pids: m,
        wall_time: Mechanism::Watchdog,
        disk: Mechanism::TmpfsQuota,
        terminal_output: Mechanism::OutputCounter,
    };
    let (cgroup, mechanisms, fallback) = match joined {
        Ok(cg) => {
            let m = match cg.version() {
                crate::cgroup::Version::V2 => Mechanism::CgroupV2,
                crate::cgroup::Version::V1 => Mechanism::CgroupV1,
            };
            (Some(cg), mechanism(m), false)
        }
        Err(e) => {
            // A CPU rate has no per-process fallback: refused, never dropped.
            if spec.cpu_rate_millicpus.is_some() {
                return Err(abort(SandboxError::LimitUnenforceable {
                    limit: "cpu_rate",
                    detail: e.to_string(),
                }));
            }
            if spec.enforcement == Enforcement::Strict {
                return Err(abort(SandboxError::LimitUnenforceable {
                    limit: "memory",
                    detail: e.to_string(),
                }));
            }
            (None, mechanism(Mechanism::Rlimit), true)
        }
    };
    // The init starts the agent (born in the cgroup, or applying the
    // rlimit fallback) once the view is built. If the caller releases at
    // once, the release waits in the socket until the agent reads it,
    // saving a round trip. If the init has already failed and gone, the
    // write fails; its error report is read below either way.
    let flags = if fallback { RELEASE_FALLBACK } else { 0 };
    let raw: Vec<RawFd> = join_files.iter().map(|f| f.as_raw_fd()).collect();
    let _ = fd::send_fds(sync_parent.as_fd(), TAG_JOINED, &raw)
        .and_then(|_| fd::write_all(sync_parent.as_fd(), &[flags]));
    drop(join_files);
    let early = if release_early {
        send_release(&sync_parent, None).ok()
    } else {
        None
    };
    // The init holds the pooled namespace now: its entry goes, while this
    // process would only wait (the unmount waits for an RCU grace period).
    // (On an earlier failure, it went when the launch returned.)
    if net_used.is_some() {
        drop(net_used);
        trace::mark("pool entry released");
    }

    // Wait for the PTY (if any) and PREPARED or ERROR.
    let mut pty_fds: Option<(OwnedFd, OwnedFd)> = None;
    let facts = loop {
        let mut tag = [0u8; 1];
        if matches!(spec.terminal, Terminal::Pty { .. }) && pty_fds.is_none() {
            let (tag, got) = fd::recv_fds::<2>(sync_parent.as_fd())
                .map_err(|e| abort(io_err("receive terminal", e)))?;
            let mut it = got.into_iter();
            match (tag, it.next(), it.next()) {
                (TAG_PTY, Some(m), Some(s)) => {
                    pty_fds = Some((m, s));
                    continue;
                }
                (TAG_ERROR, _, _) => {
                    return Err(abort(read_error_body(&sync_parent, &spec.executable)))
                }
                _ => {
                    return Err(abort(SandboxError::Io {
                        detail: "the sandbox init ended during setup".into(),
                    }))
                }
            }
        }
        match fd::read(sync_parent.as_fd(), &mut tag) {
            Ok(1) if tag[0] == TAG_PREPARED => match read_facts(&sync_parent) {
                Ok(f) => break f,
                Err(e) => return Err(abort(e)),
            },
            Ok(1) if tag[0] == TAG_ERROR => {
                return Err(abort(read_error_body(&sync_parent, &spec.executable)))
            }
            Ok(_) => {
                return Err(abort(SandboxError::Io {
                    detail: "the sandbox init ended during setup".into(),
                }))
            }
            Err(e) => return Err(abort(io_err("status channel", e))),
        }
    };

    trace::mark("prepared received");
    // With cgroup v1 the init never joins: the agent moved itself in
    // first thing (or the launch failed), so the cgroup holds exactly the
    // agent's processes.
    let init_outside_cgroup =
        matches!(&cgroup, Some(cg) if cg.version() == crate::cgroup::Version::V1);

    let streams = match (streams_pipes, pty_fds) {
        (Some((stdin, stdout, stderr)), _) => Streams::Pipes {
            stdin: Some(stdin),
            stdout,
            stderr,
        },
        (None, Some((master, slave))) => Streams::Pty { master, slave },
        (None, None) => {
            return Err(abort(SandboxError::Io {
                detail: "no terminal received".into(),
            }))
        }
    };
    Ok(Prepared {
        running: Running {
            init_pid: pid,
            sync: sync_parent,
            streams,
            cgroup,
            started: Instant::now(),
            limits,
            mechanisms,
            init_outside_cgroup,
            net_refill,
        },
        facts,
        executable: spec.executable.clone(),
        released: early,
    })
}

/// Writes a launch phase mark when `GLOVE_LAUNCH_TRACE` is set (see
/// `docs/performance.md`); a no-op otherwise.
#[doc(hidden)]
pub fn trace_mark(label: &str) {
    trace::init();
    trace::mark(label);
}

/// Builds the sandbox and runs the agent at once (`prepare` then
/// `release`).
pub fn launch(spec: LaunchSpec) -> Result<Running, SandboxError> {
    prepare_inner(spec, true)?.release()
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// The signal by which the supervisor asks the init to kill every process
/// of the sandbox and report (a real-time signal, `SIGRTMIN + 6` with
/// glibc; only the supervisor may signal the init).
pub(crate) const KILL_REQUEST: i32 = 40;

/// Queued signals one sandbox may hold (`RLIMIT_SIGPENDING`).
pub const SIGPENDING_MAX: u64 = 1024;
/// Bytes of POSIX message queues one sandbox may hold (`RLIMIT_MSGQUEUE`).
pub const MSGQUEUE_BYTES_MAX: u64 = 64 * 1024;
/// Locked memory per process (`RLIMIT_MEMLOCK`).
pub const MEMLOCK_BYTES_MAX: u64 = 8 << 20;
/// Terminals one sandbox's devpts instance may hand out.
pub const PTY_MAX: u32 = 64;
/// The mode of every terminal of the sandbox's devpts instance: the
/// agent's session PTY (given to [`INSIDE_ID`]) and those it opens itself.
/// Owner only: the agent reopens its terminal (`/dev/tty`, `ttyname(0)`),
/// nobody else may write to it (no `write`/`wall` group access).
pub const PTY_MODE: libc::mode_t = 0o600;
/// The sandbox user namespace's own limits (`/proc/sys/user/*`).
///
/// Each sandbox's counts are also charged to the user that created its
/// user namespace (host root for a privileged launch), so these are kept
/// small against the host's own per-user limits (128 inotify instances by
/// default): several concurrent sandboxes together can still reach them.
pub const USER_NS_LIMITS: &[(&str, &str)] = &[
    ("max_inotify_instances", "16"),
    ("max_inotify_watches", "16384"),
    ("max_fanotify_groups", "2"),
    ("max_fanotify_marks", "1024"),
];
