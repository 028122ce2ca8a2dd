//! `glove policy generate`: the entry it prints is accepted by `policy
//! validate` when pasted into a policy, its digest is the one validation
//! computes, and bad values are refused with their codes.

#[path = "common/mod.rs"]
mod common;

use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn generate(args: &[&str]) -> Output {
    let mut a = vec!["policy", "generate"];
    a.extend_from_slice(args);
    common::glove(common::As::Caller, &a, None)
}

/// The example policy with its template replaced by `entry`, validated.
fn validate_with(dir: &Path, entry: &Value) -> Output {
    let mut policy: Value = serde_json::from_slice(
        &std::fs::read(repo().join("docs/examples/policy.json")).expect("read"),
    )
    .expect("json");
    policy["runtime_templates"] = Value::Array(vec![entry.clone()]);
    let p = dir.join("policy.json");
    std::fs::write(&p, serde_json::to_vec_pretty(&policy).expect("json")).expect("write");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    common::glove(
        common::As::Caller,
        &[
            "policy",
            "validate",
            "--json",
            "--file",
            p.to_str().expect("utf-8"),
        ],
        None,
    )
}

fn entry(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON entry")
}

#[test]
fn a_generated_pinned_entry_validates_when_pasted_into_a_policy() {
    let t = tempfile::tempdir().expect("tempdir");
    let out = generate(&[
        "--runtime",
        "codex",
        "--executable",
        "/usr/bin/true",
        "--template-id",
        "codex-gen",
        "--arg",
        "--version",
        "--env",
        "TERM=xterm-256color",
        "--env",
        "PATH=/usr/bin:/bin",
        "--ro",
        "/usr/share",
        "--alias",
        "workspace",
        "--projection-destination",
        "libraries",
    ]);
    let e = entry(&out);
    // Sorted as the policy requires.
    assert_eq!(e["launch"]["environment"][0], "PATH=/usr/bin:/bin");
    let v = validate_with(t.path(), &e);
    assert_eq!(
        v.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&v.stdout)
    );
    // Another argument order is another digest.
    let other = entry(&generate(&[
        "--runtime",
        "codex",
        "--executable",
        "/usr/bin/true",
        "--template-id",
        "codex-gen",
        "--arg",
        "--help",
        "--arg",
        "--version",
    ]));
    assert_ne!(other["adapter_command_digest"], e["adapter_command_digest"]);
    // A pasted entry whose digest was edited is refused by validation.
    let mut forged = e.clone();
    forged["launch"]["arguments"] = serde_json::json!(["--help"]);
    let v = validate_with(t.path(), &forged);
    assert_eq!(v.status.code(), Some(1));
}

#[test]
fn a_generated_discovery_entry_validates_when_pasted_into_a_policy() {
    let t = tempfile::tempdir().expect("tempdir");
    let bin = t.path().join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    std::fs::copy("/bin/true", bin.join("pi")).expect("copy");
    let e = entry(&generate(&[
        "--runtime",
        "pi",
        "--search-path",
        bin.to_str().expect("utf-8"),
        "--template-id",
        "pi-gen",
    ]));
    assert_eq!(e["launch"]["runtime_discovery"], "pi");
    let v = validate_with(t.path(), &e);
    assert_eq!(
        v.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&v.stdout)
    );
    // Nothing named `codex` there: refused, discovery would fail closed.
    let out = generate(&[
        "--runtime",
        "codex",
        "--search-path",
        bin.to_str().expect("utf-8"),
        "--template-id",
        "x",
    ]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn bad_values_are_refused_with_their_codes() {
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "--runtime",
                "codex",
                "--executable",
                "relative",
                "--template-id",
                "x",
            ],
            "cli_invalid_argument",
        ),
        (
            &[
                "--runtime",
                "codex",
                "--executable",
                "/nonexistent/codex",
                "--template-id",
                "x",
            ],
            "cli_invalid_argument",
        ),
        (
            &[
                "--runtime",
                "codex",
                "--executable",
                "/usr/bin/true",
                "--template-id",
                "x",
                "--ro",
                "/usr/bin",
            ],
            "policy_runtime_path_overlap",
        ),
        (
            &[
                "--runtime",
                "codex",
                "--executable",
                "/usr/bin/true",
                "--template-id",
                "x",
                "--env",
                "NOEQUALS",
            ],
            "policy_environment_invalid",
        ),
        (
            &[
                "--runtime",
                "codex",
                "--executable",
                "/usr/bin/true",
                "--template-id",
                "x",
                "--alias",
                "w",
                "--alias",
                "w",
            ],
            "policy_array_duplicate",
        ),
        (
            &[
                "--runtime",
                "codex",
                "--executable",
                "/usr/bin/true",
                "--template-id",
                "x",
                "--sandbox-backend",
                "vm",
            ],
            "policy_sandbox_backend_unknown",
        ),
        (
            &[
                "--runtime",
                "cloudflare-os",
                "--search-path",
                "/usr/bin",
                "--template-id",
                "x",
            ],
            "policy_discovery_unsupported",
        ),
    ];
    for (args, code) in cases {
        let out = generate(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("error[{code}]")), "{args:?}: {err}");
    }
}

