//! `glove receipts show` against a real gloved (the real binary with
//! `--runtime-dir`), and the words a person reads when a session does not
//! exist or gloved is not running.

use super::harness::*;
use super::managed::*;
use serde_json::{json, Value};
use std::process::{Command, Output};

fn glove(args: &[&str], run: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_glove"))
        .args(args)
        .arg("--runtime-dir")
        .arg(run)
        .output()
        .expect("run glove")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn receipts_show_renders_a_finished_session() {
    if !sandbox_ok() {
        return;
    }
    let m = Managed::new(&ROOMY, None);
    let d = m.start();
    let mut c = created(&m, &d, &ROOMY, "show-1");
    start(&mut c, &m, "show-1");
    c.call("attach", json!({"session_id": "show-1"}))
        .expect("attach");
    c.call(
        "write_stdin",
        json!({"session_id": "show-1", "data": "exit 3\n"}),
    )
    .expect("exit");
    let ended = until_ended(&mut c, &mut Vec::new());
    assert_eq!(ended["stage"], "exited", "{ended}");
    receipt_of(&mut c, "show-1");

    let text = glove(&["receipts", "show", "--session", "show-1"], &m.home.run);
    let shown = stdout(&text);
    assert_eq!(text.status.code(), Some(0), "{shown}");
    assert!(shown.contains("resource_v1  session show-1"), "{shown}");
    assert!(shown.contains("ended        exited with code 3"), "{shown}");
    assert!(shown.contains("wall time"), "{shown}");
    assert!(shown.contains("MAC not checked here"), "{shown}");
    assert!(
        shown.contains("1 receipt(s) naming session show-1"),
        "{shown}"
    );

    let json_out = glove(&["receipts", "show", "--json"], &m.home.run);
    assert_eq!(json_out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&json_out.stdout).expect("json");
    let r = v["receipts"]
        .as_array()
        .expect("receipts")
        .iter()
        .find(|r| r["body"]["session_id"] == "show-1")
        .expect("the session's receipt");
    assert!(r["body"].is_object(), "{r}");
    assert_eq!(r["body"]["termination"]["exit"]["code"], 3);
    assert_eq!(r["decoded"], true);
    assert_eq!(r["chained"], true);
    assert!(v["head"].as_str().is_some(), "{v}");

    // A session that was never created does not exist; one that ended is
    // not live.
    assert_eq!(
        code(c.call("write_stdin", json!({"session_id": "nope", "data": "x"}))),
        "store_session_not_found"
    );
    let e = c
        .call("stop_session", json!({"session_id": "nope"}))
        .expect_err("no such session");
    assert_eq!(e.code(), "store_session_not_found");
    assert_eq!(e.message(), "session nope does not exist");
    assert_eq!(
        code(c.call("write_stdin", json!({"session_id": "show-1", "data": "x"}))),
        "session_not_live"
    );
}

#[test]
fn an_unreachable_gloved_gets_a_hint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = glove(&["receipts", "show"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("is gloved running?"), "{err}");
    assert!(err.contains("--runtime-dir"), "{err}");
    let run = tempfile::tempdir().expect("tempdir");
    write_mode(&run.path().join("bootstrap-secret"), &[b'a'; 64], 0o600);
    let o = glove(&["receipts", "show", "--json"], run.path());
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["code"], "control_unreachable", "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap_or("")
            .contains("is gloved running?"),
        "{v}"
    );
}
