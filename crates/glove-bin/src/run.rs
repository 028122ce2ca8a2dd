//! `glove run`: contain a command as `glove exec` does and mediate its MCP
//! tool calls (`docs/mcp.md`).
//!
//! Before the launch: the profile is read as a protected file and decoded;
//! a private runtime directory (mode 0700) gets one listening Unix socket
//! per upstream server; the spec binds each socket read-only at
//! `/run/glove/mcp/<server>.sock`, this executable read-only at
//! [`RELAY_EXECUTABLE`], and seeds the agent's home with the MCP
//! configuration of the harnesses that read one (Codex's
//! `~/.codex/config.toml`, Claude Code's `~/.claude.json` and
//! `~/.mcp.json`): each upstream is a "stdio server" running
//! `glove mcp-relay <server>`, which connects to its socket and copies
//! bytes both ways. The sandbox is then built with the command held; a
//! runtime thread starts the mediator — the upstreams, their handshakes
//! and pinned tool lists — and serves every connection on a server's
//! socket scoped to that server; only then is the command released. When
//! the mediator cannot start, the command never runs.
//!
//! At the end the mediator stops its upstreams, and the outcome gets an
//! `mcp` member: the audit's counts, the journal and its head.

/// `println!` that ignores a closed standard output (`… | head`).
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

use crate::exec::ExecArgs;
use glove_mcp::sockets::SocketServer;
use glove_mcp::{journal_spec, MediatorConfig, Profile, Summary};
use glove_sandbox::spec::{Bind, LaunchSpec, SeedFile};
use glove_types::codes::mcp::{MCP_PROFILE_INVALID, MCP_RELAY_FAILED};
use glove_types::ids::SessionId;
use glove_types::Rejection;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

pub use glove_mcp::sockets::{harness_configs, RELAY_EXECUTABLE, RELAY_SOCKET_DIR};

/// The audit journal's bounds for one `glove run` session.
const AUDIT_MAX_BYTES: u64 = 64 << 20;
const AUDIT_MAX_RECORDS: u64 = 1_000_000;

/// Arguments of `glove run`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct RunCommand {
    /// Pin-file commands.
    #[command(subcommand)]
    pub pins: Option<RunSubcommand>,
    /// Running a command.
    #[command(flatten)]
    pub run: RunArgs,
}

/// `glove run pins …`
#[derive(Debug, clap::Subcommand)]
pub enum RunSubcommand {
    /// Show or approve the pinned tool definitions.
    #[command(subcommand)]
    Pins(PinsCommand),
    /// Run a scripted agent in the sandbox against a built-in MCP server
    /// (this glove), with a policy that allows two of its three tools; show
    /// what it was allowed and refused, and the audit journal.
    Demo(RunDemo),
}

/// Arguments of `glove run demo`.
#[derive(Debug, clap::Args)]
pub struct RunDemo {
    /// Print glove run's outcome record as one JSON object on standard
    /// output (the agent's lines go to standard error; no audit listing).
    #[arg(long)]
    pub json: bool,
}

/// `glove run pins …`
#[derive(Debug, clap::Subcommand)]
pub enum PinsCommand {
    /// Show the pin file: each server's pinned digests and the digests
    /// seen that differ (pending approval).
    Show(PinsShow),
    /// Pin the pending digest (or the one given) of a tool, or with no
    /// --tool of the server.
    Approve(PinsApprove),
}

