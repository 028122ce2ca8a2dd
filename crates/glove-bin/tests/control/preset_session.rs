//! Issue 30's presets for gloved: one `glove policy generate --model URL
//! --credential-file F` gives the template, the egress policy brokering
//! the key, the secret handle and its credential source; pasted into the
//! session policy as they are, a plan selects them by id and a managed
//! codex session does a real turn against the scripted endpoint with the
//! key brokered.

use super::common;
use super::contained_turns::{glove, header, strings, stub};
use super::harness::*;
use super::managed::*;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;

#[test]
fn a_generated_preset_runs_a_managed_codex_turn_with_the_key_brokered() {
    let Some(nm) = common::harnesses() else {
        return;
    };
    if !sandbox_ok() || !common::python_ok() {
        return;
    }
    let m = Managed::new(&ROOMY, None);
    let scratch = super::staged::Scratch::new("preset");
    let d = scratch.path().to_owned();
    let st = stub(&d, &[]);
    let staged = super::staged::lease();
    let (report, _) = staged.stage("codex", &nm, glove);
    let bin = staged.dir().join("bin").display().to_string();
    let key = d.join("openai.key");
    let real = "sk-glove-real-preset-3a9c";
    std::fs::write(&key, format!("{real}\n")).expect("key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let url = format!("http://127.0.0.1:{}", st.port);
    let mut args: Vec<String> = [
        "policy",
        "generate",
        "--runtime",
        "codex",
        "--search-path",
        &bin,
        "--template-id",
        "codex-preset",
        "--model",
        &url,
        "--model-name",
        "glove-stub",
        "--credential-file",
        key.to_str().expect("utf8"),
        "--arg",
        "exec",
        "--arg",
        "--skip-git-repo-check",
        "--arg",
        "-s",
        "--arg",
        "danger-full-access",
        "--arg",
        "Write the word glove-turn into turn.txt.",
        "--env",
        "TERM=xterm-256color",
        "--alias",
        "workspace",
        "--projection-destination",
        "libraries",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for e in strings(&report["environment"]) {
        args.extend(["--env".into(), e]);
    }
    for r in strings(&report["read_only_paths"]) {
        args.extend(["--ro".into(), r]);
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let preset = glove(&a);
    let template = preset["runtime_template"].clone();
    let egress = preset["egress_policy"].clone();
    let handle = preset["secret_handle"].clone();
    let policy_id = egress["egress_policy_id"].as_str().expect("id").to_owned();
    m.edit_policy(|p| {
        p["runtime_templates"] = json!([template.clone()]);
        let mut ids = p["egress_policy_ids"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        ids.push(json!(policy_id));
        ids.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
        p["egress_policy_ids"] = Value::Array(ids);
        p["egress_policies"] = json!([egress.clone()]);
        let mut hs = p["secret_handles"].as_array().cloned().unwrap_or_default();
        hs.push(handle.clone());
        hs.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
        p["secret_handles"] = Value::Array(hs);
        p["credential_sources"] = json!([preset["credential_source"].clone()]);
    });
    let daemon = m.start();
    let standard = {
        let p: Value = serde_json::from_slice(&example("policy.json")).expect("policy");
        p["resource_profiles"]
            .as_array()
            .expect("profiles")
            .iter()
            .find(|p| p["profile_id"] == "standard")
            .expect("standard")
            .clone()
    };
    let session = "preset-codex";
    let plan = template_plan(&template, "codex", session, &standard, |v| {
        v["secret_handles"] = json!([handle.clone()]);
        v["egress_policy_ids"] = json!([policy_id.clone()]);
    });
    let mut c = daemon.client();
    c.create_session(&plan, None).expect("create");
    let started = start(&mut c, &m, session);
    assert_eq!(started["stage"], "running", "{started}");
    c.call("attach", json!({"session_id": session}))
        .expect("attach");
    let mut out = Vec::new();
    let ended = until_ended(&mut c, &mut out);
    let (body, _) = receipt_of(&mut c, session);
    let log = std::fs::read_to_string(&st.log).unwrap_or_default();
    let requests: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let what = format!(
        "{ended}\nreceipt {body}\noutput {}\nrequests {}",
        String::from_utf8_lossy(&out),
        requests.len()
    );
    assert_eq!(ended["stage"], "exited", "{what}");
    assert_eq!(body["termination"]["exit"]["code"], 0, "{what}");
    let model: Vec<&Value> = requests.iter().filter(|r| r["answer"].is_array()).collect();
    assert!(model.len() >= 2, "{what}");
    let h = glove_types::harness::by_id("codex").expect("codex");
    let want = h.model.key_format.value(real);
    assert!(
        model
            .iter()
            .all(|r| header(r, h.model.key_header) == Some(want.as_str())),
        "a model request without the real key\n{what}"
    );
    assert!(!log.contains("glove-placeholder-"), "{what}");
    assert!(!String::from_utf8_lossy(&out).contains(real), "{what}");
    assert_eq!(body["egress"]["policy_id"], policy_id.as_str(), "{what}");
    assert!(
        body["egress"]["requests_allowed"].as_u64().unwrap_or(0) >= 2,
        "{what}"
    );
}
