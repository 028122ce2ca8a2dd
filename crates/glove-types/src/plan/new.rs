//! Writing plans for people: [`build`] makes a plan from a policy and a few
//! choices (template, profile, aliases, projections, secrets, lifetime), and
//! [`canonicalize`] turns a hand-edited plan into its canonical bytes.
//!
//! Every value [`build`] writes is copied from the policy, so the plan is
//! valid by construction; it still decodes and admits its own output before
//! returning it, and a choice the policy does not offer is refused with the
//! code admission would give (`plan_runtime_template_unknown`,
//! `plan_path_access_mismatch`, …).

use super::*;
use serde_json::json;

/// Largest hand-edited plan [`canonicalize`] reads, in bytes: a
/// pretty-printed plan of [`MAX_PLAN_BYTES`] canonical bytes fits.
pub const MAX_PLAN_SOURCE_BYTES: usize = 4 * MAX_PLAN_BYTES;

/// One requested path grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantRequest {
    /// The policy's path alias.
    pub alias: String,
    /// The access mode; `None` takes the alias's first access tuple.
    pub access: Option<Access>,
}

/// One requested library projection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectionRequest {
    /// The projection id (the directory name under the destination).
    pub projection_id: String,
    /// SHA-256 of the bundle file.
    pub sha256: Sha256Digest,
    /// The policy's projection destination alias.
    pub destination_alias: String,
}

/// What a person chooses; everything else comes from the policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanRequest {
    /// The runtime template id.
    pub runtime_template_id: String,
    /// The resource profile id.
    pub profile_id: String,
    /// Path grants, in any order.
    pub grants: Vec<GrantRequest>,
    /// Library projections, in any order.
    pub projections: Vec<ProjectionRequest>,
    /// Secret handles, in any order.
    pub secret_handles: Vec<String>,
    /// Egress policy ids, in any order.
    pub egress_policy_ids: Vec<String>,
    /// Tool policy ids, in any order.
    pub tool_policy_ids: Vec<String>,
    /// Path exposures (id, generation, access), in any order; they are
    /// checked against the service's exposure journal when the plan is
    /// created, not here.
    pub exposures: Vec<PlanExposure>,
    /// Lifetime in seconds of the plan and of every grant; `None` takes the
    /// policy's maxima (`max_plan_ttl_ms`, each alias's `max_ttl_secs`).
    pub ttl_secs: Option<u64>,
    /// The session id.
    pub session_id: String,
    /// The idempotency key.
    pub idempotency_key: String,
    /// Issue time, Unix epoch milliseconds.
    pub now_ms: u64,
}

fn sorted<T: Serialize>(mut v: Vec<(String, T)>) -> Vec<T> {
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v.into_iter().map(|(_, t)| t).collect()
}

fn ids(v: &[String]) -> Vec<String> {
    let mut v = v.to_vec();
    v.sort();
    v
}

