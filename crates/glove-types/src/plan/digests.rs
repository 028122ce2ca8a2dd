//! The plan-context digest.
//!
//! ```text
//! plan_context_digest = SHA-256( "glove.plan-context.v1" || 0x00 || C )
//! ```
//!
//! where `C` is the canonical JSON of an object with exactly these members,
//! all taken from the plan: `policy_revision`, `runtime_template_id`,
//! `runtime_id`, `adapter_command_digest`, `sandbox_backend`,
//! `egress_policy_ids`, `tool_policy_ids`, `secret_handles`,
//! `resource_limits` (the six limits and `profile_id`), and
//! `library_projections` (each `projection_id`, `sha256`,
//! `destination_alias`). It leaves out the session id, idempotency key,
//! issue and expiry times and path grants, so two plans that differ only in
//! those share a context. Vectors are in `docs/digests.md`.

use super::DecodedPlan;
use crate::digest::Sha256Digest;
use crate::{canon, Rejection};
use serde_json::json;

/// Domain string of the plan-context digest.
pub const PLAN_CONTEXT_DOMAIN: &str = "glove.plan-context.v1";

/// Computes the plan-context digest of a decoded plan.
pub fn plan_context_digest(plan: &DecodedPlan) -> Result<Sha256Digest, Rejection> {
    let mut ctx = shared_context(plan);
    ctx["library_projections"] = json!(plan.library_projections);
    let bytes = canon::to_canonical(&ctx)?;
    Ok(Sha256Digest::of_domain(PLAN_CONTEXT_DOMAIN, &bytes))
}

/// The members every plan context shares: everything but the projections
/// (the refinement plan context names its two skills instead).
pub(crate) fn shared_context(plan: &DecodedPlan) -> serde_json::Value {
    let l = &plan.limits;
    json!({
        "policy_revision": plan.policy_revision,
        "runtime_template_id": plan.runtime_template_id,
        "runtime_id": plan.runtime_id,
        "adapter_command_digest": plan.adapter_command_digest,
        "sandbox_backend": plan.sandbox_backend,
        "egress_policy_ids": plan.egress_policy_ids,
        "tool_policy_ids": plan.tool_policy_ids,
        "secret_handles": plan.secret_handles,
        "resource_limits": {
            "profile_id": plan.profile_id,
            "cpu_time_ms": l.cpu_time_ms,
            "memory_bytes": l.memory_bytes,
            "pids": l.pids,
            "wall_time_ms": l.wall_time_ms,
            "disk_bytes": l.disk_bytes,
            "terminal_output_bytes": l.terminal_output_bytes,
        },
    })
}
