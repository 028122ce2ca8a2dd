//! The methods: happy paths through the library client and the `glove`
//! subcommands, idempotent creation and conflicts, many clients at once,
//! restart with the same store, a corrupted store.

use crate::harness::*;
use serde_json::{json, Value};
use std::process::Command;

fn glove(run: &std::path::Path, args: &[&str]) -> (Option<i32>, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_glove"))
        .args(args)
        .arg("--runtime-dir")
        .arg(run)
        .output()
        .expect("run glove");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let v = serde_json::from_str(text.trim()).unwrap_or(Value::Null);
    (
        out.status.code(),
        v,
        String::from_utf8_lossy(&out.stderr).into_owned() + &text,
    )
}

#[test]
fn happy_paths() {
    let home = Home::new();
    let d = Daemon::start(&home, &Config::full());
    let mut c = d.client();
    let plan = plan_text();
    let v = c.validate_plan(&plan, None).expect("validate");
    assert_eq!(v["admitted"], true);
    assert_eq!(v["session_id"], "session-0001");
    let controller = v["controller_plan_digest"]
        .as_str()
        .expect("digest")
        .to_owned();
    c.validate_plan(&plan, Some(&controller))
        .expect("with digest");
    assert_eq!(
        code(c.validate_plan(&plan, Some(&"0".repeat(64)))),
        "plan_controller_digest_mismatch"
    );
    let created = c.create_session(&plan, Some(&controller)).expect("create");
    assert_eq!(created["created"], true);
    assert_eq!(created["session"]["stage"], "created");
    assert_eq!(
        created["session"]["plan_content_digest"],
        v["plan_content_digest"]
    );
    let status = c.session_status("session-0001").expect("status");
    assert_eq!(status, created["session"]);
    assert_eq!(code(c.session_status("nope")), "store_session_not_found");
    assert_eq!(code(c.session_status("bad id!")), "id_invalid");
    let page = c.receipts_page(0, None).expect("page");
    assert_eq!(page["receipts"], json!([]));
    let head = page["head"].as_str().expect("head").to_owned();
    let ack = c.receipts_ack(&head).expect("ack");
    assert_eq!(ack["acknowledged"], head.as_str());
    assert_eq!(
        code(c.receipts_ack(&format!("1:{}", "0".repeat(64)))),
        "receipt_ack_mismatch"
    );
    assert_eq!(code(c.receipts_ack("nonsense")), "receipt_head_invalid");
    assert_eq!(code(c.receipts_page(5, None)), "receipt_page_out_of_range");
    assert_eq!(code(c.receipts_page(0, Some(0))), "control_invalid_params");
    // Plan rejections carry the admission code and the field.
    let expired = plan_with(|p| {
        p["issued_at_ms"] = json!(1_795_000_000_000u64);
        p["expires_at_ms"] = json!(1_795_000_060_000u64);
    });
    let e = c.validate_plan(&expired, None).expect_err("expired");
    assert_eq!((e.code(), e.location()), ("plan_expired", "expires_at_ms"));
    let e = c
        .validate_plan(&format!("{plan} "), None)
        .expect_err("noncanonical");
    assert_eq!((e.code(), e.location()), ("json_noncanonical", "plan"));

    // The same through the `glove` subcommands.
    let plan_file = home.dir.path().join("plan.json");
    std::fs::write(&plan_file, &plan).expect("write plan");
    let pf = plan_file.to_str().expect("utf-8");
    let (st, v, all) = glove(&d.run, &["capabilities", "--json"]);
    assert_eq!(st, Some(0), "{all}");
    assert_eq!(v["methods"].as_array().map(Vec::len), Some(7));
    let (st, v, all) = glove(&d.run, &["session", "validate", "--plan", pf, "--json"]);
    assert_eq!((st, &v["admitted"]), (Some(0), &json!(true)), "{all}");
    let (st, v, all) = glove(&d.run, &["session", "create", "--plan", pf, "--json"]);
    assert_eq!((st, &v["created"]), (Some(0), &json!(false)), "{all}");
    let (st, v, all) = glove(&d.run, &["session", "status", "session-0001", "--json"]);
    assert_eq!((st, &v["stage"]), (Some(0), &json!("created")), "{all}");
    let (st, v, all) = glove(&d.run, &["session", "status", "nope", "--json"]);
    assert_eq!(
        (st, &v["code"]),
        (Some(1), &json!("store_session_not_found")),
        "{all}"
    );
    let (st, v, all) = glove(
        &d.run,
        &["receipts", "page", "--after", "0", "--max", "10", "--json"],
    );
    assert_eq!(st, Some(0), "{all}");
    let head = v["head"].as_str().expect("head").to_owned();
    let (st, v, all) = glove(&d.run, &["receipts", "ack", "--head", &head, "--json"]);
    assert_eq!((st, &v["acknowledged"]), (Some(0), &json!(head)), "{all}");
    // Text output and errors.
    let (st, _, all) = glove(&d.run, &["capabilities"]);
    assert_eq!(st, Some(0));
    assert!(
        all.contains("methods: capabilities, validate_plan"),
        "{all}"
    );
    let (st, _, all) = glove(&d.run, &["session", "status", "nope"]);
    assert_eq!(st, Some(1));
    assert!(all.contains("error[store_session_not_found]"), "{all}");
    let nowhere = home.dir.path().join("nowhere");
    let (st, v, _) = glove(&nowhere, &["capabilities", "--json"]);
    assert_eq!((st, &v["code"]), (Some(1), &json!("file_not_found")));
    drop(c);
    let (status, log) = d.stop();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(
        !log.contains(&"ab".repeat(32)),
        "the receipt key never reaches the log"
    );
}

