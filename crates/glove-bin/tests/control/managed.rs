// This file is over 600 lines because it is one end-to-end battery on managed sessions sharing one real gloved harness.
//! Managed sessions end to end: a real gloved with a materialization root
//! and a start-authorization key, the real client and the real `glove`
//! binary; sandboxed shells started, attached, fed, stopped and recovered.
//! Skipped (with a reason) where the sandbox cannot run, failed then under
//! `GLOVE_REQUIRE_SANDBOX=1`.

use super::common;
use super::harness::*;
use glove_bin::control::client::Client;
use glove_journal::testing::StoreWriter;
use glove_types::Sha256Digest;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const KEY_HEX: &str = "cd";
/// Stands for the service's home directory (the runtime dir's parent).
const HOME_DIR: &str = "/nonexistent/home-of-the-service";
/// Stands for a directory of its own holding the start-authorization key.
const KEY_DIR: &str = "/nonexistent/dir-of-the-start-key";
/// Stands for the directory of the session store and the receipt journal.
const STATE_DIR: &str = "/nonexistent/dir-of-the-journals";

pub(crate) struct Limits {
    pub(crate) wall_ms: u64,
    pub(crate) output_bytes: u64,
    pub(crate) cpu_ms: u64,
    pub(crate) memory: u64,
    pub(crate) pids: u64,
    pub(crate) disk: u64,
}

pub(crate) const ROOMY: Limits = Limits {
    wall_ms: 30_000,
    output_bytes: 1 << 20,
    cpu_ms: 60_000,
    memory: 256 << 20,
    pids: 64,
    disk: 2 << 20,
};

/// A managed-runtime home: policy with a `/bin/sh` template, store, key,
/// materialization root and a workspace alias.
pub(crate) struct Managed {
    pub(crate) home: Home,
    pub(crate) auth_key: PathBuf,
    #[allow(dead_code)]
    pub(crate) workspace: PathBuf,
    pub(crate) extra: Vec<String>,
}

fn adapter_digest(launch: &Value) -> String {
    let mut obj = launch.clone();
    obj["runtime_id"] = json!("codex");
    let bytes = glove_types::canon::to_canonical(&obj).expect("canonical");
    Sha256Digest::of_domain("glove.adapter-command.v1", &bytes).to_hex()
}

fn launch() -> Value {
    json!({
        "executable_path": "/bin/sh",
        "arguments": [],
        "environment": ["PATH=/usr/bin:/bin", "PS1=$ ", "TERM=xterm-256color"],
        "read_only_paths": [],
    })
}

impl Managed {
    pub(crate) fn new(limits: &Limits, alias_host: Option<&Path>) -> Managed {
        let home = Home::new();
        let key_dir = home.dir.path().join("keys");
        mkdir_mode(&key_dir, 0o700);
        let auth_key = if alias_host == Some(Path::new(KEY_DIR)) {
            key_dir.join("start.key")
        } else {
            home.dir.path().join("start.key")
        };
        write_mode(
            &auth_key,
            format!("{}\n", KEY_HEX.repeat(32)).as_bytes(),
            0o600,
        );
        let mat = home.dir.path().join("mat");
        mkdir_mode(&mat, 0o700);
        let workspace = home.dir.path().join("project");
        std::fs::create_dir_all(&workspace).expect("mkdir");
        std::fs::write(workspace.join("README"), "from the host\n").expect("write");
        let host = match alias_host {
            None => workspace.clone(),
            Some(p) if p == Path::new(HOME_DIR) => home.dir.path().to_path_buf(),
            Some(p) if p == Path::new(KEY_DIR) => key_dir.clone(),
            Some(p) if p == Path::new(STATE_DIR) => home.state.clone(),
            Some(p) => p.to_path_buf(),
        };
        let mut policy: Value = serde_json::from_slice(&example("policy.json")).expect("policy");
        policy["runtime_templates"][0]["launch"] = launch();
        policy["runtime_templates"][0]["adapter_command_digest"] = json!(adapter_digest(&launch()));
        policy["path_aliases"][0]["host_path"] = json!(host.display().to_string());
        let p = &mut policy["resource_profiles"][0];
        p["wall_time_ms"] = json!(limits.wall_ms);
        p["cpu_time_ms"] = json!(limits.cpu_ms);
        p["memory_bytes"] = json!(limits.memory);
        p["pids"] = json!(limits.pids);
        p["disk_bytes"] = json!(limits.disk);
        p["terminal_output_bytes"] = json!(limits.output_bytes);
        let policy_path = home.dir.path().join("managed-policy.json");
        write_mode(
            &policy_path,
            &glove_types::canon::to_canonical(&policy).expect("canonical"),
            0o600,
        );
        let d = |p: &Path| p.display().to_string();
        let extra = vec![
            "--session-policy".into(),
            d(&policy_path),
            "--materialization-root".into(),
            d(&mat),
            "--start-auth-key".into(),
            d(&auth_key),
        ];
        Managed {
            home,
            auth_key,
            workspace,
            extra,
        }
    }

    /// Rewrites the policy file (before the service starts).
    pub(crate) fn edit_policy(&self, edit: impl FnOnce(&mut Value)) {
        let path = self.home.dir.path().join("managed-policy.json");
        let mut policy: Value =
            serde_json::from_slice(&std::fs::read(&path).expect("policy")).expect("json");
        edit(&mut policy);
        write_mode(
            &path,
            &glove_types::canon::to_canonical(&policy).expect("canonical"),
            0o600,
        );
    }

    pub(crate) fn config(&self) -> Config {
        Config {
            policy: None,
            store: true,
            extra: self.extra.clone(),
        }
    }

    pub(crate) fn start(&self) -> Daemon {
        Daemon::start(&self.home, &self.config())
    }

    /// The example plan matched to this policy (no library projection).
    pub(crate) fn plan(&self, limits: &Limits, session: &str) -> String {
        plan_with(|v| {
            v["adapter_command_digest"] = json!(adapter_digest(&launch()));
            v["library_projections"] = json!([]);
            v["secret_handles"] = json!([]);
            v["session_id"] = json!(session);
            v["idempotency_key"] = json!(format!("key-{session}"));
            let p = &mut v["resource_profile"];
            p["wall_time_ms"] = json!(limits.wall_ms);
            p["cpu_time_ms"] = json!(limits.cpu_ms);
            p["memory_bytes"] = json!(limits.memory);
            p["pids"] = json!(limits.pids);
            p["disk_bytes"] = json!(limits.disk);
            p["terminal_output_bytes"] = json!(limits.output_bytes);
        })
    }

