//! A managed session's MCP mediation: the plan's tool policy (at most
//! one), its MCP profile read as a protected file, the sockets bound into
//! the sandbox with the relay and the harness configurations, the mediator
//! started before the agent is released, and the summary the receipt
//! commits to (see `docs/mcp.md`).
//!
//! A plan only names the tool policy by id; the servers, rules and pins
//! all come from the operator's profile, so a plan cannot add any.

use glove_mcp::sockets::{
    harness_config_directories, harness_configs, SocketServer, RELAY_EXECUTABLE, RELAY_SOCKET_DIR,
};
use glove_mcp::{journal_spec, MediatorConfig, Profile, Summary};
use glove_sandbox::spec::{Bind, SeedFile};
use glove_sandbox::wire::SpecWire;
use glove_types::codes::control::{SESSION_MCP_FAILED, SESSION_TOOL_POLICY_CONFLICT};
use glove_types::ids::SessionId;
use glove_types::plan::AdmittedPlan;
use glove_types::policy::{ToolPolicy, ValidatedPolicy};
use glove_types::receipt::McpReceipt;
use glove_types::{Rejection, Sha256Digest};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// The audit journal's bounds for one session.
const AUDIT_MAX_BYTES: u64 = 64 << 20;
const AUDIT_MAX_RECORDS: u64 = 1_000_000;

fn failed(m: impl Into<String>) -> Rejection {
    Rejection::new(SESSION_MCP_FAILED, m)
}

/// The tool policy a plan's session is mediated under: `None` when it
/// names none with a definition (an id the session policy lists without
/// a `tool_policies` entry grants no tools: the session gets no mediator
/// and no MCP server); more than one with a definition is refused.
pub(super) fn tool_policy_for<'a>(
    policy: &'a ValidatedPolicy,
    admitted: &AdmittedPlan,
) -> Result<Option<&'a ToolPolicy>, Rejection> {
    let mut found = None;
    for id in admitted.tool_policy_ids() {
        let Some(t) = policy.tool_policies().iter().find(|t| t.id() == id) else {
            continue;
        };
        if found.is_some() {
            return Err(Rejection::new(
                SESSION_TOOL_POLICY_CONFLICT,
                "the plan names more than one tool policy with a definition",
            )
            .at("tool_policy_ids"));
        }
        found = Some(t);
    }
    Ok(found)
}

/// A session's mediation before the agent is released: the profile read,
/// the sockets bound, the spec given the sockets, the relay and the
/// configurations.
pub(super) struct McpStart {
    tool_policy_id: String,
    profile_sha256: String,
    profile: Option<Profile>,
    /// Removed when dropped unless the mediator took it over.
    runtime: PathBuf,
    listeners: Vec<(String, UnixListener)>,
}

impl Drop for McpStart {
    fn drop(&mut self) {
        if !self.runtime.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.runtime);
        }
    }
}

/// The mediator serving a running session. Dropped without
/// [`McpRunning::finish`], its server stops (its thread ends when the stop
/// signal's sender goes) and its sockets are removed.
pub(super) struct McpRunning {
    tool_policy_id: String,
    profile_sha256: String,
    server: Option<SocketServer>,
    runtime: PathBuf,
}

impl Drop for McpRunning {
    fn drop(&mut self) {
        if !self.runtime.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.runtime);
        }
    }
}