/// Builds the plan `req` describes from `policy`, then decodes and admits
/// it against the same policy at `req.now_ms`. Repeated entries are refused
/// (`plan_array_duplicate`), as decoding a plan refuses them.
pub fn build(policy: &ValidatedPolicy, req: &PlanRequest) -> Result<AdmittedPlan, Rejection> {
    let tpl = policy.template(&req.runtime_template_id).ok_or_else(|| {
        Rejection::new(
            PLAN_RUNTIME_TEMPLATE_UNKNOWN,
            format!(
                "runtime template {} is not in the local policy",
                req.runtime_template_id
            ),
        )
        .at("runtime_template_id")
    })?;
    let profile = policy.profile(&req.profile_id).ok_or_else(|| {
        Rejection::new(
            PLAN_RESOURCE_PROFILE_UNKNOWN,
            format!(
                "resource profile {} is not in the local policy",
                req.profile_id
            ),
        )
        .at("resource_profile.profile_id")
    })?;
    let window_ms = match req.ttl_secs {
        None => policy.max_plan_ttl_ms(),
        Some(t) => match t.checked_mul(1000) {
            Some(ms) if t > 0 && ms <= policy.max_plan_ttl_ms() => ms,
            _ => {
                return Err(Rejection::new(
                    PLAN_EXPIRY_WINDOW_INVALID,
                    format!(
                        "the lifetime must lie in 1..={} s (the policy's max_plan_ttl_ms)",
                        policy.max_plan_ttl_ms() / 1000
                    ),
                )
                .at("ttl"))
            }
        },
    };
    let expires_at_ms = req.now_ms.checked_add(window_ms).ok_or_else(|| {
        Rejection::new(PLAN_EXPIRY_WINDOW_INVALID, "the expiry time overflows").at("ttl")
    })?;
    let mut grants = Vec::with_capacity(req.grants.len());
    for g in &req.grants {
        let alias = policy.path_alias(&g.alias).ok_or_else(|| {
            Rejection::new(
                PLAN_PATH_ALIAS_UNKNOWN,
                format!("path alias {} is not in the local policy", g.alias),
            )
            .at("path_grants.alias")
        })?;
        let tuple = match g.access {
            None => alias.access().first(),
            Some(a) => alias.access().iter().find(|t| t.access == a),
        }
        .ok_or_else(|| {
            Rejection::new(
                PLAN_PATH_ACCESS_MISMATCH,
                format!(
                    "alias {} does not allow {}",
                    g.alias,
                    g.access.map_or("any access", |a| a.as_str())
                ),
            )
            .at("path_grants.access")
        })?;
        let ttl_secs = req.ttl_secs.unwrap_or(alias.max_ttl_secs());
        if ttl_secs > alias.max_ttl_secs() {
            return Err(Rejection::new(
                PLAN_PATH_TTL_INVALID,
                format!(
                    "the lifetime exceeds alias {}'s max_ttl_secs {}",
                    g.alias,
                    alias.max_ttl_secs()
                ),
            )
            .at("ttl"));
        }
        grants.push((
            g.alias.clone(),
            json!({
                "alias": g.alias,
                "access": tuple.access,
                "materialization": tuple.materialization,
                "cleanup_policy": tuple.cleanup_policy,
                "ttl_secs": ttl_secs,
                "max_bytes": tuple.max_bytes,
            }),
        ));
    }
    let projections = req
        .projections
        .iter()
        .map(|p| {
            (
                p.projection_id.clone(),
                json!({
                    "projection_id": p.projection_id,
                    "sha256": p.sha256,
                    "destination_alias": p.destination_alias,
                }),
            )
        })
        .collect();
    let exposures = sorted(
        req.exposures
            .iter()
            .map(|e| {
                (
                    e.exposure_id.as_str().to_owned(),
                    json!({"exposure_id": e.exposure_id, "generation": e.generation, "access": e.access}),
                )
            })
            .collect(),
    );
    let l = profile.limits();
    let mut plan = json!({
        "schema_version": 1,
        "session_id": req.session_id,
        "idempotency_key": req.idempotency_key,
        "policy_revision": policy.revision(),
        "issued_at_ms": req.now_ms,
        "expires_at_ms": expires_at_ms,
        "runtime_template_id": tpl.id(),
        "runtime_id": tpl.runtime_id(),
        "adapter_command_digest": tpl.adapter_command_digest(),
        "sandbox_backend": tpl.sandbox_backend(),
        "resource_profile": {
            "profile_id": profile.id(),
            "cpu_time_ms": l.cpu_time_ms,
            "memory_bytes": l.memory_bytes,
            "pids": l.pids,
            "wall_time_ms": l.wall_time_ms,
            "disk_bytes": l.disk_bytes,
            "terminal_output_bytes": l.terminal_output_bytes,
        },
        "egress_policy_ids": ids(&req.egress_policy_ids),
        "tool_policy_ids": ids(&req.tool_policy_ids),
        "secret_handles": ids(&req.secret_handles),
        "path_grants": sorted(grants),
        "library_projections": sorted(projections),
    });
    if !exposures.is_empty() {
        plan["path_exposures"] = serde_json::Value::Array(exposures);
    }
    let bytes = canon::to_canonical(&plan)?;
    admit(DecodedPlan::decode(&bytes)?, None, policy, req.now_ms)
}

