//! The launch specification: everything a sandbox commits to, validated.

use crate::error::SandboxError;
use glove_types::paths::{check_canonical, is_within};
use glove_types::policy::ResourceLimits;
use serde::{Deserialize, Serialize};
use std::os::fd::OwnedFd;

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

fn bad(detail: impl Into<String>) -> SandboxError {
    SandboxError::Spec {
        detail: detail.into(),
    }
}

fn path(p: &str, what: &str) -> Result<(), SandboxError> {
    check_canonical(p).map_err(|e| bad(format!("{what}: {}", e.message())))
}

const RESERVED_TARGETS: &[&str] = &["/proc", "/dev", "/oldroot"];

/// The executable, arguments and environment rules shared by a spec and an
/// [`AgentCommand`].
fn check_command(
    executable: &str,
    arguments: &[String],
    environment: &[String],
) -> Result<(), SandboxError> {
    path(executable, "executable")?;
    if arguments.len() + environment.len() > MAX_ARGS {
        return Err(bad(format!(
            "at most {MAX_ARGS} arguments and environment entries"
        )));
    }
    for a in arguments.iter().chain(environment.iter()) {
        if a.contains('\0') || a.len() > MAX_ARG_BYTES {
            return Err(bad(
                "arguments and environment entries must be NUL-free and at most 128 KiB",
            ));
        }
    }
    if arguments
        .iter()
        .chain(environment.iter())
        .map(String::len)
        .sum::<usize>()
        > MAX_COMMAND_BYTES
    {
        return Err(bad(format!(
            "arguments and environment together are at most {} MiB",
            MAX_COMMAND_BYTES >> 20
        )));
    }
    for e in environment {
        let name = e.split_once('=').map(|(n, _)| n).unwrap_or("");
        let ok = name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok {
            return Err(bad(format!("environment entry {e:?} is not NAME=value")));
        }
    }
    Ok(())
}

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

impl LaunchSpec {
    /// Seeded directories, files and writable files: canonical, inside a
    /// writable directory (never one itself), each once, bounded.
    fn check_seeds(&self) -> Result<(), SandboxError> {
        if self.seed_dirs.len() + self.seed_files.len() > MAX_SEED_ENTRIES {
            return Err(bad(format!(
                "at most {MAX_SEED_ENTRIES} seeded directories and files"
            )));
        }
        let bytes: usize = self.seed_files.iter().map(|f| f.text.len()).sum();
        if bytes > MAX_SEED_BYTES {
            return Err(bad(format!(
                "seeded files are at most {} MiB together",
                MAX_SEED_BYTES >> 20
            )));
        }
        let inside = |p: &str, what: &str| -> Result<(), SandboxError> {
            path(p, what)?;
            if self.writable_dirs.iter().any(|w| w != p && is_within(p, w)) {
                Ok(())
            } else {
                Err(bad(format!("{what} {p} is not below a writable directory")))
            }
        };
        let mut all: Vec<&str> = Vec::new();
        for d in &self.seed_dirs {
            inside(d, "seeded directory")?;
            all.push(d);
        }
        for f in &self.seed_files {
            inside(&f.path, "seeded file")?;
            all.push(&f.path);
        }
        for w in &self.leases {
            path(&w.source, "lease source")?;
            path(&w.returned, "lease return")?;
            inside(&w.target, "lease target")?;
            all.push(&w.target);
        }
        all.sort_unstable();
        if let Some(d) = all.windows(2).find(|p| p[0] == p[1]) {
            return Err(bad(format!("{} is seeded twice", d[0])));
        }
        Ok(())
    }

