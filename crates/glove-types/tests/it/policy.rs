// This file is over 600 lines because it is one battery of policy validation rules sharing one example-policy fixture and its mutate-and-reject helpers.
use glove_types::codes::ids::*;
use glove_types::codes::json::*;
use glove_types::codes::policy::*;
use glove_types::policy::{Explanation, ValidatedPolicy};
use glove_types::ErrorCode;
use serde_json::{json, Value};

fn base() -> Value {
    serde_json::from_slice(&crate::example("policy.json")).expect("example policy parses")
}

fn check(v: &Value) -> Result<ValidatedPolicy, glove_types::Rejection> {
    ValidatedPolicy::from_json(&serde_json::to_vec(v).expect("encode"))
}

/// Applies `f` to the example policy, fixes the adapter digest when asked,
/// and returns the rejection code.
fn reject(f: impl FnOnce(&mut Value)) -> ErrorCode {
    let mut v = base();
    f(&mut v);
    let r = check(&v);
    match r {
        Ok(_) => panic!("mutated policy was accepted: {v}"),
        Err(e) => e.code(),
    }
}

/// Like [`reject`] but recomputes the template digest first, so only the
/// intended rule can fire.
fn reject_launch(f: impl FnOnce(&mut Value)) -> ErrorCode {
    reject(|v| {
        f(v);
        redigest(v);
    })
}

fn redigest(v: &mut Value) {
    let bytes = serde_json::to_vec(v).expect("encode");
    if let Ok(x) = Explanation::from_json(&bytes) {
        for (i, t) in x.runtime_templates.iter().enumerate() {
            v["runtime_templates"][i]["adapter_command_digest"] =
                json!(t.computed_adapter_command_digest.to_hex());
        }
    }
}

fn tpl(v: &mut Value) -> &mut Value {
    &mut v["runtime_templates"][0]
}

#[test]
fn examples_are_valid() {
    let p = ValidatedPolicy::from_json(&crate::example("policy.json")).expect("example policy");
    assert_eq!(p.revision(), 7);
    let c = ValidatedPolicy::from_json(&crate::example("cloudflare-os-session-policy.json"))
        .expect("cloudflare fixture");
    let t = c.template("cloudflare-os-dev").expect("template");
    assert_eq!(t.runtime_id().as_str(), "cloudflare-os");
    assert!(c.remote_backend().is_some());
    let prof = c.profile("cfos-small").expect("profile").limits();
    assert_eq!(
        (
            prof.cpu_time_ms,
            prof.memory_bytes,
            prof.pids,
            prof.wall_time_ms
        ),
        (120_000, 2 << 30, 256, 300_000)
    );
    assert_eq!(
        (prof.disk_bytes, prof.terminal_output_bytes),
        (6 << 30, 16 << 20)
    );
    let e = &c.egress_policies()[0];
    assert_eq!(e.endpoints(), ["127.0.0.1:8787"]);
    assert!(e.allow_private());
}

#[test]
fn decoding_rules() {
    assert_eq!(reject(|v| v["extra"] = json!(1)), JSON_UNKNOWN_FIELD);
    assert_eq!(
        reject(|v| tpl(v)["launch"]["extra"] = json!(1)),
        JSON_UNKNOWN_FIELD
    );
    assert_eq!(
        reject(|v| {
            v.as_object_mut().map(|m| m.remove("revision"));
        }),
        JSON_MISSING_FIELD
    );
    assert_eq!(reject(|v| v["revision"] = json!(-1)), JSON_NEGATIVE_NUMBER);
    assert_eq!(reject(|v| v["revision"] = json!(1.5)), JSON_FLOAT);
    assert_eq!(reject(|v| v["revision"] = json!("7")), JSON_INVALID_TYPE);
    let dup = br#"{"schema_version":1,"schema_version":1}"#;
    assert_eq!(
        ValidatedPolicy::from_json(dup).unwrap_err().code(),
        JSON_DUPLICATE_KEY
    );
    let big = vec![b' '; (1 << 20) + 1];
    assert_eq!(
        ValidatedPolicy::from_json(&big).unwrap_err().code(),
        JSON_TOO_LARGE
    );
}

