//! The built-in default profile of `glove exec`: offline, system directories
//! read-only, an empty writable `/tmp`, `/workspace` and `/home/agent`
//! carved from one quota-sized scratch, a generated `/etc/passwd` and
//! `/etc/group`, and from the host's `/etc` only what ordinary programs need
//! (loader, name-service and locale configuration, certificates). Never
//! `/etc/shadow`, `/etc/ssh`, `/etc/sudoers*`, `/etc/ssl/private`, nor
//! anything of the invoking user's home or working tree unless asked.

use crate::etc_snapshot::Entry;
use crate::launch::INSIDE_ID;
use crate::spec::{Bind, CopyIn, Enforcement, LaunchSpec, Terminal};
use crate::SandboxError;
use glove_types::policy::ResourceLimits;
use std::path::Path;

/// Top-level system directories exposed read-only (or as the same symlink
/// when the host has a merged `/usr`).
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// Whether `path` lies in one of the operating system's trees
/// ([`SYSTEM_DIRS`] and `/etc`): binds from there are not scanned for
/// sockets (they are root's, large or read on every launch, and hold none
/// on a normal system).
pub fn is_system_tree(path: &str) -> bool {
    SYSTEM_DIRS
        .iter()
        .chain(std::iter::once(&"/etc"))
        .any(|d| glove_types::paths::is_within(path, d))
}

/// Entries of the host's `/etc` exposed read-only when present.
pub const ETC_ALLOWED: &[&str] = &[
    "/etc/alternatives",
    "/etc/debian_version",
    "/etc/gai.conf",
    "/etc/host.conf",
    "/etc/inputrc",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/locale.alias",
    "/etc/localtime",
    "/etc/mime.types",
    "/etc/nsswitch.conf",
    "/etc/os-release",
    "/etc/protocols",
    "/etc/services",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/timezone",
];

/// `/etc` files up to this size are copied in by the sandbox init; larger
/// ones are bound. Fresh memory is expensive on a virtual machine whose host
/// reclaims free pages (each new page faults on the host too), so copying
/// `/etc/mime.types` (74 KiB) cost more than binding it.
pub const ETC_COPY_MAX: u64 = 16 * 1024;

/// Writable directories of the default profile.
pub const WRITABLE: &[&str] = &["/home/agent", "/tmp", "/workspace"];

/// Directories searched for a bare command name (host paths that the
/// sandbox sees at the same place).
pub const SEARCH_PATH: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// Default limits: 60 s CPU, 1 GiB memory, 256 processes, 10 min wall,
/// 1 GiB disk, 64 MiB terminal output.
pub const DEFAULT_LIMITS: ResourceLimits = ResourceLimits {
    cpu_time_ms: 60_000,
    memory_bytes: 1 << 30,
    pids: 256,
    wall_time_ms: 600_000,
    disk_bytes: 1 << 30,
    terminal_output_bytes: 64 << 20,
};

/// What `glove exec` asks for.
#[derive(Clone, Debug)]
pub struct ExecRequest {
    /// Command and arguments.
    pub command: Vec<String>,
    /// Extra environment (`NAME=value`), added after the defaults.
    pub env: Vec<String>,
    /// Extra read-only binds.
    pub ro_binds: Vec<Bind>,
    /// A host directory copied into `/workspace`.
    pub rw_copy: Option<String>,
    /// Limits.
    pub limits: ResourceLimits,
    /// A terminal of this size, or pipes.
    pub pty: Option<(u16, u16)>,
    /// Refuse unless cgroups enforce cpu, memory and pids.
    pub strict_limits: bool,
    /// `TERM` for the terminal.
    pub term: Option<String>,
    /// Where read-only snapshots of the profile's `/etc` are kept (see
    /// [`crate::etc_snapshot`]); `None` copies the files into each sandbox.
    /// When no snapshot can be used there, the files are copied too.
    pub etc_snapshots: Option<std::path::PathBuf>,
    /// A pool of network namespaces made ahead, for a root launch
    /// ([`crate::net_pool`]); `None` makes the namespace during the launch.
    pub network_pool: Option<std::path::PathBuf>,
    /// A CPU rate limit in thousandths of a CPU (`None`: no rate limit).
    pub cpu_rate_millicpus: Option<u64>,
}