    /// Checks every rule; a launch validates its spec first.
    pub fn validate(&self) -> Result<(), SandboxError> {
        check_command(&self.executable, &self.arguments, &self.environment)?;
        path(&self.working_directory, "working directory")?;
        let counts = [
            self.grants.len(),
            self.bundles.len(),
            self.protected_paths.len(),
            self.read_only_binds.len(),
            self.sockets.len(),
            self.symlinks.len(),
            self.files.len(),
            self.host_files.len(),
            self.writable_dirs.len(),
            self.copy_in.len(),
            self.leases.len(),
        ];
        if counts.iter().any(|c| *c > MAX_MOUNT_ENTRIES) {
            return Err(bad(format!(
                "at most {MAX_MOUNT_ENTRIES} entries of each kind"
            )));
        }
        let mut targets: Vec<&str> = Vec::new();
        for b in &self.read_only_binds {
            path(&b.source, "bind source")?;
            path(&b.target, "bind target")?;
            targets.push(&b.target);
        }
        for b in &self.sockets {
            path(&b.source, "socket source")?;
            path(&b.target, "socket target")?;
            targets.push(&b.target);
        }
        for (link, _) in &self.symlinks {
            path(link, "symlink")?;
            targets.push(link);
        }
        for (p, body) in &self.files {
            path(p, "file")?;
            if body.len() > 1 << 20 {
                return Err(bad("generated files are at most 1 MiB"));
            }
            targets.push(p);
        }
        for f in &self.host_files {
            path(&f.source, "host file source")?;
            path(&f.target, "host file target")?;
            if is_within(&f.source, "/proc") {
                return Err(bad(format!("host file {} is under /proc", f.source)));
            }
            targets.push(&f.target);
        }
        for w in &self.writable_dirs {
            path(w, "writable directory")?;
            targets.push(w);
        }
        for g in &self.grants {
            path(&g.host_path, "grant host path")?;
            path(&g.target, "grant target")?;
            if let GrantMode::EphemeralCopy { max_bytes } = g.mode {
                if max_bytes < MIN_DISK_BYTES {
                    return Err(bad(format!(
                        "a copy grant needs at least {MIN_DISK_BYTES} bytes"
                    )));
                }
            }
            targets.push(&g.target);
        }
        for b in &self.bundles {
            path(&b.root, "bundle root")?;
            path(&b.target, "bundle target")?;
            if glove_types::Sha256Digest::parse(&b.sha256).is_err() {
                return Err(bad("a bundle digest must be 64 lowercase hex characters"));
            }
            targets.push(&b.target);
        }
        for p in &self.protected_paths {
            path(p, "protected path")?;
        }
        self.check_seeds()?;
        if self.leases.len() > 16 {
            return Err(bad("at most 16 credential leases"));
        }
        if let Some(r) = self.cpu_rate_millicpus {
            if !(MIN_CPU_RATE_MILLICPUS..=MAX_CPU_RATE_MILLICPUS).contains(&r) {
                return Err(bad(format!(
                    "a CPU rate is {MIN_CPU_RATE_MILLICPUS}..={MAX_CPU_RATE_MILLICPUS} thousandths of a CPU"
                )));
            }
        }
        if let Some(pin) = &self.executable_pin {
            if pin.is_empty()
                || pin.len() > 128
                || !pin
                    .bytes()
                    .all(|b| b.is_ascii_digit() || b == b':' || b == b'-')
            {
                return Err(bad("an executable pin is dev:ino:ctime_ns"));
            }
            if let Some(w) = self
                .writable_dirs
                .iter()
                .find(|w| is_within(&self.executable, w))
            {
                return Err(SandboxError::BindShadowed {
                    target: self.executable.clone(),
                    by: w.clone(),
                });
            }
            if RESERVED_TARGETS
                .iter()
                .any(|r| is_within(&self.executable, r))
            {
                return Err(bad("the pinned executable lies under a reserved path"));
            }
            // A grant or bundle mounted at or above the pinned path would
            // lay another file over it.
            if let Some(t) = self
                .grants
                .iter()
                .map(|g| &g.target)
                .chain(self.bundles.iter().map(|b| &b.target))
                .find(|t| is_within(&self.executable, t))
            {
                return Err(bad(format!(
                    "the pinned executable {} lies at or below the mount {t}",
                    self.executable
                )));
            }
        }
        if let Some(d) = &self.network_pool {
            match d.to_str() {
                Some(p) => path(p, "network namespace pool")?,
                None => return Err(bad("the network namespace pool path is not UTF-8")),
            }
        }
        // A read-only bind at or below a writable directory would be laid
        // over by that directory's scratch slice and silently hidden.
        // (Grants and bundles too: they are made before the writable
        // directories are laid over the root.)
        let shadowable = self
            .read_only_binds
            .iter()
            .map(|b| &b.target)
            .chain(self.grants.iter().map(|g| &g.target))
            .chain(self.bundles.iter().map(|b| &b.target));
        for t in shadowable {
            if let Some(w) = self.writable_dirs.iter().find(|w| is_within(t, w)) {
                return Err(SandboxError::BindShadowed {
                    target: t.clone(),
                    by: w.clone(),
                });
            }
        }
        for t in &targets {
            if let Some(r) = RESERVED_TARGETS
                .iter()
                .find(|r| is_within(t, r) || is_within(r, t))
            {
                return Err(bad(format!("{t} overlaps the reserved {r}")));
            }
        }
        for (i, a) in targets.iter().enumerate() {
            if targets.iter().skip(i + 1).any(|b| a == b) {
                return Err(bad(format!("{a} is mounted twice")));
            }
        }
        // Links and files are made in the root file system, some after the
        // writable directories, copies and grants exist: never below a
        // mount, where a copied link could lead the init elsewhere.
        let mounts: Vec<&str> = self
            .read_only_binds
            .iter()
            .map(|b| b.target.as_str())
            .chain(self.writable_dirs.iter().map(String::as_str))
            .chain(self.grants.iter().map(|g| g.target.as_str()))
            .chain(self.bundles.iter().map(|b| b.target.as_str()))
            .collect();
        let made = self
            .symlinks
            .iter()
            .map(|(l, _)| l.as_str())
            .chain(self.files.iter().map(|(p, _)| p.as_str()))
            .chain(self.host_files.iter().map(|f| f.target.as_str()))
            .chain(self.sockets.iter().map(|b| b.target.as_str()));
        for t in made {
            if let Some(m) = mounts.iter().find(|m| is_within(t, m) && t != **m) {
                return Err(bad(format!(
                    "{t} lies below the mount {m}: links and files belong to the root"
                )));
            }
        }
        for c in &self.copy_in {
            path(&c.source, "copy source")?;
            path(&c.target, "copy target")?;
            // The host's /proc is where the init mounts the scratch file
            // system while it builds the view (and a copy of procfs is
            // meaningless anyway).
            if is_within(&c.source, "/proc") {
                return Err(bad(format!("copy source {} is under /proc", c.source)));
            }
            if !self.writable_dirs.iter().any(|w| is_within(&c.target, w)) {
                return Err(bad(format!(
                    "copy target {} is not inside a writable directory",
                    c.target
                )));
            }
        }
        if !self.writable_dirs.is_empty() && self.limits.disk_bytes < MIN_DISK_BYTES {
            return Err(bad(format!(
                "disk limit must be at least {MIN_DISK_BYTES} bytes"
            )));
        }
        if self.hostname.is_empty()
            || self.hostname.len() > 64
            || !self
                .hostname
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(bad("hostname must be 1-64 characters of [A-Za-z0-9-]"));
        }
        let l = &self.limits;
        if [
            l.cpu_time_ms,
            l.memory_bytes,
            l.pids,
            l.wall_time_ms,
            l.disk_bytes,
            l.terminal_output_bytes,
        ]
        .contains(&0)
        {
            return Err(bad("every limit must be positive"));
        }
        if let Some(e) = &self.egress {
            if e.ports.is_empty() || e.ports.len() > MAX_EGRESS_PORTS {
                return Err(bad(format!(
                    "egress mode listens on 1 to {MAX_EGRESS_PORTS} ports"
                )));
            }
            for (i, p) in e.ports.iter().enumerate() {
                if *p < 1024 || e.ports[..i].contains(p) {
                    return Err(bad("egress ports are 1024 or above, each once"));
                }
            }
        }
        let mut seen = Vec::new();
        for (_, n) in &self.extra_fds {
            if *n < 3 || *n > 255 || seen.contains(n) {
                return Err(bad("extra descriptors are numbered 3..=255, each once"));
            }
            seen.push(*n);
        }
        Ok(())
    }
}
