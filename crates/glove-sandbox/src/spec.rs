//! The launch specification: everything a sandbox commits to, validated.

use crate::error::SandboxError;
use glove_types::paths::{check_canonical, is_within};
use glove_types::policy::ResourceLimits;
use serde::{Deserialize, Serialize};
use std::os::fd::OwnedFd;

mod validate;

use validate::check_command;

/// Most binds, files, symlinks or writable directories in one spec.
pub const MAX_MOUNT_ENTRIES: usize = 256;
/// Most arguments plus environment entries.
pub const MAX_ARGS: usize = 4096;
/// Longest argument or environment entry, bytes.
pub const MAX_ARG_BYTES: usize = 128 * 1024;
/// Most bytes of arguments and environment together (the kernel's own
/// `execve` limit is lower by default).
pub const MAX_COMMAND_BYTES: usize = 4 << 20;
/// Largest host file copied into the view ([`LaunchSpec::host_files`]).
pub const MAX_HOST_FILE_BYTES: u64 = 1 << 20;
/// Most bytes of host files together (the root tmpfs holding them is
/// 16 MiB).
pub const MAX_HOST_FILES_TOTAL: u64 = 8 << 20;
/// Smallest scratch size accepted (one page per writable directory is not
/// enough to do anything; 64 KiB is).
pub const MIN_DISK_BYTES: u64 = 64 * 1024;

/// A read-only bind of a host path at a sandbox path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bind {
    /// Host path (absolute, canonical).
    pub source: String,
    /// Sandbox path (absolute, canonical).
    pub target: String,
}

/// A copy of a host directory into a writable directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CopyIn {
    /// Host directory.
    pub source: String,
    /// Sandbox directory (inside one of the writable directories).
    pub target: String,
}

/// How a path grant reaches the sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum GrantMode {
    /// The host directory, bound read-only.
    ReadOnly,
    /// A private copy in its own tmpfs of `max_bytes`, discarded at the end.
    EphemeralCopy {
        /// Size of the copy's tmpfs.
        max_bytes: u64,
    },
}

/// A host directory granted to the session. The init opens it without
/// following any link and holds the descriptor; nothing re-resolves the path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// Host directory (absolute, canonical, no symlink anywhere in it).
    pub host_path: String,
    /// Where it appears inside.
    pub target: String,
    /// How.
    pub mode: GrantMode,
    /// For copies: start empty when the host directory does not exist.
    pub create_if_missing: bool,
}

/// A library bundle projected read-only: the file named by its SHA-256
/// beneath a pinned root, checked and rehashed before it is mounted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleMount {
    /// The bundle root directory (mode 0700, owned by the launcher's user).
    pub root: String,
    /// Lowercase hex SHA-256, also the file name.
    pub sha256: String,
    /// The file path inside the sandbox.
    pub target: String,
}

/// Largest bundle accepted.
pub const MAX_BUNDLE_BYTES: u64 = 16 << 20;

/// A credential lease given to the agent as a file of its own and taken
/// back after the session, without the sandbox ever holding a host file
/// open for writing: the init reads `source` (opened without following
/// links; a regular file with one link, at most [`MAX_LEASE_BYTES`]) into
/// an agent-owned file at `target`; once every process of the sandbox is
/// gone it reads `target` back (without following links, a regular file,
/// bounded) and writes it to `returned` (a regular host file with one
/// link, opened at launch) followed by its SHA-256, so the caller can
/// tell a complete copy from a torn one. A lease that cannot be taken back
/// leaves `returned` empty or torn, and the lease as it was.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseFile {
    /// The lease on the host (absolute, canonical, no symlink in it).
    pub source: String,
    /// Where the lease comes back on the host (same rules).
    pub returned: String,
    /// Sandbox path, inside one of the writable directories.
    pub target: String,
}

/// Largest credential lease.
pub const MAX_LEASE_BYTES: usize = 1 << 20;

/// Most seeded files plus seeded directories in one spec.
pub const MAX_SEED_ENTRIES: usize = 4096;
/// Most bytes of seeded files together (they cross the launcher socket,
/// whose frames are at most 8 MiB).
pub const MAX_SEED_BYTES: usize = 4 << 20;