    /// Adds a library bundle root (0700) to the service's flags.
    pub(crate) fn bundle_root(&mut self) -> PathBuf {
        let root = self.home.dir.path().join("bundles");
        mkdir_mode(&root, 0o700);
        self.extra
            .extend(["--library-bundle-root".into(), root.display().to_string()]);
        root
    }

    /// `glove session authorize` (the real binary) at `now_ms`.
    pub(crate) fn authorize(&self, session: &str, now_ms: u64) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_glove"))
            .args([
                "session",
                "authorize",
                session,
                "--json",
                "--start-auth-key",
            ])
            .arg(&self.auth_key)
            .args(["--now-ms", &now_ms.to_string(), "--runtime-dir"])
            .arg(&self.home.run)
            .output()
            .expect("run glove");
        assert!(
            out.status.success(),
            "authorize failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let v: Value = serde_json::from_slice(&out.stdout).expect("json");
        v["authorization"]
            .as_str()
            .expect("authorization")
            .to_owned()
    }
}

pub(crate) fn sandbox_ok() -> bool {
    common::sandbox_ok(common::As::Caller)
}

pub(crate) fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Reads notifications until `done` says so over the output collected.
pub(crate) fn until_output(
    c: &mut Client,
    out: &mut Vec<u8>,
    done: impl Fn(&str) -> bool,
) -> Option<Value> {
    loop {
        if done(&String::from_utf8_lossy(out)) {
            return None;
        }
        let n = c.next_notification().expect("notification");
        match n["method"].as_str() {
            Some("output") => out.extend(unhex(n["params"]["data_hex"].as_str().unwrap_or(""))),
            Some("session_ended") => return Some(n["params"].clone()),
            _ => {}
        }
    }
}

pub(crate) fn until_ended(c: &mut Client, out: &mut Vec<u8>) -> Value {
    until_output(c, out, |_| false).expect("ended")
}

/// The body of the receipt naming `session`.
pub(crate) fn receipt_of(c: &mut Client, session: &str) -> (Value, String) {
    let page = c.receipts_page(0, None).expect("page");
    let head = page["head"].as_str().expect("head").to_owned();
    for r in page["receipts"].as_array().expect("receipts") {
        let env: Value =
            serde_json::from_str(r["envelope"].as_str().expect("envelope")).expect("json");
        if env["body"]["session_id"] == session {
            // Every body gloved writes is a valid typed receipt.
            let bytes = glove_types::canon::to_canonical(&env["body"]).expect("canonical");
            glove_types::receipt::ResourceReceiptV1::decode(&bytes).expect("typed receipt");
            return (env["body"].clone(), head);
        }
    }
    panic!("no receipt for {session} in {page}");
}

/// A session whose plan projects the bundle `sha256` as `sage-lib`.
fn created_with_bundle(m: &Managed, d: &Daemon, session: &str, sha256: &str) -> Client {
    let mut c = d.client();
    let plan = m.plan(&ROOMY, session);
    let mut v: Value = serde_json::from_str(&plan).expect("json");
    v["library_projections"] =
        json!([{"destination_alias": "libraries", "projection_id": "sage-lib", "sha256": sha256}]);
    let plan =
        String::from_utf8(glove_types::canon::to_canonical(&v).expect("canon")).expect("utf8");
    c.create_session(&plan, None).expect("create");
    c
}

pub(crate) fn created(m: &Managed, d: &Daemon, limits: &Limits, session: &str) -> Client {
    let mut c = d.client();
    c.create_session(&m.plan(limits, session), None)
        .expect("create");
    c
}

pub(crate) fn start(c: &mut Client, m: &Managed, session: &str) -> Value {
    let auth = m.authorize(session, NOW_MS);
    c.call(
        "start_session",
        json!({"session_id": session, "authorization": auth}),
    )
    .expect("start")
}

#[test]
fn lifecycle_methods_are_advertised_only_with_a_working_runtime() {
    let m = Managed::new(&ROOMY, None);
    // Without the key: nothing constructed, nothing advertised.
    let cfg = Config {
        policy: None,
        store: true,
        extra: m.extra[..4].to_vec(),
    };
    let d = Daemon::start(&m.home, &cfg);
    let caps = d.client().capabilities().expect("caps");
    assert!(!caps["methods"].to_string().contains("start_session"));
    let _ = d.stop();
    if !sandbox_ok() {
        return;
    }
    let d = m.start();
    let caps = d.client().capabilities().expect("caps");
    for name in [
        "start_session",
        "attach",
        "write_stdin",
        "resize",
        "signal",
        "detach",
        "stop_session",
        "cleanup_session",
    ] {
        assert!(
            caps["methods"]
                .as_array()
                .expect("methods")
                .contains(&json!(name)),
            "{name} missing from {caps}"
        );
    }
    assert_eq!(caps["managed_runtime"]["lifecycle_operational"], true);
}

#[test]
fn shell_session_end_to_end() {
    if !sandbox_ok() {
        return;
    }
    let m = Managed::new(&ROOMY, None);
    let d = m.start();
    let mut c = created(&m, &d, &ROOMY, "shell-1");
    let started = start(&mut c, &m, "shell-1");
    assert_eq!(started["stage"], "running");
    let binding = started["launch_binding_digest"]
        .as_str()
        .expect("binding")
        .to_owned();
    assert_eq!(
        c.session_status("shell-1").expect("status")["stage"],
        "running"
    );
    let att = c
        .call("attach", json!({"session_id": "shell-1"}))
        .expect("attach");
    let mut out: Vec<u8> = att["transcript"]
        .as_array()
        .expect("transcript")
        .iter()
        .flat_map(|ch| unhex(ch["data_hex"].as_str().unwrap_or("")))
        .collect();
    c.call(
        "resize",
        json!({"session_id": "shell-1", "rows": 30, "cols": 100}),
    )
    .expect("resize");
    c.call(
        "write_stdin",
        json!({"session_id": "shell-1", "data": "echo hel''lo; cat /workspace/README; stty size\n"}),
    )
    .expect("stdin");
    until_output(&mut c, &mut out, |s| {
        s.contains("hello") && s.contains("30 100")
    });
    let text = String::from_utf8_lossy(&out).into_owned();
    assert!(text.contains("from the host"), "{text}");
    // A second client attaching late sees the same output in its transcript.
    let mut late = d.client();
    let att2 = late
        .call("attach", json!({"session_id": "shell-1"}))
        .expect("late attach");
    let seen: Vec<u8> = att2["transcript"]
        .as_array()
        .expect("transcript")
        .iter()
        .flat_map(|ch| unhex(ch["data_hex"].as_str().unwrap_or("")))
        .collect();
    assert!(String::from_utf8_lossy(&seen).contains("hello"));
    assert_eq!(
        late.call("detach", json!({"session_id": "shell-1"}))
            .expect("detach")["detached"],
        true
    );
    c.call(
        "write_stdin",
        json!({"session_id": "shell-1", "data": "exit 3\n"}),
    )
    .expect("exit");
    let ended = until_ended(&mut c, &mut out);
    assert_eq!(ended["stage"], "exited", "{ended}");
    assert_eq!(
        c.session_status("shell-1").expect("status")["stage"],
        "exited"
    );
    let (body, head) = receipt_of(&mut c, "shell-1");
    assert_eq!(body["launch_binding_digest"], binding.as_str());
    assert_eq!(body["termination"]["reason"], "exited");
    assert_eq!(body["termination"]["exit"]["code"], 3);
    assert_eq!(body["limits"]["wall_time_ms"], ROOMY.wall_ms);
    assert!(body["usage"]["terminal_bytes"].as_u64().expect("usage") > 0);
    assert_eq!(body["recovered"], false);
    c.receipts_ack(&head).expect("ack");
    c.call("cleanup_session", json!({"session_id": "shell-1"}))
        .expect("cleanup");
    let e = code(c.call("write_stdin", json!({"session_id": "shell-1", "data": "x"})));
    assert_eq!(e, "session_not_live");
}

