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
        p["credential_sources"] =
            json!([{"runtime_id": "codex", "secret_handle": "codex-token", "source_path": s}]);
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
    // Ended, not yet cleaned up: the lease is free for the next session.
    let started = start(&mut c, &m, "home-2");
    assert_eq!(
        started["stage"], "running",
        "the lease was released at the end: {started}"
    );
    let mut out2 = attached(&mut c, "home-2");
    c.call(
        "write_stdin",
        json!({"session_id": "home-2", "data": "exit\n"}),
    )
    .expect("exit");
    until_ended(&mut c, &mut out2);
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
fn a_credential_source_bound_to_another_runtime_or_none_is_not_leased() {
    if !sandbox_ok() {
        return;
    }
    for bound in [json!("claude-code"), Value::Null] {
        let (m, source) = with_lease(0o600);
        let s = source.display().to_string();
        m.edit_policy(|p| {
            let mut c = json!({"secret_handle": "codex-token", "source_path": s});
            if !bound.is_null() {
                c["runtime_id"] = bound.clone();
            }
            p["credential_sources"] = json!([c]);
        });
        let d = m.start();
        let mut c = d.client();
        c.create_session(&plan_with_token(&m, "other-1"), None)
            .expect("create");
        let auth = m.authorize("other-1", NOW_MS);
        let e = code(c.call(
            "start_session",
            json!({"session_id": "other-1", "authorization": auth}),
        ));
        assert_eq!(e, "session_credential_unsupported", "{bound}");
    }
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

/// A discovery template over a directory of ours (every ancestor safe),
/// its `codex` a link to a script.
fn discovery_home() -> (Managed, PathBuf, tempfile::TempDir) {
    let t = super::common::safe_tempdir();
    let bin = t.path().join("bin");
    let pkg = t.path().join("pkg");
    for d in [&bin, &pkg] {
        std::fs::create_dir(d).expect("mkdir");
    }
    write_mode(&pkg.join("one"), b"#!/bin/sh\necho ran-one\n", 0o755);
    std::os::unix::fs::symlink("../pkg/one", bin.join("codex")).expect("link");
    let m = Managed::new(&ROOMY, None);
    let launch = json!({
        "runtime_discovery": "codex",
        "executable_search_paths": [bin.display().to_string()],
        "arguments": [],
        "environment": ["PATH=/usr/bin:/bin"],
        "read_only_paths": [],
    });
    let mut obj = launch.clone();
    obj["runtime_id"] = json!("codex");
    let digest = glove_types::Sha256Digest::of_domain(
        "glove.adapter-command.v1",
        &glove_types::canon::to_canonical(&obj).expect("canonical"),
    )
    .to_hex();
    m.edit_policy(|p| {
        p["runtime_templates"][0]["launch"] = launch.clone();
        p["runtime_templates"][0]["adapter_command_digest"] = json!(digest);
        p["runtime_templates"]
            .as_array_mut()
            .expect("templates")
            .truncate(1);
    });
    (m, pkg, t)
}

fn discovery_plan(m: &Managed, session: &str) -> String {
    let p: Value = serde_json::from_slice(
        &std::fs::read(m.home.dir.path().join("managed-policy.json")).expect("policy"),
    )
    .expect("json");
    let digest = p["runtime_templates"][0]["adapter_command_digest"].clone();
    let mut v: Value = serde_json::from_str(&m.plan(&ROOMY, session)).expect("json");
    v["adapter_command_digest"] = digest;
    String::from_utf8(glove_types::canon::to_canonical(&v).expect("canon")).expect("utf8")
}

fn run_session(m: &Managed, d: &Daemon, session: &str) -> (Result<Value, String>, String) {
    let mut c = d.client();
    c.create_session(&discovery_plan(m, session), None)
        .expect("create");
    let auth = m.authorize(session, NOW_MS);
    let started = c.call(
        "start_session",
        json!({"session_id": session, "authorization": auth}),
    );
    let started = match started {
        Ok(v) => v,
        Err(e) => return (Err(format!("{e:?}")), String::new()),
    };
    let mut out = attached(&mut c, session);
    let ended = until_ended(&mut c, &mut out);
    (
        Ok(json!({"started": started, "ended": ended})),
        String::from_utf8_lossy(&out).into_owned(),
    )
}

#[test]
fn the_executable_is_resolved_at_each_start_and_a_swap_after_resolution_fails_it() {
    if !sandbox_ok() {
        return;
    }
    let (m, pkg, _t) = discovery_home();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gloved"));
    cmd.env("GLOVE_TEST_HOLD_AT", "after_resolve");
    let d = Daemon::spawn(cmd, &m.home.args(&m.config()), &m.home.run);
    let resume = m.home.run.join("resume-after_resolve");
    let held = m.home.run.join("held-after_resolve");

    // Resolved and run as it is.
    std::fs::write(&resume, b"").expect("resume");
    let (r, out) = run_session(&m, &d, "disc-1");
    assert!(r.is_ok(), "{r:?}");
    assert!(out.contains("ran-one"), "{out}");

    // The file replaced (a new inode renamed over it) after gloved
    // resolved and pinned it, before the sandbox is built: the start
    // fails with the sandbox's code, and nothing of the new file runs.
    let swapper = std::thread::spawn({
        let pkg = pkg.clone();
        let held = held.clone();
        let resume = resume.clone();
        move || {
            for _ in 0..6000 {
                if held.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            write_mode(&pkg.join("two"), b"#!/bin/sh\necho ran-two\n", 0o755);
            std::fs::rename(pkg.join("two"), pkg.join("one")).expect("swap");
            std::fs::write(&resume, b"").expect("resume");
        }
    });
    let (r, out) = run_session(&m, &d, "disc-2");
    swapper.join().expect("swapper");
    let e = r.expect_err("the swapped start fails");
    assert!(
        // The sandbox's own code, as `glove exec` gives it.
        e.contains("sandbox_executable_changed") && !e.contains("session_launch_failed"),
        "{e}"
    );
    assert!(!out.contains("ran-two"), "{out}");
    let mut c = d.client();
    let (body, _) = receipt_of(&mut c, "disc-2");
    assert_eq!(body["termination"]["reason"], "failed", "{body}");

    // The next start resolves again and runs what is there now.
    std::fs::write(&resume, b"").expect("resume");
    let (r, out) = run_session(&m, &d, "disc-3");
    assert!(r.is_ok(), "{r:?}");
    assert!(out.contains("ran-two"), "{out}");
}
