//! The MCP part: the operator's profile read as a protected file, one
//! listening socket per upstream server in a private runtime directory,
//! each bound into the sandbox with the relay executable and the harness
//! configurations that name them; the mediator started (upstreams ready,
//! tools listed and pinned) before the agent is released; the audit's
//! summary at the end (see `docs/mcp.md`).

use super::{AttachError, SpecParts};
use glove_mcp::sockets::{
    harness_config_directories, harness_configs, SocketServer, RELAY_EXECUTABLE, RELAY_SOCKET_DIR,
};
use glove_mcp::{journal_spec, MediatorConfig, Profile, Summary};
use glove_sandbox::spec::{Bind, SeedFile};
use glove_types::codes::mcp::MCP_RELAY_FAILED;
use glove_types::ids::SessionId;
use glove_types::receipt::McpReceipt;
use glove_types::{ErrorCode, Sha256Digest};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// The audit journal's bounds for one session.
pub const AUDIT_MAX_BYTES: u64 = 64 << 20;
/// See [`AUDIT_MAX_BYTES`].
pub const AUDIT_MAX_RECORDS: u64 = 1_000_000;

/// What the MCP part needs.
pub struct McpInput {
    /// The MCP profile: a protected file (mode 0600, owned by this user).
    pub profile: PathBuf,
    /// The tool policy that names the profile (a managed session's), for
    /// the receipt.
    pub tool_policy_id: Option<String>,
    /// Where the session's runtime directory is made (a private
    /// directory, made if missing).
    pub runtime_base: PathBuf,
    /// The `glove` executable, bound read-only into the sandbox as the
    /// relay.
    pub relay: PathBuf,
    /// The audit journal (a new file in an existing private directory).
    pub audit: PathBuf,
    /// The pin file (in an existing private directory).
    pub pins: PathBuf,
}

/// Makes `dir` (and its parents) with mode 0700 if missing, and checks
/// it is a directory of mode 0700 owned by this user. Faults are
/// `mcp_relay_failed`.
pub fn private_dir(dir: &Path) -> Result<(), AttachError> {
    glove_mcp::sockets::private_dir(dir).map_err(|e| {
        AttachError::new(
            MCP_RELAY_FAILED,
            "a private directory of the MCP mediator could not be made",
            e,
        )
    })
}

/// The MCP part, prepared: the profile read, the sockets bound, the spec
/// given the sockets, the relay and the configurations. Dropped without
/// being started, its runtime directory is removed.
pub(super) struct Prepared {
    tool_policy_id: Option<String>,
    profile_sha256: String,
    profile: Profile,
    runtime: RuntimeDir,
    listeners: Vec<(String, UnixListener)>,
    audit: PathBuf,
    pins: PathBuf,
}

/// The mediator serving a session. Dropped without [`Running::finish`],
/// its server stops (its thread ends when the stop signal's sender goes)
/// and its sockets are removed.
pub(super) struct Running {
    tool_policy_id: Option<String>,
    profile_sha256: String,
    server: SocketServer,
    audit: PathBuf,
    _runtime: RuntimeDir,
}

/// What the mediator reports at the end.
#[derive(Debug)]
pub struct McpReport {
    /// The tool policy, if the door named one.
    pub tool_policy_id: Option<String>,
    /// The profile's SHA-256 (hex).
    pub profile_sha256: String,
    /// The audit journal.
    pub journal: PathBuf,
    /// Connections: streams served, handed over, hand-overs refused.
    pub connections: (u64, u64, u64),
    /// The audit's summary, or the code and message of why it has none.
    pub result: Result<Summary, (ErrorCode, String)>,
}

/// A runtime directory of sockets, removed when dropped.
struct RuntimeDir(PathBuf);

impl Drop for RuntimeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn relay_fault(summary: &str, detail: impl std::fmt::Display) -> AttachError {
    AttachError::new(MCP_RELAY_FAILED, summary, detail)
}