/// Starts session `id` under `limits`, feeds it `input` and waits for it to
/// end: its final state and its receipt body (`None`: no sandbox here).
fn run_to_receipt(limits: Limits, id: &str, input: &str) -> Option<(Value, Value)> {
    if !sandbox_ok() {
        return None;
    }
    let m = Managed::new(&limits, None);
    let d = m.start();
    let mut c = created(&m, &d, &limits, id);
    start(&mut c, &m, id);
    c.call("attach", json!({"session_id": id})).expect("attach");
    c.set_read_timeout(Some(Duration::from_secs(120)))
        .expect("timeout");
    c.call("write_stdin", json!({"session_id": id, "data": input}))
        .expect("stdin");
    let ended = until_ended(&mut c, &mut Vec::new());
    assert_eq!(ended["stage"], "exited", "{ended}");
    let (body, _) = receipt_of(&mut c, id);
    Some((ended, body))
}

fn limit_case(limits: Limits, input: &str, limit: &str) {
    let Some((_, body)) = run_to_receipt(limits, "limited", input) else {
        return;
    };
    assert_eq!(body["termination"]["reason"], "limit", "{body}");
    assert_eq!(body["termination"]["limit"], limit, "{body}");
    assert!(body["termination"]["limits_reached"]
        .as_array()
        .expect("reached")
        .contains(&json!(limit)));
}

/// A limit that refuses (fork, write) without ending the session: the
/// receipt lists it among the limits reached.
fn reached_case(limits: Limits, input: &str, limit: &str) {
    let Some((_, body)) = run_to_receipt(limits, "reached", input) else {
        return;
    };
    assert!(
        body["termination"]["limits_reached"]
            .as_array()
            .expect("reached")
            .contains(&json!(limit)),
        "{body}"
    );
}

#[test]
fn cpu_limit_is_named_in_the_receipt() {
    limit_case(
        Limits {
            cpu_ms: 1_000,
            ..ROOMY
        },
        "while :; do :; done\n",
        "cpu_time",
    );
}

#[test]
fn memory_limit_is_named_in_the_receipt() {
    // The shell itself holds the command substitution's output.
    limit_case(
        Limits {
            memory: 32 << 20,
            ..ROOMY
        },
        "x=$(head -c 200000000 /dev/zero | tr '\\0' a)\n",
        "memory",
    );
}

#[test]
fn pids_limit_is_reached_and_listed() {
    reached_case(
        // dash gives up the command line when a fork fails, so the wall
        // limit ends this one.
        Limits {
            pids: 8,
            wall_ms: 3_000,
            ..ROOMY
        },
        "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 1 & done; wait; exit\n",
        "pids",
    );
}

#[test]
fn disk_limit_is_reached_and_listed() {
    reached_case(
        Limits {
            disk: 1 << 20,
            ..ROOMY
        },
        "head -c 4000000 /dev/zero > /tmp/fill; exit\n",
        "disk",
    );
}

#[test]
fn wall_time_limit_is_named_in_the_receipt() {
    limit_case(
        Limits {
            wall_ms: 1_500,
            ..ROOMY
        },
        "exec sleep 100\n",
        "wall_time",
    );
}

#[test]
fn output_limit_is_named_in_the_receipt() {
    limit_case(
        Limits {
            output_bytes: 64 * 1024,
            ..ROOMY
        },
        "yes glove\n",
        "terminal_output",
    );
}

#[test]
fn stop_session_terminates_and_still_writes_the_receipt() {
    if !sandbox_ok() {
        return;
    }
    let m = Managed::new(&ROOMY, None);
    let d = m.start();
    let mut c = created(&m, &d, &ROOMY, "stopped");
    start(&mut c, &m, "stopped");
    c.call("attach", json!({"session_id": "stopped"}))
        .expect("attach");
    c.call(
        "signal",
        json!({"session_id": "stopped", "signal": "WINCH"}),
    )
    .expect("signal");
    let r = c
        .call(
            "stop_session",
            json!({"session_id": "stopped", "grace_ms": 500}),
        )
        .expect("stop");
    assert_eq!(r["stage"], "stopping");
    let ended = until_ended(&mut c, &mut Vec::new());
    assert_eq!(ended["stage"], "exited", "{ended}");
    let (body, _) = receipt_of(&mut c, "stopped");
    assert_eq!(body["termination"]["reason"], "stopped", "{body}");
}

#[test]
fn expired_and_replayed_authorizations_are_refused() {
    if !sandbox_ok() {
        return;
    }
    let m = Managed::new(&ROOMY, None);
    let d = m.start();
    let mut c = created(&m, &d, &ROOMY, "auth-1");
    let old = m.authorize("auth-1", NOW_MS - 120_000);
    let e = code(c.call(
        "start_session",
        json!({"session_id": "auth-1", "authorization": old}),
    ));
    assert_eq!(e, "start_auth_expired");
    let other = m.authorize("auth-1", NOW_MS);
    let mut forged: Value = serde_json::from_str(&other).expect("json");
    forged["session_id"] = json!("auth-2");
    let e = code(c.call(
        "start_session",
        json!({"session_id": "auth-1", "authorization": String::from_utf8(glove_types::canon::to_canonical(&forged).expect("canon")).expect("utf8")}),
    ));
    assert_eq!(e, "start_auth_bad_mac");
    let good = m.authorize("auth-1", NOW_MS);
    c.call(
        "start_session",
        json!({"session_id": "auth-1", "authorization": good}),
    )
    .expect("start");
    let e = code(c.call(
        "start_session",
        json!({"session_id": "auth-1", "authorization": good}),
    ));
    assert_eq!(e, "start_auth_replayed");
    assert_eq!(
        c.session_status("auth-1").expect("status")["stage"],
        "running"
    );
    c.call(
        "stop_session",
        json!({"session_id": "auth-1", "grace_ms": 100}),
    )
    .expect("stop");
}

