//! Framing and JSON-RPC shape: oversized frames, malformed JSON, batches,
//! unknown and unadvertised methods, connection and idle bounds.

use crate::harness::*;
use serde_json::{json, Value};

fn error_code(v: &Value) -> (i64, String) {
    (
        v["error"]["code"].as_i64().unwrap_or(0),
        v["error"]["data"]["code"].as_str().unwrap_or("").to_owned(),
    )
}

#[test]
fn oversized_frame_gets_an_error_and_a_close() {
    let home = Home::new();
    let d = Daemon::start(&home, &Config::base().with(&["--max-frame-bytes", "4096"]));
    let mut c = d.client();
    c.send_raw_frame(&vec![b' '; 4097]).expect("send");
    let reply = c.read_message().expect("error reply");
    assert_eq!(
        error_code(&reply),
        (-32600, "control_frame_too_large".into())
    );
    assert_eq!(reply["id"], Value::Null);
    let closed = c.read_message().expect_err("closed");
    assert_eq!(closed.code(), "control_connection_closed");
    // The service stays up.
    d.client().capabilities().expect("still serving");
}

#[test]
fn malformed_json_keeps_the_connection() {
    let home = Home::new();
    let d = Daemon::start(&home, &Config::base());
    let mut c = d.client();
    for (bad, code) in [
        (&b"{"[..], "json_syntax"),
        (b"", "json_syntax"),
        (b"\xff", "json_invalid_utf8"),
        (
            br#"{"id":1,"id":2,"jsonrpc":"2.0","method":"capabilities"}"#,
            "json_duplicate_key",
        ),
        (
            br#"{"id":1.5,"jsonrpc":"2.0","method":"capabilities"}"#,
            "json_float",
        ),
    ] {
        c.send_raw_frame(bad).expect("send");
        let reply = c.read_message().expect("reply");
        assert_eq!(error_code(&reply), (-32700, code.into()), "{reply}");
    }
    for (bad, rpc, code) in [
        (json!("x"), -32600, "control_invalid_request"),
        (
            json!({"id": 1, "method": "capabilities"}),
            -32600,
            "control_invalid_request",
        ),
        (
            json!({"id": 1, "jsonrpc": "2.0", "method": "capabilities", "extra": 1}),
            -32600,
            "control_invalid_request",
        ),
        (
            json!({"id": [1], "jsonrpc": "2.0", "method": "capabilities"}),
            -32600,
            "control_invalid_request",
        ),
        (
            json!({"id": 1, "jsonrpc": "2.0", "method": "capabilities", "params": [1]}),
            -32602,
            "control_invalid_params",
        ),
        (
            json!({"id": 1, "jsonrpc": "2.0", "method": "capabilities", "params": {"x": 1}}),
            -32602,
            "json_unknown_field",
        ),
    ] {
        c.send_raw_frame(bad.to_string().as_bytes()).expect("send");
        let reply = c.read_message().expect("reply");
        assert_eq!(error_code(&reply), (rpc, code.into()), "{bad} -> {reply}");
    }
    // The connection is still in step.
    c.capabilities().expect("capabilities after errors");
}

#[test]
fn batch_arrays_are_refused() {
    let home = Home::new();
    let d = Daemon::start(&home, &Config::base());
    let mut c = d.client();
    let batch = json!([{"id": 1, "jsonrpc": "2.0", "method": "capabilities"}]);
    c.send_raw_frame(batch.to_string().as_bytes())
        .expect("send");
    let reply = c.read_message().expect("reply");
    assert_eq!(error_code(&reply), (-32600, "control_batch_refused".into()));
    c.send_raw_frame(b"[]").expect("send");
    let reply = c.read_message().expect("reply");
    assert_eq!(error_code(&reply).1, "control_batch_refused");
    c.capabilities().expect("still usable");
}

