//! Retained workspaces in gloved: a `retained_write` grant stages the
//! alias's directory, the receipt commits the stage; after a restart of
//! gloved (the loop device attached again from the image) the owner
//! inspects and applies it through the owner socket, and a controller on
//! the control socket can do neither.

use super::common;
use super::harness::*;
use super::managed::{receipt_of, start, unhex, until_ended, until_output, Managed, ROOMY};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

const BYTES: u64 = 64 << 20;

fn glove(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_glove"))
        .args(args)
        .output()
        .expect("run glove")
}

fn ready() -> bool {
    super::managed::sandbox_ok()
        && common::need(common::is_root(), "retained workspaces need root")
        && common::need(
            std::path::Path::new("/usr/sbin/mkfs.ext4").exists()
                || std::path::Path::new("/sbin/mkfs.ext4").exists(),
            "mkfs.ext4 is missing",
        )
}

#[test]
fn a_retained_grant_comes_back_through_the_owner_socket_after_a_restart() {
    if !ready() {
        return;
    }
    let mut m = Managed::new(&ROOMY, None);
    m.edit_policy(|p| {
        p["path_aliases"][0]["access"] = json!([{
            "access": "retained_write", "materialization": "copy",
            "create_policy": "require_existing", "cleanup_policy": "retain",
            "max_bytes": BYTES,
        }]);
    });
    // The owner's key and a root-owned trust policy.
    let dir = m.home.dir.path().to_path_buf();
    let trust_dir = dir.join("trust");
    std::fs::create_dir(&trust_dir).expect("mkdir");
    std::fs::set_permissions(&trust_dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let key = dir.join("owner.key");
    let out = glove(&[
        "apply",
        "keygen",
        "--key",
        key.to_str().expect("utf8"),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let k: Value = serde_json::from_slice(&out.stdout).expect("keygen");
    let trust = trust_dir.join("policy.json");
    std::fs::write(
        &trust,
        serde_json::to_vec(&json!({"schema": "glove.apply-trust-v1", "keys": [k["trust_entry"]]}))
            .expect("json"),
    )
    .expect("write trust");
    std::fs::set_permissions(&trust, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    m.extra
        .extend(["--apply-trust".into(), trust.display().to_string()]);

    std::fs::write(m.workspace.join("gone.txt"), "bye\n").expect("gone");
    std::fs::write(m.workspace.join("run.sh"), "#!/bin/sh\n").expect("run.sh");
    let d = m.start();
    let mut c = d.client();
    let caps = c.capabilities().expect("caps");
    assert_eq!(caps["apply_schema_version"], 1, "{caps}");
    assert_eq!(caps["retained_workspaces"], true);
    let plan = m.plan(&ROOMY, "kept-1");
    let mut v: Value = serde_json::from_str(&plan).expect("plan");
    v["path_grants"] = json!([{
        "access": "retained_write", "alias": "workspace", "cleanup_policy": "retain",
        "materialization": "copy", "max_bytes": BYTES, "ttl_secs": 120,
    }]);
    let plan =
        String::from_utf8(glove_types::canon::to_canonical(&v).expect("canon")).expect("utf8");
    c.create_session(&plan, None).expect("create");
    start(&mut c, &m, "kept-1");
    let att = c
        .call("attach", json!({"session_id": "kept-1"}))
        .expect("attach");
    let mut out: Vec<u8> = att["transcript"]
        .as_array()
        .expect("transcript")
        .iter()
        .flat_map(|ch| unhex(ch["data_hex"].as_str().unwrap_or("")))
        .collect();
    c.call(
        "write_stdin",
        json!({"session_id": "kept-1", "data":
            "cd /workspace && echo changed > README && echo new > added.txt && rm gone.txt && chmod 755 run.sh && echo do''ne\n"}),
    )
    .expect("stdin");
    until_output(&mut c, &mut out, |s| s.contains("done"));
    c.call(
        "write_stdin",
        json!({"session_id": "kept-1", "data": "exit\n"}),
    )
    .expect("exit");
    until_ended(&mut c, &mut out);
    let (body, _) = receipt_of(&mut c, "kept-1");
    let r = &body["retained"][0];
    assert_eq!(r["alias"], "workspace", "{body}");
    assert!(r["final_digest"].is_string(), "{body}");
    assert_ne!(r["final_digest"], r["baseline_digest"]);
    // The host directory is untouched so far.
    assert_eq!(
        std::fs::read_to_string(m.workspace.join("README")).expect("README"),
        "from the host\n"
    );
    // A controller on the control socket can neither see nor apply it.
    let e = code(c.call("stages_list", json!({})));
    assert_eq!(e, "control_owner_only");
    let e = code(c.call(
        "stage_apply",
        json!({"session_id": "kept-1", "authorization": "{}"}),
    ));
    assert_eq!(e, "apply_remote_refused");
    drop(c);

    // gloved restarts: the image is attached again on the next inspection.
    let _ = d.stop();
    let d = m.start();
    let run = d.run.display().to_string();
    let diff = glove(&["diff", "kept-1", "--service", "--runtime-dir", &run]);
    assert!(
        diff.status.success(),
        "{}",
        String::from_utf8_lossy(&diff.stderr)
    );
    let stat = String::from_utf8_lossy(&diff.stdout).into_owned();
    assert!(
        stat.contains("README") && stat.contains("added.txt"),
        "{stat}"
    );
    let applied = glove(&[
        "apply",
        "kept-1",
        "--service",
        "--runtime-dir",
        &run,
        "--yes",
        "--json",
        "--key",
        key.to_str().expect("utf8"),
    ]);
    let a: Value = serde_json::from_slice(&applied.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&applied.stderr)));
    assert_eq!(a["outcome"], "applied", "{a}");
    assert_eq!(
        std::fs::read_to_string(m.workspace.join("README")).expect("README"),
        "changed\n"
    );
    assert_eq!(
        std::fs::read_to_string(m.workspace.join("added.txt")).expect("added"),
        "new\n"
    );
    assert!(!m.workspace.join("gone.txt").exists());
    let mode = std::fs::metadata(m.workspace.join("run.sh"))
        .expect("run.sh")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    // The applied receipt is in gloved's receipt journal, after the
    // session's, in the same chain.
    let mut c = d.client();
    let page = c.receipts_page(0, None).expect("page");
    let kinds: Vec<String> = page["receipts"]
        .as_array()
        .expect("receipts")
        .iter()
        .map(|r| {
            let env: Value =
                serde_json::from_str(r["envelope"].as_str().unwrap_or("{}")).expect("env");
            env["receipt_kind"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    assert_eq!(kinds, ["resource_v1", "apply_v1"], "{page}");
    let listed = glove(&[
        "stages",
        "list",
        "--service",
        "--runtime-dir",
        &run,
        "--json",
    ]);
    let l: Value = serde_json::from_slice(&listed.stdout).expect("list");
    assert_eq!(l["stages"][0]["applied_by"], a["transaction_id"], "{l}");
    let _ = d.stop();

    // With an age limit, gloved removes the stages past it at startup.
    m.extra.extend(["--stage-max-age-secs".into(), "0".into()]);
    let d = m.start();
    let run = d.run.display().to_string();
    let listed = glove(&[
        "stages",
        "list",
        "--service",
        "--runtime-dir",
        &run,
        "--json",
    ]);
    let l: Value = serde_json::from_slice(&listed.stdout).expect("list");
    assert_eq!(l["stages"], json!([]), "{l}");
    let _ = d.stop();
}

/// gloved killed while a session with a retained workspace runs: at the
/// next start, session recovery ends the sandbox and the stage it left
/// live is attached again and frozen, ready for `glove diff`.
#[test]
fn a_stage_left_live_by_a_killed_gloved_is_frozen_at_the_next_start() {
    if !ready() {
        return;
    }
    let m = Managed::new(&ROOMY, None);
    m.edit_policy(|p| {
        p["path_aliases"][0]["access"] = json!([{
            "access": "retained_write", "materialization": "copy",
            "create_policy": "require_existing", "cleanup_policy": "retain",
            "max_bytes": BYTES,
        }]);
    });
    let mut d = m.start();
    let mut c = d.client();
    let mut v: Value = serde_json::from_str(&m.plan(&ROOMY, "kept-2")).expect("plan");
    v["path_grants"] = json!([{
        "access": "retained_write", "alias": "workspace", "cleanup_policy": "retain",
        "materialization": "copy", "max_bytes": BYTES, "ttl_secs": 120,
    }]);
    let plan =
        String::from_utf8(glove_types::canon::to_canonical(&v).expect("canon")).expect("utf8");
    c.create_session(&plan, None).expect("create");
    start(&mut c, &m, "kept-2");
    let mut out = Vec::new();
    c.call("attach", json!({"session_id": "kept-2"}))
        .expect("attach");
    c.call(
        "write_stdin",
        json!({"session_id": "kept-2", "data": "echo left > /workspace/left.txt && echo wr''itten\n"}),
    )
    .expect("stdin");
    until_output(&mut c, &mut out, |s| s.contains("written"));
    d.child.kill().expect("SIGKILL gloved");
    d.child.wait().expect("wait");
    drop(c);
    let d = m.start();
    let run = d.run.display().to_string();
    let listed = glove(&[
        "stages",
        "list",
        "--service",
        "--runtime-dir",
        &run,
        "--json",
    ]);
    let l: Value = serde_json::from_slice(&listed.stdout).expect("list");
    assert_eq!(l["stages"][0]["session_id"], "kept-2", "{l}");
    assert_eq!(l["stages"][0]["state"], "frozen", "{l}");
    let diff = glove(&[
        "diff",
        "kept-2",
        "--service",
        "--runtime-dir",
        &run,
        "--stat",
    ]);
    let stat = String::from_utf8_lossy(&diff.stdout).into_owned();
    assert!(
        stat.contains("left.txt"),
        "{stat} {}",
        String::from_utf8_lossy(&diff.stderr)
    );
    let _ = d.stop();
}