/// A start refused by the sandbox after the reservation: the session is
/// failed and a receipt says why.
fn refused_start(m: &Managed, session: &str) -> Value {
    let d = m.start();
    let mut c = created(m, &d, &ROOMY, session);
    let auth = m.authorize(session, NOW_MS);
    let e = code(c.call(
        "start_session",
        json!({"session_id": session, "authorization": auth}),
    ));
    // The sandbox's own code, as `glove exec` gives it for the same fault.
    assert!(e.starts_with("sandbox_"), "{e}");
    assert_eq!(
        c.session_status(session).expect("status")["stage"],
        "failed"
    );
    let body = receipt_of(&mut c, session).0;
    assert_eq!(body["termination"]["code"], e.as_str(), "{body}");
    body
}

#[test]
fn an_alias_through_a_symlink_to_etc_is_refused() {
    if !sandbox_ok() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let link = dir.path().join("workspace-link");
    std::os::unix::fs::symlink("/etc", &link).expect("symlink");
    let m = Managed::new(&ROOMY, Some(&link));
    let body = refused_start(&m, "symlinked");
    assert_eq!(body["termination"]["reason"], "failed");
    assert!(
        body["termination"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("sandbox_"),
        "{body}"
    );
}

/// Starts `session` on a fresh service of `m` and expects the grant to be
/// refused before anything is launched: the code, and the session still
/// `created` (nothing was prepared, no sandbox saw the host path).
fn refused_as_exposing(m: &Managed, session: &str) {
    if !sandbox_ok() {
        return;
    }
    let d = m.start();
    let mut c = created(m, &d, &ROOMY, session);
    let auth = m.authorize(session, NOW_MS);
    let e = c
        .call(
            "start_session",
            json!({"session_id": session, "authorization": auth}),
        )
        .expect_err("the grant exposes a file the service holds");
    assert_eq!(e.code(), "session_grant_exposes_protected_path", "{e:?}");
    assert!(
        !e.message().contains(&*m.home.dir.path().to_string_lossy()),
        "the message names no host path: {}",
        e.message()
    );
    assert_eq!(
        c.session_status(session).expect("status")["stage"],
        "created"
    );
}

#[test]
fn issue_14_a_grant_of_the_directory_holding_the_start_key_is_refused() {
    // The key's directory is no ancestor of the runtime directory: before
    // the fix nothing but the runtime directory was protected, and the
    // sandbox got a copy of the start-authorization key.
    let m = Managed::new(&ROOMY, Some(Path::new(KEY_DIR)));
    refused_as_exposing(&m, "key-dir");
}

#[test]
fn issue_14_a_grant_of_the_journals_directory_is_refused() {
    // The session store, the receipt journal, their anchors and the ack.
    let m = Managed::new(&ROOMY, Some(Path::new(STATE_DIR)));
    refused_as_exposing(&m, "state-dir");
}

#[test]
fn issue_14_a_grant_of_the_operators_home_is_refused() {
    // The directory holding the receipt key, the policy, the start key and
    // (below it) the runtime directory.
    let m = Managed::new(&ROOMY, Some(Path::new(HOME_DIR)));
    refused_as_exposing(&m, "home-dir");
}

#[test]
fn sigkilled_gloved_recovers_a_running_session() {
    if !sandbox_ok() {
        return;
    }
    let m = Managed::new(&ROOMY, None);
    let mut d = m.start();
    let mut c = created(&m, &d, &ROOMY, "crash-1");
    let started = start(&mut c, &m, "crash-1");
    let pid = started["init_pid"].as_i64().expect("pid") as i32;
    let ident = glove_sandbox::identity::ProcessIdentity::of(pid).expect("identity");
    assert!(ident.still_matches());
    d.child.kill().expect("SIGKILL gloved");
    d.child.wait().expect("wait");
    drop(c);
    assert!(ident.still_matches(), "the sandbox outlives gloved");
    let d = m.start();
    let mut c = d.client();
    assert!(!ident.still_matches(), "recovery killed the sandbox");
    let st = c.session_status("crash-1").expect("status");
    assert_eq!(st["stage"], "failed");
    let (body, _) = receipt_of(&mut c, "crash-1");
    assert_eq!(body["recovered"], true);
    assert_eq!(body["recovery"]["identity_matched"], true);
    assert_eq!(
        body["termination"]["code"],
        "lifecycle_recovery_running_interrupted"
    );
    assert_eq!(
        body["launch_binding_digest"],
        started["launch_binding_digest"]
    );
}

#[test]
fn recovery_signals_nothing_when_the_identity_no_longer_matches() {
    if !sandbox_ok() {
        return;
    }
    let m = Managed::new(&ROOMY, None);
    let mut d = m.start();
    let mut c = created(&m, &d, &ROOMY, "crash-2");
    let started = start(&mut c, &m, "crash-2");
    let pid = started["init_pid"].as_i64().expect("pid") as i32;
    let ident = glove_sandbox::identity::ProcessIdentity::of(pid).expect("identity");
    d.child.kill().expect("SIGKILL gloved");
    d.child.wait().expect("wait");
    drop(c);
    // The sandbox ends before the restart: the recorded identity is stale.
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid).expect("pid"),
        rustix::process::Signal::KILL,
    )
    .expect("kill init");
    let mut gone = false;
    for _ in 0..1000 {
        if !ident.still_matches() {
            gone = true;
            break;
        }
        std::thread::yield_now();
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(gone, "the sandbox init did not end");
    let d = m.start();
    let mut c = d.client();
    assert_eq!(
        c.session_status("crash-2").expect("status")["stage"],
        "failed"
    );
    let (body, _) = receipt_of(&mut c, "crash-2");
    assert_eq!(body["recovered"], true);
    assert_eq!(body["recovery"]["identity_matched"], false);
    assert_eq!(body["recovery"]["killed"], false);
}

/// The example library bundle (one skill, one behavior entry) and its digest.
fn example_bundle() -> (Vec<u8>, String) {
    let content = example("library-bundle.json");
    let sha = Sha256Digest::of(&content).to_hex();
    (content, sha)
}

