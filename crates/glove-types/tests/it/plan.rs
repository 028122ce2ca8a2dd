use glove_types::codes::json::*;
use glove_types::codes::plan::*;
use glove_types::plan::{admit, DecodedPlan};
use glove_types::policy::ValidatedPolicy;
use glove_types::{canon, Blake3Digest, ErrorCode};
use serde_json::{json, Value};

pub(crate) const NOW: u64 = 1_796_000_001_000;

fn policy() -> ValidatedPolicy {
    ValidatedPolicy::from_json(&crate::example("policy.json")).expect("policy")
}

fn base() -> Value {
    serde_json::from_slice(&crate::example("plan.json")).expect("plan")
}

fn bytes(v: &Value) -> Vec<u8> {
    canon::to_canonical(v).expect("canonical")
}

fn reject(f: impl FnOnce(&mut Value)) -> ErrorCode {
    let mut v = base();
    f(&mut v);
    let r = DecodedPlan::decode(&bytes(&v)).and_then(|p| admit(p, None, &policy(), NOW));
    match r {
        Ok(_) => panic!("mutated plan admitted: {v}"),
        Err(e) => {
            // Remote callers never learn a host path from a rejection.
            let shown = e.to_string();
            for local in ["/srv", "/usr/bin/true", "/opt/", "/workspace"] {
                assert!(!shown.contains(local), "{shown:?} leaks {local}");
            }
            e.code()
        }
    }
}

#[test]
fn example_plan_is_admitted() {
    let raw = crate::example("plan.json");
    let p = DecodedPlan::decode(&raw).expect("decode");
    let supplied = p.controller_plan_digest();
    let a = admit(p, Some(&supplied), &policy(), NOW).expect("admit");
    assert_eq!(
        a.plan_content_digest(),
        &glove_types::Sha256Digest::of(&raw)
    );
    assert_eq!(a.controller_plan_digest(), &Blake3Digest::of(&raw));
}

#[test]
fn plan_must_be_canonical() {
    let pretty = serde_json::to_vec_pretty(&base()).expect("pretty");
    assert_eq!(
        DecodedPlan::decode(&pretty).unwrap_err().code(),
        JSON_NONCANONICAL
    );
    assert_eq!(reject(|v| v["extra"] = json!(1)), JSON_UNKNOWN_FIELD);
    // A plan cannot carry a path, an executable, an environment or a secret.
    for field in [
        "executable_path",
        "host_path",
        "environment",
        "secret_value",
        "arguments",
    ] {
        assert_eq!(
            reject(|v| v[field] = json!("x")),
            JSON_UNKNOWN_FIELD,
            "{field}"
        );
    }
    assert_eq!(
        reject(|v| v["path_grants"][0]["host_path"] = json!("/etc")),
        JSON_UNKNOWN_FIELD
    );
    // A projection is a bundle by digest, never a prompt reference.
    assert_eq!(
        reject(|v| v["library_projections"][0]["prompt_ref"] = json!("prompts/x")),
        JSON_UNKNOWN_FIELD
    );
    assert_eq!(
        reject(|v| v["schema_version"] = json!(2)),
        PLAN_SCHEMA_VERSION
    );
    assert_eq!(
        reject(|v| v["tool_policy_ids"] = json!(["b", "a"])),
        PLAN_ARRAY_NOT_CANONICAL
    );
    assert_eq!(
        reject(|v| v["tool_policy_ids"] = json!(["a", "a"])),
        PLAN_ARRAY_DUPLICATE
    );
    assert_eq!(
        reject(|v| v["path_grants"][0]["access"] = json!("root")),
        JSON_INVALID_TYPE
    );
}

#[test]
fn controller_digest_is_checked() {
    let p = DecodedPlan::decode(&crate::example("plan.json")).expect("decode");
    let wrong = Blake3Digest::of(b"other");
    assert_eq!(
        admit(p, Some(&wrong), &policy(), NOW).unwrap_err().code(),
        PLAN_CONTROLLER_DIGEST_MISMATCH
    );
}

#[test]
fn expiry_window() {
    let p = || DecodedPlan::decode(&crate::example("plan.json")).expect("decode");
    assert_eq!(
        admit(p(), None, &policy(), 1_796_000_060_000)
            .unwrap_err()
            .code(),
        PLAN_EXPIRED
    );
    assert_eq!(
        admit(p(), None, &policy(), 1_795_999_000_000)
            .unwrap_err()
            .code(),
        PLAN_NOT_YET_VALID
    );
    assert!(
        admit(p(), None, &policy(), 1_795_999_990_000).is_ok(),
        "within clock skew"
    );
    assert_eq!(
        reject(|v| v["expires_at_ms"] = json!(1_796_000_000_000u64)),
        PLAN_EXPIRY_WINDOW_INVALID
    );
    assert_eq!(
        reject(|v| v["expires_at_ms"] = json!(1_796_000_120_001u64)),
        PLAN_EXPIRY_WINDOW_INVALID
    );
}

