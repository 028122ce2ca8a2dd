//! `glove plan new` and `glove plan fmt` against the example policy, their
//! output checked by `glove plan check`.

use super::{glove, protected_copy, repo, text};
use std::os::unix::fs::PermissionsExt;

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).expect("json")
}

/// Issue time of every plan here, Unix milliseconds.
const NOW: &str = "1796000000000";

#[test]
fn plan_new_writes_a_plan_plan_check_admits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = protected_copy(dir.path(), "policy.json");
    let ps = p.to_str().expect("utf-8");
    let plan = dir.path().join("plan.json");
    let plan_s = plan.to_str().expect("utf-8");
    let lib = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855:libraries:sage-lib";
    let args = [
        "plan",
        "new",
        "--policy",
        ps,
        "--template",
        "codex-safe",
        "--profile",
        "small",
        "--alias",
        "workspace:ephemeral_write",
        "--library",
        lib,
        "--secret",
        "codex-token",
        "--egress",
        "no-network",
        "--tool-policy",
        "sage-readonly",
        "--session",
        "session-0001",
        "--ttl",
        "60",
        "--now",
        NOW,
    ];
    // To stdout: exactly the plan's bytes.
    let out = glove(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mut want: serde_json::Value = serde_json::from_slice(
        &std::fs::read(repo().join("docs/examples/plan.json")).expect("read"),
    )
    .expect("example");
    want["path_grants"][0]["ttl_secs"] = serde_json::json!(60);
    want["idempotency_key"] = serde_json::json!("session-0001");
    assert_eq!(
        out.stdout,
        glove_types::canon::to_canonical(&want).expect("canonical")
    );
    // To a file, which `plan check` admits with the digests `--json` gave.
    let mut with_out = args.to_vec();
    with_out.extend(["--out", plan_s, "--json"]);
    let out = glove(&with_out);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let made = json(&out);
    assert_eq!(made["session_id"], "session-0001");
    assert_eq!(
        std::fs::read(&plan).expect("plan"),
        made["plan"].as_str().expect("plan").as_bytes()
    );
    let out = glove(&[
        "plan",
        "check",
        "--policy",
        ps,
        "--plan",
        plan_s,
        "--now",
        "1796000001000",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let checked = json(&out);
    assert_eq!(checked["admitted"], true);
    assert_eq!(
        checked["controller_plan_digest"],
        made["controller_plan_digest"]
    );
    // A fresh session id without `--session`, admitted now.
    let out = glove(&[
        "plan",
        "new",
        "--policy",
        ps,
        "--template",
        "codex-safe",
        "--profile",
        "small",
        "--alias",
        "workspace",
        "--json",
    ]);
    let v = json(&out);
    let id = v["session_id"].as_str().expect("id");
    assert!(id.starts_with("plan-") && id.len() == 21, "{id}");
    assert_eq!(
        std::fs::read(&plan).expect("plan"),
        made["plan"].as_str().expect("plan").as_bytes()
    );
}

#[test]
fn plan_new_refuses_with_stable_codes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = protected_copy(dir.path(), "policy.json");
    let ps = p.to_str().expect("utf-8");
    for (extra, code) in [
        (
            &["--template", "nope", "--profile", "small"][..],
            "plan_runtime_template_unknown",
        ),
        (
            &["--template", "codex-safe", "--profile", "huge"][..],
            "plan_resource_profile_unknown",
        ),
        (
            &[
                "--template",
                "codex-safe",
                "--profile",
                "small",
                "--alias",
                "home",
            ][..],
            "plan_path_alias_unknown",
        ),
        (
            &[
                "--template",
                "codex-safe",
                "--profile",
                "small",
                "--alias",
                "workspace:read_only",
            ][..],
            "plan_path_access_mismatch",
        ),
        (
            &[
                "--template",
                "codex-safe",
                "--profile",
                "small",
                "--alias",
                "workspace:rw",
            ][..],
            "cli_invalid_argument",
        ),
        (
            &[
                "--template",
                "codex-safe",
                "--profile",
                "small",
                "--library",
                "ab:libraries",
            ][..],
            "digest_invalid",
        ),
        (
            &[
                "--template",
                "codex-safe",
                "--profile",
                "small",
                "--library",
                "nodest",
            ][..],
            "cli_invalid_argument",
        ),
        (
            &[
                "--template",
                "codex-safe",
                "--profile",
                "small",
                "--secret",
                "x",
            ][..],
            "plan_secret_handle_unknown",
        ),
        (
            &[
                "--template",
                "codex-safe",
                "--profile",
                "small",
                "--ttl",
                "121",
            ][..],
            "plan_expiry_window_invalid",
        ),
        (
            &[
                "--template",
                "codex-safe",
                "--profile",
                "small",
                "--session",
                "Bad Id",
            ][..],
            "id_invalid",
        ),
    ] {
        let mut args = vec!["plan", "new", "--policy", ps, "--json"];
        args.extend(extra);
        let out = glove(&args);
        assert_eq!(out.status.code(), Some(1), "{extra:?}");
        assert_eq!(json(&out)["code"], code, "{extra:?}");
    }
    // The policy is read as a protected file.
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let out = glove(&[
        "plan",
        "new",
        "--policy",
        ps,
        "--template",
        "codex-safe",
        "--profile",
        "small",
        "--json",
    ]);
    assert_eq!(json(&out)["code"], "file_bad_mode");
}

#[test]
fn plan_fmt_round_trips_a_hand_edited_plan() {
    let dir = tempfile::tempdir().expect("tempdir");
    let example = std::fs::read(repo().join("docs/examples/plan.json")).expect("read");
    let v: serde_json::Value = serde_json::from_slice(&example).expect("plan");
    // Reordered (serde_json keeps the sorted order; reverse it) and pretty.
    let reordered: serde_json::Map<_, _> = v
        .as_object()
        .expect("object")
        .clone()
        .into_iter()
        .rev()
        .collect();
    let pretty = serde_json::to_vec_pretty(&reordered).expect("pretty");
    assert_ne!(pretty, example);
    let f = dir.path().join("edited.json");
    std::fs::write(&f, &pretty).expect("write");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let fs = f.to_str().expect("utf-8");
    let out = glove(&["plan", "fmt", fs]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(out.stdout, example);
    assert_eq!(
        std::fs::read(&f).expect("read"),
        pretty,
        "printing leaves the file"
    );
    let out = glove(&["plan", "fmt", fs, "--in-place"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(std::fs::read(&f).expect("read"), example);
    let mode = std::fs::metadata(&f).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o640, "the rewrite keeps the mode");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names.len(), 1, "no temporary file left: {names:?}");
    // What decoding refuses, fmt refuses with its code, and leaves the file.
    for (bad, code) in [
        (&b"{\"a\":1,\"a\":2}"[..], "json_duplicate_key"),
        (&b"{\"schema_version\":1}"[..], "json_missing_field"),
        (&b"{\"x\":1.5}"[..], "json_float"),
    ] {
        std::fs::write(&f, bad).expect("write");
        let out = glove(&["plan", "fmt", fs, "--in-place"]);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            text(&out.stderr).starts_with(&format!("error[{code}]")),
            "{}",
            text(&out.stderr)
        );
        assert_eq!(std::fs::read(&f).expect("read"), bad);
    }
}