#[test]
fn a_bundle_is_projected_read_only_and_its_skills_expanded() {
    if !sandbox_ok() {
        return;
    }
    let mut m = Managed::new(&ROOMY, None);
    let root = m.bundle_root();
    let (content, sha) = example_bundle();
    write_mode(&root.join(&sha), &content, 0o600);
    let d = m.start();
    let mut c = created_with_bundle(&m, &d, "bundled", &sha);
    start(&mut c, &m, "bundled");
    c.call("attach", json!({"session_id": "bundled"}))
        .expect("attach");
    c.call(
        "write_stdin",
        json!({"session_id": "bundled", "data": "head -c 40 /opt/sage/library-bundles/sage-lib; echo; echo x >> /opt/sage/library-bundles/sage-lib || echo refused-\"\"write; S=/home/agent/.codex/skills/code-review; grep '^name:' $S/SKILL.md; stat -c '%a %u' $S/scripts/check.sh; ls /home/agent/.codex/skills; exit\n"}),
    )
    .expect("stdin");
    let mut out = Vec::new();
    let ended = until_ended(&mut c, &mut out);
    assert_eq!(ended["stage"], "exited", "{ended}");
    let text = String::from_utf8_lossy(&out).into_owned();
    assert!(
        text.contains("glove.library-bundle.v1") || text.contains("{\"entries\""),
        "{text}"
    );
    assert!(text.contains("refused-write"), "{text}");
    assert!(text.contains("name: code-review"), "{text}");
    assert!(
        text.contains("755 1000"),
        "the skill's script is the agent's, executable: {text}"
    );
    let (body, _) = receipt_of(&mut c, "bundled");
    assert_eq!(
        body["projections"],
        json!([{"destination_alias": "libraries", "projection_id": "sage-lib", "sha256": sha, "target": "/opt/sage/library-bundles/sage-lib"}])
    );
    // The behavior entry stays in the raw bundle; only the skill expands.
    assert_eq!(body["adapter"]["skills"], json!(["code-review"]), "{body}");
    assert_eq!(
        body["adapter"]["skills_digest"],
        "099844a7ca812e7ffbfe22c94f9a2823b29fec2ea7961e06d9c59287c198ca64"
    );
}

/// Starts `session` projecting the bundle at `sha` and expects `want`;
/// the session is left `created` (nothing was launched).
fn refused_bundle(m: &Managed, d: &Daemon, session: &str, sha: &str, want: &str) {
    let mut c = created_with_bundle(m, d, session, sha);
    let auth = m.authorize(session, NOW_MS);
    let e = code(c.call(
        "start_session",
        json!({"session_id": session, "authorization": auth}),
    ));
    assert_eq!(e, want, "{session}");
    assert_eq!(
        c.session_status(session).expect("status")["stage"],
        "created"
    );
}

#[test]
fn bundles_that_do_not_verify_or_decode_fail_the_start() {
    if !sandbox_ok() {
        return;
    }
    let mut m = Managed::new(&ROOMY, None);
    let root = m.bundle_root();
    // Bytes that are not the ones the plan names.
    let promised = Sha256Digest::of(b"the promised bytes").to_hex();
    write_mode(&root.join(&promised), b"other bytes", 0o600);
    // A symbolic link in place of the file.
    let (content, linked) = example_bundle();
    let real = m.home.dir.path().join("real-bundle");
    write_mode(&real, &content, 0o600);
    std::os::unix::fs::symlink(&real, root.join(&linked)).expect("symlink");
    // An unknown kind: refused, never skipped.
    let unknown = br#"{"entries":[{"files":[{"path":"x.md","text":"x"}],"kind":"plugin","name":"x"}],"format":"glove.library-bundle.v1"}"#;
    let unknown_sha = Sha256Digest::of(unknown).to_hex();
    write_mode(&root.join(&unknown_sha), unknown, 0o600);
    // A skill file name escaping its directory.
    let escape = br#"{"entries":[{"files":[{"path":"../../.bashrc","text":"x"},{"path":"SKILL.md","text":"---\nname: x\ndescription: d\n---\n"}],"kind":"skill","name":"x"}],"format":"glove.library-bundle.v1"}"#;
    let escape_sha = Sha256Digest::of(escape).to_hex();
    write_mode(&root.join(&escape_sha), escape, 0o600);
    // Valid, but its skills are more than a launch can carry (4 MiB).
    let big = "a".repeat(1 << 20);
    let mut files =
        vec![json!({"path": "SKILL.md", "text": "---\nname: big\ndescription: d\n---\n"})];
    for i in 0..5 {
        files.push(json!({"path": format!("part{i}.md"), "text": big}));
    }
    let big_bundle = glove_types::canon::to_canonical(&json!({
        "format": "glove.library-bundle.v1",
        "entries": [{"kind": "skill", "name": "big", "files": files}],
    }))
    .expect("canonical");
    let big_sha = Sha256Digest::of(&big_bundle).to_hex();
    write_mode(&root.join(&big_sha), &big_bundle, 0o600);
    let d = m.start();
    refused_bundle(&m, &d, "too-big", &big_sha, "session_spec_too_large");
    refused_bundle(&m, &d, "mismatch", &promised, "bundle_digest_mismatch");
    refused_bundle(&m, &d, "linked", &linked, "file_symlink");
    refused_bundle(
        &m,
        &d,
        "unknown-kind",
        &unknown_sha,
        "bundle_entry_kind_unknown",
    );
    refused_bundle(&m, &d, "escape", &escape_sha, "bundle_path_invalid");
}

#[test]
fn a_plan_the_policy_no_longer_admits_is_not_started() {
    if !sandbox_ok() {
        return;
    }
    let m = Managed::new(&ROOMY, None);
    let d = m.start();
    let mut c = created(&m, &d, &ROOMY, "stale-plan");
    drop(c);
    let _ = d.stop();
    // The operator changes the profile; the stored plan no longer matches.
    let policy_path = m.home.dir.path().join("managed-policy.json");
    let mut policy: Value =
        serde_json::from_slice(&std::fs::read(&policy_path).expect("read")).expect("json");
    policy["resource_profiles"][0]["wall_time_ms"] = json!(20_000);
    write_mode(
        &policy_path,
        &glove_types::canon::to_canonical(&policy).expect("canon"),
        0o600,
    );
    let d = m.start();
    c = d.client();
    let auth = m.authorize("stale-plan", NOW_MS);
    let e = code(c.call(
        "start_session",
        json!({"session_id": "stale-plan", "authorization": auth}),
    ));
    assert_eq!(e, "session_plan_not_admitted");
    assert_eq!(
        c.session_status("stale-plan").expect("status")["stage"],
        "created"
    );
}

#[test]
fn demo_runs_in_one_command() {
    if !sandbox_ok() {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_glove"))
        .args(["demo"])
        .output()
        .expect("run glove demo");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("hello from the sandbox"), "{text}");
    assert!(text.contains("\"receipt_kind\":\"resource_v1\""), "{text}");
}