#[test]
fn create_is_idempotent_and_conflicts_fail_closed() {
    let home = Home::new();
    let d = Daemon::start(&home, &Config::full());
    let mut c = d.client();
    let plan = plan_text();
    let first = c.create_session(&plan, None).expect("create");
    assert_eq!(first["created"], true);
    let again = c.create_session(&plan, None).expect("retry");
    assert_eq!(again["created"], false);
    assert_eq!(again["session"], first["session"]);
    // Same key and session, other content.
    let changed = plan_with(|p| p["expires_at_ms"] = json!(1_796_000_050_000u64));
    assert_eq!(code(c.create_session(&changed, None)), "session_conflict");
    // Same session id, another key.
    let other_key = plan_with(|p| p["idempotency_key"] = json!("create-0002"));
    assert_eq!(code(c.create_session(&other_key, None)), "session_conflict");
    // Same key, another session id.
    let other_id = plan_with(|p| p["session_id"] = json!("session-0002"));
    assert_eq!(code(c.create_session(&other_id, None)), "session_conflict");
    // A fresh session and key is fine.
    let fresh = plan_with(|p| {
        p["session_id"] = json!("session-0002");
        p["idempotency_key"] = json!("create-0002");
    });
    assert_eq!(
        c.create_session(&fresh, None).expect("fresh")["created"],
        true
    );
    // The original is untouched.
    assert_eq!(
        c.session_status("session-0001").expect("status"),
        first["session"]
    );
}

