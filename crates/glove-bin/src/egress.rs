//! `glove exec --egress`: the egress policy file read into the assembly's
//! egress part ([`glove_control::assembly::egress`]), the proxy's summary
//! rendered, and `glove egress show`.

use glove_control::assembly::egress::{EgressInput, EgressReport};
use glove_egress::ProxyLimits;
use glove_types::codes::egress::EGRESS_POLICY_INVALID;
use glove_types::egress::settings::{EgressSettings, MAX_SETTINGS_BYTES};
use glove_types::ids::SessionId;
use glove_types::Rejection;
use std::path::{Path, PathBuf};

pub use glove_control::assembly::egress::read_extra_roots;

fn invalid(m: impl Into<String>) -> Rejection {
    Rejection::new(EGRESS_POLICY_INVALID, m)
}

/// The default journal directory: `$XDG_STATE_HOME/glove/egress`, else
/// `$HOME/.local/state/glove/egress` (made with mode 0700).
pub(crate) fn default_journal_dir() -> Result<PathBuf, Rejection> {
    let base = crate::report::state_home()
        .ok_or_else(|| invalid("neither XDG_STATE_HOME nor HOME is set: give --egress-journal"))?;
    let dir = base.join("glove/egress");
    glove_control::assembly::egress::journal_dir(&dir).map_err(|e| e.local())?;
    Ok(dir)
}

/// The egress part's input from `glove exec --egress FILE`: the policy
/// file read (bounded) and validated as a session policy's egress section
/// is, the extra roots read (see [`read_extra_roots`]), and the journal
/// (`journal`, else `<session>.journal` in the default directory).
pub fn input(
    file: &Path,
    journal: Option<&Path>,
    extra_roots: &[PathBuf],
    session_id: &SessionId,
) -> Result<EgressInput, Rejection> {
    let bytes = read_bounded(file)?;
    let settings = EgressSettings::from_json(&bytes)
        .map_err(|r| Rejection::new(r.code(), format!("{}: {}", file.display(), r.message())))?;
    let extra_roots = read_extra_roots(extra_roots)?;
    let journal = match journal {
        Some(j) => j.to_owned(),
        None => default_journal_dir()?.join(format!("{session_id}.journal")),
    };
    Ok(EgressInput {
        settings,
        extra_roots,
        journal,
    })
}

fn read_bounded(file: &Path) -> Result<Vec<u8>, Rejection> {
    use std::io::Read;
    let f = std::fs::File::open(file).map_err(|e| invalid(format!("{}: {e}", file.display())))?;
    let mut bytes = Vec::new();
    f.take(MAX_SETTINGS_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| invalid(format!("{}: {e}", file.display())))?;
    if bytes.len() > MAX_SETTINGS_BYTES {
        return Err(invalid(format!(
            "{} is larger than {MAX_SETTINGS_BYTES} bytes",
            file.display()
        )));
    }
    Ok(bytes)
}

/// The outcome's `egress` member: the proxy's summary and its journal.
pub fn summary_json(r: &EgressReport) -> serde_json::Value {
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
    serde_json::json!({
        "policy_id": s.policy_id.as_str(),
        "connections_allowed": s.connections_allowed,
        "connections_refused": s.connections_refused,
        "requests_allowed": s.requests_allowed,
        "requests_refused": s.requests_refused,
        "requests_failed": s.requests_failed,
        "connections_closed": s.connections_closed,
        "names_resolved": s.names_resolved,
        "refusals_unjournaled": s.refusals_unjournaled,
        "audit_failed": s.audit_failed,
        "bytes_up": s.bytes_up,
        "bytes_down": s.bytes_down,
        "journal": journal,
        "journal_records": s.journal_records,
        "journal_head": glove_types::digest::to_hex(&s.journal_head),
    })
}

/// Replays an egress journal read-only (see
/// [`crate::audit::replay_read_only`]): its events, decoded strictly, and
/// its head in hex.
fn replay_read_only(
    path: &std::path::Path,
    spec: &glove_journal::JournalSpec,
) -> Result<(Vec<glove_types::egress::event::EgressEvent>, String), Rejection> {
    use glove_types::codes::egress::{EGRESS_AUDIT_FAILED, EGRESS_EVENT_INVALID};
    let shown = path.display();
    let (bytes, replayed) = crate::audit::replay_read_only(path, spec, EGRESS_AUDIT_FAILED, |e| {
        let e = glove_egress::EgressError::from(e);
        Rejection::new(e.code(), format!("{shown}: {e}"))
    })?;
    let mut events = Vec::with_capacity(replayed.records.len());
    for rec in &replayed.records {
        let payload = bytes.get(rec.payload.clone()).unwrap_or(&[]);
        let e = glove_types::egress::event::EgressEvent::decode(payload).map_err(|x| {
            Rejection::new(
                EGRESS_EVENT_INVALID,
                format!("{shown}: record {}: {x}", rec.seq),
            )
        })?;
        events.push(e);
    }
    Ok((events, glove_types::digest::to_hex(&replayed.head)))
}