#[test]
fn capability_document_of_the_managed_runtime() {
    if !sandbox_ok() {
        return;
    }
    let mut m = Managed::new(&ROOMY, None);
    m.bundle_root();
    let d = m.start();
    let caps = d.client().capabilities().expect("capabilities");
    insta::with_settings!({
        snapshot_path => repo().join("snapshots").display().to_string(),
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!(
            "control_capabilities_managed",
            serde_json::to_string_pretty(&caps).expect("json")
        )
    });
}

/// Starts gloved paused at `point` (the debug-build test hook), drives the
/// session there, SIGKILLs gloved, restarts it, and returns the receipt.
fn crash_at(point: &str, session: &str) -> (Value, Value) {
    let limits = Limits {
        wall_ms: 5_000,
        ..ROOMY
    };
    let m = Managed::new(&limits, None);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gloved"));
    cmd.env("GLOVE_TEST_PAUSE_AT", point);
    let mut d = Daemon::spawn(cmd, &m.home.args(&m.config()), &m.home.run);
    let mut c = created(&m, &d, &limits, session);
    let auth = m.authorize(session, NOW_MS);
    let (s, run) = (session.to_owned(), m.home.run.clone());
    std::thread::spawn(move || {
        let _ = c.call(
            "start_session",
            json!({"session_id": s, "authorization": auth}),
        );
        if let Ok(mut c) = Client::connect(&run) {
            let _ = c.call("stop_session", json!({"session_id": s, "grace_ms": 100}));
        }
    });
    let marker = m.home.run.join(format!("paused-{point}"));
    let mut reached = false;
    for _ in 0..6000 {
        if marker.exists() {
            reached = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(reached, "gloved never reached {point}");
    d.child.kill().expect("SIGKILL gloved");
    d.child.wait().expect("wait");
    let _ = std::fs::remove_file(&marker);
    let d = m.start();
    let mut c = d.client();
    let status = c.session_status(session).expect("status");
    let (body, _) = receipt_of(&mut c, session);
    (status, body)
}

#[test]
fn sigkill_at_each_stage_is_recovered_with_a_receipt() {
    if !sandbox_ok() {
        return;
    }
    for (point, stage) in [
        ("after_prepare_record", "preparing"),
        ("after_start_record", "starting"),
        ("after_release", "starting"),
        ("after_stop_record", "stopping"),
    ] {
        let (status, body) = crash_at(point, &format!("crash-{stage}"));
        assert_eq!(status["stage"], "failed", "{point}: {status}");
        assert_eq!(body["recovered"], true, "{point}: {body}");
        assert_eq!(body["recovery"]["stage"], stage, "{point}: {body}");
        assert_eq!(
            body["termination"]["code"],
            format!("lifecycle_recovery_{stage}_interrupted"),
            "{point}: {body}"
        );
        // Only a stopping session had a recorded identity, and its sandbox
        // was still there to stop.
        assert_eq!(
            body["recovery"]["identity_matched"],
            stage == "stopping",
            "{point}: {body}"
        );
        if stage != "preparing" {
            assert!(body["launch_binding_digest"].is_string(), "{point}: {body}");
        }
        // After the release the agent ran without a running record: its
        // launcher, recorded before the release, was killed (and the
        // sandbox init with it).
        if point == "after_release" {
            assert_eq!(body["recovery"]["launcher_killed"], true, "{point}: {body}");
            // The killed launcher could not remove its session cgroup;
            // recovery did (as root, cgroups are always used here).
            if rustix::process::geteuid().is_root() {
                assert!(
                    body["recovery"]["cgroups_removed"].as_u64() >= Some(1),
                    "{point}: {body}"
                );
            }
        }
    }
}

#[test]
fn sigterm_stops_running_sessions_with_receipts() {
    if !sandbox_ok() {
        return;
    }
    let m = Managed::new(&ROOMY, None);
    let d = m.start();
    let mut c = created(&m, &d, &ROOMY, "shutdown-1");
    let started = start(&mut c, &m, "shutdown-1");
    let pid = started["init_pid"].as_i64().expect("pid") as i32;
    let ident = glove_sandbox::identity::ProcessIdentity::of(pid).expect("identity");
    drop(c);
    let (status, log) = d.stop();
    assert!(status.success(), "{log}");
    assert!(!ident.still_matches(), "the sandbox ended with the service");
    let d = m.start();
    let mut c = d.client();
    assert_eq!(
        c.session_status("shutdown-1").expect("status")["stage"],
        "exited"
    );
    let (body, _) = receipt_of(&mut c, "shutdown-1");
    assert_eq!(body["recovered"], false, "{body}");
    assert_eq!(body["termination"]["reason"], "stopped", "{body}");
}

#[test]
fn issue_14_sigterm_stops_sessions_while_a_client_does_not_read() {
    if !sandbox_ok() {
        return;
    }
    // Room for far more output than the test produces, so only the stop
    // can end the session.
    const CHATTY: Limits = Limits {
        output_bytes: 1 << 28,
        ..ROOMY
    };
    let m = Managed::new(&CHATTY, None);
    let mut d = m.start();
    let mut c = created(&m, &d, &CHATTY, "stuck-1");
    let started = start(&mut c, &m, "stuck-1");
    let pid = started["init_pid"].as_i64().expect("pid") as i32;
    let ident = glove_sandbox::identity::ProcessIdentity::of(pid).expect("identity");
    c.call("attach", json!({"session_id": "stuck-1"}))
        .expect("attach");
    // Output starts after the answer; from then on this client reads
    // nothing, so its socket buffer and the service's queue fill up.
    c.call(
        "write_stdin",
        json!({"session_id": "stuck-1", "data": "sleep 1; while :; do head -c 65536 /dev/zero | tr '\\0' x; sleep 0.05; done\n"}),
    )
    .expect("stdin");
    std::thread::sleep(Duration::from_secs(4));
    assert!(ident.still_matches());
    let gloved = rustix::process::Pid::from_raw(d.child.id() as i32).expect("pid");
    rustix::process::kill_process(gloved, rustix::process::Signal::TERM).expect("SIGTERM");
    // Bounded: the shutdown grace (10 s) plus the sessions' stop.
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    let status = loop {
        if let Some(s) = d.child.try_wait().expect("try_wait") {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "gloved did not exit within 40 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    assert!(
        !ident.still_matches(),
        "the agent outlived the service it belongs to"
    );
    drop(c);
    drop(d);
    let d = m.start();
    let mut c = d.client();
    assert_eq!(
        c.session_status("stuck-1").expect("status")["stage"],
        "exited"
    );
    let (body, _) = receipt_of(&mut c, "stuck-1");
    assert_eq!(body["recovered"], false, "{body}");
    assert_eq!(body["termination"]["reason"], "stopped", "{body}");
}

/// A zombie child of `parent`, if there is one (from `/proc/<pid>/stat`).
fn zombie_child_of(parent: u32) -> Option<String> {
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`; the name may hold spaces and parens.
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let (state, ppid) = (f.next(), f.next().and_then(|p| p.parse::<u32>().ok()));
        if state == Some("Z") && ppid == Some(parent) {
            return Some(head.to_owned());
        }
    }
    None
}

#[test]
fn issue_14_the_startup_probe_leaves_no_zombie() {
    // The probe runs whether or not the sandbox works here; without the fix
    // its launcher stayed a zombie for as long as the service ran.
    let m = Managed::new(&ROOMY, None);
    let d = m.start();
    let gloved = d.child.id();
    for _ in 0..20 {
        if let Some(z) = zombie_child_of(gloved) {
            panic!("gloved has a zombie child after start-up: {z})");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_attached_connection_is_not_closed_as_idle() {
    if !sandbox_ok() {
        return;
    }
    let mut m = Managed::new(&ROOMY, None);
    m.extra.extend(["--idle-timeout-secs".into(), "1".into()]);
    let d = m.start();
    let mut c = created(&m, &d, &ROOMY, "idle-1");
    start(&mut c, &m, "idle-1");
    c.call("attach", json!({"session_id": "idle-1"}))
        .expect("attach");
    c.call(
        "write_stdin",
        json!({"session_id": "idle-1", "data": "sleep 3; echo late-\"\"marker; exit\n"}),
    )
    .expect("stdin");
    let mut out = Vec::new();
    let ended = until_ended(&mut c, &mut out);
    assert_eq!(ended["stage"], "exited");
    assert!(String::from_utf8_lossy(&out).contains("late-marker"));
}

#[test]
fn a_symlink_inside_the_granted_directory_does_not_leak_the_host() {
    if !sandbox_ok() {
        return;
    }
    let m = Managed::new(&ROOMY, None);
    let secret = m.home.dir.path().join("host-secret");
    std::fs::write(&secret, "host-only-secret-4711\n").expect("write");
    std::os::unix::fs::symlink(&secret, m.workspace.join("leak")).expect("symlink");
    std::os::unix::fs::symlink("/etc", m.workspace.join("etc")).expect("symlink");
    let d = m.start();
    let mut c = created(&m, &d, &ROOMY, "links");
    start(&mut c, &m, "links");
    c.call("attach", json!({"session_id": "links"}))
        .expect("attach");
    c.call(
        "write_stdin",
        json!({"session_id": "links", "data": "cat /workspace/leak; cat /workspace/etc/shadow; echo done-\"\"reading; exit\n"}),
    )
    .expect("stdin");
    let mut out = Vec::new();
    until_ended(&mut c, &mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    assert!(text.contains("done-reading"), "{text}");
    assert!(!text.contains("host-only-secret-4711"), "{text}");
    assert!(!text.contains("root:"), "{text}");
}

#[test]
fn another_client_cannot_drive_or_attach_to_a_session() {
    if !sandbox_ok() {
        return;
    }
    let m = Managed::new(&ROOMY, None);
    let d = m.start();
    // The owner presents a label of its own.
    let mut owner = d.client_as("sage-a").expect("connect as sage-a");
    owner
        .create_session(&m.plan(&ROOMY, "owned"), None)
        .expect("create");
    start(&mut owner, &m, "owned");

    for other in [
        d.client_as("sage-b").expect("connect as sage-b"),
        d.client(),
    ] {
        let mut other = other;
        for (method, params) in [
            ("attach", json!({"session_id": "owned"})),
            (
                "write_stdin",
                json!({"session_id": "owned", "data": "echo hijack\n"}),
            ),
            (
                "resize",
                json!({"session_id": "owned", "rows": 10, "cols": 10}),
            ),
            ("signal", json!({"session_id": "owned", "signal": "TERM"})),
            (
                "stop_session",
                json!({"session_id": "owned", "grace_ms": 0}),
            ),
            ("cleanup_session", json!({"session_id": "owned"})),
        ] {
            let e = other
                .call(method, params)
                .expect_err("another client is refused");
            assert_eq!(e.code(), "session_not_owned", "{method}: {e}");
        }
    }
    // An invalid label fails the handshake.
    let e = d.client_as("Not Valid").expect_err("invalid label");
    assert_eq!(e.code(), "auth_failed");

    // The owner still drives its session to the end.
    owner
        .call("attach", json!({"session_id": "owned"}))
        .expect("attach");
    owner
        .call(
            "write_stdin",
            json!({"session_id": "owned", "data": "exit 0\n"}),
        )
        .expect("write");
    let ended = until_ended(&mut owner, &mut Vec::new());
    assert_eq!(ended["stage"], "exited", "{ended}");
}

/// Issue 14, finding 4: the store anchor follows every durable transition.
/// Before, it was written only at creation, start-up and clean shutdown, so
/// after a crash the store cut back to the creation opened, the session was
/// `created` again and its used authorization started it a second time.
#[test]
fn issue_14_a_store_cut_back_after_a_crash_is_refused() {
    if !sandbox_ok() {
        return;
    }
    let m = Managed::new(&ROOMY, None);
    let mut d = m.start();
    let mut c = created(&m, &d, &ROOMY, "cut-1");
    let after_creation = std::fs::read(m.home.store()).expect("read store");
    let auth = m.authorize("cut-1", NOW_MS);
    c.call(
        "start_session",
        json!({"session_id": "cut-1", "authorization": auth}),
    )
    .expect("start");
    d.child.kill().expect("SIGKILL gloved");
    d.child.wait().expect("wait");
    drop(c);
    let full = std::fs::read(m.home.store()).expect("read store");
    assert!(full.len() > after_creation.len());
    std::fs::write(m.home.store(), &after_creation).expect("cut");
    let (status, stderr) = run_expecting_refusal(&m.home.args(&m.config()));
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error[journal_shorter_than_anchor]"),
        "{stderr}"
    );
    // With the store put back, recovery fails the session and the used
    // authorization stays used.
    std::fs::write(m.home.store(), &full).expect("restore");
    let d = m.start();
    let mut c = d.client();
    assert_eq!(
        c.session_status("cut-1").expect("status")["stage"],
        "failed"
    );
    let e = code(c.call(
        "start_session",
        json!({"session_id": "cut-1", "authorization": auth}),
    ));
    assert_eq!(e, "start_auth_replayed");
}

/// Appends one transition to `session` in the store of `m` (gloved
/// stopped) with `evidence` that is canonical JSON but no lifecycle record:
/// the store takes it, the lifecycle cannot replay it.
fn append_undecodable_transition(m: &Managed, session: &str, to: glove_types::stage::SessionStage) {
    let path = m.home.store();
    let key = glove_journal::receipt::ReceiptKey::from_key_file(
        &std::fs::read(&m.home.key).expect("key"),
    )
    .expect("receipt key");
    let anchor = glove_journal::anchor_file::AnchorFile::beside(
        &path,
        key,
        glove_journal::anchor_file::STORE_ANCHOR_DOMAIN,
    )
    .expect("anchor");
    let (mut store, _) = glove_journal::SessionStore::open_anchored(&path, anchor).expect("open");
    let id = glove_types::ids::SessionId::new(session).expect("id");
    store
        .transition(&id, to, br#"{"not":"a lifecycle record"}"#)
        .expect("append");
}

fn receipts_naming(c: &mut Client, session: &str) -> usize {
    let page = c.receipts_page(0, None).expect("page");
    page["receipts"]
        .as_array()
        .expect("receipts")
        .iter()
        .filter(|r| {
            serde_json::from_str::<Value>(r["envelope"].as_str().expect("envelope")).expect("json")
                ["body"]["session_id"]
                == session
        })
        .count()
}

#[test]
fn issue_14_a_session_whose_records_do_not_replay_is_failed_with_a_receipt() {
    // Before the fix recovery skipped the session: it stayed `preparing`
    // for good, with no receipt and nothing in the log but a count.
    if !sandbox_ok() {
        return;
    }
    let m = Managed::new(&ROOMY, None);
    let d = m.start();
    let c = created(&m, &d, &ROOMY, "garbled");
    drop(c);
    let _ = d.stop();
    append_undecodable_transition(&m, "garbled", glove_types::stage::SessionStage::Preparing);
    let d = m.start();
    let mut c = d.client();
    let st = c.session_status("garbled").expect("status");
    assert_eq!(st["stage"], "failed", "{st}");
    let (body, _) = receipt_of(&mut c, "garbled");
    assert_eq!(body["recovered"], true, "{body}");
    assert_eq!(
        body["termination"]["code"], "lifecycle_recovery_replay_failed",
        "{body}"
    );
    assert_eq!(
        body["recovery"]["replay_error"], "lifecycle_record_invalid",
        "{body}"
    );
    // The limits are the plan's, not zeros.
    assert_eq!(body["limits"]["wall_time_ms"], ROOMY.wall_ms, "{body}");
    assert_eq!(
        body["limits"]["terminal_output_bytes"], ROOMY.output_bytes,
        "{body}"
    );
    assert_eq!(body["limits"]["pids"], ROOMY.pids, "{body}");
    drop(c);
    let _ = d.stop();
    // A second restart finds it failed and writes no second receipt.
    let d = m.start();
    let mut c = d.client();
    assert_eq!(
        c.session_status("garbled").expect("status")["stage"],
        "failed"
    );
    assert_eq!(receipts_naming(&mut c, "garbled"), 1);
}

#[test]
fn issue_14_a_recovered_receipt_never_reports_made_up_limits() {
    // A session whose stored plan bytes are canonical JSON but no plan,
    // interrupted while preparing. Before the fix its recovered receipt
    // said every limit was 0; now it says it does not know (`null`).
    if !sandbox_ok() {
        return;
    }
    let m = Managed::new(&ROOMY, None);
    let d = m.start();
    drop(d.client());
    let _ = d.stop();
    {
        let path = m.home.store();
        let key = glove_journal::receipt::ReceiptKey::from_key_file(
            &std::fs::read(&m.home.key).expect("key"),
        )
        .expect("receipt key");
        let anchor = glove_journal::anchor_file::AnchorFile::beside(
            &path,
            key,
            glove_journal::anchor_file::STORE_ANCHOR_DOMAIN,
        )
        .expect("anchor");
        let (mut store, _) =
            glove_journal::SessionStore::open_anchored(&path, anchor).expect("open");
        let id = glove_types::ids::SessionId::new("no-plan").expect("id");
        let plan = br#"{"resource_profile":{"wall_time_ms":5}}"#;
        store
            .create_session(glove_journal::session::NewSession {
                session_id: &id,
                idempotency_key: &glove_types::ids::IdempotencyKey::new("key-no-plan")
                    .expect("key"),
                controller_plan_digest: glove_types::Blake3Digest::of(plan),
                plan,
            })
            .expect("create");
        let zero = glove_lifecycle::SessionRecord {
            session_id: id.clone(),
            seq: 0,
            prev: None,
            entry: glove_lifecycle::SessionEntry::Created {
                digests: glove_lifecycle::PlanDigests::new(
                    Sha256Digest::of(plan),
                    glove_types::Blake3Digest::of(plan),
                ),
            },
        }
        .encode()
        .expect("record 0");
        let preparing = glove_lifecycle::SessionRecord {
            session_id: id.clone(),
            seq: 1,
            prev: Some(Sha256Digest::of_domain(
                "glove.lifecycle.session-record.v1",
                &zero,
            )),
            entry: glove_lifecycle::SessionEntry::Preparing,
        }
        .encode()
        .expect("encode");
        store
            .transition(&id, glove_types::stage::SessionStage::Preparing, &preparing)
            .expect("preparing");
    }
    let d = m.start();
    let mut c = d.client();
    assert_eq!(
        c.session_status("no-plan").expect("status")["stage"],
        "failed"
    );
    let (body, _) = receipt_of(&mut c, "no-plan");
    assert_eq!(
        body["termination"]["code"], "lifecycle_recovery_preparing_interrupted",
        "{body}"
    );
    assert!(body["limits"].is_null(), "no limit is made up: {body}");
}

#[test]
fn issue_14_a_recovered_running_session_carries_its_admitted_limits() {
    if !sandbox_ok() {
        return;
    }
    let m = Managed::new(&ROOMY, None);
    let mut d = m.start();
    let mut c = created(&m, &d, &ROOMY, "crash-limits");
    let started = start(&mut c, &m, "crash-limits");
    let pid = started["init_pid"].as_i64().expect("pid") as i32;
    let ident = glove_sandbox::identity::ProcessIdentity::of(pid).expect("identity");
    d.child.kill().expect("SIGKILL gloved");
    d.child.wait().expect("wait");
    drop(c);
    let d = m.start();
    let mut c = d.client();
    assert!(!ident.still_matches(), "recovery killed the sandbox");
    let (body, _) = receipt_of(&mut c, "crash-limits");
    assert_eq!(
        body["limits"],
        json!({
            "cpu_time_ms": ROOMY.cpu_ms,
            "memory_bytes": ROOMY.memory,
            "pids": ROOMY.pids,
            "wall_time_ms": ROOMY.wall_ms,
            "disk_bytes": ROOMY.disk,
            "terminal_output_bytes": ROOMY.output_bytes,
        }),
        "{body}"
    );
}
