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

use crate::cgroup::Cgroup;
use crate::error::SandboxError;
use crate::outcome::{Enforcement as Mechanisms, Mechanism};
use crate::seccomp;
use crate::spec::{
    AgentCommand, Enforcement, LaunchSpec, Terminal, MAX_HOST_FILES_TOTAL, MAX_HOST_FILE_BYTES,
};
use crate::sys::at;
use crate::sys::process::{self, Exit, Forked};
use crate::sys::{caps, fd, mount, pty, resolve, trace, Errno};
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
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
/// [`join_net`]).
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

pub(crate) const TAG_GO: u8 = b'G';
pub(crate) const TAG_ERROR: u8 = b'E';
pub(crate) const TAG_PTY: u8 = b'P';
pub(crate) const TAG_EXIT: u8 = b'X';
pub(crate) const TAG_PREPARED: u8 = b'B';
pub(crate) const TAG_RELEASE: u8 = b'A';
pub(crate) const TAG_JOINED: u8 = b'J';
/// JOINED flags (second byte): no cgroup, apply the rlimit fallback.
const RELEASE_FALLBACK: u8 = 1;
/// RELEASE flags (second byte): a command follows (`u32` LE length,
/// [`ExecCmd::encode`]).
const RELEASE_COMMAND: u8 = 2;

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

/// The agent's command as `execve` takes it.
struct ExecCmd {
    exe: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
}

/// Largest command payload a release may carry.
const MAX_RELEASE_COMMAND: usize =
    crate::spec::MAX_COMMAND_BYTES + 2 * crate::spec::MAX_ARGS + 4096;

impl ExecCmd {
    fn new(exe: &str, args: &[String], env: &[String]) -> Result<Self, SandboxError> {
        let cs = |s: &str| {
            CString::new(s).map_err(|_| SandboxError::Spec {
                detail: "NUL in string".into(),
            })
        };
        Ok(ExecCmd {
            exe: cs(exe)?,
            argv: std::iter::once(exe)
                .chain(args.iter().map(String::as_str))
                .map(cs)
                .collect::<Result<_, _>>()?,
            envp: env.iter().map(|s| cs(s)).collect::<Result<_, _>>()?,
        })
    }

