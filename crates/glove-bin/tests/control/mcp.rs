//! The managed path of MCP mediation: a session policy defines a tool
//! policy (an MCP profile file), a plan names it by id, and the session
//! started through gloved gets the same mediator `glove run` uses — the
//! relay and the sockets bound into the sandbox, the harness
//! configurations in its home — with the audit journal's head in the
//! receipt. A plan cannot add servers or rules: it names ids only.

use super::harness::*;
use super::managed::*;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

fn servers() -> Option<PathBuf> {
    let p = std::env::var_os("GLOVE_MCP_SERVERS").map(PathBuf::from);
    let ok = p.as_ref().is_some_and(|p| {
        p.join("@modelcontextprotocol/server-everything/dist/index.js")
            .is_file()
    });
    if !ok {
        assert!(
            !required(),
            "GLOVE_REQUIRE_SANDBOX=1 but GLOVE_MCP_SERVERS names no MCP servers"
        );
        eprintln!("skipping: GLOVE_MCP_SERVERS names no MCP servers (see mcp/package.json)");
        return None;
    }
    p
}

const TOOL_POLICY: &str = "mcp-everything";

/// A managed home whose policy defines the tool policy over
/// server-everything (only `echo` allowed).
fn managed_with_tools(nm: &std::path::Path) -> Managed {
    let m = Managed::new(&ROOMY, None);
    let profile = m.home.dir.path().join("mcp-profile.json");
    let text = json!({"schema_version": 1, "servers": [{
        "server_id": "everything",
        "command": {"path": "/usr/bin/node",
                    "arguments": [nm.join("@modelcontextprotocol/server-everything/dist/index.js"), "stdio"],
                    "environment": ["PATH=/usr/bin:/bin"], "working_directory": "/"},
        "tools": [{"name": "echo", "arguments": {"message": {"prefix": "ok"}}}],
    }]});
    write_mode(&profile, text.to_string().as_bytes(), 0o600);
    m.edit_policy(|p| {
        p["tool_policy_ids"] = json!(["another-policy", TOOL_POLICY]);
        p["tool_policies"] = json!([{"tool_policy_id": TOOL_POLICY,
                                     "profile_path": profile.display().to_string()}]);
    });
    m
}

fn plan_naming(m: &Managed, session: &str, tools: Value) -> String {
    let plan = m.plan(&ROOMY, session);
    let mut v: Value = serde_json::from_str(&plan).expect("json");
    v["tool_policy_ids"] = tools;
    String::from_utf8(glove_types::canon::to_canonical(&v).expect("canon")).expect("utf8")
}

