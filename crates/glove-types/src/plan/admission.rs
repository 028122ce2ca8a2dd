//! Admission: [`admit`] matches a decoded plan against the local policy
//! and, when every check passes, yields the [`AdmittedPlan`].

use super::*;

fn mismatch(code: crate::ErrorCode, at: &str, what: &str) -> Rejection {
    Rejection::new(code, format!("{what} does not match the local policy")).at(at)
}

/// Matches a decoded plan against the policy at time `now_ms` (Unix epoch
/// milliseconds). When the controller supplied its BLAKE3 digest, it must
/// equal the digest of the canonical bytes. Messages name plan fields and
/// identifiers only, never policy paths.
pub fn admit(
    plan: DecodedPlan,
    supplied_controller_digest: Option<&Blake3Digest>,
    policy: &ValidatedPolicy,
    now_ms: u64,
) -> Result<AdmittedPlan, Rejection> {
    let controller = plan.controller_plan_digest();
    if let Some(s) = supplied_controller_digest {
        if *s != controller {
            return Err(Rejection::new(
                PLAN_CONTROLLER_DIGEST_MISMATCH,
                "controller_plan_digest is not the BLAKE3 digest of the canonical plan",
            ));
        }
    }
    if plan.policy_revision != policy.revision() {
        return Err(Rejection::new(
            PLAN_POLICY_REVISION_MISMATCH,
            format!(
                "plan names policy revision {}; the local policy is revision {}",
                plan.policy_revision,
                policy.revision()
            ),
        )
        .at("policy_revision"));
    }
    if plan.expires_at_ms <= plan.issued_at_ms
        || plan.expires_at_ms - plan.issued_at_ms > policy.max_plan_ttl_ms()
    {
        return Err(Rejection::new(
            PLAN_EXPIRY_WINDOW_INVALID,
            format!(
                "the expiry window must be positive and at most {} ms",
                policy.max_plan_ttl_ms()
            ),
        )
        .at("expires_at_ms"));
    }
    if plan.issued_at_ms > now_ms.saturating_add(MAX_CLOCK_SKEW_MS) {
        return Err(
            Rejection::new(PLAN_NOT_YET_VALID, "issued_at_ms lies in the future")
                .at("issued_at_ms"),
        );
    }
    if now_ms >= plan.expires_at_ms {
        return Err(Rejection::new(PLAN_EXPIRED, "the plan has expired").at("expires_at_ms"));
    }
    let tpl = policy
        .template(plan.runtime_template_id.as_str())
        .ok_or_else(|| {
            Rejection::new(
                PLAN_RUNTIME_TEMPLATE_UNKNOWN,
                format!(
                    "runtime template {} is not in the local policy",
                    plan.runtime_template_id
                ),
            )
            .at("runtime_template_id")
        })?;
    if tpl.runtime_id() != &plan.runtime_id {
        return Err(mismatch(PLAN_RUNTIME_MISMATCH, "runtime_id", "runtime_id"));
    }
    if tpl.adapter_command_digest() != &plan.adapter_command_digest {
        return Err(mismatch(
            PLAN_ADAPTER_DIGEST_MISMATCH,
            "adapter_command_digest",
            "adapter_command_digest",
        ));
    }
    if tpl.sandbox_backend() != plan.sandbox_backend {
        return Err(mismatch(
            PLAN_SANDBOX_BACKEND_MISMATCH,
            "sandbox_backend",
            "sandbox_backend",
        ));
    }
    // An evaluation template takes exactly the plans with a binding (and
    // no path grant): checked before the grants, which such a template
    // would refuse with a less telling code.
    crate::refinement::binding::admit_binding(&plan, tpl, policy)?;
    let profile = policy.profile(plan.profile_id.as_str()).ok_or_else(|| {
        Rejection::new(
            PLAN_RESOURCE_PROFILE_UNKNOWN,
            format!(
                "resource profile {} is not in the local policy",
                plan.profile_id
            ),
        )
        .at("resource_profile.profile_id")
    })?;
    let (want, got) = (profile.limits(), &plan.limits);
    for (name, w, g) in [
        ("cpu_time_ms", want.cpu_time_ms, got.cpu_time_ms),
        ("memory_bytes", want.memory_bytes, got.memory_bytes),
        ("pids", want.pids, got.pids),
        ("wall_time_ms", want.wall_time_ms, got.wall_time_ms),
        ("disk_bytes", want.disk_bytes, got.disk_bytes),
        (
            "terminal_output_bytes",
            want.terminal_output_bytes,
            got.terminal_output_bytes,
        ),
    ] {
        if w != g {
            return Err(Rejection::new(
                PLAN_RESOURCE_LIMIT_MISMATCH,
                format!("{name} is {g}; profile {} fixes {w}", plan.profile_id),
            )
            .at(format!("resource_profile.{name}")));
        }
    }
    for (i, id) in plan.egress_policy_ids.iter().enumerate() {
        if !policy.egress_policy_ids().contains(id) {
            return Err(Rejection::new(
                PLAN_EGRESS_POLICY_UNKNOWN,
                format!("egress policy {id} is not in the local policy"),
            )
            .at(format!("egress_policy_ids[{i}]")));
        }
    }
    for (i, id) in plan.tool_policy_ids.iter().enumerate() {
        if !policy.tool_policy_ids().contains(id) {
            return Err(Rejection::new(
                PLAN_TOOL_POLICY_UNKNOWN,
                format!("tool policy {id} is not in the local policy"),
            )
            .at(format!("tool_policy_ids[{i}]")));
        }
    }
    for (i, h) in plan.secret_handles.iter().enumerate() {
        if !policy.secret_handles().contains(h) {
            return Err(Rejection::new(
                PLAN_SECRET_HANDLE_UNKNOWN,
                format!("secret handle {h} is not in the local policy"),
            )
            .at(format!("secret_handles[{i}]")));
        }
        // A key an egress policy brokers stays with the proxy: it reaches
        // the sandbox only as a placeholder, and only through an egress
        // policy this plan names. Named without one that brokers it, the
        // handle would fall through to a lease, a copy of the key inside
        // the sandbox (issue 26, finding 3).
        let brokers = |e: &crate::policy::EgressPolicy| {
            e.settings()
                .is_some_and(|s| s.brokered().iter().any(|b| &b.secret_handle == h))
        };
        let brokered_somewhere = policy.egress_policies().iter().any(brokers);
        let brokered_here = policy
            .egress_policies()
            .iter()
            .filter(|e| plan.egress_policy_ids.contains(e.id()))
            .any(brokers);
        if brokered_somewhere && !brokered_here {
            return Err(Rejection::new(
                PLAN_SECRET_HANDLE_BROKERED,
                format!(
                    "secret handle {h} is brokered by an egress policy this plan does not name; \
                     a brokered key is never leased into the sandbox"
                ),
            )
            .at(format!("secret_handles[{i}]")));
        }
    }
    for (i, g) in plan.path_grants.iter().enumerate() {
        let at = format!("path_grants[{i}]");
        let alias = policy.path_alias(g.alias.as_str()).ok_or_else(|| {
            Rejection::new(
                PLAN_PATH_ALIAS_UNKNOWN,
                format!("path alias {} is not in the local policy", g.alias),
            )
            .at(format!("{at}.alias"))
        })?;
        if !tpl.allowed_path_aliases().contains(&g.alias) {
            return Err(Rejection::new(
                PLAN_PATH_ALIAS_NOT_ALLOWED,
                format!("template {} does not allow alias {}", tpl.id(), g.alias),
            )
            .at(format!("{at}.alias")));
        }
        let tuple = alias
            .access()
            .iter()
            .find(|t| t.access == g.access)
            .ok_or_else(|| {
                Rejection::new(
                    PLAN_PATH_ACCESS_MISMATCH,
                    format!("alias {} does not allow {}", g.alias, g.access.as_str()),
                )
                .at(format!("{at}.access"))
            })?;
        if tuple.materialization != g.materialization {
            return Err(mismatch(
                PLAN_PATH_MATERIALIZATION_MISMATCH,
                &format!("{at}.materialization"),
                "materialization",
            ));
        }
        if tuple.cleanup_policy != g.cleanup_policy {
            return Err(mismatch(
                PLAN_PATH_CLEANUP_MISMATCH,
                &format!("{at}.cleanup_policy"),
                "cleanup_policy",
            ));
        }
        if tuple.max_bytes != g.max_bytes {
            return Err(mismatch(
                PLAN_PATH_QUOTA_MISMATCH,
                &format!("{at}.max_bytes"),
                "max_bytes",
            ));
        }
        if g.ttl_secs == 0 || g.ttl_secs > alias.max_ttl_secs() {
            return Err(Rejection::new(
                PLAN_PATH_TTL_INVALID,
                format!("ttl_secs must lie in 1..={}", alias.max_ttl_secs()),
            )
            .at(format!("{at}.ttl_secs")));
        }
    }
    for (i, p) in plan.library_projections.iter().enumerate() {
        let at = format!("library_projections[{i}].destination_alias");
        check_destination(policy, tpl, &p.destination_alias, &at)?;
    }
    let plan_context_digest = plan_context_digest(&plan)?;
    Ok(AdmittedPlan {
        plan_content_digest: plan.plan_content_digest(),
        controller_plan_digest: controller,
        plan_context_digest,
        plan,
    })
}

/// A library projection's destination: defined by the policy and allowed
/// by the template (`at` locates it in the plan).
pub(crate) fn check_destination(
    policy: &ValidatedPolicy,
    tpl: &crate::policy::RuntimeTemplate,
    alias: &AliasId,
    at: &str,
) -> Result<(), Rejection> {
    if policy.destination(alias.as_str()).is_none() {
        return Err(Rejection::new(
            PLAN_PROJECTION_DESTINATION_UNKNOWN,
            format!("destination {alias} is not in the local policy"),
        )
        .at(at));
    }
    if !tpl.allowed_projection_destinations().contains(alias) {
        return Err(Rejection::new(
            PLAN_PROJECTION_DESTINATION_NOT_ALLOWED,
            format!("template {} does not allow destination {alias}", tpl.id()),
        )
        .at(at));
    }
    Ok(())
}