impl ExecRequest {
    /// `command` in the default profile: no extra environment or binds, no
    /// copy, the default limits, pipes, best-effort enforcement, `/etc`
    /// copied in (no snapshot), no network namespace pool.
    pub fn new(command: Vec<String>) -> ExecRequest {
        ExecRequest {
            command,
            env: Vec::new(),
            ro_binds: Vec::new(),
            rw_copy: None,
            limits: DEFAULT_LIMITS,
            pty: None,
            strict_limits: false,
            term: None,
            etc_snapshots: None,
            network_pool: None,
            cpu_rate_millicpus: None,
        }
    }
}

fn spec_err(d: impl Into<String>) -> SandboxError {
    SandboxError::Spec { detail: d.into() }
}

/// Resolves a command name as the sandbox will see it.
pub fn resolve_command(cmd: &str, extra_binds: &[Bind]) -> Result<String, SandboxError> {
    if cmd.starts_with('/') {
        return Ok(cmd.to_owned());
    }
    if cmd.contains('/') {
        return Ok(format!("/workspace/{cmd}"));
    }
    for dir in SEARCH_PATH {
        let p = Path::new(dir).join(cmd);
        if p.is_file() {
            return Ok(p.display().to_string());
        }
    }
    for b in extra_binds {
        if b.target.rsplit('/').next() == Some(cmd) {
            return Ok(b.target.clone());
        }
    }
    Err(spec_err(format!(
        "command {cmd:?} not found in {}",
        SEARCH_PATH.join(":")
    )))
}

/// The files of `/etc` the profile generates: the sandbox's users, groups
/// and host name.
fn generated_etc() -> Vec<(String, Vec<u8>)> {
    vec![
        (
            "/etc/passwd".to_owned(),
            format!("root:x:0:0:root:/root:/usr/sbin/nologin\nagent:x:{INSIDE_ID}:{INSIDE_ID}:agent:/home/agent:/bin/sh\n").into_bytes(),
        ),
        (
            "/etc/group".to_owned(),
            format!("root:x:0:\nagent:x:{INSIDE_ID}:\n").into_bytes(),
        ),
        ("/etc/hostname".to_owned(), b"glove\n".to_vec()),
        (
            "/etc/hosts".to_owned(),
            b"127.0.0.1 localhost glove\n::1 localhost\n".to_vec(),
        ),
    ]
}

/// The snapshot in `dir` of the profile's `/etc` (made if missing), or
/// `None` when it cannot be used (the files are then copied).
fn etc_snapshot_of(
    dir: &Path,
    dirs: &[String],
    files: &[(String, std::fs::Metadata)],
    generated: &[(String, Vec<u8>)],
) -> Option<std::path::PathBuf> {
    let below = |p: &str| p.strip_prefix("/etc/").map(str::to_owned);
    let mut entries = Vec::new();
    for d in dirs {
        entries.push(Entry::MountPoint { name: below(d)? });
    }
    for (path, meta) in files {
        entries.push(Entry::Host {
            name: below(path)?,
            source: path.into(),
            meta: meta.clone(),
        });
    }
    for (path, body) in generated {
        entries.push(Entry::Generated {
            name: below(path)?,
            body: body.clone(),
        });
    }
    crate::etc_snapshot::ensure(dir, &entries).ok()
}

