//! `glove audit verify|show`: an MCP audit journal, offline.
//!
//! Both replay the journal strictly and read-only (every record's
//! checksum and chain, every event's canonical encoding, sequence numbers
//! in order, one session; a torn tail is a failure, never repaired) and
//! name its head, which the outcome's (or a receipt's)
//! `mcp.journal_head` commits. `verify` says only whether it holds;
//! `show` renders every decision.

/// `println!` that ignores a closed standard output (`… | head`).
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

use glove_mcp::{AuditEvent, Decision, McpError};
use glove_types::Rejection;
use std::path::PathBuf;

/// `glove audit …`
#[derive(Debug, clap::Subcommand)]
pub enum AuditCommand {
    /// Replay an MCP audit journal strictly and print its record count and
    /// head (exit 0), or why it does not hold (exit 1). Read-only: the
    /// file is never changed.
    Verify(AuditArgs),
    /// Replay an MCP audit journal strictly and show its decisions.
    Show(AuditArgs),
}

/// Arguments of `glove audit verify|show`.
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// The MCP audit journal.
    #[arg(long, value_name = "FILE")]
    pub journal: PathBuf,
    /// The head digest the journal must end at (from a receipt or an
    /// outcome's `mcp.journal_head`).
    #[arg(long, value_name = "SHA256")]
    pub head: Option<String>,
    /// One JSON object.
    #[arg(long)]
    pub json: bool,
}

/// The largest journal read (a mediator writes at most 64 MiB).
const MAX_JOURNAL_BYTES: u64 = 1 << 30;

struct Replayed {
    events: Vec<AuditEvent>,
    head: String,
}

/// Reads a journal's bytes (a regular file of at most `spec.max_bytes`,
/// see [`glove_journal::read_bounded`]) and replays them,
/// read-only: nothing on disk is locked, repaired or removed (a command
/// that shows or verifies must not change evidence), and a torn tail (bytes
/// after the last whole record) fails with `failed` instead of being cut
/// off. `journal` names a replay failure in the caller's codes.
pub(crate) fn replay_read_only(
    path: &std::path::Path,
    spec: &glove_journal::JournalSpec,
    failed: glove_types::codes::ErrorCode,
    journal: impl Fn(glove_journal::JournalError) -> Rejection,
) -> Result<(Vec<u8>, glove_journal::Replayed), Rejection> {
    let shown = path.display();
    let bytes = glove_journal::read_bounded(path, spec.max_bytes).map_err(&journal)?;
    let replayed = glove_journal::replay_bytes(&bytes, spec, None).map_err(&journal)?;
    if let Some(t) = replayed.torn {
        return Err(Rejection::new(
            failed,
            format!(
                "{shown}: {} bytes after the last whole record (at offset {}): a torn or altered tail (or a writer still running), left as it is",
                t.len, t.offset
            ),
        ));
    }
    Ok((bytes, replayed))
}

/// Replays the MCP audit journal read-only (see [`replay_read_only`]).
fn replay(a: &AuditArgs) -> Result<Replayed, Rejection> {
    use glove_types::codes::mcp::{MCP_AUDIT_FAILED, MCP_EVENT_INVALID};
    let spec = glove_mcp::journal_spec(MAX_JOURNAL_BYTES, u64::MAX >> 1);
    let (bytes, replayed) = replay_read_only(&a.journal, &spec, MCP_AUDIT_FAILED, |e| {
        let e = McpError::Journal(e);
        Rejection::new(e.code(), format!("{}: {e}", a.journal.display()))
    })?;
    let head = glove_types::digest::to_hex(&replayed.head);
    let invalid = |m: String| Rejection::new(MCP_EVENT_INVALID, m);
    let mut events = Vec::with_capacity(replayed.records.len());
    for rec in &replayed.records {
        let payload = bytes.get(rec.payload.clone()).unwrap_or(&[]);
        let e = AuditEvent::decode(payload)
            .map_err(|x| invalid(format!("record {}: {}", rec.seq, x.message())))?;
        events.push(e);
    }
    for (i, e) in events.iter().enumerate() {
        if e.seq != i as u64 + 1 {
            return Err(invalid(format!(
                "event {} carries sequence number {}",
                i + 1,
                e.seq
            )));
        }
        if e.session_id != events[0].session_id {
            return Err(invalid(format!(
                "event {} belongs to session {}, not {}",
                e.seq, e.session_id, events[0].session_id
            )));
        }
    }
    if let Some(want) = &a.head {
        if want != &head {
            return Err(Rejection::new(
                MCP_AUDIT_FAILED,
                format!("the journal's head is {head}, not {want}"),
            ));
        }
    }
    Ok(Replayed { events, head })
}

/// Runs `glove audit …`.
pub fn command(c: &AuditCommand) -> i32 {
    let (a, show) = match c {
        AuditCommand::Verify(a) => (a, false),
        AuditCommand::Show(a) => (a, true),
    };
    let rep = match replay(a) {
        Ok(r) => r,
        Err(r) => return crate::cli::fail(&r, a.json, None),
    };
    let session = rep.events.first().map(|e| e.session_id.to_string());
    if a.json {
        let mut v = serde_json::json!({
            "journal": a.journal.display().to_string(),
            "records": rep.events.len(),
            "head": rep.head,
            "session_id": session,
        });
        if show {
            let list: Vec<serde_json::Value> = rep
                .events
                .iter()
                .filter_map(|e| e.encode().ok())
                .filter_map(|b| serde_json::from_slice(&b).ok())
                .collect();
            v["events"] = serde_json::Value::Array(list);
        }
        crate::report::print_json(&v);
        return 0;
    }
    out!(
        "MCP audit journal {}: {} events{}, head {}",
        a.journal.display(),
        rep.events.len(),
        session
            .map(|s| format!(" of session {s}"))
            .unwrap_or_default(),
        rep.head
    );
    if !show {
        out!("verified: every record's chain and every event's encoding hold");
        return 0;
    }
    for e in &rep.events {
        let verdict = match (e.decision, &e.code) {
            (Decision::Allowed, _) => "allowed".to_owned(),
            (Decision::Pinned, _) => "pinned".to_owned(),
            (Decision::Cancelled, _) => "cancelled".to_owned(),
            (Decision::Counted, _) => {
                format!("COUNTED {} refusals", e.count.unwrap_or(0))
            }
            (d, c) => {
                let d = match d {
                    Decision::Denied => "DENIED",
                    Decision::UpstreamError => "UPSTREAM ERROR",
                    _ => "DROPPED",
                };
                match c {
                    Some(c) => format!("{d} {c}"),
                    None => d.to_owned(),
                }
            }
        };
        let at = match (&e.server, &e.tool) {
            (Some(s), Some(t)) => format!("{s}/{t}"),
            (Some(s), None) => s.clone(),
            (None, Some(t)) => format!("?/{t}"),
            (None, None) => "-".to_owned(),
        };
        let short = |d: &Option<glove_types::Sha256Digest>| {
            d.map(|d| d.to_hex()[..12].to_owned())
                .unwrap_or_else(|| "-".into())
        };
        out!(
            "{:>6}  {:<16} {:<36} {verdict:<32} args {} result {} {} ms",
            e.seq,
            e.method.as_deref().unwrap_or("-"),
            at,
            short(&e.arguments_sha256),
            short(&e.result_sha256),
            e.latency_ms
        );
    }
    0
}