#[test]
fn top_level_rules() {
    assert_eq!(
        reject(|v| v["schema_version"] = json!(2)),
        POLICY_SCHEMA_VERSION
    );
    assert_eq!(
        reject(|v| v["revision"] = json!(0)),
        POLICY_REVISION_INVALID
    );
    assert_eq!(
        reject(|v| v["max_plan_ttl_ms"] = json!(0)),
        POLICY_PLAN_TTL_INVALID
    );
    assert_eq!(
        reject(|v| v["max_plan_ttl_ms"] = json!(2999)),
        POLICY_PLAN_TTL_TOO_SHORT
    );
    // The bound is the longest profile's wall time plus a second.
    assert!(check(&{
        let mut v = base();
        v["max_plan_ttl_ms"] = json!(111_000);
        v
    })
    .is_ok());
    assert_eq!(
        reject(|v| v["max_plan_ttl_ms"] = json!(110_999)),
        POLICY_PLAN_TTL_TOO_SHORT
    );
    assert!(check(&{
        let mut v = base();
        v["resource_profiles"]
            .as_array_mut()
            .expect("profiles")
            .truncate(1);
        v["max_plan_ttl_ms"] = json!(3000);
        v
    })
    .is_ok());
    // An operator-local CPU rate: bounded, optional.
    for bad in [0, 9, 1_024_001] {
        assert_eq!(
            reject(|v| v["resource_profiles"][1]["cpu_rate_millicpus"] = json!(bad)),
            POLICY_LIMIT_INVALID,
            "{bad}"
        );
    }
    assert_eq!(reject(|v| v["runtime_templates"] = json!([])), POLICY_EMPTY);
    assert_eq!(reject(|v| v["resource_profiles"] = json!([])), POLICY_EMPTY);
    assert_eq!(
        reject(|v| v["tool_policy_ids"] = json!(["b", "a"])),
        POLICY_ARRAY_NOT_CANONICAL
    );
    assert_eq!(
        reject(|v| v["tool_policy_ids"] = json!(["a", "a"])),
        POLICY_ARRAY_DUPLICATE
    );
    assert_eq!(reject(|v| v["secret_handles"] = json!(["Bad"])), ID_INVALID);
    let many: Vec<String> = (0..300).map(|i| format!("t{i:04}")).collect();
    assert_eq!(
        reject(|v| v["tool_policy_ids"] = json!(many)),
        POLICY_TOO_MANY
    );
}

#[test]
fn profile_rules() {
    for f in [
        "cpu_time_ms",
        "memory_bytes",
        "pids",
        "wall_time_ms",
        "disk_bytes",
        "terminal_output_bytes",
    ] {
        assert_eq!(
            reject(|v| v["resource_profiles"][0][f] = json!(0)),
            POLICY_LIMIT_INVALID,
            "{f}"
        );
    }
    assert_eq!(
        reject(|v| v["resource_profiles"][0]["pids"] = json!(65537)),
        POLICY_LIMIT_INVALID
    );
    let second = json!({"profile_id":"a","cpu_time_ms":1,"memory_bytes":1,"pids":1,"wall_time_ms":1,"disk_bytes":1,"terminal_output_bytes":1});
    assert_eq!(
        reject(|v| v["resource_profiles"]
            .as_array_mut()
            .expect("array")
            .push(second)),
        POLICY_ARRAY_NOT_CANONICAL
    );
}