/// The canonical bytes of a hand-edited plan: strict JSON (a repeated key is
/// `json_duplicate_key`) of at most [`MAX_PLAN_SOURCE_BYTES`], whose
/// canonical form [`DecodedPlan::decode`] must accept. Arrays are not
/// sorted for the editor: an unsorted one is `plan_array_not_canonical`.
pub fn canonicalize(bytes: &[u8]) -> Result<Vec<u8>, Rejection> {
    let value = canon::parse_strict(bytes, MAX_PLAN_SOURCE_BYTES)?;
    let out = canon::to_canonical(&value)?;
    DecodedPlan::decode(&out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codes::json::JSON_DUPLICATE_KEY;

    const NOW: u64 = 1_796_000_000_000;
    const EXAMPLE: &str = include_str!("../../../../docs/examples/policy.json");

    /// The example policy (plans up to 120 s), its `workspace` alias
    /// offering three modes for up to 60 s, and a second alias, `scratch`, the template does not allow.
    fn policy() -> ValidatedPolicy {
        let mut v: serde_json::Value = serde_json::from_str(EXAMPLE).expect("example");
        v["path_aliases"][0]["access"] = json!([
            {"access": "ephemeral_write", "materialization": "copy",
             "create_policy": "empty_directory", "cleanup_policy": "remove", "max_bytes": 2097152},
            {"access": "read_only", "materialization": "bind",
             "create_policy": "require_existing", "cleanup_policy": "none", "max_bytes": 0},
            {"access": "retained_write", "materialization": "copy",
             "create_policy": "require_existing", "cleanup_policy": "retain", "max_bytes": 4096},
        ]);
        v["path_aliases"][0]["max_ttl_secs"] = json!(60);
        let scratch = json!({
            "alias": "scratch", "host_path": "/srv/scratch", "target_path": "/scratch",
            "max_ttl_secs": 60,
            "access": [{"access": "read_only", "materialization": "bind",
             "create_policy": "require_existing", "cleanup_policy": "none", "max_bytes": 0}],
        });
        if let Some(a) = v["path_aliases"].as_array_mut() {
            a.insert(0, scratch);
        }
        ValidatedPolicy::from_json(&serde_json::to_vec(&v).expect("json")).expect("policy")
    }

    fn request() -> PlanRequest {
        PlanRequest {
            runtime_template_id: "codex-safe".into(),
            profile_id: "small".into(),
            grants: vec![GrantRequest {
                alias: "workspace".into(),
                access: None,
            }],
            projections: vec![],
            secret_handles: vec![],
            egress_policy_ids: vec![],
            tool_policy_ids: vec![],
            exposures: Vec::new(),
            ttl_secs: None,
            session_id: "plan-0123456789abcdef".into(),
            idempotency_key: "plan-0123456789abcdef".into(),
            now_ms: NOW,
        }
    }

    fn code(req: &PlanRequest) -> crate::ErrorCode {
        build(&policy(), req).expect_err("refused").code()
    }

    #[test]
    fn the_example_plan_is_rebuilt_byte_for_byte() {
        let want = include_bytes!("../../../../docs/examples/plan.json");
        let policy = ValidatedPolicy::from_json(EXAMPLE.as_bytes()).expect("policy");
        let req = PlanRequest {
            projections: vec![ProjectionRequest {
                projection_id: "sage-lib".into(),
                sha256: Sha256Digest::of(b""),
                destination_alias: "libraries".into(),
            }],
            secret_handles: vec!["codex-token".into()],
            egress_policy_ids: vec!["no-network".into()],
            tool_policy_ids: vec!["sage-readonly".into()],
            exposures: Vec::new(),
            ttl_secs: Some(60),
            session_id: "session-0001".into(),
            idempotency_key: "create-0001".into(),
            ..request()
        };
        let got = build(&policy, &req).expect("built");
        // The example grants 120 s (the alias's maximum) for a 60 s plan;
        // one lifetime gives both 60 s.
        let mut want: serde_json::Value = serde_json::from_slice(want).expect("plan");
        want["path_grants"][0]["ttl_secs"] = json!(60);
        let want = canon::to_canonical(&want).expect("canonical");
        assert_eq!(got.plan().canonical_bytes(), &want[..]);
    }

    #[test]
    fn every_mode_takes_its_tuple() {
        for (access, mat, cleanup, bytes) in [
            (None, "copy", "remove", 2097152),
            (Some(Access::EphemeralWrite), "copy", "remove", 2097152),
            (Some(Access::ReadOnly), "bind", "none", 0),
            (Some(Access::RetainedWrite), "copy", "retain", 4096),
        ] {
            let mut req = request();
            req.grants[0].access = access;
            let p = build(&policy(), &req).expect("built");
            let g = &p.path_grants()[0];
            assert_eq!(g.materialization.as_str(), mat);
            assert_eq!(g.cleanup_policy.as_str(), cleanup);
            assert_eq!(g.max_bytes, bytes);
            assert_eq!(g.ttl_secs, 60);
            if let Some(a) = access {
                assert_eq!(g.access, a);
            }
        }
    }

    #[test]
    fn the_policy_fills_in_everything_else() {
        let p = build(&policy(), &request()).expect("built");
        assert_eq!(p.runtime_template_id().as_str(), "codex-safe");
        assert_eq!(p.profile_id().as_str(), "small");
        assert_eq!(p.limits().pids, 16);
        assert_eq!(p.expires_at_ms(), NOW + 120_000);
        let v = canon::parse_canonical(p.plan().canonical_bytes(), MAX_PLAN_BYTES).expect("canon");
        assert_eq!(
            v["adapter_command_digest"],
            "9d1ee6f01f40c5813bf566765cef30fc98c0fed227945707f7c1c2e5d3608bf1"
        );
        assert_eq!(v["policy_revision"], 7);
        assert_eq!(v["issued_at_ms"], NOW);
    }

    #[test]
    fn arrays_come_out_sorted() {
        let mut req = request();
        req.grants = vec![];
        req.projections = ["b-lib", "a-lib"]
            .map(|id| ProjectionRequest {
                projection_id: id.into(),
                sha256: Sha256Digest::of(id.as_bytes()),
                destination_alias: "libraries".into(),
            })
            .to_vec();
        let p = build(&policy(), &req).expect("built");
        let got: Vec<_> = p
            .library_projections()
            .iter()
            .map(|p| p.projection_id.as_str())
            .collect();
        assert_eq!(got, ["a-lib", "b-lib"]);
        req.projections[1].projection_id = "b-lib".into();
        assert_eq!(code(&req), PLAN_ARRAY_DUPLICATE);
    }

    #[test]
    fn a_choice_the_policy_does_not_offer_has_admissions_code() {
        let mut r = request();
        r.runtime_template_id = "nope".into();
        assert_eq!(code(&r), PLAN_RUNTIME_TEMPLATE_UNKNOWN);
        let mut r = request();
        r.profile_id = "huge".into();
        assert_eq!(code(&r), PLAN_RESOURCE_PROFILE_UNKNOWN);
        let mut r = request();
        r.grants[0].alias = "home".into();
        assert_eq!(code(&r), PLAN_PATH_ALIAS_UNKNOWN);
        let mut r = request();
        r.grants[0].alias = "scratch".into();
        assert_eq!(code(&r), PLAN_PATH_ALIAS_NOT_ALLOWED);
        let mut r = request();
        r.grants[0].access = Some(Access::DirectWrite);
        assert_eq!(code(&r), PLAN_PATH_ACCESS_MISMATCH);
        let mut r = request();
        r.secret_handles = vec!["other-token".into()];
        assert_eq!(code(&r), PLAN_SECRET_HANDLE_UNKNOWN);
        let mut r = request();
        r.egress_policy_ids = vec!["open".into()];
        assert_eq!(code(&r), PLAN_EGRESS_POLICY_UNKNOWN);
        let mut r = request();
        r.projections = vec![ProjectionRequest {
            projection_id: "lib".into(),
            sha256: Sha256Digest::of(b""),
            destination_alias: "elsewhere".into(),
        }];
        assert_eq!(code(&r), PLAN_PROJECTION_DESTINATION_UNKNOWN);
        let mut r = request();
        r.session_id = "Not An Id".into();
        assert_eq!(code(&r), crate::codes::ids::ID_INVALID);
    }

    #[test]
    fn the_lifetime_is_bounded_by_the_policy() {
        for (ttl, want) in [
            (Some(1), Ok((1_000, 1))),
            (Some(60), Ok((60_000, 60))),
            // Each defaults to its own maximum.
            (None, Ok((120_000, 60))),
            (Some(61), Err(PLAN_PATH_TTL_INVALID)),
            (Some(0), Err(PLAN_EXPIRY_WINDOW_INVALID)),
            (Some(121), Err(PLAN_EXPIRY_WINDOW_INVALID)),
            (Some(u64::MAX), Err(PLAN_EXPIRY_WINDOW_INVALID)),
        ] {
            let mut r = request();
            r.ttl_secs = ttl;
            let got = build(&policy(), &r)
                .map(|p| (p.expires_at_ms() - NOW, p.path_grants()[0].ttl_secs))
                .map_err(|e| e.code());
            assert_eq!(got, want, "{ttl:?}");
        }
    }

    #[test]
    fn canonicalize_reorders_and_refuses_what_decode_refuses() {
        let raw = include_bytes!("../../../../docs/examples/plan.json");
        let v: serde_json::Value = serde_json::from_slice(raw).expect("plan");
        let pretty = serde_json::to_vec_pretty(&v).expect("pretty");
        let out = canonicalize(&pretty).expect("canonical");
        assert_eq!(canonicalize(&out).expect("again"), out);
        assert!(DecodedPlan::decode(&out).is_ok());
        let dup = b"{\"schema_version\":1,\"schema_version\":1}";
        assert_eq!(canonicalize(dup).unwrap_err().code(), JSON_DUPLICATE_KEY);
        let mut extra = v.clone();
        extra["extra"] = json!(1);
        let extra = serde_json::to_vec(&extra).expect("json");
        assert_eq!(
            canonicalize(&extra).unwrap_err().code(),
            crate::codes::json::JSON_UNKNOWN_FIELD
        );
    }
}