/// Every bound field, changed alone, is rejected with that field's code.
#[test]
fn each_bound_field_has_its_code() {
    let cases: Vec<(&str, Value, ErrorCode)> = vec![
        ("/policy_revision", json!(8), PLAN_POLICY_REVISION_MISMATCH),
        (
            "/runtime_template_id",
            json!("other"),
            PLAN_RUNTIME_TEMPLATE_UNKNOWN,
        ),
        ("/runtime_id", json!("pi"), PLAN_RUNTIME_MISMATCH),
        (
            "/adapter_command_digest",
            json!("11".repeat(32)),
            PLAN_ADAPTER_DIGEST_MISMATCH,
        ),
        (
            "/sandbox_backend",
            json!("remote_linux_container"),
            PLAN_SANDBOX_BACKEND_MISMATCH,
        ),
        (
            "/resource_profile/profile_id",
            json!("large"),
            PLAN_RESOURCE_PROFILE_UNKNOWN,
        ),
        (
            "/resource_profile/cpu_time_ms",
            json!(1001),
            PLAN_RESOURCE_LIMIT_MISMATCH,
        ),
        (
            "/resource_profile/memory_bytes",
            json!(1),
            PLAN_RESOURCE_LIMIT_MISMATCH,
        ),
        (
            "/resource_profile/pids",
            json!(17),
            PLAN_RESOURCE_LIMIT_MISMATCH,
        ),
        (
            "/resource_profile/wall_time_ms",
            json!(1999),
            PLAN_RESOURCE_LIMIT_MISMATCH,
        ),
        (
            "/resource_profile/disk_bytes",
            json!(1),
            PLAN_RESOURCE_LIMIT_MISMATCH,
        ),
        (
            "/resource_profile/terminal_output_bytes",
            json!(1),
            PLAN_RESOURCE_LIMIT_MISMATCH,
        ),
        (
            "/egress_policy_ids",
            json!(["open"]),
            PLAN_EGRESS_POLICY_UNKNOWN,
        ),
        (
            "/tool_policy_ids",
            json!(["admin"]),
            PLAN_TOOL_POLICY_UNKNOWN,
        ),
        (
            "/secret_handles",
            json!(["root-token"]),
            PLAN_SECRET_HANDLE_UNKNOWN,
        ),
        (
            "/path_grants/0/alias",
            json!("home"),
            PLAN_PATH_ALIAS_UNKNOWN,
        ),
        (
            "/path_grants/0/access",
            json!("read_only"),
            PLAN_PATH_ACCESS_MISMATCH,
        ),
        (
            "/path_grants/0/materialization",
            json!("bind"),
            PLAN_PATH_MATERIALIZATION_MISMATCH,
        ),
        (
            "/path_grants/0/cleanup_policy",
            json!("retain"),
            PLAN_PATH_CLEANUP_MISMATCH,
        ),
        (
            "/path_grants/0/max_bytes",
            json!(2_097_153),
            PLAN_PATH_QUOTA_MISMATCH,
        ),
        ("/path_grants/0/ttl_secs", json!(121), PLAN_PATH_TTL_INVALID),
        ("/path_grants/0/ttl_secs", json!(0), PLAN_PATH_TTL_INVALID),
        (
            "/library_projections/0/destination_alias",
            json!("elsewhere"),
            PLAN_PROJECTION_DESTINATION_UNKNOWN,
        ),
    ];
    for (ptr, x, code) in cases {
        let got = reject(|v| *v.pointer_mut(ptr).expect("pointer") = x.clone());
        assert_eq!(got, code, "{ptr} = {x}");
    }
}

#[test]
fn template_allow_lists() {
    // A second alias and destination that exist but the template does not allow.
    let mut pv: Value = serde_json::from_slice(&crate::example("policy.json")).expect("json");
    pv["path_aliases"].as_array_mut().expect("a").push(json!({"alias":"zdata","host_path":"/srv/data","target_path":"/data","max_ttl_secs":60,
        "access":[{"access":"read_only","materialization":"bind","create_policy":"require_existing","cleanup_policy":"none","max_bytes":0}]}));
    pv["library_projection_destinations"]
        .as_array_mut()
        .expect("a")
        .push(json!({"alias":"zlib","target_path":"/opt/zlib"}));
    let policy =
        ValidatedPolicy::from_json(&serde_json::to_vec(&pv).expect("enc")).expect("policy");
    let try_plan = |f: &dyn Fn(&mut Value)| {
        let mut v = base();
        f(&mut v);
        DecodedPlan::decode(&bytes(&v))
            .and_then(|p| admit(p, None, &policy, NOW))
            .unwrap_err()
            .code()
    };
    assert_eq!(
        try_plan(
            &|v| v["path_grants"] = json!([{"alias":"zdata","access":"read_only","materialization":"bind","cleanup_policy":"none","ttl_secs":60,"max_bytes":0}])
        ),
        PLAN_PATH_ALIAS_NOT_ALLOWED
    );
    assert_eq!(
        try_plan(&|v| v["library_projections"][0]["destination_alias"] = json!("zlib")),
        PLAN_PROJECTION_DESTINATION_NOT_ALLOWED
    );
}