/// A file written into a writable directory before the agent runs, owned
/// by the agent (e.g. an expanded skill in the private home).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedFile {
    /// Sandbox path, inside one of the writable directories.
    pub path: String,
    /// The contents (UTF-8 text).
    pub text: String,
    /// Mode 0755 instead of 0644.
    pub executable: bool,
}

/// How the agent's standard streams are connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Terminal {
    /// Three pipes: stdin, stdout, stderr.
    Pipes,
    /// A pseudo-terminal from the sandbox's own devpts.
    Pty {
        /// Initial rows.
        rows: u16,
        /// Initial columns.
        cols: u16,
    },
}

/// How strictly limits must be enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Enforcement {
    /// cgroups for cpu, memory and pids, or refuse to launch.
    Strict,
    /// cgroups when available, otherwise per-process rlimits (reported).
    BestEffort,
}

/// Everything a launch commits to.
#[derive(Debug)]
pub struct LaunchSpec {
    /// Executable path inside the sandbox.
    pub executable: String,
    /// Arguments after `argv[0]` (which is the executable path).
    pub arguments: Vec<String>,
    /// The complete environment (`NAME=value`); nothing is inherited.
    pub environment: Vec<String>,
    /// Working directory inside the sandbox.
    pub working_directory: String,
    /// Read-only binds.
    pub read_only_binds: Vec<Bind>,
    /// Unix sockets exposed on purpose: Glove's own listeners (the MCP
    /// mediator's, one per upstream server), each bound read-only over a
    /// file at its target. Every source must be a socket, reached without
    /// following links; a directory bind never exposes one (the launch
    /// refuses it). Connecting is all a read-only socket bind allows.
    pub sockets: Vec<Bind>,
    /// Symbolic links to create: (link path, target).
    pub symlinks: Vec<(String, String)>,
    /// Small generated read-only files: (path, contents).
    pub files: Vec<(String, Vec<u8>)>,
    /// Host regular files copied read-only into the view while it is built
    /// (`source` is resolved on the host, symbolic links included, as the
    /// launcher would see it; at most [`MAX_HOST_FILE_BYTES`] each). A
    /// source that is missing, not a regular file or too large fails the
    /// launch. Cheaper than a bind per file, and read by the sandbox init
    /// rather than the launcher.
    pub host_files: Vec<Bind>,
    /// Writable directories, all carved from one scratch tmpfs of
    /// `limits.disk_bytes`.
    pub writable_dirs: Vec<String>,
    /// Host directories copied into writable directories before launch.
    pub copy_in: Vec<CopyIn>,
    /// Directories made (owned by the agent, mode 0755) inside writable
    /// directories before launch, parents first.
    pub seed_dirs: Vec<String>,
    /// Files written inside writable directories before launch.
    pub seed_files: Vec<SeedFile>,
    /// Credential leases copied in and taken back.
    pub leases: Vec<LeaseFile>,
    /// The identity the executable (a host path, seen at the same place
    /// inside) was resolved with ([`crate::identity::file_identity`]): the
    /// init opens it without following links, refuses the launch when the
    /// identity differs, and binds *that* file read-only over the path, so
    /// a swap on the host after the check cannot change what runs.
    pub executable_pin: Option<String>,
    /// A CPU rate limit, thousandths of a CPU (cgroup v2 `cpu.max`).
    pub cpu_rate_millicpus: Option<u64>,
    /// Hostname inside.
    pub hostname: String,
    /// The six limits.
    pub limits: ResourceLimits,
    /// Standard streams.
    pub terminal: Terminal,
    /// Extra descriptors: (descriptor, number inside, from 3 upward).
    pub extra_fds: Vec<(OwnedFd, i32)>,
    /// Enforcement requirement.
    pub enforcement: Enforcement,
    /// Host directories granted to the session.
    pub grants: Vec<Grant>,
    /// Library bundles projected read-only.
    pub bundles: Vec<BundleMount>,
    /// Host paths no grant may expose (a grant equal to one of them or to an
    /// ancestor is refused), e.g. the control socket's directory.
    pub protected_paths: Vec<String>,
    /// A pool of network namespaces made ahead ([`crate::net_pool`]; an
    /// absolute host directory, used by root launches only): the sandbox
    /// gets one from there instead of a namespace made during the launch.
    /// Only a supervisor that exits after the session (`Settings::exit_after`,
    /// as `glove exec`) refills the pool. `None`: always made during the
    /// launch.
    pub network_pool: Option<std::path::PathBuf>,
    /// Egress mode ([`EgressSpec`]); `None`: offline.
    pub egress: Option<EgressSpec>,
    /// Retained images, already mounted (detached) by the supervisor, that
    /// the init attaches at their targets ([`crate::retained`]).
    pub retained: Vec<RetainedMount>,
    /// Path exposures: project directories the supervisor opened beneath
    /// their roots, copied by the init from the descriptors
    /// ([`crate::exposures`]).
    pub exposures: Vec<ExposureMount>,
}

