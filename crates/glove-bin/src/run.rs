//! `glove run`: contain a command as `glove exec` does and mediate its MCP
//! tool calls (`docs/mcp.md`).
//!
//! The flags become the MCP part of the one assembly
//! ([`glove_control::assembly::mcp`]), which reads the profile as a
//! protected file, binds one socket per upstream server into the sandbox
//! with this executable as the relay and the harnesses' MCP
//! configurations, and starts the mediator — upstreams, handshakes and
//! pinned tool lists — before the command is released; when it cannot
//! start, the command never runs. At the end the outcome gets an `mcp`
//! member: the audit's counts, the journal and its head. This file holds
//! the flags, the pin-file commands and the rendering.

/// `println!` that ignores a closed standard output (`… | head`).
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

use crate::exec::ExecArgs;
use glove_control::assembly::mcp::{McpInput, McpReport};
use glove_types::codes::mcp::{MCP_PROFILE_INVALID, MCP_RELAY_FAILED};
use glove_types::ids::SessionId;
use glove_types::Rejection;
use std::path::{Path, PathBuf};

pub use glove_mcp::sockets::{harness_configs, RELAY_EXECUTABLE, RELAY_SOCKET_DIR};

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
#[command(mut_arg("command", |a| a.required(false).required_unless_present("agent")))]
pub struct RunArgs {
    /// The MCP profile (docs/mcp.md): a protected file (a regular file of
    /// mode 0600 owned by you) naming the upstream servers and the tool
    /// policy.
    #[arg(long, value_name = "PROFILE_FILE", required_unless_present = "agent")]
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
    /// An agent preset (docs/quickstart.md).
    #[command(flatten)]
    pub agent: crate::agent::AgentArgs,
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
    let base = crate::report::state_home().ok_or_else(|| {
        invalid("neither XDG_STATE_HOME nor HOME is set: give --audit-journal and --pins")
    })?;
    private_dir(&base.join("glove/mcp"))
}

fn private_dir(dir: &Path) -> Result<PathBuf, Rejection> {
    glove_control::assembly::mcp::private_dir(dir).map_err(|e| invalid(e.detail()))?;
    Ok(dir.to_owned())
}

/// The runtime directory for the sockets: `/run/glove/mcp` for root,
/// `$XDG_RUNTIME_DIR/glove/mcp` otherwise, else the state directory.
fn runtime_base() -> Result<PathBuf, Rejection> {
    if rustix::process::geteuid().is_root() {
        return Ok(PathBuf::from("/run/glove/mcp"));
    }
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| Path::new(v).is_absolute()) {
        Some(v) => Ok(PathBuf::from(v).join("glove/mcp")),
        None => Ok(state_dir()?.join("run")),
    }
}

/// The MCP part's input from `glove run`'s flags: the profile, the audit
/// journal (`--audit-journal`, else `<session>.journal` in the state
/// directory), the pin file, the runtime directory's base and this
/// executable as the relay.
pub fn mcp_input(a: &RunArgs, session_id: &SessionId) -> Result<McpInput, Rejection> {
    let Some(profile) = a.profile.clone() else {
        return Err(invalid("--profile is required"));
    };
    let audit = match &a.audit_journal {
        Some(j) => j.clone(),
        None => state_dir()?.join(format!("{session_id}.journal")),
    };
    let pins = match &a.pins {
        Some(p) => p.clone(),
        None => state_dir()?.join("pins.json"),
    };
    let relay = std::env::current_exe()
        .map_err(|e| Rejection::new(MCP_RELAY_FAILED, format!("this executable: {e}")))?;
    Ok(McpInput {
        profile,
        tool_policy_id: None,
        runtime_base: runtime_base()?,
        relay,
        audit,
        pins,
    })
}

/// The outcome's `mcp` member: the audit's counts, its journal and head,
/// and the connections served.
pub fn summary_json(r: &McpReport) -> serde_json::Value {
    let journal = r.journal.display().to_string();
    let s = match &r.result {
        Ok(s) => s,
        Err((code, message)) => {
            return serde_json::json!({
                "journal": journal,
                "error": {"code": code.as_str(), "message": message},
            })
        }
    };
    let (streams, handed_over, refused) = r.connections;
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
        "connections": {
            "streams": streams,
            "handed_over": handed_over,
            "handoffs_refused": refused,
        },
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
        None if c.run.agent.agent.is_some() => crate::agent::run(c.run),
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
