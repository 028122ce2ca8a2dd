//! Path exposures through the real gloved and the real `glove init`:
//! enrollment on the owner socket only, the refusals (the root itself,
//! `/`, outside every root, a symlinked ancestor, another file system, a
//! second live exposure), the redacted catalog, plans naming a stale,
//! revoked or expired generation, and one managed session that sees the
//! exposed project copied in.

use super::common;
use super::harness::*;
use super::managed::{start, unhex, until_ended, until_output, Managed, ROOMY};
use glove_types::exposure::{starter, StarterRoot};
use glove_types::ids::RuntimeTemplateId;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

/// An exposure root (`<home>/projects`), its policy and journal flags.
struct Exposed {
    root: PathBuf,
    flags: Vec<String>,
}

fn exposed(home: &Home) -> Exposed {
    let root = home.dir.path().join("projects");
    std::fs::create_dir(&root).expect("mkdir root");
    let policy = home.dir.path().join("exposure-policy.json");
    let bytes = starter(
        &[(root.clone(), StarterRoot::default())],
        &[RuntimeTemplateId::new("codex-safe").expect("id")],
    )
    .expect("starter");
    write_mode(&policy, &bytes, 0o600);
    let journal = home.state.join("exposures.journal");
    Exposed {
        root,
        flags: vec![
            "--path-exposure-policy".into(),
            policy.display().to_string(),
            "--path-exposure-journal".into(),
            journal.display().to_string(),
        ],
    }
}

/// `glove init ARGS --runtime-dir RUN --json`: the status and the JSON.
fn init(run: &Path, args: &[&str]) -> (bool, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_glove"))
        .arg("init")
        .args(args)
        .args(["--runtime-dir", run.to_str().expect("utf8"), "--json"])
        .output()
        .expect("run glove init");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "glove init printed no JSON: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.success(), v)
}

fn refused(run: &Path, args: &[&str]) -> String {
    let (ok, v) = init(run, args);
    assert!(!ok, "glove init {args:?} succeeded: {v}");
    v["code"].as_str().expect("code").to_owned()
}

fn enrolled(run: &Path, args: &[&str]) -> (String, u64) {
    let (ok, v) = init(run, args);
    assert!(ok, "glove init {args:?} failed: {v}");
    let x = &v["exposure"];
    (
        x["exposure_id"].as_str().expect("id").to_owned(),
        x["generation"].as_u64().expect("generation"),
    )
}

fn plan(session: &str, id: &str, generation: u64) -> String {
    plan_with(|v| {
        v["session_id"] = json!(session);
        v["idempotency_key"] = json!(format!("key-{session}"));
        v["path_exposures"] =
            json!([{"exposure_id": id, "generation": generation, "access": "read_only"}]);
    })
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8")
}