#[test]
fn unknown_and_unadvertised_methods_are_not_found() {
    let home = Home::new();
    let d = Daemon::start(&home, &Config::base());
    let mut c = d.client();
    for m in [
        "frobnicate",
        "validate_plan",
        "create_session",
        "session_status",
        "start_session",
        "attach",
        "authenticate",
    ] {
        let e = c.call(m, json!({})).expect_err(m);
        assert_eq!(e.code(), "method_not_found", "{m}");
        match e {
            glove_bin::control::client::ClientError::Remote { rpc_code, .. } => {
                assert_eq!(rpc_code, -32601)
            }
            other => panic!("{other:?}"),
        }
    }
    drop(c);
    drop(d);
    // With a policy and a store: lifecycle methods stay unadvertised, even
    // with a materialization root configured.
    let home = Home::new();
    let mat = home.dir.path().join("mat");
    mkdir_mode(&mat, 0o700);
    let mat = mat.display().to_string();
    let d = Daemon::start(
        &home,
        &Config::full().with(&["--materialization-root", &mat]),
    );
    let mut c = d.client();
    for m in [
        "start_session",
        "attach",
        "write_stdin",
        "resize",
        "signal",
        "detach",
        "stop_session",
        "cleanup_session",
    ] {
        assert_eq!(code(c.call(m, json!({}))), "method_not_found", "{m}");
    }
}

#[test]
fn notifications_get_no_answer() {
    let home = Home::new();
    let d = Daemon::start(&home, &Config::base());
    let mut c = d.client();
    c.send_raw_frame(br#"{"jsonrpc":"2.0","method":"capabilities"}"#)
        .expect("send");
    // The next reply answers the next request, not the notification.
    let caps = c.call("capabilities", json!({})).expect("capabilities");
    assert!(caps["methods"].is_array());
}

#[test]
fn connection_bound_is_enforced() {
    let home = Home::new();
    let d = Daemon::start(&home, &Config::base().with(&["--max-connections", "2"]));
    let mut a = d.client();
    let _b = d.client();
    let mut s = std::os::unix::net::UnixStream::connect(d.socket()).expect("connect");
    let reply = crate::auth::read_frame(&mut s);
    assert_eq!(
        error_code(&reply),
        (-32002, "control_too_many_connections".into())
    );
    a.capabilities().expect("the admitted ones still work");
    drop(a);
}

#[test]
fn issue_14_silent_connections_do_not_lock_the_owner_out() {
    let home = Home::new();
    let d = Daemon::start(&home, &Config::base());
    // As many connections as the service serves, and more, each saying
    // nothing after the hello; before the fix they held every slot.
    let max = glove_bin::control::limits::Limits::default().max_connections;
    let mut silent = Vec::new();
    for _ in 0..max + 8 {
        let mut s = std::os::unix::net::UnixStream::connect(d.socket()).expect("connect");
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .expect("timeout");
        // Each one is accepted (hello) or refused (an error), never ignored.
        let _ = crate::auth::read_frame(&mut s);
        silent.push(s);
    }
    let mut owner = d.client();
    let caps = owner.capabilities().expect("the owner is served");
    assert!(caps["methods"].is_array());
    drop(silent);
}

#[test]
fn idle_connections_are_closed() {
    let home = Home::new();
    let d = Daemon::start(&home, &Config::base().with(&["--idle-timeout-secs", "1"]));
    let mut c = d.client();
    // Wait for the close itself (an event), not for a duration.
    let e = c.read_message().expect_err("closed when idle");
    assert_eq!(e.code(), "control_connection_closed");
}

#[test]
fn pipelined_requests_are_each_answered_once() {
    let home = Home::new();
    let d = Daemon::start(&home, &Config::policy().with(&["--max-in-flight", "1"]));
    let mut c = d.client();
    let plan = plan_text();
    let n = 200u64;
    for id in 0..n {
        let r = json!({"jsonrpc": "2.0", "id": id + 100, "method": "validate_plan", "params": {"plan": plan}});
        c.send_raw_frame(r.to_string().as_bytes()).expect("send");
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut busy = 0;
    for _ in 0..n {
        let reply = c.read_message().expect("reply");
        let id = reply["id"].as_u64().expect("id");
        assert!(seen.insert(id), "answered twice: {id}");
        if reply.get("error").is_some() {
            assert_eq!(
                error_code(&reply),
                (-32002, "control_busy".into()),
                "{reply}"
            );
            busy += 1;
        } else {
            assert_eq!(reply["result"]["admitted"], true);
        }
    }
    assert_eq!(seen.len() as u64, n);
    // How many hit the bound depends on scheduling; every one was answered.
    eprintln!("{busy} of {n} pipelined requests were answered control_busy");
}
