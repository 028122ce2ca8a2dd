//! A managed session's MCP input: the plan's tool policy (at most one
//! with a definition), and the receipt of a session recovered after
//! gloved died. The mediator itself is the assembly's MCP part
//! ([`crate::assembly::mcp`]; see `docs/mcp.md`).
//!
//! A plan only names the tool policy by id; the servers, rules and pins
//! all come from the operator's profile, so a plan cannot add any.

use crate::assembly::mcp::{AUDIT_MAX_BYTES, AUDIT_MAX_RECORDS};
use glove_mcp::journal_spec;
use glove_types::codes::control::SESSION_TOOL_POLICY_CONFLICT;
use glove_types::plan::AdmittedPlan;
use glove_types::policy::{ToolPolicy, ValidatedPolicy};
use glove_types::receipt::McpReceipt;
use glove_types::Rejection;
use std::path::Path;

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
    let mut r = crate::assembly::mcp::failure_receipt(
        tool_policy_id.unwrap_or("unknown").to_owned(),
        "0".repeat(64),
    );
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