#[test]
fn the_owner_enrolls_and_everything_else_is_refused_with_its_code() {
    let home = Home::new();
    let x = exposed(&home);
    let app = x.root.join("team/app");
    std::fs::create_dir_all(&app).expect("mkdir");
    std::fs::create_dir_all(x.root.join("real/proj")).expect("mkdir");
    std::os::unix::fs::symlink(x.root.join("real"), x.root.join("link")).expect("symlink");
    let cfg = Config::full().with(&x.flags.iter().map(String::as_str).collect::<Vec<_>>());
    let d = Daemon::start(&home, &cfg);
    let mut c = d.client();
    let caps = c.capabilities().expect("caps");
    for m in ["exposure_create", "exposure_revoke", "exposure_catalog"] {
        assert!(
            caps["methods"]
                .as_array()
                .expect("methods")
                .contains(&json!(m)),
            "{caps}"
        );
    }
    let (id, generation) = enrolled(&d.run, &[s(&app)]);
    assert_eq!(generation, 1);
    // A second live exposure of the same project, by another spelling too.
    let other = format!("{}/team/./app/", s(&x.root));
    assert_eq!(refused(&d.run, &[&other]), "exposure_live_exists");
    // `..` is refused by glove init itself: after a symbolic link it would
    // be another directory than the lexical one.
    let dotdot = format!("{}/team/x/../app", s(&x.root));
    assert_eq!(refused(&d.run, &[&dotdot]), "exposure_path_invalid");
    assert_eq!(refused(&d.run, &[s(&x.root)]), "exposure_path_is_root");
    assert_eq!(refused(&d.run, &["/"]), "exposure_path_invalid");
    assert_eq!(refused(&d.run, &["/usr"]), "exposure_path_outside_roots");
    let through_link = x.root.join("link/proj");
    assert_eq!(
        refused(&d.run, &[s(&through_link)]),
        "exposure_path_symlink"
    );
    assert_eq!(
        refused(&d.run, &[s(&x.root.join("missing"))]),
        "exposure_path_not_found"
    );
    // A controller on the control socket can neither enroll nor revoke.
    let e = code(c.call("exposure_create", json!({"path": s(&app)})));
    assert_eq!(e, "control_owner_only");
    let e = code(c.call("exposure_revoke", json!({"exposure_id": id})));
    assert_eq!(e, "control_owner_only");
    let e = code(c.call("exposure_create", json!({"path": s(&app), "x": 1})));
    assert_eq!(e, "json_unknown_field");
    // It sees the catalog, without a path, a root or a source identity.
    let cat = c.call("exposure_catalog", json!({})).expect("catalog");
    let text = cat.to_string();
    assert_eq!(cat["exposures"][0]["exposure_id"], json!(id), "{cat}");
    assert_eq!(cat["exposures"][0]["state"], "live");
    assert_eq!(cat["exposures"][0]["label"], "app");
    let root_str = s(&x.root).to_owned();
    for secret in [
        root_str.as_str(),
        "team/app",
        "projects",
        "root_id",
        "relative_path",
        "\"dev\"",
        "\"ino\"",
        "/tmp",
    ] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    // Plans: the newest generation only, while live.
    c.validate_plan(&plan("exp-1", &id, 1), None)
        .expect("a plan naming the live generation validates");
    let (id2, generation) = enrolled(&d.run, &[s(&app), "--replace"]);
    assert_eq!((id2.as_str(), generation), (id.as_str(), 2));
    let e = code(c.create_session(&plan("exp-2", &id, 1), None));
    assert_eq!(e, "exposure_generation_stale");
    let e = code(c.create_session(&plan("exp-3", &id, 7), None));
    assert_eq!(e, "exposure_generation_stale");
    let e = code(c.create_session(&plan("exp-4", "e0000", 1), None));
    assert_eq!(e, "exposure_unknown");
    let out = Command::new(env!("CARGO_BIN_EXE_glove"))
        .args(["exposures", "revoke", &id, "--runtime-dir", s(&d.run)])
        .output()
        .expect("revoke");
    assert!(out.status.success(), "{out:?}");
    let e = code(c.create_session(&plan("exp-5", &id, 2), None));
    assert_eq!(e, "exposure_revoked");
    // Revoked: the project may be enrolled again (the next generation).
    let (_, generation) = enrolled(&d.run, &[s(&app), "--ttl", "1"]);
    assert_eq!(generation, 3);
    c.create_session(&plan("exp-6", &id, 3), None)
        .expect("a live generation creates");
    drop(c);
    let _ = d.stop();

    // Restarted two seconds later (the service clock): the journal replays,
    // generation 3 has expired, and a plan naming it is refused.
    let mut cmd = Command::new("/usr/bin/env");
    cmd.arg(format!("GLOVE_TEST_NOW_MS={}", NOW_MS + 2_000))
        .arg(env!("CARGO_BIN_EXE_gloved"));
    let d = Daemon::spawn(cmd, &home.args(&cfg), &home.run);
    let mut c = d.client();
    let e = code(c.create_session(&plan("exp-7", &id, 3), None));
    assert_eq!(e, "exposure_expired");
    let cat = c.call("exposure_catalog", json!({})).expect("catalog");
    assert_eq!(cat["exposures"][0]["state"], "expired", "{cat}");
    // An expired lease no longer blocks the project.
    let (_, generation) = enrolled(&d.run, &[s(&app)]);
    assert_eq!(generation, 4);
}

#[test]
fn a_project_on_another_file_system_is_refused() {
    if !common::need(
        common::is_root(),
        "mounting a tmpfs in a private mount namespace needs root",
    ) || !common::need(Path::new("/usr/bin/unshare").exists(), "unshare is missing")
    {
        return;
    }
    let home = Home::new();
    let x = exposed(&home);
    let mnt = x.root.join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    let cfg = Config::full().with(&x.flags.iter().map(String::as_str).collect::<Vec<_>>());
    // gloved in a private mount namespace with a tmpfs at <root>/mnt: the
    // host's mounts are untouched.
    let mut cmd = Command::new("/usr/bin/unshare");
    cmd.args([
        "--mount",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        "mount -t tmpfs tmpfs \"$0\" && mkdir \"$0/proj\" && exec \"$@\"",
        s(&mnt),
        env!("CARGO_BIN_EXE_gloved"),
    ]);
    let d = Daemon::spawn(cmd, &home.args(&cfg), &home.run);
    assert_eq!(
        refused(&d.run, &[s(&mnt.join("proj"))]),
        "exposure_path_crosses_mount"
    );
    assert_eq!(refused(&d.run, &[s(&mnt)]), "exposure_path_crosses_mount");
}