#[test]
fn path_rules() {
    assert_eq!(
        reject(|v| v["path_aliases"][0]["host_path"] = json!("relative")),
        POLICY_PATH_INVALID
    );
    assert_eq!(
        reject(|v| v["path_aliases"][0]["host_path"] = json!("/srv/../etc")),
        POLICY_PATH_INVALID
    );
    assert_eq!(
        reject(|v| v["path_aliases"][0]["host_path"] = json!("/srv/x/")),
        POLICY_PATH_INVALID
    );
    assert_eq!(
        reject(|v| v["path_aliases"][0]["host_path"] = json!("/")),
        POLICY_PATH_ROOT
    );
    assert_eq!(
        reject(|v| v["path_aliases"][0]["host_path"] = json!("/etc/ssh")),
        POLICY_PATH_RESTRICTED
    );
    assert_eq!(
        reject(|v| v["path_aliases"][0]["host_path"] = json!("/proc/1/root")),
        POLICY_PATH_RESTRICTED
    );
    assert_eq!(
        reject(|v| v["path_aliases"][0]["target_path"] = json!("/proc/x")),
        POLICY_PATH_RESTRICTED
    );
    assert_eq!(
        reject(|v| v["path_aliases"][0]["max_ttl_secs"] = json!(0)),
        POLICY_ALIAS_TTL_INVALID
    );
    assert_eq!(
        reject(|v| v["path_aliases"][0]["max_ttl_secs"] = json!(86_401)),
        POLICY_ALIAS_TTL_INVALID
    );
    // Overlapping host paths and targets between two aliases.
    let second = |host: &str, target: &str| {
        json!({"alias":"zz","host_path":host,"target_path":target,"max_ttl_secs":1,
        "access":[{"access":"read_only","materialization":"bind","create_policy":"require_existing","cleanup_policy":"none","max_bytes":0}]})
    };
    assert_eq!(
        reject(|v| v["path_aliases"]
            .as_array_mut()
            .expect("a")
            .push(second("/srv/work/sage-protocol/sub", "/data"))),
        POLICY_ALIAS_OVERLAP
    );
    assert_eq!(
        reject(|v| v["path_aliases"]
            .as_array_mut()
            .expect("a")
            .push(second("/srv/other", "/workspace/sub"))),
        POLICY_TARGET_OVERLAP
    );
    assert_eq!(
        reject(|v| v["library_projection_destinations"][0]["target_path"] = json!("/workspace")),
        POLICY_TARGET_OVERLAP
    );
    assert!(check(&{
        let mut v = base();
        v["path_aliases"]
            .as_array_mut()
            .expect("a")
            .push(second("/srv/other", "/data"));
        v
    })
    .is_ok());
}

#[test]
fn access_tuple_rules() {
    let acc = |v: &mut Value, k: &str, x: Value| v["path_aliases"][0]["access"][0][k] = x;
    assert_eq!(
        reject(|v| acc(v, "access", json!("write"))),
        POLICY_ACCESS_UNKNOWN
    );
    assert_eq!(
        reject(|v| acc(v, "materialization", json!("overlay"))),
        POLICY_ACCESS_UNKNOWN
    );
    assert_eq!(
        reject(|v| acc(v, "create_policy", json!("make"))),
        POLICY_ACCESS_UNKNOWN
    );
    assert_eq!(
        reject(|v| acc(v, "cleanup_policy", json!("keep"))),
        POLICY_ACCESS_UNKNOWN
    );
    assert_eq!(
        reject(|v| acc(v, "materialization", json!("bind"))),
        POLICY_ACCESS_TUPLE_INVALID
    );
    assert_eq!(
        reject(|v| acc(v, "cleanup_policy", json!("retain"))),
        POLICY_ACCESS_TUPLE_INVALID
    );
    assert_eq!(
        reject(|v| acc(v, "max_bytes", json!(0))),
        POLICY_MAX_BYTES_INVALID
    );
    let ro = json!({"access":"read_only","materialization":"bind","create_policy":"require_existing","cleanup_policy":"none","max_bytes":5});
    assert_eq!(
        reject(|v| v["path_aliases"][0]["access"] = json!([ro])),
        POLICY_MAX_BYTES_INVALID
    );
    let t = v_access();
    assert_eq!(
        reject(|v| v["path_aliases"][0]["access"] = json!([t.clone(), t])),
        POLICY_ACCESS_DUPLICATE
    );
    assert_eq!(
        reject(|v| v["path_aliases"][0]["access"] = json!([])),
        POLICY_EMPTY
    );
    // direct_write parses (it is refused at launch, not here).
    let dw = json!({"access":"direct_write","materialization":"bind","create_policy":"require_existing","cleanup_policy":"none","max_bytes":1});
    assert!(check(&{
        let mut v = base();
        v["path_aliases"][0]["access"] = json!([dw]);
        v
    })
    .is_ok());
}

fn v_access() -> Value {
    base()["path_aliases"][0]["access"][0].clone()
}