    /// What a release sends the init: argument and environment counts
    /// (`u32` LE each), then the executable, the arguments and the
    /// environment, each NUL-terminated.
    fn encode(cmd: &AgentCommand) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(cmd.arguments.len() as u32).to_le_bytes());
        out.extend_from_slice(&(cmd.environment.len() as u32).to_le_bytes());
        for s in std::iter::once(&cmd.executable)
            .chain(&cmd.arguments)
            .chain(&cmd.environment)
        {
            out.extend_from_slice(s.as_bytes());
            out.push(0);
        }
        out
    }

    /// The inverse of [`ExecCmd::encode`]; `None` for anything else.
    fn decode(bytes: &[u8]) -> Option<Self> {
        let count = |at: usize| -> Option<usize> {
            let b = bytes.get(at..at + 4)?;
            let n = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
            (n <= crate::spec::MAX_ARGS).then_some(n)
        };
        let (argc, envc) = (count(0)?, count(4)?);
        let mut rest = bytes.get(8..)?;
        let mut strings = Vec::with_capacity(1 + argc + envc);
        for _ in 0..1 + argc + envc {
            let end = rest.iter().position(|b| *b == 0)?;
            strings.push(CString::new(&rest[..end]).ok()?);
            rest = &rest[end + 1..];
        }
        if !rest.is_empty() {
            return None;
        }
        let envp = strings.split_off(1 + argc);
        Some(ExecCmd {
            exe: strings.first()?.clone(),
            argv: strings,
            envp,
        })
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
        filter: seccomp::build().map_err(|e| SandboxError::Seccomp {
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
    } = match spec.network_pool.as_deref().filter(|_| privileged) {
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
        None => Cgroup::create_v1(&name, limits.memory_bytes, limits.pids).and_then(|cg| {
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

/// In the init: waits until the helper (if any: none when the init was
/// born in a namespace from the pool) has created the network namespace
/// and joins it; either way refuses to go on in the supervisor's network
/// namespace, `born_in` (fails closed whatever went wrong).
fn join_net(helper: Option<&mut process::NetUnsharer>, born_in: u64) -> Result<(), Errno> {
    use std::os::unix::fs::MetadataExt;
    if let Some(helper) = helper {
        helper.wait_ready()?;
        process::setns(helper.pidfd(), libc::CLONE_NEWNET)?;
        helper.release();
    }
    let now = std::fs::metadata("/proc/self/ns/net")
        .map(|m| m.ino())
        .map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
    if now == born_in {
        return Err(Errno(libc::EEXIST));
    }
    Ok(())
}

/// What the init resolved while building the sandbox, reported before the
/// agent runs so that the caller can commit to it (the launch binding).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreparedFacts {
    /// Each grant with the identity of the directory that was opened.
    pub grants: Vec<crate::grants::ResolvedGrant>,
    /// Each bundle with its verified digest.
    pub bundles: Vec<crate::grants::ResolvedBundle>,
}

/// A sandbox that is completely built, with the agent not yet started.
#[derive(Debug)]
#[must_use = "a prepared sandbox must be released or aborted"]
pub struct Prepared {
    running: Running,
    facts: PreparedFacts,
    executable: String,
    /// The release was already sent: the read end of the agent's
    /// exec-status pipe.
    released: Option<OwnedFd>,
}

impl Prepared {
    /// What was resolved.
    pub fn facts(&self) -> &PreparedFacts {
        &self.facts
    }

    /// The init's pid.
    pub fn init_pid(&self) -> i32 {
        self.running.init_pid
    }

    /// How each limit is enforced.
    pub fn mechanisms(&self) -> &Mechanisms {
        &self.running.mechanisms
    }

    /// Lets the agent run; returns once it has been `execve`d.
    pub fn release(self) -> Result<Running, SandboxError> {
        self.release_inner(None)
    }

    /// Lets the agent run `command` instead of the spec's executable,
    /// arguments and environment (checked by the same rules); returns once
    /// it has been `execve`d. A sandbox can so be built before it is known
    /// what will run in it, and the launch then costs only this call. A
    /// refused command tears the sandbox down.
    pub fn release_command(self, command: &AgentCommand) -> Result<Running, SandboxError> {
        if let Err(e) = command.validate() {
            self.abort();
            return Err(e);
        }
        if self.released.is_some() {
            self.abort();
            return Err(SandboxError::Spec {
                detail: "this sandbox was released already".into(),
            });
        }
        self.release_inner(Some(command))
    }

    fn release_inner(self, command: Option<&AgentCommand>) -> Result<Running, SandboxError> {
        let Prepared {
            mut running,
            executable,
            released,
            ..
        } = self;
        let executable = command.map_or(executable, |c| c.executable.clone());
        let fail = |r: &Running, e: SandboxError| {
            r.kill_now();
            e
        };
        let exec_status = match released {
            Some(r) => r,
            None => match send_release(&running.sync, command) {
                Ok(r) => r,
                // The init is gone; it may have said why first.
                Err(e) => {
                    let mut tag = [0u8; 1];
                    let why = match fd::read_full(running.sync.as_fd(), &mut tag) {
                        Ok(1) if tag[0] == TAG_ERROR => read_error_body(&running.sync, &executable),
                        _ => io_err("release", e),
                    };
                    return Err(fail(&running, why));
                }
            },
        };
        trace::mark("release sent");
        match exec_outcome(&exec_status) {
            Ok(true) => {}
            Ok(false) => {
                // The agent did not execve; the init says why.
                let mut tag = [0u8; 1];
                let e = match fd::read_full(running.sync.as_fd(), &mut tag) {
                    Ok(1) if tag[0] == TAG_ERROR => read_error_body(&running.sync, &executable),
                    _ => SandboxError::Io {
                        detail: "the sandbox init ended before the agent ran".into(),
                    },
                };
                return Err(fail(&running, e));
            }
            Err(e) => return Err(fail(&running, io_err("exec status", e))),
        }
        running.started = Instant::now();
        trace::mark("agent runs");
        Ok(running)
    }

    /// Tears the sandbox down without running the agent.
    pub fn abort(self) {
        self.running.kill_now();
    }
}

/// Sends RELEASE (with `command`, if any) and hands the agent the write end
/// of a new close-on-exec pipe with it; returns the read end. The agent's
/// `execve` closes the write end, so end-of-file on the read end says the
/// agent runs; a byte says it failed (the init then sends ERROR). This
/// tells the supervisor without waking the init first.
fn send_release(sync: &OwnedFd, command: Option<&AgentCommand>) -> Result<OwnedFd, Errno> {
    let (exec_r, exec_w) = fd::pipe()?;
    fd::send_fds(sync.as_fd(), TAG_RELEASE, &[exec_w.as_raw_fd()])?;
    drop(exec_w);
    let mut msg = vec![0u8];
    if let Some(c) = command {
        let body = ExecCmd::encode(c);
        msg[0] |= RELEASE_COMMAND;
        msg.extend_from_slice(&(body.len() as u32).to_le_bytes());
        msg.extend_from_slice(&body);
    }
    fd::write_all(sync.as_fd(), &msg)?;
    Ok(exec_r)
}

/// Waits until every write end of the exec-status pipe is closed (the
/// agent's by its `execve` or its exit) without waking for the bytes
/// written before that, then reads them: true exactly when the agent
/// reached its `execve` and nothing reported a failure after.
fn exec_outcome(exec_status: &OwnedFd) -> Result<bool, Errno> {
    loop {
        // No events asked for: only the hang-up (or an error) wakes us.
        let mut entry = [fd::PollEntry {
            fd: exec_status.as_raw_fd(),
            events: 0,
            revents: 0,
        }];
        fd::poll(&mut entry, -1)?;
        if entry[0].revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            break;
        }
    }
    let mut got = [0u8; 8];
    let n = fd::read_full(exec_status.as_fd(), &mut got)?;
    Ok(&got[..n] == EXEC_STARTED)
}

/// For the fuzz target: bytes read as `/proc/self/stat` when the init
/// looks for its argument area; never panics.
#[doc(hidden)]
pub fn fuzz_proc_stat(bytes: &[u8]) {
    let _ = process::arg_area(bytes);
}

/// For the fuzz target: decodes a release command as the agent does and,
/// when it decodes, checks that encoding the result gives the same bytes.
/// Never panics on any input (the round trip holding is asserted).
#[doc(hidden)]
pub fn fuzz_release_command(bytes: &[u8]) {
    let Some(c) = ExecCmd::decode(bytes) else {
        return;
    };
    let s = |c: &CString| c.to_string_lossy().into_owned();
    let cmd = AgentCommand {
        executable: s(&c.exe),
        arguments: c.argv.iter().skip(1).map(s).collect(),
        environment: c.envp.iter().map(s).collect(),
    };
    // Valid UTF-8 strings re-encode to exactly the input.
    let utf8 = std::iter::once(&c.exe)
        .chain(&c.argv)
        .chain(&c.envp)
        .all(|x| x.to_str().is_ok());
    if utf8 {
        assert_eq!(ExecCmd::encode(&cmd), bytes);
    }
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

fn read_facts(sync: &OwnedFd) -> Result<PreparedFacts, SandboxError> {
    let mut len = [0u8; 4];
    read_exact(sync, &mut len)?;
    let n = u32::from_le_bytes(len) as usize;
    if n > 1 << 20 {
        return Err(SandboxError::Io {
            detail: "prepared report too large".into(),
        });
    }
    let mut body = vec![0u8; n];
    read_exact(sync, &mut body)?;
    glove_types::canon::decode(&body, 1 << 20, glove_types::canon::Form::Strict).map_err(|e| {
        SandboxError::Io {
            detail: format!("prepared report: {e}"),
        }
    })
}

fn read_exact(sync: &OwnedFd, buf: &mut [u8]) -> Result<(), SandboxError> {
    match fd::read_full(sync.as_fd(), buf) {
        Ok(n) if n == buf.len() => Ok(()),
        Ok(_) => Err(SandboxError::Io {
            detail: "status channel closed".into(),
        }),
        Err(e) => Err(io_err("status channel", e)),
    }
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn read_error_body(sync: &OwnedFd, exe: &str) -> SandboxError {
    let mut head = [0u8; 6];
    let _ = fd::read_full(sync.as_fd(), &mut head);
    let len = usize::from(u16::from_le_bytes([head[0], head[1]]));
    let errno = i32::from_le_bytes([head[2], head[3], head[4], head[5]]);
    let mut step = vec![0u8; len.min(256)];
    let got = fd::read_full(sync.as_fd(), &mut step).unwrap_or(0);
    let step = String::from_utf8_lossy(&step[..got]).into_owned();
    let detail = Errno(errno).to_string();
    if step == "execve" {
        SandboxError::Exec {
            executable: exe.to_owned(),
            detail,
        }
    } else if step.starts_with("grant ") {
        SandboxError::Grant {
            detail: format!("{step} ({detail})"),
        }
    } else if step.starts_with("bundle ") {
        SandboxError::Bundle {
            detail: format!("{step} ({detail})"),
        }
    } else if step == "cgroup join" {
        SandboxError::Cgroup {
            detail: format!("the agent could not join the session cgroup: {detail}"),
        }
    } else if step.starts_with("socket ") {
        SandboxError::SocketExposed {
            detail: format!("{step} ({detail})"),
        }
    } else if step.starts_with("copy") {
        SandboxError::Copy {
            detail: format!("{step}: {detail}"),
        }
    } else {
        SandboxError::Setup { step, detail }
    }
}

/// Sends an error frame and leaves.
fn fail(sync: &OwnedFd, step: &str, e: Errno) -> ! {
    let mut msg = vec![TAG_ERROR];
    msg.extend_from_slice(&(step.len() as u16).to_le_bytes());
    msg.extend_from_slice(&e.0.to_le_bytes());
    msg.extend_from_slice(step.as_bytes());
    let _ = fd::write_all(sync.as_fd(), &msg);
    process::exit_now(1)
}

/// The sandbox's PID 1.
fn init_main(
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
    let facts = match setup_fs(spec, prep.privileged, net.as_mut(), born_in_net) {
        Ok(f) => f,
        Err((step, e)) => fail(&sync, &step, e),
    };
    if let Err(e) = process::sethostname(&spec.hostname) {
        fail(&sync, "sethostname", e);
    }
    trace::mark("view built");
    let _ = process::set_not_dumpable();

    let stdio: [OwnedFd; 3] = match (&spec.terminal, pipes) {
        (Terminal::Pty { rows, cols }, _) => {
            let (master, slave) = match pty::open_pair("/dev/pts/ptmx", "/dev/pts") {
                Ok(p) => p,
                Err(e) => fail(&sync, "open pty", e),
            };
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
    let join_files = match fd::recv_fds::<3>(sync.as_fd()) {
        Ok((TAG_JOINED, files)) => files,
        _ => process::exit_now(1),
    };
    let mut flags = [0u8; 1];
    if fd::read_full(sync.as_fd(), &mut flags) != Ok(1) {
        process::exit_now(1);
    }
    let fallback = flags[0] & RELEASE_FALLBACK != 0;
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
                // No release: the supervisor withdrew the launch.
                _ => process::exit_now(1),
            }
        }
        Ok(_) => fail(&sync, "exec status", Errno(libc::EIO)),
        Err(e) => fail(&sync, "exec status", e),
    }
    drop(err_r);
    trace::mark("agent execed");
    supervise_inside(spec, &sync, agent, disk_at_start)
}

/// The init's loop: reap, forward signals, sample disk and pids, report the
/// agent's end, then kill whatever is left.
fn supervise_inside(
    spec: &LaunchSpec,
    sync: &OwnedFd,
    agent: libc::pid_t,
    disk_at_start: u64,
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

/// Processes visible in the sandbox's `/proc` (its pid namespace).
fn count_processes() -> u64 {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
                })
                .count() as u64
        })
        .unwrap_or(0)
}

/// The agent: streams, descriptors, signals, limits, capabilities, seccomp,
/// `execve`.
/// What the agent restores or applies first, and how it talks to the
/// supervisor until its `execve`.
struct AgentStart<'a> {
    umask: libc::mode_t,
    fallback: bool,
    affinity: Option<&'a process::CpuSet>,
    /// The status channel: the agent sends PREPARED on it and reads the
    /// release (the init is suspended until the agent's `execve`).
    sync: BorrowedFd<'a>,
    /// The PREPARED frame to send.
    prepared: &'a [u8],
    /// Set right before the `execve` (the init reads it once the vfork
    /// wait ends).
    exec_started: &'a std::sync::atomic::AtomicBool,
    /// The session cgroup's v1 `tasks` files: the agent moves itself in
    /// first (closed by its `execve`).
    join: &'a [OwnedFd],
}

