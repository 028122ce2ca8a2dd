//! The three digests that bind a matched base/candidate pair to one
//! context. Each is `SHA-256(domain || 0x00 || canonical JSON)`; the
//! definitions and vectors are in `docs/digests.md`.
//!
//! ```text
//! refinement_plan_context = sha256_domain("glove.refinement-plan-context.v1", P)
//! fixture_context         = sha256_domain("glove.refinement-fixture-context.v1", F)
//! matched_context         = sha256_domain("glove.refinement-matched-context.v1",
//!                             {"fixture_context":hex,"plan_context":hex})
//! ```
//!
//! * `P` is the canonical JSON object of the plan's `policy_revision`,
//!   `runtime_template_id`, `runtime_id`, `adapter_command_digest`,
//!   `sandbox_backend`, `egress_policy_ids`, `tool_policy_ids`,
//!   `secret_handles`, `resource_limits` (`profile_id` and the six limits,
//!   as in the plan) and `skills`: `{"base": B, "candidate": C}`, where `B`
//!   and `C` are the binding's base and candidate projections, each the
//!   object `{"destination_alias","projection_id","sha256"}`. It leaves out
//!   the session id, idempotency key, issue and expiry times, the variant,
//!   the selected projection, the fixture projection and the plan's library
//!   projections (which hold the last two): the base and the candidate plan
//!   of one pair share it.
//! * `F` is the fixture's canonical JSON without `session_id`, `variant`
//!   and `selected_projection` ([`Fixture::context_digest`]): the base and
//!   the candidate fixture of one pair share it.
//! * The matched context is what a plan's binding commits to
//!   (`matched_context_digest`) and [`Fixture::check_against`] recomputes.
//!
//! [`Fixture::context_digest`]: super::Fixture::context_digest
//! [`Fixture::check_against`]: super::Fixture::check_against

use crate::codes::refinement::REFINEMENT_BINDING_MISSING;
use crate::digest::Sha256Digest;
use crate::plan::DecodedPlan;
use crate::{canon, Rejection};
use serde_json::json;

/// Domain of [`refinement_plan_context_digest`].
pub const REFINEMENT_PLAN_CONTEXT_DOMAIN: &str = "glove.refinement-plan-context.v1";
/// Domain of [`super::Fixture::context_digest`].
pub const FIXTURE_CONTEXT_DOMAIN: &str = "glove.refinement-fixture-context.v1";
/// Domain of [`matched_context_digest`].
pub const MATCHED_CONTEXT_DOMAIN: &str = "glove.refinement-matched-context.v1";

/// The refinement plan context of a plan with a binding (see the module
/// docs); `refinement_binding_missing` for a plan without one.
pub fn refinement_plan_context_digest(plan: &DecodedPlan) -> Result<Sha256Digest, Rejection> {
    let binding = plan.refinement().ok_or_else(|| {
        Rejection::new(
            REFINEMENT_BINDING_MISSING,
            "the plan has no refinement binding",
        )
        .at("refinement")
    })?;
    let mut ctx = crate::plan::shared_context(plan);
    ctx["skills"] = json!({
        "base": binding.base(),
        "candidate": binding.candidate(),
    });
    let bytes = canon::to_canonical(&ctx)?;
    Ok(Sha256Digest::of_domain(
        REFINEMENT_PLAN_CONTEXT_DOMAIN,
        &bytes,
    ))
}

/// The matched context of a refinement plan context and a fixture context.
pub fn matched_context_digest(
    plan_context: &Sha256Digest,
    fixture_context: &Sha256Digest,
) -> Sha256Digest {
    // Two fixed keys and two hex strings: this is the canonical form.
    let bytes = format!(
        "{{\"fixture_context\":\"{}\",\"plan_context\":\"{}\"}}",
        fixture_context.to_hex(),
        plan_context.to_hex()
    );
    Sha256Digest::of_domain(MATCHED_CONTEXT_DOMAIN, bytes.as_bytes())
}
