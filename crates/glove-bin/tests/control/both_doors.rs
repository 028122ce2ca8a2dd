//! One assembly, two doors: each refusal class of a session's parts gives
//! the same code through the local door (`glove run`, `glove exec`: flags
//! and files) and through gloved's managed start (a policy and a plan),
//! because both prepare their parts with the same code
//! (`glove_control::assembly`).

use super::harness::*;
use super::managed::*;
use serde_json::{json, Value};
use std::path::Path;

/// The code `glove <args> --json -- /bin/true` refuses with (status 125,
/// the error as the last JSON line on standard output).
fn local_code(args: &[String], state: &Path) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_glove"))
        .args(args)
        .args(["--json", "--", "/bin/true"])
        .env("XDG_STATE_HOME", state)
        .output()
        .expect("glove");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let what = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(125), "{what}");
    let last = stdout.lines().last().unwrap_or_default();
    let v: Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {what}"));
    v["code"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}"))
        .to_owned()
}

/// The code gloved refuses `start_session` with, for the example plan
/// edited by `edit`.
fn managed_code(m: &Managed, session: &str, edit: impl FnOnce(&mut Value)) -> String {
    let d = m.start();
    let mut c = d.client();
    let mut v: Value = serde_json::from_str(&m.plan(&ROOMY, session)).expect("json");
    edit(&mut v);
    let plan =
        String::from_utf8(glove_types::canon::to_canonical(&v).expect("canon")).expect("utf8");
    c.create_session(&plan, None).expect("create");
    let auth = m.authorize(session, NOW_MS);
    code(c.call(
        "start_session",
        json!({"session_id": session, "authorization": auth}),
    ))
}

/// Adds `item` to the sorted list `key` of `p`.
fn add_sorted(p: &mut Value, key: &str, item: Value, by: &str) {
    let mut list = p[key].as_array().cloned().unwrap_or_default();
    list.push(item);
    list.sort_by(|a, b| {
        let k = |v: &Value| {
            if by.is_empty() {
                v.as_str().unwrap_or_default().to_owned()
            } else {
                v[by].as_str().unwrap_or_default().to_owned()
            }
        };
        k(a).cmp(&k(b))
    });
    p[key] = Value::Array(list);
}

/// A profile of one server running `command`.
fn profile_text(command: &str) -> String {
    json!({"schema_version": 1, "servers": [{
        "server_id": "one",
        "command": {"path": command, "arguments": [], "environment": ["PATH=/usr/bin:/bin"],
                    "working_directory": "/"},
        "tools": [{"name": "echo"}],
    }]})
    .to_string()
}

/// Both doors on an MCP profile written by `write`: the codes
/// (`glove run`, managed start).
fn mcp_both_ways(write: impl Fn(&Path)) -> (String, String) {
    let m = Managed::new(&ROOMY, None);
    let profile = m.home.dir.path().join("mcp-profile.json");
    write(&profile);
    m.edit_policy(|p| {
        p["tool_policy_ids"] = json!(["broken-tools"]);
        p["tool_policies"] = json!([{"tool_policy_id": "broken-tools",
                                     "profile_path": profile.display().to_string()}]);
    });
    let state = tempfile::tempdir().expect("state");
    let local = local_code(
        &[
            "run".into(),
            "--profile".into(),
            profile.display().to_string(),
        ],
        state.path(),
    );
    let managed = managed_code(&m, "both-mcp", |v| {
        v["tool_policy_ids"] = json!(["broken-tools"]);
    });
    (local, managed)
}

#[test]
fn an_mcp_profile_that_is_not_a_protected_file_is_refused_alike() {
    if !sandbox_ok() {
        return;
    }
    let (local, managed) = mcp_both_ways(|p| {
        write_mode(p, profile_text("/bin/cat").as_bytes(), 0o644);
    });
    assert_eq!(local, "file_bad_mode");
    assert_eq!(managed, local);
}

#[test]
fn an_invalid_mcp_profile_is_refused_alike() {
    if !sandbox_ok() {
        return;
    }
    let (local, managed) = mcp_both_ways(|p| {
        write_mode(p, b"{\"schema_version\": 1, \"servers\": 7}", 0o600);
    });
    assert_eq!(local, "mcp_profile_invalid");
    assert_eq!(managed, local);
}

#[test]
fn an_mcp_server_that_cannot_start_is_refused_alike() {
    if !sandbox_ok() {
        return;
    }
    let (local, managed) = mcp_both_ways(|p| {
        write_mode(
            p,
            profile_text("/nonexistent/glove-test/server").as_bytes(),
            0o600,
        );
    });
    assert!(local.starts_with("mcp_"), "{local}");
    assert_eq!(managed, local);
}

#[test]
fn an_unreadable_brokered_credential_is_refused_alike() {
    if !sandbox_ok() {
        return;
    }
    let m = Managed::new(&ROOMY, None);
    let key = m.home.dir.path().join("broken.key");
    write_mode(&key, b"sk-not-private\n", 0o600);
    let endpoint = "model.test:9";
    let brokered = json!({"secret_handle": "broken-key", "env": "BROKEN_KEY",
                          "header": "authorization", "endpoints": [endpoint], "scheme": "http"});
    m.edit_policy(|p| {
        add_sorted(p, "egress_policy_ids", json!("broken-egress"), "");
        add_sorted(
            p,
            "egress_policies",
            json!({"egress_policy_id": "broken-egress", "endpoints": [endpoint],
                   "allow_private": true, "hosts": {"model.test": ["127.0.0.1"]},
                   "brokered": [brokered.clone()]}),
            "egress_policy_id",
        );
        add_sorted(p, "secret_handles", json!("broken-key"), "");
        add_sorted(
            p,
            "credential_sources",
            json!({"secret_handle": "broken-key", "source_path": key.display().to_string()}),
            "secret_handle",
        );
    });
    // The credential is readable by others: neither door brokers it.
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("chmod");
    let file = m.home.dir.path().join("egress.json");
    let mut local_brokered = brokered.clone();
    local_brokered["source_path"] = json!(key.display().to_string());
    write_mode(
        &file,
        json!({"schema_version": 1, "egress_policy_id": "broken-egress",
               "endpoints": [endpoint], "allow_private": true,
               "hosts": {"model.test": ["127.0.0.1"]}, "brokered": [local_brokered]})
        .to_string()
        .as_bytes(),
        0o600,
    );
    let state = tempfile::tempdir().expect("state");
    let local = local_code(
        &["exec".into(), "--egress".into(), file.display().to_string()],
        state.path(),
    );
    assert!(local.starts_with("egress_"), "{local}");
    let managed = managed_code(&m, "both-egress", |v| {
        v["secret_handles"] = json!(["broken-key"]);
        v["egress_policy_ids"] = json!(["broken-egress"]);
    });
    assert_eq!(managed, local);
}