/// What the agent writes on the exec-status pipe: right before its
/// `execve`, and after it if the `execve` failed. The supervisor takes
/// exactly [`EXEC_STARTED`] followed by the pipe's close as success.
const EXEC_STARTED: &[u8] = b"X";
const EXEC_FAILED: &[u8] = b"F";

/// Why the agent did not `execve` (first word of its report to the init).
const AGENT_FAILED_EXEC: u32 = 0;
const AGENT_FAILED_COMMAND: u32 = 1;
const AGENT_NOT_RELEASED: u32 = 2;
const AGENT_FAILED_JOIN: u32 = 3;

/// The release the agent waits for: the command to run (`None`: the
/// spec's) and the write end of the supervisor's exec-status pipe (closed
/// by the `execve`). `Err` with a report kind when there is none or it is
/// malformed (a byte on the exec-status pipe tells the supervisor then).
fn read_release(sync: BorrowedFd<'_>) -> Result<(Option<ExecCmd>, OwnedFd), (u32, Errno)> {
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

fn agent_main(
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

/// Builds the sandbox's file system view inside the new mount namespace.
fn setup_fs(
    spec: &LaunchSpec,
    privileged: bool,
    net: Option<&mut process::NetUnsharer>,
    born_in_net: u64,
) -> Result<PreparedFacts, (String, Errno)> {
    let owner = privileged.then_some((INSIDE_ID, INSIDE_ID));
    let mut facts = PreparedFacts::default();
    let step = |s: &str| {
        let s = s.to_owned();
        move |e: Errno| (s.clone(), e)
    };
    let nodev_nosuid = libc::MS_NOSUID | libc::MS_NODEV;
    mount::mount("", "/", "", libc::MS_REC | libc::MS_PRIVATE, "")
        .map_err(step("make / private"))?;
    let root_size = 16u64 << 20;
    let root_size = root_size + spec.bundles.len() as u64 * crate::spec::MAX_BUNDLE_BYTES;
    mount::mount(
        "tmpfs",
        "/tmp",
        "tmpfs",
        nodev_nosuid,
        &format!("size={root_size},nr_inodes=16384,mode=0755"),
    )
    .map_err(step("mount new root"))?;
    mount::mkdir("/tmp/oldroot", 0o700).map_err(step("mkdir oldroot"))?;
    mount::chdir("/tmp").map_err(step("chdir new root"))?;
    mount::pivot_root(".", "oldroot").map_err(step("pivot_root"))?;
    mount::chdir("/").map_err(step("chdir /"))?;

    trace::mark("v:pivoted");
    // The sandbox's own per-user budgets (inotify, fanotify), set in its
    // user namespace through the host's procfs, which is still reachable
    // under /oldroot: the user-namespace sysctls are those of the writer's
    // user namespace, where the init holds CAP_SYS_RESOURCE.
    for (knob, value) in USER_NS_LIMITS {
        let path = format!("/oldroot/proc/sys/user/{knob}");
        mount::write_existing(&path, value.as_bytes()).map_err(step(&format!("limit {knob}")))?;
    }
    // /proc of the new pid namespace: only the processes (no kernel knobs,
    // no host-wide files: `subset=pid`), and only those the reader may
    // trace (`hidepid=invisible`: the init is not visible to the agent).
    mount::mkdir("/proc", 0o555).map_err(step("mkdir /proc"))?;
    mount::mount(
        "proc",
        "/proc",
        "proc",
        nodev_nosuid | libc::MS_NOEXEC,
        "subset=pid,hidepid=invisible",
    )
    .map_err(step("mount /proc"))?;

    trace::mark("v:proc");
    // Read-only binds from descriptors opened without following any link
    // (the path was checked once by the caller; a link put in its way
    // since fails the launch instead of being followed at mount time).
    for b in &spec.read_only_binds {
        let what = |w: &str| format!("bind source {}: {w}", b.source);
        let src = resolve::open_no_links(&format!("/oldroot{}", b.source), libc::O_PATH)
            .map_err(|e| (what("open"), e))?;
        let m = resolve::meta(src.as_fd()).map_err(|e| (what("stat"), e))?;
        if at::on_kernel_fs(src.as_fd()).map_err(|e| (what("statfs"), e))? {
            return Err((
                what("a kernel file system (proc, sys, cgroup)"),
                Errno(libc::EACCES),
            ));
        }
        // The target, too, is reached without following links: it may lie
        // in an earlier bind whose host directory another user controls.
        let target = if m.is_dir() {
            if !crate::profile::is_system_tree(&b.source) {
                refuse_sockets(src.as_fd(), &format!("bind {}", b.source))?;
            }
            at::target_dir(&b.target, 0o755)
        } else if m.is_file() {
            at::target_file(&b.target, 0o444)
        } else {
            return Err((what("not a directory or regular file"), Errno(libc::EPERM)));
        }
        .map_err(step(&format!("mount target {}", b.target)))?;
        at::bind_tree(
            src.as_fd(),
            target.as_fd(),
            mount::MOUNT_ATTR_RDONLY | mount::MOUNT_ATTR_NOSUID | mount::MOUNT_ATTR_NODEV,
        )
        .map_err(step(&format!("bind {}", b.target)))?;
    }
    trace::mark("v:binds");
    // Grants and bundles, opened without following links and bound from
    // the held descriptors.
    crate::grants::apply_grants(&spec.grants, &spec.protected_paths, owner, &mut facts)?;
    let owner_inside = if privileged { 0 } else { INSIDE_ID };
    crate::grants::apply_bundles(&spec.bundles, owner_inside, &mut facts)?;

    trace::mark("v:grants");
    // A minimal /dev with its own devpts: a directory of the root, so it
    // becomes read-only with it (one mount fewer than a tmpfs of its own).
    mount::mkdir("/dev", 0o755).map_err(step("mkdir /dev"))?;
    for d in ["null", "zero", "full", "random", "urandom", "tty"] {
        let t = format!("/dev/{d}");
        mount::touch(&t, 0o666).map_err(step(&format!("create {t}")))?;
        mount::mount(&format!("/oldroot/dev/{d}"), &t, "", libc::MS_BIND, "")
            .map_err(step(&format!("bind {t}")))?;
    }
    mount::mkdir("/dev/pts", 0o755).map_err(step("mkdir /dev/pts"))?;
    mount::mount(
        "devpts",
        "/dev/pts",
        "devpts",
        libc::MS_NOSUID | libc::MS_NOEXEC,
        &format!("newinstance,ptmxmode=0666,mode=0620,max={PTY_MAX}"),
    )
    .map_err(step("mount devpts"))?;
    mount::symlink("pts/ptmx", "/dev/ptmx").map_err(step("link /dev/ptmx"))?;
    for (l, t) in [
        ("/dev/fd", "/proc/self/fd"),
        ("/dev/stdin", "/proc/self/fd/0"),
        ("/dev/stdout", "/proc/self/fd/1"),
        ("/dev/stderr", "/proc/self/fd/2"),
    ] {
        mount::symlink(t, l).map_err(step(&format!("link {l}")))?;
    }
    mount::mkdir("/dev/shm", 0o1777).map_err(step("mkdir /dev/shm"))?;

    trace::mark("v:dev");
    // One quota-sized scratch tmpfs; every writable directory is a slice of it.
    let size = format!(
        "size={},nr_inodes={},mode=0755",
        spec.limits.disk_bytes,
        inodes(spec.limits.disk_bytes)
    );
    mount::mount("tmpfs", SCRATCH, "tmpfs", nodev_nosuid, &size).map_err(step("mount scratch"))?;
    // Held from here on: the slices are made and bound through descriptors.
    let scratch = resolve::open_no_links(SCRATCH, libc::O_PATH | libc::O_DIRECTORY)
        .map_err(step("open scratch"))?;
    let slices = spec
        .writable_dirs
        .iter()
        .map(String::as_str)
        .chain(std::iter::once("/dev/shm"));
    let mut slice_fds: Vec<(&str, OwnedFd)> = Vec::new();
    for (i, w) in slices.enumerate() {
        let name = i.to_string();
        let mode = if w == "/tmp" || w == "/dev/shm" {
            0o1777
        } else {
            0o755
        };
        at::mkdir(scratch.as_fd(), &name, mode).map_err(step("mkdir scratch slice"))?;
        if let Some((u, g)) = owner {
            at::chown(scratch.as_fd(), &name, u, g).map_err(step("chown scratch slice"))?;
        }
        let slice = at::open_beneath(scratch.as_fd(), &name, libc::O_PATH | libc::O_DIRECTORY)
            .map_err(step("open scratch slice"))?;
        let target = at::target_dir(w, 0o755).map_err(step(&format!("mount target {w}")))?;
        // A plain bind (it keeps the scratch's nosuid,nodev) from one held
        // descriptor onto another, through this sandbox's own /proc (no
        // target is ever on procfs, so nothing can be mounted over it).
        mount::mount(
            &resolve::proc_path(slice.as_fd()),
            &resolve::proc_path(target.as_fd()),
            "",
            libc::MS_BIND,
            "",
        )
        .map_err(step(&format!("bind {w}")))?;
        slice_fds.push((w, slice));
    }
    trace::mark("v:scratch");
    for c in &spec.copy_in {
        let what = |w: &str| format!("copy {}: {w}", c.source);
        let src = crate::copy::open_source(&c.source).map_err(|e| (what("open"), e))?;
        let m = resolve::meta(src.as_fd()).map_err(|e| (what("stat"), e))?;
        // The target lies in a writable directory (checked by the spec):
        // reached from that directory's slice, never by its path.
        let (w, slice) = slice_fds
            .iter()
            .filter(|(w, _)| glove_types::paths::is_within(&c.target, w))
            .max_by_key(|(w, _)| w.len())
            .ok_or_else(|| (what("target"), Errno(libc::EINVAL)))?;
        let rel = c.target[w.len()..].trim_start_matches('/');
        let dst = at::dir_creating(slice.as_fd(), rel, 0o755).map_err(|e| (what("mkdir"), e))?;
        let here = at::open_beneath(dst.as_fd(), ".", libc::O_RDONLY | libc::O_DIRECTORY)
            .map_err(|e| (what("open target"), e))?;
        at::chmod(here.as_fd(), (m.mode & 0o777) | 0o700).map_err(|e| (what("chmod"), e))?;
        if let Some((u, g)) = owner {
            at::chown(dst.as_fd(), "", u, g).map_err(|e| (what("chown"), e))?;
        }
        crate::copy::copy_tree(src.as_fd(), dst.as_fd(), owner).map_err(|(w, e)| (what(&w), e))?;
    }
    drop(slice_fds);
    drop(scratch);

    trace::mark("v:copy+devro");

    // The host files to copy are read now; then nothing refers to the old
    // root any more.
    let old_root = resolve::open_no_links("/oldroot", libc::O_PATH | libc::O_DIRECTORY)
        .map_err(step("open old root"))?;
    let mut host_bodies = Vec::with_capacity(spec.host_files.len());
    let mut host_total = 0u64;
    for f in &spec.host_files {
        let what = format!("host file {}", f.source);
        // Resolved and checked as a path first: opening a device for
        // reading (a link may point at one) can have effects of its own.
        let at = resolve::open_in_root(old_root.as_fd(), &f.source, libc::O_PATH)
            .map_err(step(&what))?;
        let m = resolve::meta(at.as_fd()).map_err(step(&what))?;
        if !m.is_file() {
            return Err((what, Errno(libc::EINVAL)));
        }
        host_total = host_total.saturating_add(m.size);
        if m.size > MAX_HOST_FILE_BYTES || host_total > MAX_HOST_FILES_TOTAL {
            return Err((what, Errno(libc::EFBIG)));
        }
        let fd = resolve::reopen(
            at.as_fd(),
            libc::O_RDONLY | libc::O_NOCTTY | libc::O_NONBLOCK,
        )
        .map_err(step(&what))?;
        let body =
            resolve::read_all_sized(fd.as_fd(), m.size as usize, MAX_HOST_FILE_BYTES as usize)
                .map_err(step(&what))?;
        host_bodies.push(body);
    }
    drop(old_root);
    trace::mark("v:host files read");

    // Directories made for links and files so far (most files share /etc),
    // held as descriptors: links and files are made relative to them.
    let mut made: Vec<(String, OwnedFd)> = Vec::new();
    fn parent_of(
        made: &mut Vec<(String, OwnedFd)>,
        p: &str,
    ) -> Result<(usize, String), (String, Errno)> {
        let (dir, name) = at::split(p).map_err(|e| (format!("path {p}"), e))?;
        let i = match made.iter().position(|(m, _)| m == dir) {
            Some(i) => i,
            None => {
                let fd = at::target_dir(dir, 0o755).map_err(|e| (format!("mkdir {p}"), e))?;
                made.push((dir.to_owned(), fd));
                made.len() - 1
            }
        };
        Ok((i, name.to_owned()))
    }
    for (link, target) in &spec.symlinks {
        let (i, name) = parent_of(&mut made, link)?;
        at::symlink(target, made[i].1.as_fd(), &name).map_err(step(&format!("symlink {link}")))?;
    }
    let generated = spec.files.iter().map(|(p, b)| (p.as_str(), b.as_slice()));
    let copied = spec
        .host_files
        .iter()
        .zip(&host_bodies)
        .map(|(f, b)| (f.target.as_str(), b.as_slice()));
    for (path, body) in generated.chain(copied) {
        let (i, name) = parent_of(&mut made, path)?;
        let f = at::create_file(made[i].1.as_fd(), &name, 0o444)
            .map_err(step(&format!("write {path}")))?;
        fd::write_all(f.as_fd(), body).map_err(step(&format!("write {path}")))?;
    }
    trace::mark("v:files");
    // Detaching waits for an RCU grace period; the helper is normally
    // still making the network namespace meanwhile.
    mount::detach("/oldroot").map_err(step("detach old root"))?;
    trace::mark("v:detached");
    mount::rmdir("/oldroot").map_err(step("remove old root"))?;
    mount::mount(
        "",
        "/",
        "",
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | nodev_nosuid,
        "",
    )
    .map_err(step("read-only /"))?;
    join_net(net, born_in_net).map_err(step("network namespace"))?;
    trace::mark("net joined");
    Ok(facts)
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

/// Fails when a socket lies below `dir` (see [`crate::copy::find_socket`]);
/// the step names `what` and the socket (its path below the source).
pub(crate) fn refuse_sockets(dir: BorrowedFd<'_>, what: &str) -> Result<(), (String, Errno)> {
    match crate::copy::find_socket(dir) {
        Ok(None) => Ok(()),
        Ok(Some(found)) => Err((
            format!("socket {found} in {what} (a connect() would reach its listener)"),
            Errno(libc::EACCES),
        )),
        Err((w, e)) => Err((format!("socket check of {what}: {w}"), e)),
    }
}

fn inodes(bytes: u64) -> u64 {
    (bytes / 4096).clamp(1024, 1 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn as_strings(c: &ExecCmd) -> (String, Vec<String>, Vec<String>) {
        let s = |c: &CString| c.to_string_lossy().into_owned();
        (
            s(&c.exe),
            c.argv.iter().map(s).collect(),
            c.envp.iter().map(s).collect(),
        )
    }

    proptest! {
        /// What a release sends is what the init runs: `argv[0]` is the
        /// executable, then the arguments; the environment as given.
        #[test]
        fn release_command_round_trips(
            exe in "/[a-z/]{0,20}",
            args in prop::collection::vec("[^\\x00]{0,12}", 0..6),
            env in prop::collection::vec("[A-Z]{1,4}=[^\\x00]{0,8}", 0..6),
        ) {
            let cmd = AgentCommand { executable: exe.clone(), arguments: args.clone(), environment: env.clone() };
            let got = ExecCmd::decode(&ExecCmd::encode(&cmd)).expect("decodes");
            let mut argv = vec![exe.clone()];
            argv.extend(args);
            prop_assert_eq!(as_strings(&got), (exe, argv, env));
        }

        /// Any bytes: a command or `None`, never a panic; trailing or
        /// missing strings are refused.
        #[test]
        fn release_command_decoder_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = ExecCmd::decode(&bytes);
        }
    }

    #[test]
    fn release_command_decoder_refuses_malformed_input() {
        let cmd = AgentCommand {
            executable: "/bin/echo".into(),
            arguments: vec!["a".into()],
            environment: vec!["X=1".into()],
        };
        let good = ExecCmd::encode(&cmd);
        assert!(ExecCmd::decode(&good).is_some());
        let mut trailing = good.clone();
        trailing.extend_from_slice(b"junk");
        assert!(ExecCmd::decode(&trailing).is_none());
        assert!(ExecCmd::decode(&good[..good.len() - 1]).is_none());
        let mut huge = good.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(ExecCmd::decode(&huge).is_none());
        assert!(ExecCmd::decode(&[]).is_none());
    }
}