#[test]
fn template_rules() {
    assert_eq!(
        reject(|v| tpl(v)["adapter_command_digest"] = json!("00".repeat(32))),
        POLICY_ADAPTER_DIGEST_MISMATCH
    );
    assert_eq!(
        reject(|v| tpl(v)["adapter_command_digest"] = json!("AB".repeat(32))),
        DIGEST_INVALID
    );
    assert_eq!(
        reject_launch(|v| tpl(v)["sandbox_backend"] = json!("macos_sbpl")),
        POLICY_SANDBOX_BACKEND_UNKNOWN
    );
    assert_eq!(
        reject_launch(|v| tpl(v)["allowed_path_aliases"] = json!(["nope"])),
        POLICY_ALIAS_UNRESOLVED
    );
    assert_eq!(
        reject_launch(|v| tpl(v)["allowed_projection_destinations"] = json!(["nope"])),
        POLICY_DESTINATION_UNRESOLVED
    );
    assert_eq!(
        reject_launch(|v| tpl(v)["sandbox_backend"] = json!("remote_linux_container")),
        POLICY_REMOTE_BACKEND_CONFLICT
    );
    // Each launch field is covered by the digest.
    for (k, x) in [
        ("executable_path", json!("/usr/bin/false")),
        ("arguments", json!(["--help"])),
        ("environment", json!(["PATH=/bin"])),
        ("read_only_paths", json!(["/opt/other"])),
    ] {
        assert_eq!(
            reject(|v| tpl(v)["launch"][k] = x),
            POLICY_ADAPTER_DIGEST_MISMATCH,
            "{k}"
        );
    }
}

#[test]
fn launch_rules() {
    let l = |v: &mut Value, k: &str, x: Value| tpl(v)["launch"][k] = x;
    assert_eq!(
        reject_launch(|v| l(v, "executable_path", json!(""))),
        POLICY_LAUNCH_EXECUTABLE
    );
    assert_eq!(
        reject_launch(|v| l(v, "runtime_discovery", json!("codex"))),
        POLICY_LAUNCH_EXECUTABLE
    );
    assert_eq!(
        reject_launch(|v| l(v, "executable_path", json!("usr/bin/true"))),
        POLICY_PATH_INVALID
    );
    assert_eq!(
        reject_launch(|v| l(v, "executable_search_paths", json!(["/usr/bin"]))),
        POLICY_DISCOVERY_SEARCH_PATHS
    );
    let disc = |v: &mut Value, runtime: &str, paths: Value| {
        l(v, "executable_path", json!(""));
        l(v, "runtime_discovery", json!(runtime));
        l(v, "executable_search_paths", paths);
    };
    assert!(check(&{
        let mut v = base();
        disc(&mut v, "codex", json!(["/opt/codex/bin", "/usr/local/bin"]));
        redigest(&mut v);
        v
    })
    .is_ok());
    assert_eq!(
        reject_launch(|v| disc(v, "aider", json!(["/usr/bin"]))),
        POLICY_DISCOVERY_UNSUPPORTED
    );
    assert_eq!(
        reject_launch(|v| disc(v, "pi", json!(["/usr/bin"]))),
        POLICY_DISCOVERY_RUNTIME_MISMATCH
    );
    assert_eq!(
        reject_launch(|v| disc(v, "codex", json!([]))),
        POLICY_DISCOVERY_SEARCH_PATHS
    );
    assert_eq!(
        reject_launch(|v| disc(v, "codex", json!(["/a", "/a"]))),
        POLICY_ARRAY_DUPLICATE
    );
    assert_eq!(
        reject_launch(|v| l(v, "arguments", json!(["a\u{0}b"]))),
        POLICY_ARGUMENT_INVALID
    );
    assert_eq!(
        reject_launch(|v| l(v, "environment", json!(["NOEQUALS"]))),
        POLICY_ENVIRONMENT_INVALID
    );
    assert_eq!(
        reject_launch(|v| l(v, "environment", json!(["1X=a"]))),
        POLICY_ENVIRONMENT_INVALID
    );
    assert_eq!(
        reject_launch(|v| l(v, "environment", json!(["HOME=/root"]))),
        POLICY_ENVIRONMENT_RESERVED
    );
    assert_eq!(
        reject_launch(|v| l(v, "environment", json!(["GLOVE_X=1"]))),
        POLICY_ENVIRONMENT_RESERVED
    );
    assert_eq!(
        reject_launch(|v| l(v, "environment", json!(["A=1", "A=2"]))),
        POLICY_ENVIRONMENT_DUPLICATE
    );
    assert_eq!(
        reject_launch(|v| l(v, "environment", json!(["B=1", "A=2"]))),
        POLICY_ARRAY_NOT_CANONICAL
    );
    assert_eq!(
        reject_launch(|v| l(v, "read_only_paths", json!(["/"]))),
        POLICY_PATH_ROOT
    );
    assert_eq!(
        reject_launch(|v| l(v, "read_only_paths", json!(["/a", "/a"]))),
        POLICY_ARRAY_DUPLICATE
    );
    assert_eq!(
        reject_launch(|v| l(v, "read_only_paths", json!(["/a", "/a/b"]))),
        POLICY_RUNTIME_PATH_OVERLAP
    );
    assert_eq!(
        reject_launch(|v| l(v, "read_only_paths", json!(["/usr/bin"]))),
        POLICY_RUNTIME_PATH_OVERLAP
    );
    assert_eq!(
        reject_launch(|v| l(v, "read_only_paths", json!(["/usr/bin/true"]))),
        POLICY_RUNTIME_PATH_OVERLAP
    );
}