fn random_hex(n: usize) -> Result<String, Rejection> {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).map_err(|e| failed(format!("random: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

fn private_dir(dir: &Path) -> Result<(), Rejection> {
    glove_mcp::sockets::private_dir(dir).map_err(failed)
}

impl McpStart {
    /// Reads the tool policy's profile and binds its sockets under
    /// `runtime_dir`; `relay` is the `glove` executable bound into the
    /// sandbox as the relay.
    pub(super) fn prepare(
        tool: &ToolPolicy,
        runtime_dir: &Path,
        relay: &Path,
        spec: &mut SpecWire,
    ) -> Result<McpStart, Rejection> {
        let bytes = crate::protected::read(
            Path::new(tool.profile_path()),
            crate::protected::Requirements {
                max_bytes: glove_mcp::profile::MAX_PROFILE_BYTES as u64,
                mode: 0o600,
            },
        )
        .map_err(|r| {
            tracing::warn!(code = r.code().as_str(), "MCP profile: {}", r.message());
            failed(format!(
                "{}: the tool policy's MCP profile could not be read",
                r.code().as_str()
            ))
        })?;
        let profile = Profile::decode(&bytes).map_err(|r| {
            failed(format!(
                "{}: the tool policy's MCP profile: {}",
                r.code().as_str(),
                r.message()
            ))
        })?;
        let relay = std::fs::canonicalize(relay)
            .map_err(|e| failed(format!("the relay executable {}: {e}", relay.display())))?;
        let runtime = runtime_dir.join("mcp").join(random_hex(8)?);
        private_dir(&runtime)?;
        let mut listeners = Vec::new();
        for (i, s) in profile.servers().iter().enumerate() {
            let path = runtime.join(format!("{i}.sock"));
            let l = UnixListener::bind(&path).map_err(|e| {
                let _ = std::fs::remove_dir_all(&runtime);
                failed(format!("MCP socket {}: {e}", path.display()))
            })?;
            {
                // The agent's user is another host user; the directory is
                // private, so only the bind reaches the socket.
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
                    .map_err(|e| failed(format!("MCP socket {}: {e}", path.display())))?;
            }
            spec.sockets.push(Bind {
                source: path.display().to_string(),
                target: format!("{RELAY_SOCKET_DIR}/{}.sock", s.id()),
            });
            listeners.push((s.id().to_owned(), l));
        }
        spec.read_only_binds.push(Bind {
            source: relay.display().to_string(),
            target: RELAY_EXECUTABLE.into(),
        });
        let ids: Vec<&str> = profile.servers().iter().map(|s| s.id()).collect();
        for dir in harness_config_directories() {
            if !spec.seed_dirs.iter().any(|d| d == dir) {
                spec.seed_dirs.push(dir.to_owned());
            }
        }
        for (path, text) in harness_configs(&ids) {
            spec.seed_files.retain(|f| f.path != path);
            spec.seed_files.push(SeedFile {
                path,
                text,
                executable: false,
            });
        }
        Ok(McpStart {
            tool_policy_id: tool.id().as_str().to_owned(),
            profile_sha256: Sha256Digest::of(&bytes).to_hex(),
            profile: Some(profile),
            runtime,
            listeners,
        })
    }

    /// Starts the mediator; returns once its upstreams are ready. The
    /// audit journal is `<journal_dir>/<session>.journal`, the pins
    /// `<journal_dir>/pins/<tool policy>.json`.
    pub(super) fn start(
        mut self,
        session_id: &SessionId,
        journal_dir: &Path,
    ) -> Result<McpRunning, Rejection> {
        let pins = journal_dir.join("pins");
        private_dir(journal_dir).and_then(|()| private_dir(&pins))?;
        let config = MediatorConfig {
            session_id: session_id.clone(),
            audit_path: journal_dir.join(format!("{}.journal", session_id.as_str())),
            audit_spec: journal_spec(AUDIT_MAX_BYTES, AUDIT_MAX_RECORDS),
            pin_file: Some(pins.join(format!("{}.json", self.tool_policy_id))),
        };
        let (Some(profile), listeners) = (self.profile.take(), std::mem::take(&mut self.listeners))
        else {
            return Err(failed("the MCP mediator was started twice"));
        };
        let runtime = std::mem::take(&mut self.runtime);
        let (tool_policy_id, profile_sha256) = (
            std::mem::take(&mut self.tool_policy_id),
            std::mem::take(&mut self.profile_sha256),
        );
        match SocketServer::start(profile, config, listeners) {
            Ok(server) => Ok(McpRunning {
                tool_policy_id,
                profile_sha256,
                server: Some(server),
                runtime,
            }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&runtime);
                tracing::warn!(code = e.code().as_str(), "MCP mediator: {e}");
                Err(failed(format!(
                    "{}: the MCP mediator could not be started",
                    e.code().as_str()
                )))
            }
        }
    }
}

impl McpRunning {
    /// Stops the mediator; the receipt's `mcp` member.
    pub(super) fn finish(mut self) -> McpReceipt {
        let r = match self.server.take() {
            Some(s) => s.finish(),
            None => Err(glove_mcp::McpError::AuditFailed),
        };
        let _ = std::fs::remove_dir_all(std::mem::take(&mut self.runtime));
        let (tool_policy_id, profile_sha256) = (
            std::mem::take(&mut self.tool_policy_id),
            std::mem::take(&mut self.profile_sha256),
        );
        match r {
            Ok(s) => receipt_of(&tool_policy_id, &profile_sha256, &s),
            Err(e) => {
                tracing::error!(code = e.code().as_str(), "MCP mediator: {e}");
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
        }
    }
}

fn receipt_of(tool_policy_id: &str, profile_sha256: &str, s: &Summary) -> McpReceipt {
    McpReceipt {
        tool_policy_id: tool_policy_id.to_owned(),
        profile_sha256: profile_sha256.to_owned(),
        allowed: s.allowed,
        denied: s.denied,
        upstream_errors: s.upstream_errors,
        dropped: s.dropped,
        pinned: s.pinned,
        cancelled: s.cancelled,
        journal_records: s.journal_records,
        journal_head: glove_types::digest::to_hex(&s.journal_head),
        audit_failed: s.audit_failed,
    }
}

/// The receipt's `mcp` member for a session recovered after gloved died:
/// its mediator died with gloved, so `audit_failed` is set and the profile
/// digest is unknown (zeros); the counts and the head are the audit
/// journal's valid prefix, replayed read-only, so the receipt still
/// commits to every decision that was durable. `None` when the session
/// has no journal (it had no tool policy, or died before its mediator).
pub(super) fn recovered(journal: &Path, tool_policy_id: Option<&str>) -> Option<McpReceipt> {
    use std::io::Read;
    let f = std::fs::File::open(journal).ok()?;
    let mut bytes = Vec::new();
    f.take(AUDIT_MAX_BYTES + 1).read_to_end(&mut bytes).ok()?;
    let spec = journal_spec(AUDIT_MAX_BYTES.max(bytes.len() as u64), AUDIT_MAX_RECORDS);
    let zeros = "0".repeat(64);
    let mut r = McpReceipt {
        tool_policy_id: tool_policy_id.unwrap_or("unknown").to_owned(),
        profile_sha256: zeros.clone(),
        allowed: 0,
        denied: 0,
        upstream_errors: 0,
        dropped: 0,
        pinned: 0,
        cancelled: 0,
        journal_records: 0,
        journal_head: zeros,
        audit_failed: true,
    };
    let Ok(replayed) = glove_journal::replay_bytes(&bytes, &spec, None) else {
        return Some(r);
    };
    for rec in &replayed.records {
        let Some(e) = bytes
            .get(rec.payload.clone())
            .and_then(|p| glove_mcp::AuditEvent::decode(p).ok())
        else {
            continue;
        };
        use glove_mcp::Decision as D;
        match e.decision {
            D::Allowed => r.allowed += 1,
            D::Denied => r.denied += 1,
            D::UpstreamError => r.upstream_errors += 1,
            D::Dropped => r.dropped += 1,
            D::Pinned => r.pinned += 1,
            D::Cancelled => r.cancelled += 1,
            // Refusals past the per-second budget: the receipt has no
            // member for their count (the journal has it).
            D::Counted => {}
        }
    }
    r.journal_records = replayed.records.len() as u64;
    r.journal_head = glove_types::digest::to_hex(&replayed.head);
    Some(r)
}