/// Most path exposures in one session.
pub const MAX_EXPOSURES: usize = glove_types::plan::MAX_PLAN_EXPOSURES;

/// A path exposure as the sandbox gets it: the project directory's
/// descriptor (opened by the supervisor beneath its root, never by path
/// here), copied into a tmpfs of `max_bytes` attached at `target`, and
/// made read-only after the copy when `read_only`.
#[derive(Debug)]
pub struct ExposureMount {
    /// Where the copy appears inside the sandbox.
    pub target: String,
    /// The project directory (an `O_PATH` descriptor is enough).
    pub source: OwnedFd,
    /// Whether the copy is mounted read-only.
    pub read_only: bool,
    /// The copy's tmpfs size.
    pub max_bytes: u64,
}

/// Most retained workspaces in one session.
pub const MAX_RETAINED: usize = 16;

/// A retained image's mount, made by the supervisor and attached by the
/// sandbox init at `target` (an absolute path inside the sandbox). A
/// target must not lie inside another grant or writable directory.
#[derive(Debug)]
pub struct RetainedMount {
    /// Where the workspace appears inside the sandbox.
    pub target: String,
    /// The detached mount (`fsmount`) of the image's file system.
    pub mount: OwnedFd,
}

/// Egress mode: the sandbox's network namespace gets `lo` up, seccomp
/// allows TCP sockets (which reach nothing beyond `lo`), and a forwarder
/// process inside listens on `127.0.0.1` (and `::1`) at each port and
/// passes every accepted connection over `channel` (a `SOCK_SEQPACKET`
/// socket, [`crate::egress_channel`]): one message per connection, its
/// data the port's index in `ports`, the connection attached. Never pooled.
#[derive(Debug)]
pub struct EgressSpec {
    /// The sandbox's end of the egress channel.
    pub channel: OwnedFd,
    /// The ports listened on, at most [`MAX_EGRESS_PORTS`], each 1024 or above.
    pub ports: Vec<u16>,
}

/// Most ports of [`EgressSpec::ports`].
pub const MAX_EGRESS_PORTS: usize = 17;

/// The agent's command given when a prepared sandbox is released
/// ([`crate::launch::Prepared::release_command`]) instead of the spec's: a
/// sandbox can be built ahead of time and bound to its command only when
/// it is needed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentCommand {
    /// Executable path inside the sandbox.
    pub executable: String,
    /// Arguments after `argv[0]` (which is the executable path).
    pub arguments: Vec<String>,
    /// The complete environment (`NAME=value`).
    pub environment: Vec<String>,
}

impl AgentCommand {
    /// The same rules as a spec's executable, arguments and environment.
    pub fn validate(&self) -> Result<(), SandboxError> {
        check_command(&self.executable, &self.arguments, &self.environment)
    }
}

/// Smallest CPU rate accepted (1% of a CPU).
pub const MIN_CPU_RATE_MILLICPUS: u64 = 10;
/// Largest CPU rate accepted (1,024 CPUs).
pub const MAX_CPU_RATE_MILLICPUS: u64 = 1024 * 1000;