/// Arguments of `glove run pins show`.
#[derive(Debug, clap::Args)]
pub struct PinsShow {
    /// The pin file [default: $XDG_STATE_HOME/glove/mcp/pins.json].
    #[arg(long, value_name = "FILE")]
    pub pins: Option<PathBuf>,
    /// One JSON object (the pin file's own encoding).
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `glove run pins approve`.
#[derive(Debug, clap::Args)]
pub struct PinsApprove {
    /// The pin file [default: $XDG_STATE_HOME/glove/mcp/pins.json].
    #[arg(long, value_name = "FILE")]
    pub pins: Option<PathBuf>,
    /// The server id.
    #[arg(long, value_name = "SERVER")]
    pub server: String,
    /// The tool (its upstream name); without it, the server digest.
    #[arg(long, value_name = "TOOL")]
    pub tool: Option<String>,
    /// The digest to pin (64 hex characters) [default: the pending one].
    #[arg(long, value_name = "SHA256")]
    pub digest: Option<String>,
    /// One JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `glove run` with a command.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The MCP profile (docs/mcp.md): a protected file (a regular file of
    /// mode 0600 owned by you) naming the upstream servers and the tool
    /// policy.
    #[arg(long, value_name = "PROFILE_FILE", required = true)]
    pub profile: Option<PathBuf>,
    /// Where the MCP audit journal is written (a new file in an existing
    /// directory of mode 0700) [default: a new file in
    /// $XDG_STATE_HOME/glove/mcp].
    #[arg(long, value_name = "FILE")]
    pub audit_journal: Option<PathBuf>,
    /// The pin file (in a directory of mode 0700) [default:
    /// $XDG_STATE_HOME/glove/mcp/pins.json].
    #[arg(long, value_name = "FILE")]
    pub pins: Option<PathBuf>,
    /// Everything `glove exec` takes.
    #[command(flatten)]
    pub exec: ExecArgs,
}

fn invalid(m: impl Into<String>) -> Rejection {
    Rejection::new(MCP_PROFILE_INVALID, m)
}

/// `$XDG_STATE_HOME/glove/mcp`, else `$HOME/.local/state/glove/mcp` (made
/// with mode 0700).
fn state_dir() -> Result<PathBuf, Rejection> {
    let base = match std::env::var_os("XDG_STATE_HOME").filter(|v| Path::new(v).is_absolute()) {
        Some(v) => PathBuf::from(v),
        None => match std::env::var_os("HOME").filter(|v| Path::new(v).is_absolute()) {
            Some(h) => PathBuf::from(h).join(".local/state"),
            None => {
                return Err(invalid(
                    "neither XDG_STATE_HOME nor HOME is set: give --audit-journal and --pins",
                ))
            }
        },
    };
    private_dir(&base.join("glove/mcp"))
}

fn private_dir(dir: &Path) -> Result<PathBuf, Rejection> {
    glove_mcp::sockets::private_dir(dir).map_err(invalid)?;
    Ok(dir.to_owned())
}

fn random_hex(n: usize) -> Result<String, Rejection> {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).map_err(|e| invalid(format!("random: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// The runtime directory for the sockets: `/run/glove/mcp` for root,
/// `$XDG_RUNTIME_DIR/glove/mcp` otherwise, else the state directory.
fn runtime_base() -> Result<PathBuf, Rejection> {
    if rustix::process::geteuid().is_root() {
        return private_dir(Path::new("/run/glove/mcp"));
    }
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| Path::new(v).is_absolute()) {
        Some(v) => private_dir(&PathBuf::from(v).join("glove/mcp")),
        None => Ok(state_dir()?.join("run")).and_then(|d| private_dir(&d)),
    }
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

/// Removes the runtime directories (`run-*`) of `glove run`s that are
/// gone (killed before they could clean up): their `owner` names a
/// process that no longer exists. Best effort.
fn remove_stale(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        if !name.to_str().is_some_and(|n| n.starts_with("run-")) {
            continue;
        }
        // No owner yet (a run between making and marking it), or one that
        // cannot be judged: left alone.
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

/// A read profile with its sockets bound, before the launch.
pub struct Prepared {
    profile: Profile,
    session_id: SessionId,
    runtime: PathBuf,
    listeners: Vec<(String, UnixListener, PathBuf)>,
    audit: PathBuf,
    pins: PathBuf,
}

/// The mediator serving a running sandbox.
pub struct Running {
    server: SocketServer,
    audit: PathBuf,
    runtime: PathBuf,
}

/// Reads the profile and binds the sockets.
pub fn prepare(a: &RunArgs) -> Result<Prepared, Rejection> {
    let Some(file) = &a.profile else {
        return Err(invalid("--profile is required"));
    };
    let bytes = crate::protected::read(
        file,
        crate::protected::Requirements {
            max_bytes: glove_mcp::profile::MAX_PROFILE_BYTES as u64,
            mode: 0o600,
        },
    )?;
    let profile = Profile::decode(&bytes)
        .map_err(|r| Rejection::new(r.code(), format!("{}: {}", file.display(), r.message())))?;
    let session_id = SessionId::new(format!("run-{}", random_hex(8)?))?;
    let audit = match &a.audit_journal {
        Some(j) => j.clone(),
        None => state_dir()?.join(format!("{session_id}.journal")),
    };
    let pins = match &a.pins {
        Some(p) => p.clone(),
        None => state_dir()?.join("pins.json"),
    };
    let base = runtime_base()?;
    remove_stale(&base);
    let runtime = base.join(session_id.as_str());
    private_dir(&runtime)?;
    // Whose directory this is, for a later run to tell whether it is stale
    // (written whole, then renamed into place: never seen half-written).
    let mark = owner_mark(std::process::id()).unwrap_or_else(|| "unknown".into());
    std::fs::write(runtime.join("owner.tmp"), mark)
        .and_then(|()| std::fs::rename(runtime.join("owner.tmp"), runtime.join("owner")))
        .map_err(|e| {
            let _ = std::fs::remove_dir_all(&runtime);
            Rejection::new(MCP_RELAY_FAILED, format!("{}: {e}", runtime.display()))
        })?;
    let mut listeners = Vec::new();
    for (i, s) in profile.servers().iter().enumerate() {
        // Short names: a socket path is at most 107 bytes.
        let path = runtime.join(format!("{i}.sock"));
        let l = UnixListener::bind(&path).map_err(|e| {
            let _ = std::fs::remove_dir_all(&runtime);
            Rejection::new(MCP_RELAY_FAILED, format!("{}: {e}", path.display()))
        })?;
        // The agent's user inside the sandbox is another host user (for
        // root, nobody); the socket is reached only through its bind (the
        // directory is private).
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).map_err(|e| {
            let _ = std::fs::remove_dir_all(&runtime);
            Rejection::new(MCP_RELAY_FAILED, format!("{}: {e}", path.display()))
        })?;
        listeners.push((s.id().to_owned(), l, path));
    }
    Ok(Prepared {
        profile,
        session_id,
        runtime,
        listeners,
        audit,
        pins,
    })
}

impl Prepared {
    /// This executable, bound read-only as the relay.
    pub fn relay_bind() -> Result<Bind, Rejection> {
        let exe = std::env::current_exe()
            .and_then(std::fs::canonicalize)
            .map_err(|e| Rejection::new(MCP_RELAY_FAILED, format!("this executable: {e}")))?;
        Ok(Bind {
            source: exe.display().to_string(),
            target: RELAY_EXECUTABLE.into(),
        })
    }

    /// Binds the sockets and seeds the harness configurations.
    pub fn attach(&self, spec: &mut LaunchSpec) {
        for (server, _, path) in &self.listeners {
            spec.sockets.push(Bind {
                source: path.display().to_string(),
                target: format!("{RELAY_SOCKET_DIR}/{server}.sock"),
            });
        }
        let ids: Vec<&str> = self.listeners.iter().map(|(s, ..)| s.as_str()).collect();
        for dir in glove_mcp::sockets::harness_config_directories() {
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
    }

    /// Removes the runtime directory (a launch that failed).
    pub fn abandon(self) {
        let _ = std::fs::remove_dir_all(&self.runtime);
    }

    /// Starts the mediator on a runtime thread; returns once its upstreams
    /// are ready (or failed).
    pub fn start(self) -> Result<Running, Rejection> {
        let Prepared {
            profile,
            session_id,
            runtime,
            listeners,
            audit,
            pins,
        } = self;
        let config = MediatorConfig {
            session_id,
            audit_path: audit.clone(),
            audit_spec: journal_spec(AUDIT_MAX_BYTES, AUDIT_MAX_RECORDS),
            pin_file: Some(pins),
        };
        let listeners = listeners.into_iter().map(|(s, l, _)| (s, l)).collect();
        match SocketServer::start(profile, config, listeners) {
            Ok(server) => Ok(Running {
                server,
                audit,
                runtime,
            }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&runtime);
                Err(Rejection::new(e.code(), e.to_string()))
            }
        }
    }
}

impl Running {
    /// Stops the mediator; its summary as the outcome's `mcp` member.
    pub fn finish(self) -> serde_json::Value {
        let journal = self.audit.display().to_string();
        let counts = self.server.connections();
        let r = self.server.finish();
        let _ = std::fs::remove_dir_all(&self.runtime);
        match r {
            Ok(s) => {
                let mut v = summary_json(&s, &journal);
                let (streams, handed_over, refused) = counts.get();
                v["connections"] = serde_json::json!({
                    "streams": streams,
                    "handed_over": handed_over,
                    "handoffs_refused": refused,
                });
                v
            }
            Err(e) => serde_json::json!({
                "journal": journal,
                "error": {"code": e.code().as_str(), "message": e.to_string()},
            }),
        }
    }
}

/// The outcome's `mcp` member.
pub fn summary_json(s: &Summary, journal: &str) -> serde_json::Value {
    serde_json::json!({
        "allowed": s.allowed,
        "denied": s.denied,
        "upstream_errors": s.upstream_errors,
        "dropped": s.dropped,
        "pinned": s.pinned,
        "cancelled": s.cancelled,
        "unjournaled": s.unjournaled,
        "audit_failed": s.audit_failed,
        "journal": journal,
        "journal_records": s.journal_records,
        "journal_head": glove_types::digest::to_hex(&s.journal_head),
    })
}

/// One line for a person: what the mediator decided.
pub fn summary_line(v: &serde_json::Value) -> String {
    if let Some(e) = v.get("error") {
        return format!(
            "glove: MCP mediator failed: {} ({})",
            e["message"].as_str().unwrap_or(""),
            e["code"].as_str().unwrap_or("")
        );
    }
    let failed = if v["audit_failed"] == true {
        " AUDIT FAILED (everything after the failure was refused);"
    } else {
        ""
    };
    format!(
        "glove: MCP:{failed} {} allowed, {} denied, {} upstream errors, {} dropped; audit {} ({} records, head {})",
        v["allowed"],
        v["denied"],
        v["upstream_errors"],
        v["dropped"],
        v["journal"].as_str().unwrap_or(""),
        v["journal_records"],
        v["journal_head"].as_str().unwrap_or("")
    )
}

/// Runs `glove run …`.
pub fn command(c: RunCommand) -> i32 {
    match c.pins {
        Some(RunSubcommand::Pins(PinsCommand::Show(a))) => pins_show(&a),
        Some(RunSubcommand::Pins(PinsCommand::Approve(a))) => pins_approve(&a),
        Some(RunSubcommand::Demo(a)) => crate::run_demo::run(a.json),
        None => crate::exec::run_mcp(c.run),
    }
}

fn pins_path(p: &Option<PathBuf>) -> Result<PathBuf, Rejection> {
    match p {
        Some(p) => Ok(p.clone()),
        None => Ok(state_dir()?.join("pins.json")),
    }
}

fn pins_show(a: &PinsShow) -> i32 {
    let file = match pins_path(&a.pins).and_then(|p| glove_mcp::pin::show(&p)) {
        Ok(f) => f,
        Err(r) => return crate::cli::fail(&r, a.json, None),
    };
    if a.json {
        match serde_json::from_slice::<serde_json::Value>(&file.encode()) {
            Ok(v) => crate::report::print_json(&v),
            Err(e) => eprintln!("error[mcp_pin_file_invalid]: {e}"),
        }
        return 0;
    }
    if file.servers.is_empty() {
        out!("no pins");
    }
    for (server, p) in &file.servers {
        let d = |x: &Option<glove_types::Sha256Digest>| {
            x.map(|d| d.to_hex()).unwrap_or_else(|| "-".into())
        };
        out!("server {server}: digest {}", d(&p.server));
        if p.pending_server.is_some() {
            out!(
                "  PENDING server digest {} (glove run pins approve --server {server})",
                d(&p.pending_server)
            );
        }
        // Each digest with the definition behind it, when the file kept
        // it, every hidden or control character written out.
        let definition = |digest: &glove_types::Sha256Digest| match p.definitions.get(digest) {
            Some(def) => {
                for line in glove_mcp::pin::render_definition(def) {
                    out!("      {line}");
                }
            }
            None => out!("      (definition not kept)"),
        };
        for (tool, digest) in &p.tools {
            out!("  {tool:<32} {digest}");
            definition(digest);
        }
        for (tool, digest) in &p.pending {
            out!(
                "  {tool:<32} PENDING {digest} (glove run pins approve --server {server} --tool {tool})"
            );
            definition(digest);
        }
    }
    0
}

fn pins_approve(a: &PinsApprove) -> i32 {
    let digest = match a.digest.as_deref().map(glove_types::Sha256Digest::parse) {
        None => None,
        Some(Ok(d)) => Some(d),
        Some(Err(r)) => return crate::cli::fail(&r, a.json, None),
    };
    let r = pins_path(&a.pins)
        .and_then(|p| glove_mcp::pin::approve(&p, &a.server, a.tool.as_deref(), digest));
    match r {
        Ok(d) => {
            if a.json {
                crate::report::print_json(&serde_json::json!({
                    "server": a.server, "tool": a.tool, "pinned": d.to_hex(),
                }));
            } else {
                match &a.tool {
                    Some(t) => out!("pinned {}/{t} at {d}", a.server),
                    None => out!("pinned server {} at {d}", a.server),
                }
            }
            0
        }
        Err(r) => crate::cli::fail(&r, a.json, None),
    }
}