#[test]
fn egress_secret_remote_rules() {
    let eg = |ep: &str, private: bool| json!([{"egress_policy_id":"no-network","endpoints":[ep],"allow_private":private}]);
    assert!(check(&{
        let mut v = base();
        v["egress_policies"] = eg("api.example.com:443", false);
        v
    })
    .is_ok());
    assert_eq!(
        reject(|v| v["egress_policies"] = eg("10.0.0.1:443", false)),
        POLICY_EGRESS_PRIVATE
    );
    assert_eq!(
        reject(|v| v["egress_policies"] = eg("[::1]:443", false)),
        POLICY_EGRESS_PRIVATE
    );
    assert_eq!(
        reject(|v| v["egress_policies"] = eg("localhost:80", false)),
        POLICY_EGRESS_PRIVATE
    );
    // Private whatever the spelling; metadata and reserved never.
    for ep in ["[::ffff:10.0.0.1]:443", "100.64.0.1:443", "[fe80::1]:443"] {
        assert_eq!(
            reject(|v| v["egress_policies"] = eg(ep, false)),
            POLICY_EGRESS_PRIVATE,
            "{ep}"
        );
    }
    for ep in [
        "127.1:443",
        "2130706433:443",
        "0x7f000001:443",
        "Example.com:443",
    ] {
        assert_eq!(
            reject(|v| v["egress_policies"] = eg(ep, true)),
            POLICY_EGRESS_ENDPOINT_INVALID,
            "{ep}"
        );
    }
    for ep in [
        "169.254.169.254:80",
        "169.254.170.23:80",
        "[fd00:ec2::254]:80",
        "[::ffff:169.254.169.254]:80",
        "0.0.0.0:80",
        "224.0.0.1:80",
    ] {
        assert_eq!(
            reject(|v| v["egress_policies"] = eg(ep, true)),
            POLICY_EGRESS_ENDPOINT_FORBIDDEN,
            "{ep}"
        );
    }
    assert_eq!(
        reject(|v| v["egress_policies"] = eg("example.com", true)),
        POLICY_EGRESS_ENDPOINT_INVALID
    );
    assert_eq!(
        reject(|v| v["egress_policies"] = eg("example.com:0", true)),
        POLICY_EGRESS_ENDPOINT_INVALID
    );
    assert_eq!(
        reject(|v| v["egress_policies"] = eg("Example.com:1", true)),
        POLICY_EGRESS_ENDPOINT_INVALID
    );
    assert_eq!(
        reject(|v| v["egress_policies"] =
            json!([{"egress_policy_id":"other","endpoints":[],"allow_private":false}])),
        POLICY_EGRESS_UNRESOLVED
    );
    assert_eq!(
        reject(|v| v["credential_sources"] =
            json!([{"secret_handle":"other","source_path":"/srv/secret"}])),
        POLICY_SECRET_UNRESOLVED
    );
    assert_eq!(
        reject(|v| v["credential_sources"] =
            json!([{"secret_handle":"codex-token","source_path":"secret"}])),
        POLICY_PATH_INVALID
    );
    assert_eq!(
        reject(
            |v| v["credential_sources"] = json!([{"runtime_id":"Codex!","secret_handle":"codex-token","source_path":"/srv/secret"}])
        ),
        glove_types::codes::ids::ID_INVALID
    );
    assert!(check(&{
        let mut v = base();
        v["credential_sources"] =
            json!([{"runtime_id":"codex","secret_handle":"codex-token","source_path":"/srv/secret"}]);
        v
    })
    .is_ok());
    let cf: Value =
        serde_json::from_slice(&crate::example("cloudflare-os-session-policy.json")).expect("json");
    let cf_reject = |f: &dyn Fn(&mut Value)| {
        let mut v = cf.clone();
        f(&mut v);
        check(&v).expect_err("must reject").code()
    };
    assert_eq!(
        cf_reject(&|v| {
            v.as_object_mut().map(|m| m.remove("remote_backend"));
        }),
        POLICY_REMOTE_BACKEND_CONFLICT
    );
    assert_eq!(
        cf_reject(&|v| v["remote_backend"]["port"] = json!(0)),
        POLICY_REMOTE_BACKEND_INVALID
    );
    assert_eq!(
        cf_reject(&|v| v["remote_backend"]["host_key"] = json!("ssh-rsa AAAA")),
        POLICY_REMOTE_BACKEND_INVALID
    );
    assert_eq!(
        cf_reject(&|v| v["remote_backend"]["container_image"] =
            json!("registry.example.invalid/glove/cloudflare-os:latest")),
        POLICY_REMOTE_BACKEND_INVALID
    );
    assert_eq!(
        cf_reject(&|v| v["remote_backend"]["container_image_digest"] = json!("11".repeat(32))),
        POLICY_REMOTE_BACKEND_INVALID
    );
    assert_eq!(
        cf_reject(&|v| v["egress_policies"][0]["allow_private"] = json!(false)),
        POLICY_EGRESS_PRIVATE
    );
    assert_eq!(
        cf_reject(&|v| v["max_plan_ttl_ms"] = json!(300_999)),
        POLICY_PLAN_TTL_TOO_SHORT
    );
}

