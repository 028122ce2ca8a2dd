//! `glove apply` killed (SIGKILL) at each step of the exchange — after the
//! reservation, after the copy, after the sync, after the exchange, after
//! its record (commit), during the cleanup — then `glove apply recover`:
//! the source is the old tree or the new one in full, the receipt matches
//! (failed before the exchange, applied after the commit), and a kill
//! between the exchange and its record is reported ambiguous and left
//! exactly as it is. Twenty runs at
//! each point (`GLOVE_APPLY_CRASH_RUNS` to change).

mod common;

use common::apply_env::{expected_after, leftovers, ready, seed, snapshot, Env, EDITS};
use std::io::BufRead;
use std::process::Stdio;

fn runs() -> usize {
    std::env::var("GLOVE_APPLY_CRASH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

/// Starts `glove apply` stopping at `point`, waits until it is there, and
/// kills it.
fn kill_at(env: &Env, session: &str, key: &str, point: &str) {
    let mut cmd = common::command(common::As::Caller);
    cmd.args(["apply", session, "--yes", "--key", key])
        .env("GLOVE_STAGE_DIR", env.p("stages"))
        .env("GLOVE_APPLY_DIR", env.p("apply"))
        .env("GLOVE_APPLY_TRUST", env.p("trust/policy.json"))
        .env("GLOVE_APPLY_CRASH_POINT", point)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    let err = child.stderr.take().expect("stderr");
    let mut seen = Vec::new();
    for line in std::io::BufReader::new(err).lines() {
        let line = line.expect("line");
        if line == format!("CRASH_POINT {point}") {
            break;
        }
        seen.push(line);
    }
    child.kill().expect("kill");
    let status = child.wait().expect("wait");
    assert!(
        !status.success(),
        "glove apply finished before {point}: {seen:?}"
    );
}

fn recover(env: &Env) -> serde_json::Value {
    let out = env.run(&["apply", "recover", "--json"]);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn receipts_verify(env: &Env) {
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
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn crash_at(point: &str) {
    if !ready() {
        return;
    }
    for run in 0..runs() {
        let env = Env::new();
        seed(&env);
        let key = env.key("owner.key", true);
        let before = snapshot(&env.src());
        let session = env.session(EDITS);
        kill_at(&env, &session, &key, point);
        let r = recover(&env);
        let all = r["recovered"].as_array().cloned().unwrap_or_default();
        let outcome = all
            .first()
            .and_then(|x| x["outcome"].as_str())
            .unwrap_or("nothing")
            .to_owned();
        let now = snapshot(&env.src());
        match point {
            "reserve" | "copy" | "sync" => {
                assert_eq!(outcome, "failed", "run {run}: {r}");
                assert_eq!(now, before, "run {run}: the old tree in full");
                assert!(leftovers(env.dir.path()).is_empty(), "run {run}");
            }
            "exchange" => {
                assert_eq!(outcome, "ambiguous", "run {run}: {r}");
                assert_eq!(now, expected_after(), "run {run}: the new tree in full");
                let left = leftovers(env.dir.path());
                assert_eq!(left.len(), 1, "run {run}: the old tree stays beside it");
                // Reported again, and still untouched.
                let again = recover(&env);
                assert_eq!(again["recovered"][0]["outcome"], "ambiguous");
                assert_eq!(snapshot(&env.src()), now);
                assert_eq!(leftovers(env.dir.path()), left);
            }
            "commit" => {
                // Recovery finishes it: the applied receipt, then the
                // old tree removed.
                assert_eq!(outcome, "applied", "run {run}: {r}");
                assert_eq!(now, expected_after(), "run {run}: the new tree in full");
                assert!(leftovers(env.dir.path()).is_empty(), "run {run}");
            }
            "cleanup" => {
                assert_eq!(outcome, "cleaned", "run {run}: {r}");
                assert_eq!(now, expected_after(), "run {run}: the new tree in full");
                assert!(leftovers(env.dir.path()).is_empty(), "run {run}");
            }
            other => panic!("unknown point {other}"),
        }
        receipts_verify(&env);
        // Nothing is left to recover but an ambiguous transaction.
        let r = recover(&env);
        for x in r["recovered"].as_array().cloned().unwrap_or_default() {
            assert_eq!(x["outcome"], "ambiguous", "run {run}: {r}");
        }
    }
}

#[test]
fn killed_after_the_reservation() {
    crash_at("reserve");
}

#[test]
fn killed_after_the_copy() {
    crash_at("copy");
}

#[test]
fn killed_after_the_sync() {
    crash_at("sync");
}

#[test]
fn killed_after_the_exchange() {
    crash_at("exchange");
}

#[test]
fn killed_after_the_commit() {
    crash_at("commit");
}

#[test]
fn killed_during_the_cleanup() {
    crash_at("cleanup");
}

/// Another tree renamed to the staging name (by whoever can rename in the
/// source's parent) while an apply was cut short is never removed by
/// recovery: only the tree of the identity the apply recorded is.
#[test]
fn a_tree_planted_under_the_staging_name_is_left_alone() {
    if !ready() {
        return;
    }
    for point in ["copy", "cleanup"] {
        let env = Env::new();
        seed(&env);
        let key = env.key("owner.key", true);
        let session = env.session(EDITS);
        kill_at(&env, &session, &key, point);
        // Whatever the apply left there goes aside; a stranger's tree takes
        // its name.
        let parent = env.dir.path();
        let staging = match leftovers(parent).pop() {
            Some(name) => {
                std::fs::rename(parent.join(&name), parent.join("aside")).expect("rename");
                name
            }
            None => {
                let r = recover(&env);
                panic!("{point}: no staging tree to replace: {r}");
            }
        };
        let planted = parent.join(&staging);
        std::fs::create_dir_all(planted.join("deep")).expect("plant");
        std::fs::write(planted.join("deep/precious.txt"), "keep me\n").expect("plant");
        let r = recover(&env);
        assert_eq!(
            std::fs::read_to_string(planted.join("deep/precious.txt")).expect("still there"),
            "keep me\n",
            "{point}: {r}"
        );
    }
}