fn random_hex(n: usize) -> Result<String, AttachError> {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).map_err(|e| relay_fault("no randomness", e))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// `pid starttime` of a process (`/proc/<pid>/stat` field 22), which no
/// other process has while this one lives.
fn owner_mark(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses.
    let after = stat.rsplit_once(')')?.1;
    let start = after.split_whitespace().nth(19)?;
    Some(format!("{pid} {start}"))
}

/// Removes the runtime directories (`run-*`) of sessions whose process is
/// gone (killed before it could clean up): their `owner` names a process
/// that no longer exists. Best effort.
fn remove_stale(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        if !name.to_str().is_some_and(|n| n.starts_with("run-")) {
            continue;
        }
        // No owner yet (a session between making and marking it), or one
        // that cannot be judged: left alone.
        let Ok(owner) = std::fs::read_to_string(e.path().join("owner")) else {
            continue;
        };
        let mut parts = owner.split_whitespace();
        let (Some(pid), Some(_), None) = (
            parts.next().and_then(|p| p.parse::<u32>().ok()),
            parts.next(),
            parts.next(),
        ) else {
            continue;
        };
        let alive = owner_mark(pid).is_some_and(|now| now == owner.trim());
        if !alive {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl RuntimeDir {
    /// A new `run-<random>` directory under `base`, marked with this
    /// process (so a later session can tell it is stale once this process
    /// is gone); stale ones are removed first.
    fn claim(base: &Path) -> Result<RuntimeDir, AttachError> {
        private_dir(base)?;
        remove_stale(base);
        let dir = RuntimeDir(base.join(format!("run-{}", random_hex(8)?)));
        private_dir(&dir.0)?;
        // Written whole, then renamed into place: never seen half-written.
        let mark = owner_mark(std::process::id()).unwrap_or_else(|| "unknown".into());
        std::fs::write(dir.0.join("owner.tmp"), mark)
            .and_then(|()| std::fs::rename(dir.0.join("owner.tmp"), dir.0.join("owner")))
            .map_err(|e| {
                relay_fault(
                    "the MCP runtime directory could not be marked",
                    format!("{}: {e}", dir.0.display()),
                )
            })?;
        Ok(dir)
    }
}

impl Prepared {
    /// Reads the profile, binds one socket per server and gives the spec
    /// the sockets, the relay and the harness configurations.
    pub(super) fn prepare(
        input: McpInput,
        spec: &mut impl SpecParts,
    ) -> Result<Prepared, AttachError> {
        let McpInput {
            profile: file,
            tool_policy_id,
            runtime_base,
            relay,
            audit,
            pins,
        } = input;
        let bytes = crate::protected::read(
            &file,
            crate::protected::Requirements {
                max_bytes: glove_mcp::profile::MAX_PROFILE_BYTES as u64,
                mode: 0o600,
            },
        )
        .map_err(|r| {
            AttachError::new(r.code(), "the MCP profile could not be read", r.message())
        })?;
        let profile = Profile::decode(&bytes).map_err(|r| {
            AttachError::new(
                r.code(),
                "the MCP profile is invalid",
                format!("{}: {}", file.display(), r.message()),
            )
        })?;
        let relay = std::fs::canonicalize(&relay).map_err(|e| {
            relay_fault(
                "the relay executable is missing",
                format!("{}: {e}", relay.display()),
            )
        })?;
        let runtime = RuntimeDir::claim(&runtime_base)?;
        let mut listeners = Vec::new();
        for (i, s) in profile.servers().iter().enumerate() {
            // Short names: a socket path is at most 107 bytes.
            let path = runtime.0.join(format!("{i}.sock"));
            let bound = UnixListener::bind(&path).and_then(|l| {
                // The agent's user inside the sandbox is another host user
                // (for root, nobody); the socket is reached only through
                // its bind (the directory is private).
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).map(|()| l)
            });
            let l = bound.map_err(|e| {
                relay_fault(
                    "an MCP socket could not be bound",
                    format!("{}: {e}", path.display()),
                )
            })?;
            spec.bind_socket(Bind {
                source: path.display().to_string(),
                target: format!("{RELAY_SOCKET_DIR}/{}.sock", s.id()),
            });
            listeners.push((s.id().to_owned(), l));
        }
        spec.bind_read_only(Bind {
            source: relay.display().to_string(),
            target: RELAY_EXECUTABLE.into(),
        });
        let ids: Vec<&str> = profile.servers().iter().map(|s| s.id()).collect();
        for dir in harness_config_directories() {
            spec.seed_dir(dir.to_owned());
        }
        for (path, text) in harness_configs(&ids) {
            spec.seed_file(SeedFile {
                path,
                text,
                executable: false,
            });
        }
        Ok(Prepared {
            tool_policy_id,
            profile_sha256: Sha256Digest::of(&bytes).to_hex(),
            profile,
            runtime,
            listeners,
            audit,
            pins,
        })
    }

    /// Starts the mediator on its own thread; returns once its upstreams
    /// are ready (or failed).
    pub(super) fn start(self, session_id: &SessionId) -> Result<Running, AttachError> {
        let Prepared {
            tool_policy_id,
            profile_sha256,
            profile,
            runtime,
            listeners,
            audit,
            pins,
        } = self;
        let config = MediatorConfig {
            session_id: session_id.clone(),
            audit_path: audit.clone(),
            audit_spec: journal_spec(AUDIT_MAX_BYTES, AUDIT_MAX_RECORDS),
            pin_file: Some(pins),
        };
        let server = SocketServer::start(profile, config, listeners)
            .map_err(|e| AttachError::new(e.code(), "the MCP mediator could not be started", &e))?;
        Ok(Running {
            tool_policy_id,
            profile_sha256,
            server,
            audit,
            _runtime: runtime,
        })
    }
}

impl Running {
    /// Stops the mediator and its upstreams; removes the sockets.
    pub(super) fn finish(self) -> McpReport {
        let counts = self.server.connections();
        let result = self.server.finish().map_err(|e| {
            tracing::error!(code = e.code().as_str(), "MCP mediator: {e}");
            (e.code(), e.to_string())
        });
        McpReport {
            tool_policy_id: self.tool_policy_id,
            profile_sha256: self.profile_sha256,
            journal: self.audit,
            connections: counts.get(),
            result,
        }
    }
}

impl McpReport {
    /// The receipt's `mcp` member. A mediator that could not report gives
    /// no counts, a zero head and `audit_failed`.
    pub fn receipt(&self) -> McpReceipt {
        let tool_policy_id = self.tool_policy_id.clone().unwrap_or_default();
        let profile_sha256 = self.profile_sha256.clone();
        match &self.result {
            Ok(s) => McpReceipt {
                tool_policy_id,
                profile_sha256,
                allowed: s.allowed,
                denied: s.denied,
                upstream_errors: s.upstream_errors,
                dropped: s.dropped,
                pinned: s.pinned,
                cancelled: s.cancelled,
                journal_records: s.journal_records,
                journal_head: glove_types::digest::to_hex(&s.journal_head),
                audit_failed: s.audit_failed,
            },
            Err(_) => failure_receipt(tool_policy_id, profile_sha256),
        }
    }
}

/// The receipt's `mcp` member of a mediator that could not report: no
/// counts, a zero head, `audit_failed`.
pub fn failure_receipt(tool_policy_id: String, profile_sha256: String) -> McpReceipt {
    McpReceipt {
        tool_policy_id,
        profile_sha256,
        allowed: 0,
        denied: 0,
        upstream_errors: 0,
        dropped: 0,
        pinned: 0,
        cancelled: 0,
        journal_records: 0,
        journal_head: "0".repeat(64),
        audit_failed: true,
    }
}