/// Issue 30: `--model URL --credential-file F` prints the template pointed
/// at the endpoint, the egress policy brokering the key, the handle and
/// its credential source; all five together validate in one policy, and a
/// loose credential file is refused.
#[test]
fn model_presets_for_every_harness_validate_together_in_one_policy() {
    let t = tempfile::tempdir().expect("tempdir");
    let bin = t.path().join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    let key = t.path().join("model.key");
    std::fs::write(&key, "sk-x").expect("key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let key_s = key.to_str().expect("utf-8");
    let mut policy: Value = serde_json::from_slice(
        &std::fs::read(repo().join("docs/examples/policy.json")).expect("read"),
    )
    .expect("json");
    let (mut templates, mut egress, mut handles, mut sources) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (i, h) in glove_types::harness::all().enumerate() {
        std::fs::copy("/bin/true", bin.join(h.executable_name)).expect("copy");
        let id = format!("{}-preset", h.id);
        // One over HTTPS (the vendor's way), the rest to a loopback stub.
        let url = if i == 0 {
            "https://api.example.com".to_owned()
        } else {
            format!("http://127.0.0.1:{}", 8000 + i)
        };
        let v = entry(&generate(&[
            "--runtime",
            h.id,
            "--search-path",
            bin.to_str().expect("utf-8"),
            "--template-id",
            &id,
            "--model",
            &url,
            "--model-name",
            "m",
            "--credential-file",
            key_s,
        ]));
        assert_eq!(v["runtime_template"]["runtime_template_id"], id.as_str());
        assert_eq!(v["secret_handle"], format!("{id}-key"));
        assert_eq!(v["credential_source"]["source_path"], key_s);
        let e = &v["egress_policy"];
        assert_eq!(e["brokered"][0]["env"], h.model.key_variable);
        assert_eq!(e["brokered"][0]["header"], h.model.key_header);
        assert!(e["brokered"][0].get("source_path").is_none(), "{e}");
        assert_eq!(
            e["brokered"][0]["scheme"],
            if i == 0 { "https" } else { "http" }
        );
        templates.push(v["runtime_template"].clone());
        egress.push(e.clone());
        handles.push(v["secret_handle"].clone());
        sources.push(v["credential_source"].clone());
    }
    let by = |k: &'static str| move |a: &Value, b: &Value| a[k].as_str().cmp(&b[k].as_str());
    templates.sort_by(by("runtime_template_id"));
    egress.sort_by(by("egress_policy_id"));
    sources.sort_by(by("secret_handle"));
    handles.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
    let mut ids: Vec<Value> = egress
        .iter()
        .map(|e| e["egress_policy_id"].clone())
        .collect();
    ids.extend(
        policy["egress_policy_ids"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
    );
    ids.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
    let mut hs = policy["secret_handles"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    hs.extend(handles);
    hs.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
    policy["runtime_templates"] = Value::Array(templates);
    policy["egress_policy_ids"] = Value::Array(ids);
    policy["egress_policies"] = Value::Array(egress);
    policy["secret_handles"] = Value::Array(hs);
    policy["credential_sources"] = Value::Array(sources);
    let p = t.path().join("policy.json");
    std::fs::write(&p, serde_json::to_vec_pretty(&policy).expect("json")).expect("write");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let v = common::glove(
        common::As::Caller,
        &[
            "policy",
            "validate",
            "--json",
            "--file",
            p.to_str().expect("utf-8"),
        ],
        None,
    );
    assert_eq!(
        v.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&v.stdout),
        String::from_utf8_lossy(&v.stderr)
    );
    // A credential file others can read is refused with its code.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let out = generate(&[
        "--runtime",
        "codex",
        "--search-path",
        bin.to_str().expect("utf-8"),
        "--template-id",
        "x",
        "--model",
        "http://127.0.0.1:1",
        "--credential-file",
        key_s,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("agent_key_file_loose"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