/// Builds the launch spec of the default profile.
pub fn exec_spec(req: ExecRequest) -> Result<LaunchSpec, SandboxError> {
    let (first, rest) = req
        .command
        .split_first()
        .ok_or_else(|| spec_err("no command given"))?;
    let executable = resolve_command(first, &req.ro_binds)?;
    crate::sys::trace::mark("s:resolved");
    let mut binds = Vec::new();
    let mut symlinks = Vec::new();
    for d in SYSTEM_DIRS {
        match std::fs::symlink_metadata(d) {
            Ok(m) if m.file_type().is_symlink() => {
                if let Ok(t) = std::fs::read_link(d) {
                    symlinks.push((d.to_string(), t.display().to_string()));
                }
            }
            Ok(m) if m.is_dir() => binds.push(Bind {
                source: d.to_string(),
                target: d.to_string(),
            }),
            _ => {}
        }
    }
    crate::sys::trace::mark("s:system dirs");
    // From /etc: directories are bound; regular files go into a snapshot
    // bound as /etc, or are copied by the sandbox init while it builds the
    // view (large ones bound instead).
    let mut etc_dirs = Vec::new();
    let mut etc_files = Vec::new();
    for e in ETC_ALLOWED {
        match std::fs::metadata(e) {
            Ok(m) if m.is_dir() => etc_dirs.push(e.to_string()),
            Ok(m) if m.is_file() => etc_files.push((e.to_string(), m)),
            _ => {}
        }
    }
    let files = generated_etc();
    crate::sys::trace::mark("s:etc stat");
    let snapshot = req
        .etc_snapshots
        .as_deref()
        .filter(|_| {
            // Extra binds below /etc need mount points the snapshot lacks.
            !req.ro_binds
                .iter()
                .any(|b| b.target == "/etc" || b.target.starts_with("/etc/"))
        })
        .and_then(|dir| etc_snapshot_of(dir, &etc_dirs, &etc_files, &files));
    crate::sys::trace::mark("s:snapshot");
    // The sandbox binds a source without following links: name the real
    // place of what /etc links to.
    let real = |p: &str| {
        std::fs::canonicalize(p)
            .ok()
            .and_then(|c| c.to_str().map(str::to_owned))
            .unwrap_or_else(|| p.to_owned())
    };
    let dir_binds = etc_dirs.iter().map(|d| Bind {
        source: real(d),
        target: d.clone(),
    });
    let (files, host_files) = match snapshot {
        Some(snapshot) => {
            binds.push(Bind {
                source: snapshot.display().to_string(),
                target: "/etc".into(),
            });
            binds.extend(dir_binds);
            (Vec::new(), Vec::new())
        }
        None => {
            binds.extend(dir_binds);
            let mut host_files = Vec::new();
            for (path, m) in etc_files {
                if m.len() <= ETC_COPY_MAX {
                    host_files.push(Bind {
                        source: path.clone(),
                        target: path,
                    });
                } else {
                    binds.push(Bind {
                        source: real(&path),
                        target: path,
                    });
                }
            }
            (files, host_files)
        }
    };
    binds.extend(req.ro_binds.iter().cloned());
    let mut environment = vec![
        "HOME=/home/agent".to_owned(),
        "LANG=C.UTF-8".to_owned(),
        "PATH=/usr/local/bin:/usr/bin:/bin".to_owned(),
        "USER=agent".to_owned(),
    ];
    if req.pty.is_some() {
        environment.push(format!(
            "TERM={}",
            req.term.as_deref().unwrap_or("xterm-256color")
        ));
    }
    for e in &req.env {
        let name = e
            .split_once('=')
            .map(|(n, _)| n)
            .ok_or_else(|| spec_err(format!("--env {e:?} is not NAME=value")))?;
        environment.retain(|x| x.split_once('=').map(|(n, _)| n) != Some(name));
        environment.push(e.clone());
    }
    let copy_in = req
        .rw_copy
        .map(|src| {
            let canonical = std::fs::canonicalize(&src)
                .map_err(|e| spec_err(format!("--rw-copy {src}: {e}")))?;
            Ok::<_, SandboxError>(vec![CopyIn {
                source: canonical.display().to_string(),
                target: "/workspace".into(),
            }])
        })
        .transpose()?
        .unwrap_or_default();
    Ok(LaunchSpec {
        executable,
        arguments: rest.to_vec(),
        environment,
        working_directory: "/workspace".into(),
        read_only_binds: binds,
        sockets: Vec::new(),
        symlinks,
        files,
        host_files,
        writable_dirs: WRITABLE.iter().map(|s| s.to_string()).collect(),
        copy_in,
        seed_dirs: Vec::new(),
        seed_files: Vec::new(),
        leases: Vec::new(),
        executable_pin: None,
        cpu_rate_millicpus: req.cpu_rate_millicpus,
        hostname: "glove".into(),
        limits: req.limits,
        terminal: match req.pty {
            Some((rows, cols)) => Terminal::Pty { rows, cols },
            None => Terminal::Pipes,
        },
        extra_fds: Vec::new(),
        grants: Vec::new(),
        bundles: Vec::new(),
        protected_paths: Vec::new(),
        network_pool: req.network_pool,
        retained: Vec::new(),
        exposures: Vec::new(),
        egress: None,
        enforcement: if req.strict_limits {
            Enforcement::Strict
        } else {
            Enforcement::BestEffort
        },
    })
}