#[test]
fn a_managed_session_with_a_tool_policy_is_mediated_and_its_receipt_commits_the_audit() {
    if !sandbox_ok() {
        return;
    }
    let Some(nm) = servers() else {
        return;
    };
    let m = managed_with_tools(&nm);
    let d = m.start();
    let mut c = d.client();
    let session = "mcp-1";
    c.create_session(&plan_naming(&m, session, json!([TOOL_POLICY])), None)
        .expect("create");
    let started = start(&mut c, &m, session);
    assert_eq!(started["stage"], "running", "{started}");
    c.call("attach", json!({"session_id": session}))
        .expect("attach");
    c.set_read_timeout(Some(Duration::from_secs(120)))
        .expect("timeout");
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#;
    let frames = [
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{{"message":"ok managed"}},{meta}}}}}"#
        ),
        format!(
            r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"echo","arguments":{{"message":"not ok"}},{meta}}}}}"#
        ),
        format!(
            r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"get-env","arguments":{{}},{meta}}}}}"#
        ),
    ];
    let script = format!(
        "test -s /home/agent/.codex/config.toml && printf '%s\\n' '{}' '{}' '{}' | /run/glove/bin/glove mcp-relay everything | tr -d '\\r' > /tmp/answers; cat /tmp/answers; echo END-OF-ANSWERS; exit 0\n",
        frames[0], frames[1], frames[2]
    );
    c.call(
        "write_stdin",
        json!({"session_id": session, "data": script}),
    )
    .expect("stdin");
    let mut out = Vec::new();
    let ended = until_ended(&mut c, &mut out);
    assert_eq!(ended["stage"], "exited", "{ended}");
    let text = String::from_utf8_lossy(&out).into_owned();
    assert!(text.contains("Echo: ok managed"), "{text}");
    assert!(text.contains("mcp_argument_refused"), "{text}");
    assert!(text.contains("mcp_tool_denied"), "{text}");
    let (body, _) = receipt_of(&mut c, session);
    let mcp = &body["mcp"];
    assert_eq!(mcp["tool_policy_id"], TOOL_POLICY, "{body}");
    assert_eq!(mcp["audit_failed"], false, "{mcp}");
    assert_eq!(mcp["allowed"], 1, "{mcp}");
    assert_eq!(mcp["denied"], 2, "{mcp}");
    let profile = std::fs::read(m.home.dir.path().join("mcp-profile.json")).expect("profile");
    assert_eq!(
        mcp["profile_sha256"],
        glove_types::Sha256Digest::of(&profile).to_hex(),
        "{mcp}"
    );
    // The journal the receipt commits replays to that head and holds the
    // three calls.
    let journal = m
        .home
        .dir
        .path()
        .join("mat/mcp")
        .join(format!("{session}.journal"));
    let head = mcp["journal_head"].as_str().expect("head");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_glove"))
        .args(["audit", "show", "--json", "--journal"])
        .arg(&journal)
        .args(["--head", head])
        .output()
        .expect("glove audit");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Value = serde_json::from_slice(&out.stdout).expect("json");
    // Requests are decided concurrently: the journal has them in the
    // order their decisions were made.
    let mut calls: Vec<(String, String)> = shown["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["method"] == "tools/call")
        .map(|e| {
            (
                e["tool"].as_str().unwrap_or("").to_owned(),
                e["decision"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    calls.sort();
    assert_eq!(
        calls,
        [
            ("echo".to_owned(), "allowed".to_owned()),
            ("echo".to_owned(), "denied".to_owned()),
            ("get-env".to_owned(), "denied".to_owned()),
        ],
        "{shown}"
    );
}

#[test]
fn a_session_without_a_defined_tool_policy_gets_no_mediator_and_two_are_refused() {
    if !sandbox_ok() {
        return;
    }
    let Some(nm) = servers() else {
        return;
    };
    let m = managed_with_tools(&nm);
    m.edit_policy(|p| {
        let profile = p["tool_policies"][0]["profile_path"].clone();
        p["tool_policies"] = json!([
            {"tool_policy_id": "another-policy", "profile_path": profile},
            {"tool_policy_id": TOOL_POLICY, "profile_path": profile},
        ]);
        p["tool_policy_ids"] = json!(["another-policy", "listed-only", TOOL_POLICY]);
    });
    let d = m.start();
    let mut c = d.client();
    // Listed but not defined: no tools at all (no relay, no socket).
    c.create_session(&plan_naming(&m, "mcp-none", json!(["listed-only"])), None)
        .expect("create");
    start(&mut c, &m, "mcp-none");
    c.call("attach", json!({"session_id": "mcp-none"}))
        .expect("attach");
    c.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    c.call(
        "write_stdin",
        json!({"session_id": "mcp-none", "data": "ls /run/glove/mcp /run/glove/bin 2>&1 | tr -d '\\r'; echo END; exit 0\n"}),
    )
    .expect("stdin");
    let mut out = Vec::new();
    until_ended(&mut c, &mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    assert!(!text.contains("everything.sock"), "{text}");
    let (body, _) = receipt_of(&mut c, "mcp-none");
    assert!(body.get("mcp").is_none(), "{body}");
    // Two defined tool policies in one plan are refused at start.
    c.create_session(
        &plan_naming(&m, "mcp-two", json!(["another-policy", TOOL_POLICY])),
        None,
    )
    .expect("create");
    let auth = m.authorize("mcp-two", NOW_MS);
    let e = code(c.call(
        "start_session",
        json!({"session_id": "mcp-two", "authorization": auth}),
    ));
    assert_eq!(e, "session_tool_policy_conflict");
}

#[test]
fn a_session_recovered_after_gloved_died_still_commits_its_durable_tool_calls() {
    if !sandbox_ok() {
        return;
    }
    let Some(nm) = servers() else {
        return;
    };
    let m = managed_with_tools(&nm);
    let mut d = m.start();
    let mut c = d.client();
    let session = "mcp-crash";
    c.create_session(&plan_naming(&m, session, json!([TOOL_POLICY])), None)
        .expect("create");
    start(&mut c, &m, session);
    c.call("attach", json!({"session_id": session}))
        .expect("attach");
    c.set_read_timeout(Some(Duration::from_secs(120)))
        .expect("timeout");
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#;
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{{"message":"ok before the crash"}},{meta}}}}}"#
    );
    c.call(
        "write_stdin",
        json!({"session_id": session, "data": format!("printf '%s\\n' '{call}' | /run/glove/bin/glove mcp-relay everything; echo CALLED\n")}),
    )
    .expect("stdin");
    let mut out = Vec::new();
    until_output(&mut c, &mut out, |s| {
        s.contains("Echo: ok before the crash")
    });
    d.child.kill().expect("SIGKILL gloved");
    d.child.wait().expect("wait");
    drop(c);
    let d = m.start();
    let mut c = d.client();
    let (body, _) = receipt_of(&mut c, session);
    assert_eq!(body["recovered"], true, "{body}");
    let mcp = &body["mcp"];
    assert_eq!(mcp["tool_policy_id"], TOOL_POLICY, "{body}");
    assert_eq!(mcp["audit_failed"], true, "{mcp}");
    assert_eq!(mcp["allowed"], 1, "{mcp}");
    let journal = m
        .home
        .dir
        .path()
        .join("mat/mcp")
        .join(format!("{session}.journal"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_glove"))
        .args(["audit", "verify", "--json", "--journal"])
        .arg(&journal)
        .args(["--head", mcp["journal_head"].as_str().expect("head")])
        .output()
        .expect("glove audit");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