#[test]
fn many_concurrent_clients() {
    let home = Home::new();
    let d = Daemon::start(&home, &Config::full());
    let run = d.run.clone();
    let plan = plan_text();
    let workers: Vec<_> = (0..40)
        .map(|i| {
            let (run, plan) = (run.clone(), plan.clone());
            std::thread::spawn(move || {
                let mut c = glove_bin::control::client::Client::connect(&run).expect("connect");
                for _ in 0..5 {
                    let v = c.validate_plan(&plan, None).expect("validate");
                    assert_eq!(v["admitted"], true);
                }
                let own = plan_with(|p| {
                    p["session_id"] = json!(format!("s-{i}"));
                    p["idempotency_key"] = json!(format!("k-{i}"));
                });
                let created = c.create_session(&own, None).expect("create");
                assert_eq!(created["created"], true);
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    let mut c = d.client();
    for i in 0..40 {
        assert_eq!(
            c.session_status(&format!("s-{i}")).expect("status")["stage"],
            "created"
        );
    }
}

#[test]
fn restart_replays_the_same_store() {
    let home = Home::new();
    let d = Daemon::start(&home, &Config::full());
    let first = d
        .client()
        .create_session(&plan_text(), None)
        .expect("create");
    let secret_before = std::fs::read(home.run.join("bootstrap-secret")).expect("secret");
    let (status, log) = d.stop();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(!home.run.join("gloved.sock").exists(), "socket removed");
    assert!(
        !home.run.join("bootstrap-secret").exists(),
        "secret removed"
    );
    let d = Daemon::start(&home, &Config::full());
    let secret_after = std::fs::read(home.run.join("bootstrap-secret")).expect("secret");
    assert_ne!(secret_before, secret_after, "a fresh secret per start");
    let mut c = d.client();
    assert_eq!(
        c.session_status("session-0001").expect("status"),
        first["session"]
    );
    let again = c
        .create_session(&plan_text(), None)
        .expect("retry after restart");
    assert_eq!(again["created"], false);
    assert_eq!(again["session"], first["session"]);
}

#[test]
fn corrupted_store_stops_startup() {
    let home = Home::new();
    let d = Daemon::start(&home, &Config::full());
    let mut c = d.client();
    c.create_session(&plan_text(), None).expect("create");
    let second = plan_with(|p| {
        p["session_id"] = json!("session-0002");
        p["idempotency_key"] = json!("create-0002");
    });
    c.create_session(&second, None).expect("create");
    drop(c);
    assert_eq!(d.stop().0.code(), Some(0));
    // Flip one byte inside the first record's plan (records follow; this
    // is corruption, not a torn tail).
    let mut bytes = std::fs::read(home.store()).expect("read store");
    let at = bytes
        .windows(12)
        .position(|w| w == b"session-0001")
        .expect("first plan");
    bytes[at] ^= 0x01;
    std::fs::write(home.store(), &bytes).expect("write store");
    let (status, stderr) = run_to_exit(&home.args(&Config::full()));
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error[journal_") || stderr.contains("error[store_"),
        "{stderr}"
    );
    assert!(!home.run.join("gloved.sock").exists(), "nothing served");
}

#[test]
fn a_store_cut_at_a_record_boundary_is_refused() {
    let home = Home::new();
    let d = Daemon::start(&home, &Config::full());
    let mut c = d.client();
    c.create_session(&plan_text(), None).expect("create");
    // Appends are durable when answered: this copy ends at a boundary.
    let shorter = std::fs::read(home.store()).expect("read store");
    let second = plan_with(|p| {
        p["session_id"] = json!("session-0002");
        p["idempotency_key"] = json!("create-0002");
    });
    c.create_session(&second, None).expect("create");
    drop(c);
    assert_eq!(d.stop().0.code(), Some(0));
    let full = std::fs::read(home.store()).expect("read store");
    std::fs::write(home.store(), &shorter).expect("cut");
    let (status, stderr) = run_to_exit(&home.args(&Config::full()));
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error[journal_shorter_than_anchor]"),
        "{stderr}"
    );
    // A forged anchor is refused too.
    std::fs::write(home.store(), &full).expect("restore");
    let anchor = home.state.join("sessions.journal.anchor");
    let text = std::fs::read(&anchor).expect("anchor");
    // The record count (little-endian at byte 28 of the binary file, see
    // docs/journal.md) lowered from 2 to 1 without the key.
    assert_eq!(text[28], 2);
    let mut forged = text.clone();
    forged[28] = 1;
    std::fs::write(&anchor, forged).expect("forge");
    let (status, stderr) = run_to_exit(&home.args(&Config::full()));
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error[journal_anchor_file_invalid]"),
        "{stderr}"
    );
    std::fs::write(&anchor, text).expect("restore anchor");
    let d = Daemon::start(&home, &Config::full());
    assert_eq!(
        d.client().session_status("session-0002").expect("status")["stage"],
        "created"
    );
}