#[test]
fn an_exposure_policy_replaced_by_a_symlink_refuses_the_start() {
    let home = Home::new();
    let x = exposed(&home);
    let policy = PathBuf::from(&x.flags[1]);
    let real = home.dir.path().join("real-policy.json");
    std::fs::rename(&policy, &real).expect("rename");
    std::os::unix::fs::symlink(&real, &policy).expect("symlink");
    let cfg = Config::full().with(&x.flags.iter().map(String::as_str).collect::<Vec<_>>());
    let (status, err) = run_expecting_refusal(&home.args(&cfg));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("error[file_symlink]"), "{err}");
    // Half of the pair is refused as well.
    let cfg = Config::full().with(&x.flags[..2].iter().map(String::as_str).collect::<Vec<_>>());
    let (status, _) = run_expecting_refusal(&home.args(&cfg));
    assert_eq!(status.code(), Some(1));
}

#[test]
fn a_managed_session_sees_the_exposed_project_copied_in() {
    if !super::managed::sandbox_ok() {
        return;
    }
    let mut m = Managed::new(&ROOMY, None);
    let x = exposed(&m.home);
    let project = x.root.join("webapp");
    std::fs::create_dir(&project).expect("mkdir");
    std::fs::write(project.join("NOTES"), "exposed from the host\n").expect("write");
    m.extra.extend(x.flags.iter().cloned());
    let d = m.start();
    let (id, generation) = enrolled(&d.run, &[s(&project), "--label", "web"]);
    let mut c = d.client();
    let mut v: Value = serde_json::from_str(&m.plan(&ROOMY, "seen-1")).expect("plan");
    v["path_exposures"] =
        json!([{"exposure_id": id, "generation": generation, "access": "ephemeral_write"}]);
    let plan =
        String::from_utf8(glove_types::canon::to_canonical(&v).expect("canon")).expect("utf8");
    c.create_session(&plan, None).expect("create");
    start(&mut c, &m, "seen-1");
    let att = c
        .call("attach", json!({"session_id": "seen-1"}))
        .expect("attach");
    let mut out: Vec<u8> = att["transcript"]
        .as_array()
        .expect("transcript")
        .iter()
        .flat_map(|ch| unhex(ch["data_hex"].as_str().unwrap_or("")))
        .collect();
    c.call(
        "write_stdin",
        json!({"session_id": "seen-1", "data":
            "cat /work/web/NOTES && echo scribble > /work/web/NOTES && echo new > /work/web/added && echo do''ne\nexit\n"}),
    )
    .expect("stdin");
    until_output(&mut c, &mut out, |s| s.contains("done"));
    until_ended(&mut c, &mut out);
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains("exposed from the host"), "{text}");
    // The agent wrote to its copy; the host project is as it was.
    assert_eq!(
        std::fs::read_to_string(project.join("NOTES")).expect("NOTES"),
        "exposed from the host\n"
    );
    assert!(!project.join("added").exists());

    // A read-only exposure: the copy is there and cannot be written.
    let mut v: Value = serde_json::from_str(&m.plan(&ROOMY, "seen-2")).expect("plan");
    v["path_exposures"] =
        json!([{"exposure_id": id, "generation": generation, "access": "read_only"}]);
    let plan =
        String::from_utf8(glove_types::canon::to_canonical(&v).expect("canon")).expect("utf8");
    c.create_session(&plan, None).expect("create");
    start(&mut c, &m, "seen-2");
    let att = c
        .call("attach", json!({"session_id": "seen-2"}))
        .expect("attach");
    let mut out: Vec<u8> = att["transcript"]
        .as_array()
        .expect("transcript")
        .iter()
        .flat_map(|ch| unhex(ch["data_hex"].as_str().unwrap_or("")))
        .collect();
    c.call(
        "write_stdin",
        json!({"session_id": "seen-2", "data":
            "cat /work/web/NOTES; touch /work/web/x 2>&1; echo fin''ished\nexit\n"}),
    )
    .expect("stdin");
    until_output(&mut c, &mut out, |s| s.contains("finished"));
    until_ended(&mut c, &mut out);
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains("exposed from the host"), "{text}");
    assert!(text.contains("Read-only file system"), "{text}");
    assert!(!project.join("x").exists());
}