/// One line for a person: what left the sandbox.
pub fn summary_line(v: &serde_json::Value) -> String {
    if let Some(e) = v.get("error") {
        return format!(
            "glove: egress proxy failed: {} ({})",
            e["message"].as_str().unwrap_or(""),
            e["code"].as_str().unwrap_or("")
        );
    }
    let failed = if v["audit_failed"] == true {
        " AUDIT FAILED (everything after the failure was refused);"
    } else {
        ""
    };
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    // Every refusal: those journaled one by one and those past the
    // per-second budget, answered and only counted.
    let unjournaled = n("refusals_unjournaled");
    let refused = n("connections_refused")
        .saturating_add(n("requests_refused"))
        .saturating_add(unjournaled);
    let counted = if unjournaled > 0 {
        format!(" ({unjournaled} of them counted, not journaled one by one)")
    } else {
        String::new()
    };
    format!(
        "glove: egress {}:{failed} {} connections and {} requests allowed, {refused} refused{counted}; {} bytes up, {} down; journal {}",
        v["policy_id"].as_str().unwrap_or(""),
        v["connections_allowed"],
        v["requests_allowed"],
        v["bytes_up"],
        v["bytes_down"],
        v["journal"].as_str().unwrap_or("")
    )
}

/// `glove egress …`
#[derive(Debug, clap::Subcommand)]
pub enum EgressCommand {
    /// Replay an egress journal strictly (every record's chain, every
    /// event's canonical encoding) and show its events and its head, which
    /// a receipt's `egress.journal_head` names. Read-only: a torn tail
    /// fails and is left as it is.
    Show(ShowArgs),
}

/// Arguments of `glove egress show`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The egress journal.
    #[arg(long, value_name = "FILE")]
    pub journal: PathBuf,
    /// One JSON object: `{"events": [...], "records", "head"}`.
    #[arg(long)]
    pub json: bool,
}

/// Runs `glove egress …`.
pub fn command(c: &EgressCommand) -> i32 {
    match c {
        EgressCommand::Show(a) => show(a),
    }
}

fn show(a: &ShowArgs) -> i32 {
    let spec = ProxyLimits::default().journal_spec();
    let (events, head) = match replay_read_only(&a.journal, &spec) {
        Ok(v) => v,
        Err(r) => return crate::cli::fail(&r, a.json, None),
    };
    if a.json {
        let list: Vec<serde_json::Value> = events
            .iter()
            .filter_map(|e| e.encode().ok())
            .filter_map(|b| serde_json::from_slice(&b).ok())
            .collect();
        crate::report::print_json(&serde_json::json!({
            "records": events.len(),
            "head": head,
            "events": list,
        }));
        return 0;
    }
    println!(
        "egress journal {} ({} events, head {head})",
        a.journal.display(),
        events.len()
    );
    for e in &events {
        println!("{}", event_line(e));
    }
    0
}

/// One event of `glove egress show`, for a person. A decision reads
/// `allowed` or `REFUSED <code>`; the end of something allowed earlier
/// reads `ended` (a tunnel's or mapped connection's totals) or
/// `FAILED <code>` (a request that failed after it was let through), never
/// as a second decision.
pub fn event_line(e: &glove_types::egress::event::EgressEvent) -> String {
    use glove_types::egress::event::{Decision, EventKind, Phase};
    let what = match e.kind {
        EventKind::Connection => "connection",
        EventKind::Request => "request",
    };
    let code = e.code.as_deref().unwrap_or("");
    let verdict = match (e.phase, e.decision) {
        (Phase::Decision, Decision::Allowed) => "allowed".to_owned(),
        (Phase::Decision, Decision::Refused) => format!("REFUSED {code}"),
        (Phase::End, Decision::Allowed) => "ended".to_owned(),
        (Phase::End, Decision::Refused) => format!("FAILED {code}"),
    };
    let host = match glove_types::egress::Host::parse(&e.host) {
        Ok(h) => h.to_string(),
        Err(_) => e.host.clone(),
    };
    let method = e
        .method
        .as_deref()
        .map(|m| format!(" {m}"))
        .unwrap_or_default();
    let cred = e
        .credential
        .as_ref()
        .map(|c| format!(" credential {}", c.as_str()))
        .unwrap_or_default();
    format!(
        "{:>6}  {what:<10} {host}:{}{method}  {}{cred}  up {} B, down {} B, {} ms",
        e.seq,
        e.port,
        verdict.trim_end(),
        e.bytes_up,
        e.bytes_down,
        e.duration_ms
    )
}
