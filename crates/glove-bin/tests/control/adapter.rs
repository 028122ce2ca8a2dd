//! The native adapter through a real gloved: the private home and its
//! managed environment, credential leases (one session at a time, a token
//! refreshed inside kept as a new version, loose sources refused), and the
//! adapter's facts in the receipt. The example policy's template is a
//! `codex` runtime running `/bin/sh`.

use super::harness::*;
use super::managed::*;
use serde_json::{json, Value};
use std::path::PathBuf;

/// A managed home whose policy maps `codex-token` to a protected source.
fn with_lease(source_mode: u32) -> (Managed, PathBuf) {
    let m = Managed::new(&ROOMY, None);
    let source = m.home.dir.path().join("codex-auth.json");
    write_mode(&source, b"{\"token\":\"first\"}\n", source_mode);
    let s = source.display().to_string();
    m.edit_policy(|p| {
        p["credential_sources"] = json!([{"secret_handle": "codex-token", "source_path": s}]);
    });
    (m, source)
}

fn plan_with_token(m: &Managed, session: &str) -> String {
    let mut v: Value = serde_json::from_str(&m.plan(&ROOMY, session)).expect("json");
    v["secret_handles"] = json!(["codex-token"]);
    String::from_utf8(glove_types::canon::to_canonical(&v).expect("canon")).expect("utf8")
}

fn attached(c: &mut glove_bin::control::client::Client, session: &str) -> Vec<u8> {
    let att = c
        .call("attach", json!({"session_id": session}))
        .expect("attach");
    att["transcript"]
        .as_array()
        .expect("transcript")
        .iter()
        .flat_map(|ch| unhex(ch["data_hex"].as_str().unwrap_or("")))
        .collect()
}

#[test]
fn a_native_session_gets_a_private_home_and_its_lease() {
    if !sandbox_ok() {
        return;
    }
    let (m, source) = with_lease(0o600);
    let d = m.start();
    let mut c = d.client();
    c.create_session(&plan_with_token(&m, "home-1"), None)
        .expect("create");
    let started = start(&mut c, &m, "home-1");
    assert_eq!(started["stage"], "running", "{started}");
    let mut out = attached(&mut c, "home-1");
    c.call(
        "write_stdin",
        json!({"session_id": "home-1", "data": "echo H=$HOME C=$CODEX_HOME; stat -c '%u %n' /home/agent/.codex/skills; cat /home/agent/.codex/auth.json; echo '{\"token\":\"refreshed\"}' > /home/agent/.codex/auth.json; echo done-$((40+2))\n"}),
    )
    .expect("stdin");
    until_output(&mut c, &mut out, |s| s.contains("done-42"));
    let text = String::from_utf8_lossy(&out).into_owned();
    assert!(
        text.contains("H=/home/agent C=/home/agent/.codex"),
        "{text}"
    );
    assert!(text.contains("1000 /home/agent/.codex/skills"), "{text}");
    assert!(text.contains("{\"token\":\"first\"}"), "{text}");

    // A second session naming the same handle while the first holds it.
    c.create_session(&plan_with_token(&m, "home-2"), None)
        .expect("create");
    let auth = m.authorize("home-2", NOW_MS);
    let busy = code(c.call(
        "start_session",
        json!({"session_id": "home-2", "authorization": auth}),
    ));
    assert_eq!(busy, "session_lease_busy");

    c.call(
        "write_stdin",
        json!({"session_id": "home-1", "data": "exit\n"}),
    )
    .expect("exit");
    let ended = until_ended(&mut c, &mut out);
    assert_eq!(ended["stage"], "exited", "{ended}");
    let (body, _) = receipt_of(&mut c, "home-1");
    let a = &body["adapter"];
    assert_eq!(a["runtime"], "codex", "{body}");
    assert_eq!(a["home"], "/home/agent");
    assert_eq!(
        a["managed_environment"],
        json!(["CODEX_HOME=/home/agent/.codex", "HOME=/home/agent"])
    );
    assert_eq!(
        a["leases"],
        json!([{"secret_handle": "codex-token", "version_at_start": 1, "version_at_end": 2}])
    );
    // The operator's source is untouched; the refreshed token is the lease's.
    assert_eq!(
        std::fs::read_to_string(&source).expect("source"),
        "{\"token\":\"first\"}\n"
    );
    let lease = m.home.dir.path().join("mat/leases/codex-token/lease");
    assert_eq!(
        std::fs::read_to_string(lease).expect("lease"),
        "{\"token\":\"refreshed\"}\n"
    );
}

#[test]
fn a_loose_or_linked_credential_source_fails_the_start() {
    if !sandbox_ok() {
        return;
    }
    let (m, source) = with_lease(0o644);
    let d = m.start();
    let mut c = d.client();
    c.create_session(&plan_with_token(&m, "loose-1"), None)
        .expect("create");
    let auth = m.authorize("loose-1", NOW_MS);
    let e = code(c.call(
        "start_session",
        json!({"session_id": "loose-1", "authorization": auth}),
    ));
    assert_eq!(e, "file_bad_mode");
    let _ = d.stop();

    // A symbolic link in place of the source.
    let real = m.home.dir.path().join("real-auth.json");
    write_mode(&real, b"{}", 0o600);
    std::fs::remove_file(&source).expect("rm");
    std::os::unix::fs::symlink(&real, &source).expect("symlink");
    let d = m.start();
    let mut c = d.client();
    c.create_session(&plan_with_token(&m, "link-1"), None)
        .expect("create");
    let auth = m.authorize("link-1", NOW_MS);
    let e = code(c.call(
        "start_session",
        json!({"session_id": "link-1", "authorization": auth}),
    ));
    assert_eq!(e, "file_symlink");
}

#[test]
fn a_handle_without_a_credential_source_fails_the_start() {
    if !sandbox_ok() {
        return;
    }
    let m = Managed::new(&ROOMY, None);
    let d = m.start();
    let mut c = d.client();
    c.create_session(&plan_with_token(&m, "nosrc-1"), None)
        .expect("create");
    let auth = m.authorize("nosrc-1", NOW_MS);
    let e = code(c.call(
        "start_session",
        json!({"session_id": "nosrc-1", "authorization": auth}),
    ));
    assert_eq!(e, "session_credential_unsupported");
}