/// Issue 26, finding 3: a handle that an egress policy brokers is admitted
/// only with that egress policy, so it never falls through to a lease (a
/// copy of the key inside the sandbox).
#[test]
fn a_brokered_handle_needs_the_egress_policy_that_brokers_it() {
    let mut pv: Value = serde_json::from_slice(&crate::example("policy.json")).expect("policy");
    pv["egress_policy_ids"] = json!(["model", "no-network"]);
    pv["egress_policies"] = json!([{
        "egress_policy_id": "model",
        "endpoints": ["model.test:8000"],
        "allow_private": true,
        "hosts": {"model.test": ["127.0.0.1"]},
        "brokered": [{"secret_handle": "model-key", "env": "OPENAI_API_KEY",
                      "header": "authorization", "endpoints": ["model.test:8000"]}],
    }]);
    pv["secret_handles"] = json!(["codex-token", "model-key"]);
    let mut sources = pv["credential_sources"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    sources.push(
        json!({"secret_handle": "model-key", "source_path": "/etc/glove/model.key",
                        "runtime_id": "codex"}),
    );
    pv["credential_sources"] = Value::Array(sources);
    let policy =
        ValidatedPolicy::from_json(&serde_json::to_vec(&pv).expect("encode")).expect("policy");
    let admit_with = |egress: Value, handles: Value| {
        let mut v = base();
        v["egress_policy_ids"] = egress;
        v["secret_handles"] = handles;
        DecodedPlan::decode(&bytes(&v)).and_then(|p| admit(p, None, &policy, NOW))
    };
    for egress in [json!([]), json!(["no-network"])] {
        let e = admit_with(egress.clone(), json!(["model-key"])).expect_err("leased");
        assert_eq!(e.code(), PLAN_SECRET_HANDLE_BROKERED, "{egress}: {e}");
        assert_eq!(e.location(), "secret_handles[0]");
    }
    // With the egress policy that brokers it, the proxy holds the key.
    admit_with(json!(["model"]), json!(["model-key"])).expect("brokered");
    admit_with(json!(["model", "no-network"]), json!(["model-key"])).expect("brokered");
    // A handle no egress policy brokers is still a lease candidate.
    admit_with(json!(["no-network"]), json!(["codex-token"])).expect("lease");
}

#[test]
fn path_exposures_are_optional_sorted_and_never_empty() {
    use glove_types::codes::exposure::*;
    // Without the field, the example plan's bytes and digests are those of
    // the file (a plan that never names an exposure is unchanged).
    let raw = crate::example("plan.json");
    let canonical = bytes(&base());
    let p = DecodedPlan::decode(&canonical).expect("decode");
    assert!(p.path_exposures().is_empty());
    assert_eq!(
        canon::to_canonical(&serde_json::from_slice::<Value>(&raw).expect("json")).expect("c"),
        canonical
    );
    let e = |id: &str, g: u64, a: &str| json!({"exposure_id": id, "generation": g, "access": a});
    let mut v = base();
    v["path_exposures"] = json!([e("a1", 1, "read_only"), e("b2", 3, "ephemeral_write")]);
    let p = DecodedPlan::decode(&bytes(&v)).expect("decode");
    assert_eq!(p.path_exposures().len(), 2);
    assert_eq!(p.path_exposures()[1].generation, 3);
    // Admission against the policy alone leaves them to gloved's journal.
    admit(p, None, &policy(), NOW).expect("admitted");
    for (list, want) in [
        (json!([]), PLAN_ARRAY_NOT_CANONICAL),
        (
            json!([e("b2", 1, "read_only"), e("a1", 1, "read_only")]),
            PLAN_ARRAY_NOT_CANONICAL,
        ),
        (
            json!([e("a1", 1, "read_only"), e("a1", 2, "read_only")]),
            PLAN_ARRAY_DUPLICATE,
        ),
        (json!([e("a1", 0, "read_only")]), EXPOSURE_GENERATION_STALE),
        (
            json!([e("a1", 1, "direct_write")]),
            EXPOSURE_ACCESS_NOT_ALLOWED,
        ),
        (json!([e("a1", 1, "direct")]), JSON_INVALID_TYPE),
        (
            json!([e("A1", 1, "read_only")]),
            glove_types::codes::ids::ID_INVALID,
        ),
        (
            json!([{"exposure_id": "a1", "generation": 1, "access": "read_only", "path": "/x"}]),
            JSON_UNKNOWN_FIELD,
        ),
    ] {
        assert_eq!(
            reject(|v| v["path_exposures"] = list.clone()),
            want,
            "{list}"
        );
    }
}