#[test]
fn explain_reports_both_digests() {
    let mut v = base();
    tpl(&mut v)["adapter_command_digest"] = json!("00".repeat(32));
    let x = Explanation::from_json(&serde_json::to_vec(&v).expect("encode")).expect("explain");
    assert!(!x.valid);
    let t = &x.runtime_templates[0];
    assert!(!t.digest_matches);
    assert_eq!(
        t.template.adapter_command_digest().to_hex(),
        "00".repeat(32)
    );
    assert_ne!(t.computed_adapter_command_digest.to_hex(), "00".repeat(32));
}

#[test]
fn an_egress_policy_carries_the_proxys_settings() {
    let mut v = base();
    let handles = v["secret_handles"].clone();
    let sources = v["credential_sources"].clone();
    let eg = json!([{
        "egress_policy_id": "no-network",
        "endpoints": ["model.test:8000"],
        "allow_private": true,
        "hosts": {"model.test": ["127.0.0.1"]},
        "port_mappings": [{"listen_port": 18000, "endpoint": "model.test:8000"}],
        "brokered": [{"secret_handle": "zz-broker", "env": "OPENAI_API_KEY",
                      "header": "authorization", "endpoints": ["model.test:8000"]}],
    }]);
    v["egress_policies"] = eg;
    let mut hs: Vec<Value> = handles.as_array().cloned().unwrap_or_default();
    hs.push(json!("zz-broker"));
    v["secret_handles"] = Value::Array(hs);
    let mut ss: Vec<Value> = sources.as_array().cloned().unwrap_or_default();
    ss.push(json!({"secret_handle": "zz-broker", "source_path": "/etc/glove/broker.key"}));
    v["credential_sources"] = Value::Array(ss);
    let p = check(&v).expect("valid");
    let s = p.egress_policies()[0].settings().expect("settings");
    assert_eq!(s.port_mappings()[0].listen_port, 18000);
    assert_eq!(s.brokered()[0].source_path, "/etc/glove/broker.key");
    // A brokered handle without a source, a mapping to an unlisted
    // endpoint, extras on an offline policy: refused.
    let mut w = v.clone();
    w["credential_sources"] = if sources.is_null() {
        json!([])
    } else {
        sources.clone()
    };
    assert_eq!(
        check(&w).expect_err("no source").code(),
        POLICY_SECRET_UNRESOLVED
    );
    let mut w = v.clone();
    w["egress_policies"][0]["port_mappings"][0]["endpoint"] = json!("other.test:1");
    assert_eq!(
        check(&w).expect_err("unlisted").code(),
        glove_types::codes::egress::EGRESS_POLICY_INVALID
    );
    let mut w = v;
    w["egress_policies"][0]["endpoints"] = json!([]);
    assert_eq!(
        check(&w).expect_err("offline with extras").code(),
        glove_types::codes::egress::EGRESS_POLICY_INVALID
    );
}

#[test]
fn tool_policies_must_be_listed_and_name_a_canonical_profile_path() {
    use glove_types::codes::policy::{POLICY_PATH_INVALID, POLICY_TOOL_UNRESOLVED};
    use glove_types::policy::ValidatedPolicy;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let seed = std::fs::read(root.join("fuzz/seeds/policy_decode/policy-tool-policies.json"))
        .expect("seed");
    let p = ValidatedPolicy::from_json(&seed).expect("the seed validates");
    assert_eq!(p.tool_policies().len(), 1);
    assert_eq!(
        p.tool_policies()[0].profile_path(),
        "/etc/glove/mcp-profile.json"
    );
    let mut v: serde_json::Value = serde_json::from_slice(&seed).expect("json");
    v["tool_policies"][0]["tool_policy_id"] = serde_json::json!("not-listed");
    let e = ValidatedPolicy::from_json(v.to_string().as_bytes()).expect_err("unlisted");
    assert_eq!(e.code(), POLICY_TOOL_UNRESOLVED, "{e:?}");
    let mut v: serde_json::Value = serde_json::from_slice(&seed).expect("json");
    v["tool_policies"][0]["profile_path"] = serde_json::json!("relative/profile.json");
    let e = ValidatedPolicy::from_json(v.to_string().as_bytes()).expect_err("relative");
    assert_eq!(e.code(), POLICY_PATH_INVALID, "{e:?}");
}

/// Issue 27: an egress policy file (`glove exec --egress`) and a session
/// policy's egress section go through the same validation: the same bad
/// endpoints are refused both ways with the same code, and the same good
/// ones accepted both ways.
#[test]
fn issue27_an_egress_file_and_a_session_policy_refuse_the_same_endpoints() {
    use glove_types::egress::settings::EgressSettings;
    let cases: &[(&str, bool, Option<ErrorCode>)] = &[
        ("127.0.0.1:80", false, Some(POLICY_EGRESS_PRIVATE)),
        ("[::1]:9000", false, Some(POLICY_EGRESS_PRIVATE)),
        ("10.0.0.5:80", false, Some(POLICY_EGRESS_PRIVATE)),
        ("localhost:8080", false, Some(POLICY_EGRESS_PRIVATE)),
        (
            "API.example.com:443",
            true,
            Some(POLICY_EGRESS_ENDPOINT_INVALID),
        ),
        (
            "Model.Test:8000",
            false,
            Some(POLICY_EGRESS_ENDPOINT_INVALID),
        ),
        (
            "api.example.com.:443",
            true,
            Some(POLICY_EGRESS_ENDPOINT_INVALID),
        ),
        ("api.example.com:443", false, None),
        ("127.0.0.1:80", true, None),
        ("localhost:8080", true, None),
    ];
    for (ep, allow, want) in cases {
        let file = json!({
            "schema_version": 1,
            "egress_policy_id": "no-network",
            "endpoints": [ep],
            "allow_private": allow,
        });
        let by_file = EgressSettings::from_json(&serde_json::to_vec(&file).expect("encode"))
            .map(|_| ())
            .map_err(|e| e.code());
        let mut v = base();
        v["egress_policies"] = json!([{
            "egress_policy_id": "no-network",
            "endpoints": [ep],
            "allow_private": allow,
        }]);
        let by_policy = check(&v).map(|_| ()).map_err(|e| e.code());
        assert_eq!(by_file, by_policy, "{ep} allow_private={allow}");
        match want {
            Some(code) => assert_eq!(by_file, Err(*code), "{ep} allow_private={allow}"),
            None => assert_eq!(by_file, Ok(()), "{ep} allow_private={allow}"),
        }
    }
}
