// This file is over 600 lines because it is one end-to-end battery on `glove run` sharing its real agents, upstream servers and audit checks.
//! `glove run`: a contained agent reaches the operator's MCP servers only
//! through Glove's mediator. The agents are real: the Python MCP SDK's
//! stdio client (`tests/probes/mcp_sdk.py`, both revisions) and a raw
//! frame sender (`tests/probes/mcp_raw.py`), each running the relay
//! inside the sandbox; the upstreams are the real npm servers
//! (server-everything, server-filesystem on a temporary root). Every
//! decision is in the audit journal, which `glove audit verify` checks
//! against the head the outcome names.

mod common;

use common::{glove, glove_with_env, kit, outcome, python_ok, safe_tempdir, sandbox_ok, As};
use serde_json::{json, Value};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

fn servers() -> Option<PathBuf> {
    let p = std::env::var_os("GLOVE_MCP_SERVERS").map(PathBuf::from);
    let ok = p.as_ref().is_some_and(|p| {
        p.join("@modelcontextprotocol/server-everything/dist/index.js")
            .is_file()
    });
    common::need(
        ok,
        "GLOVE_MCP_SERVERS does not name a node_modules with the MCP servers (see mcp/package.json)",
    )
    .then(|| p.expect("set"))
}

fn python_sdk() -> Option<PathBuf> {
    let p = std::env::var_os("GLOVE_MCP_PYTHON").map(PathBuf::from);
    let ok = p
        .as_ref()
        .is_some_and(|p| p.join("mcp/__init__.py").is_file());
    common::need(
        ok,
        "GLOVE_MCP_PYTHON does not name the Python MCP SDK (see mcp/requirements.txt)",
    )
    .then(|| p.expect("set"))
}

fn ready() -> Option<PathBuf> {
    if !sandbox_ok(As::Caller) || !python_ok() {
        return None;
    }
    if !common::need(
        Path::new("/usr/bin/node").is_file(),
        "/usr/bin/node is missing",
    ) {
        return None;
    }
    servers()
}

fn write_private(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

fn everything(nm: &Path, tools: Value) -> Value {
    json!({
        "server_id": "everything",
        "command": {
            "path": "/usr/bin/node",
            "arguments": [nm.join("@modelcontextprotocol/server-everything/dist/index.js"), "stdio"],
            "environment": ["PATH=/usr/bin:/bin"],
            "working_directory": "/",
        },
        "tools": tools,
    })
}

fn filesystem(nm: &Path, root: &str, tools: Value) -> Value {
    json!({
        "server_id": "files",
        "command": {
            "path": "/usr/bin/node",
            "arguments": [nm.join("@modelcontextprotocol/server-filesystem/dist/index.js"), root],
            "environment": ["PATH=/usr/bin:/bin"],
            "working_directory": "/",
        },
        "tools": tools,
    })
}

/// A private directory with the profile, the audit journal and the pins.
struct Setup {
    dir: tempfile::TempDir,
    profile: PathBuf,
    audit: PathBuf,
    pins: PathBuf,
}

fn setup(servers: &[Value]) -> Setup {
    let dir = safe_tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let profile = dir.path().join("profile.json");
    write_private(
        &profile,
        &json!({"schema_version": 1, "servers": servers}).to_string(),
    );
    Setup {
        audit: dir.path().join("mcp.journal"),
        pins: dir.path().join("pins.json"),
        profile,
        dir,
    }
}

fn probe_bind(name: &str) -> String {
    let k = kit();
    let dst = k.root.join(name);
    if !dst.exists() {
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/probes")
                .join(name),
            &dst,
        )
        .expect("copy probe");
        std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    format!("{}:/probe/{name}", dst.display())
}

/// `glove run --json` of `cmd` with the setup's files (a fresh audit
/// journal each time); the outcome record and the output before it.
fn run(s: &Setup, extra: &[&str], cmd: &[&str]) -> (Value, String, std::process::Output) {
    let _ = std::fs::remove_file(&s.audit);
    let state = s.dir.path().join("state");
    let mut a: Vec<&str> = vec!["run", "--json"];
    let (p, j, pins) = (
        s.profile.display().to_string(),
        s.audit.display().to_string(),
        s.pins.display().to_string(),
    );
    a.extend_from_slice(&["--profile", &p, "--audit-journal", &j, "--pins", &pins]);
    a.extend_from_slice(extra);
    a.push("--");
    a.extend_from_slice(cmd);
    let out = glove_with_env(
        As::Caller,
        &a,
        None,
        &[("XDG_STATE_HOME", state.as_os_str())],
    );
    let (v, text) = outcome(&out);
    (v, text, out)
}

fn last_json_line(text: &str) -> Value {
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or("");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("no probe line ({e}) in {text:?}"))
}

fn audit(args: &[&str]) -> Value {
    let mut a = vec!["audit"];
    a.extend_from_slice(args);
    a.push("--json");
    let out = glove(As::Caller, &a, None);
    assert!(
        out.status.success(),
        "glove audit {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("audit json")
}

fn calls(events: &Value) -> Vec<(String, String, String)> {
    events["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["method"] == "tools/call")
        .map(|e| {
            (
                e["tool"].as_str().unwrap_or("").to_owned(),
                e["decision"].as_str().unwrap_or("").to_owned(),
                e["code"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

#[test]
fn the_python_sdk_inside_the_sandbox_calls_a_mediated_tool_in_both_revisions() {
    let Some(nm) = ready() else {
        return;
    };
    let Some(sdk) = python_sdk() else {
        return;
    };
    let s = setup(&[everything(
        &nm,
        json!([{"name": "echo"}, {"name": "get-sum", "arguments": {"a": {"range": {"min": 0, "max": 10}}}}]),
    )]);
    let sdk_bind = format!("{}:/opt/pymcp", sdk.display());
    let probe = probe_bind("mcp_sdk.py");
    let extra = [
        "--ro-bind",
        &sdk_bind,
        "--ro-bind",
        &probe,
        "--env",
        "PYTHONPATH=/opt/pymcp",
    ];
    for rev in ["legacy", "modern"] {
        let (v, text, out) = run(
            &s,
            &extra,
            &[
                "/usr/bin/python3",
                "/probe/mcp_sdk.py",
                "everything",
                rev,
                "echo",
                r#"{"message":"through glove"}"#,
            ],
        );
        assert_eq!(
            v["exit"]["code"],
            0,
            "{rev}: {v} {text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let p = last_json_line(&text);
        assert_eq!(p["tools"], json!(["echo", "get-sum"]), "{rev}: {p}");
        assert_eq!(p["text"], json!(["Echo: through glove"]), "{rev}: {p}");
        match rev {
            "legacy" => assert_eq!(p["protocol"], "2025-11-25"),
            _ => assert_eq!(p["supported"], json!(["2026-07-28"])),
        }
        // The outcome commits the audit journal's head; the journal
        // replays strictly to that head and holds the call.
        let m = &v["mcp"];
        assert_eq!(m["audit_failed"], false, "{m}");
        assert!(m["allowed"].as_u64().unwrap_or(0) >= 3, "{m}");
        // The SDK starts the relay with pipes, which are never handed
        // over (glove_mcp::handoff): the relay copies.
        assert_eq!(
            m["connections"],
            json!({"streams": 1, "handed_over": 0, "handoffs_refused": 0}),
            "{rev}: {m}"
        );
        let head = m["journal_head"].as_str().expect("head").to_owned();
        let j = s.audit.display().to_string();
        let verified = audit(&["verify", "--journal", &j, "--head", &head]);
        assert_eq!(verified["head"], head.as_str());
        assert_eq!(verified["records"], m["journal_records"]);
        let shown = audit(&["show", "--journal", &j]);
        assert_eq!(
            calls(&shown),
            [("echo".to_owned(), "allowed".to_owned(), String::new())],
            "{rev}: {shown}"
        );
    }
    // A rule the SDK's call breaks is refused by Glove before the
    // upstream sees it, and the SDK gets Glove's code.
    let (v, text, _) = run(
        &s,
        &extra,
        &[
            "/usr/bin/python3",
            "/probe/mcp_sdk.py",
            "everything",
            "legacy",
            "get-sum",
            r#"{"a":11,"b":1}"#,
        ],
    );
    let p = last_json_line(&text);
    assert_eq!(
        p["error"]["data"]["glove_code"], "mcp_argument_refused",
        "{p} {v}"
    );
    assert_eq!(v["mcp"]["denied"], 1, "{v}");
    // A wrong head is refused.
    let j = s.audit.display().to_string();
    let out = glove(
        As::Caller,
        &[
            "audit",
            "verify",
            "--journal",
            &j,
            "--head",
            &"0".repeat(64),
        ],
        None,
    );
    assert!(!out.status.success());
}

#[test]
fn frames_tools_arguments_and_paths_from_the_contained_agent_are_decided_by_glove() {
    let Some(nm) = ready() else {
        return;
    };
    let tree = safe_tempdir();
    let outside = safe_tempdir();
    let root = tree.path().display().to_string();
    std::fs::write(tree.path().join("a.txt"), "alpha").expect("write");
    std::fs::write(outside.path().join("secret.txt"), "secret").expect("write");
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), tree.path().join("link"))
        .expect("link");
    let rule = json!({"required": true, "path": {"roots": [root], "no_symlinks": true}});
    let s = setup(&[
        everything(
            &nm,
            json!([{"name": "echo", "arguments": {"message": {"prefix": "ok"}}}]),
        ),
        filesystem(
            &nm,
            &root,
            json!([{"name": "read_text_file", "arguments": {"path": rule}}]),
        ),
    ]);
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#;
    let call = |id: u32, name: &str, args: Value| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}","arguments":{args},{meta}}}}}"#
        )
    };
    let outside_file = outside.path().join("secret.txt").display().to_string();
    let files_cases = json!([
        [
            "list",
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{{meta}}}}}"#),
            true
        ],
        [
            "inside",
            call(
                2,
                "read_text_file",
                json!({"path": format!("{root}/a.txt")})
            ),
            true
        ],
        [
            "dots",
            call(
                3,
                "read_text_file",
                json!({"path": format!("{root}/../{}", outside.path().file_name().and_then(|n| n.to_str()).unwrap_or("x"))})
            ),
            true
        ],
        [
            "absolute",
            call(4, "read_text_file", json!({"path": outside_file})),
            true
        ],
        [
            "symlink",
            call(5, "read_text_file", json!({"path": format!("{root}/link")})),
            true
        ],
        [
            "other_servers_tool",
            call(6, "echo", json!({"message": "ok"})),
            true
        ],
    ]);
    let everything_cases = json!([
        [
            "allowed",
            call(1, "echo", json!({"message": "ok then"})),
            true
        ],
        ["rule", call(2, "echo", json!({"message": "not ok"})), true],
        [
            "undeclared",
            call(3, "echo", json!({"message": "ok", "extra": 1})),
            true
        ],
        ["unknown", call(4, "no-such-tool", json!({})), true],
        ["denied", call(5, "get-env", json!({})), true],
        ["malformed", "{\"jsonrpc\":\"2.0\",\"id\":6,", true],
        [
            "duplicate_keys",
            format!(r#"{{"jsonrpc":"2.0","id":7,"id":8,"method":"ping","params":{{{meta}}}}}"#),
            true
        ],
        [
            "batch",
            format!(r#"[{{"jsonrpc":"2.0","id":9,"method":"ping","params":{{{meta}}}}}]"#),
            true
        ],
        ["oversized", null, true],
        [
            "after",
            format!(r#"{{"jsonrpc":"2.0","id":10,"method":"ping","params":{{{meta}}}}}"#),
            true
        ],
    ]);
    let probe = probe_bind("mcp_raw.py");
    let script = format!(
        "/usr/bin/python3 /probe/mcp_raw.py files '{}' && /usr/bin/python3 /probe/mcp_raw.py everything '{}' && /run/glove/bin/glove mcp-relay nosuch </dev/null; echo relay-exit:$?",
        files_cases, everything_cases
    );
    let (v, text, out) = run(&s, &["--ro-bind", &probe], &["/bin/sh", "-c", &script]);
    assert_eq!(
        v["exit"]["code"],
        0,
        "{v} {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = text
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("probe json"))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    let (files, every) = (&lines[0], &lines[1]);
    let code = |v: &Value| {
        v["error"]["data"]["glove_code"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    // The files relay reaches only its server, with only the allowed tool.
    let names: Vec<&str> = files["list"]["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["read_text_file"], "{files}");
    assert_eq!(
        files["inside"]["result"]["content"][0]["text"], "alpha",
        "{files}"
    );
    for case in ["dots", "absolute", "symlink"] {
        assert_eq!(
            code(&files[case]),
            "mcp_argument_refused",
            "{case}: {files}"
        );
    }
    assert_eq!(
        code(&files["other_servers_tool"]),
        "mcp_tool_unknown",
        "{files}"
    );
    assert!(!files.to_string().contains("secret\""), "{files}");
    // The everything relay.
    assert_eq!(
        every["allowed"]["result"]["content"][0]["text"], "Echo: ok then",
        "{every}"
    );
    assert_eq!(code(&every["rule"]), "mcp_argument_refused", "{every}");
    assert_eq!(code(&every["undeclared"]), "mcp_schema_refused", "{every}");
    assert_eq!(code(&every["unknown"]), "mcp_tool_unknown", "{every}");
    assert_eq!(code(&every["denied"]), "mcp_tool_denied", "{every}");
    // A frame whose id is ambiguous (duplicate keys) is refused like one
    // without a usable id: answered with `id: null`, never decided.
    for (dropped, rpc) in [
        ("malformed", -32700),
        ("duplicate_keys", -32700),
        ("batch", -32600),
        ("oversized", -32600),
    ] {
        assert_eq!(every[dropped]["id"], Value::Null, "{dropped}: {every}");
        assert_eq!(every[dropped]["error"]["code"], rpc, "{dropped}: {every}");
    }
    assert_eq!(
        every["after"]["result"],
        json!({"resultType": "complete"}),
        "{every}"
    );
    // A relay for a server the profile does not name cannot connect.
    assert!(text.contains("relay-exit:1"), "{text}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("relay-exit:1"),
        "{text}"
    );
    // Every decision is audited: the dropped frames too.
    let j = s.audit.display().to_string();
    let shown = audit(&["show", "--journal", &j]);
    let c = calls(&shown);
    let refused = c.iter().filter(|(_, d, _)| d == "denied").count();
    assert_eq!(refused, 8, "{c:?}");
    let dropped = shown["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["decision"] == "dropped")
        .count();
    assert!(dropped >= 4, "{shown}");
    assert_eq!(v["mcp"]["dropped"].as_u64(), Some(dropped as u64), "{v}");
}

#[test]
fn a_changed_pin_blocks_the_tool_until_the_operator_approves_it() {
    let Some(nm) = ready() else {
        return;
    };
    let s = setup(&[everything(&nm, json!([{"name": "echo"}]))]);
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#;
    let cases = json!([[
        "echo",
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{{"message":"hi"}},{meta}}}}}"#
        ),
        true
    ]]);
    let probe = probe_bind("mcp_raw.py");
    let cmd = [
        "/usr/bin/python3",
        "/probe/mcp_raw.py",
        "everything",
        &cases.to_string(),
    ];
    let cmd: Vec<&str> = cmd.iter().map(|s| s.as_ref()).collect();
    // First sight: pinned and callable.
    let (v, text, _) = run(&s, &["--ro-bind", &probe], &cmd);
    assert_eq!(
        last_json_line(&text)["echo"]["result"]["content"][0]["text"],
        "Echo: hi",
        "{v}"
    );
    assert_eq!(v["mcp"]["pinned"], 1, "{v}");
    let pins = s.pins.display().to_string();
    let show = |s: &str| {
        let out = glove(
            As::Caller,
            &["run", "pins", "show", "--pins", s, "--json"],
            None,
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).expect("pins json")
    };
    let first = show(&pins);
    let digest = first["servers"]["everything"]["tools"]["echo"]
        .as_str()
        .expect("echo pinned")
        .to_owned();
    // The operator's pin no longer matches what the server shows (as if
    // the server had changed the tool): the call is refused with the pin
    // code, and the digest seen is pending.
    let mut tampered = first.clone();
    tampered["servers"]["everything"]["tools"]["echo"] = json!("1".repeat(64));
    write_private(&s.pins, &tampered.to_string());
    let (v, text, _) = run(&s, &["--ro-bind", &probe], &cmd);
    assert_eq!(
        last_json_line(&text)["echo"]["error"]["data"]["glove_code"],
        "mcp_pin_mismatch",
        "{v} {text}"
    );
    let pending = show(&pins);
    assert_eq!(
        pending["servers"]["everything"]["pending"]["echo"],
        digest.as_str(),
        "{pending}"
    );
    let text_show = glove(As::Caller, &["run", "pins", "show", "--pins", &pins], None);
    assert!(String::from_utf8_lossy(&text_show.stdout).contains("PENDING"));
    // Approved explicitly, it is callable again.
    let out = glove(
        As::Caller,
        &[
            "run",
            "pins",
            "approve",
            "--pins",
            &pins,
            "--server",
            "everything",
            "--tool",
            "echo",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (v, text, _) = run(&s, &["--ro-bind", &probe], &cmd);
    assert_eq!(
        last_json_line(&text)["echo"]["result"]["content"][0]["text"],
        "Echo: hi",
        "{v}"
    );
}

#[test]
fn a_profile_that_is_not_protected_or_an_upstream_that_fails_stops_before_the_command_runs() {
    let Some(nm) = ready() else {
        return;
    };
    let s = setup(&[everything(&nm, json!([{"name": "echo"}]))]);
    std::fs::set_permissions(&s.profile, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let (v, _, out) = run(&s, &[], &["/bin/echo", "ran"]);
    assert_eq!(out.status.code(), Some(125));
    assert_eq!(v["code"], "file_bad_mode", "{v}");
    let mut bad = everything(&nm, json!([{"name": "echo"}]));
    bad["command"]["arguments"] = json!(["/nonexistent/server.js"]);
    let s = setup(&[bad]);
    let (v, text, out) = run(&s, &[], &["/bin/echo", "ran"]);
    assert_eq!(out.status.code(), Some(125), "{v}");
    assert!(
        v["code"] == "mcp_upstream_failed" || v["code"] == "mcp_upstream_timeout",
        "{v}"
    );
    assert!(!text.contains("ran"), "{text}");
    let out = glove(As::Caller, &["run", "--json", "--", "/bin/true"], None);
    assert!(!out.status.success());
}

/// The scripted model endpoint on host loopback, calling the MCP tool
/// `tool` when the harness offers it.
struct Stub {
    child: std::process::Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Stub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn stub(dir: &Path, tool: &str) -> Stub {
    use std::io::BufRead;
    let log = dir.join("requests.jsonl");
    let mut child = std::process::Command::new("/usr/bin/python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/model_stub/stub.py"))
        .args(["--port", "0", "--mcp-tool", tool, "--log"])
        .arg(&log)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut first = String::new();
    let out = child.stdout.take().expect("stdout");
    std::io::BufReader::new(out)
        .read_line(&mut first)
        .expect("the stub's port");
    let port = first.trim().parse().expect("a port");
    Stub { child, port, log }
}

#[test]
fn codex_configured_by_glove_run_calls_a_mediated_tool_for_the_stub_model() {
    let Some(nm) = ready() else {
        return;
    };
    let Some(h) = common::harnesses() else {
        return;
    };
    let codex_dir = h.join("@openai/codex-linux-x64");
    let codex = codex_dir.join("vendor/x86_64-unknown-linux-musl/bin/codex");
    if !common::need(codex.is_file(), "codex is not installed in GLOVE_HARNESSES") {
        return;
    }
    let s = setup(&[everything(&nm, json!([{"name": "echo"}]))]);
    let model = stub(s.dir.path(), "echo");
    let endpoint = format!("model.test:{}", model.port);
    let egress = s.dir.path().join("egress.json");
    write_private(
        &egress,
        &json!({
            "schema_version": 1,
            "egress_policy_id": "run-codex",
            "endpoints": [endpoint],
            "allow_private": true,
            "hosts": {"model.test": ["127.0.0.1"]},
            "port_mappings": [{"listen_port": 18000, "endpoint": endpoint}],
        })
        .to_string(),
    );
    let (e, bind) = (
        egress.display().to_string(),
        codex_dir.display().to_string(),
    );
    let codex = codex.display().to_string();
    let provider = "model_providers.glove={name=\"glove\",base_url=\"http://127.0.0.1:18000/v1\",env_key=\"OPENAI_API_KEY\",wire_api=\"responses\"}";
    let (v, text, out) = run(
        &s,
        &[
            "--egress",
            &e,
            "--ro-bind",
            &bind,
            "--env",
            "OPENAI_API_KEY=sk-stub",
            "--memory",
            "2G",
        ],
        &[
            &codex,
            "exec",
            "--skip-git-repo-check",
            "-s",
            "danger-full-access",
            "-m",
            "glove-stub",
            "-c",
            provider,
            "-c",
            "model_provider=glove",
            "Call the echo tool.",
        ],
    );
    assert_eq!(
        v["exit"]["code"],
        0,
        "{v} {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The model saw the tool Glove showed (under codex's MCP namespace)
    // and got the mediated result back.
    let log = std::fs::read_to_string(&model.log).expect("stub log");
    let mut offered = false;
    let mut answered = false;
    for line in log.lines() {
        let entry: Value = serde_json::from_str(line).expect("log line");
        let body = &entry["body"];
        offered |= body["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["name"] == "mcp__everything" && t.to_string().contains("\"echo\""));
        answered |= body["input"].as_array().into_iter().flatten().any(|i| {
            i["type"] == "function_call_output" && i.to_string().contains("Echo: glove-mcp-turn")
        });
    }
    assert!(offered, "codex did not offer the mediated tool: {log}");
    assert!(answered, "the tool's result did not reach the model: {log}");
    // The call is in the audit the outcome commits.
    let m = &v["mcp"];
    assert_eq!(m["audit_failed"], false, "{m}");
    // Codex starts the relay with pipes: copied, never handed over.
    assert_eq!(m["connections"]["handed_over"], 0, "{m}");
    assert!(m["connections"]["streams"].as_u64() >= Some(1), "{m}");
    let head = m["journal_head"].as_str().expect("head").to_owned();
    let j = s.audit.display().to_string();
    let shown = audit(&["show", "--journal", &j, "--head", &head]);
    assert_eq!(
        calls(&shown),
        [("echo".to_owned(), "allowed".to_owned(), String::new())],
        "{shown}"
    );
    assert_eq!(v["egress"]["audit_failed"], false, "{v}");
}

#[test]
fn the_shipped_example_profile_decodes() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/mcp-profile.json");
    let bytes = std::fs::read(&p).expect("docs/examples/mcp-profile.json");
    let profile = glove_mcp::Profile::decode(&bytes).expect("the example profile is valid");
    let ids: Vec<&str> = profile.servers().iter().map(|s| s.id()).collect();
    assert_eq!(ids, ["everything", "files"]);
}

#[test]
fn audit_verify_reads_a_journal_without_changing_it_and_refuses_a_torn_tail() {
    let Some(nm) = ready() else {
        return;
    };
    let s = setup(&[everything(&nm, json!([{"name": "echo"}]))]);
    let (v, _, _) = run(&s, &[], &["/bin/true"]);
    assert_eq!(v["exit"]["code"], 0, "{v}");
    let j = s.audit.display().to_string();
    let before = std::fs::read(&s.audit).expect("journal");
    // A clean close leaves exactly the records: no tail.
    let spec = glove_mcp::journal_spec(1 << 30, u64::MAX >> 1);
    let replayed = glove_journal::replay_bytes(&before, &spec, None).expect("replays");
    assert!(replayed.torn.is_none(), "{:?}", replayed.torn);
    assert_eq!(replayed.valid_len, before.len() as u64);
    let ok = audit(&["verify", "--journal", &j]);
    assert_eq!(ok["head"], v["mcp"]["journal_head"], "{ok}");
    // Cut inside the last record: verify fails, and the file keeps every
    // byte (nothing repaired, nothing removed).
    let cut = &before[..before.len() - 10];
    std::fs::write(&s.audit, cut).expect("write");
    let out = glove(As::Caller, &["audit", "verify", "--journal", &j], None);
    assert!(!out.status.success(), "a torn journal must not verify");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("torn"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(&s.audit).expect("journal"), cut);
}

#[test]
fn connections_beyond_the_bound_wait_and_churn_does_not_stop_the_mediator() {
    let Some(nm) = ready() else {
        return;
    };
    let s = setup(&[everything(&nm, json!([{"name": "echo"}]))]);
    let probe = probe_bind("mcp_conns.py");
    let (v, text, out) = run(
        &s,
        &["--ro-bind", &probe],
        &["/usr/bin/python3", "/probe/mcp_conns.py"],
    );
    assert_eq!(
        v["exit"]["code"],
        0,
        "{v} {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let p = last_json_line(&text);
    assert_eq!(p["served"], 16, "{p}");
    assert_eq!(p["waiting_answered"], false, "{p}");
    assert_eq!(p["after_one_closed"], true, "{p}");
    assert_eq!(p["after_churn"], true, "{p}");
    assert_eq!(v["mcp"]["audit_failed"], false, "{v}");
    // Raw connections, no relay: plain streams, none handed over. (The
    // 300 that close at once never say a word and are not served.)
    assert_eq!(v["mcp"]["connections"]["handed_over"], 0, "{v}");
    // The handoff byte with no descriptors: closed unread, and counted.
    assert_eq!(p["bad_handoff_closed"], true, "{p}");
    assert_eq!(v["mcp"]["connections"]["handoffs_refused"], 1, "{v}");
    assert!(
        v["mcp"]["connections"]["streams"].as_u64() >= Some(17),
        "{v}"
    );
}

#[test]
fn a_killed_runs_runtime_directory_is_removed_by_the_next_run() {
    let Some(nm) = ready() else {
        return;
    };
    if !common::need(
        common::is_root(),
        "the runtime base /run/glove/mcp is root's",
    ) {
        return;
    }
    let base = Path::new("/run/glove/mcp");
    std::fs::create_dir_all(base).expect("mkdir");
    let stale = base.join(format!("run-stale-{}", std::process::id()));
    let live = base.join(format!("run-live-{}", std::process::id()));
    for d in [&stale, &live] {
        std::fs::create_dir_all(d).expect("mkdir");
        std::fs::write(d.join("0.sock"), "").expect("write");
    }
    // No process has pid 4194305 (above the kernel's pid limit).
    std::fs::write(stale.join("owner"), "4194305 1").expect("write");
    let stat = std::fs::read_to_string("/proc/self/stat").expect("stat");
    let start = stat
        .rsplit_once(')')
        .and_then(|(_, a)| a.split_whitespace().nth(19))
        .expect("starttime");
    std::fs::write(
        live.join("owner"),
        format!("{} {start}", std::process::id()),
    )
    .expect("write");
    let s = setup(&[everything(&nm, json!([{"name": "echo"}]))]);
    let (v, _, _) = run(&s, &[], &["/bin/true"]);
    assert_eq!(v["exit"]["code"], 0, "{v}");
    assert!(!stale.exists(), "the stale directory is still there");
    assert!(live.exists(), "a live run's directory was removed");
    let _ = std::fs::remove_dir_all(&live);
}

#[test]
fn an_agent_that_stops_reading_neither_starves_the_others_nor_fills_the_host() {
    let Some(nm) = ready() else {
        return;
    };
    if !common::need(
        Path::new("/usr/bin/time").is_file(),
        "/usr/bin/time is missing (it reports the mediator's peak memory)",
    ) {
        return;
    }
    let s = setup(&[everything(&nm, json!([{"name": "echo"}]))]);
    let probe = probe_bind("mcp_stall.py");
    for (count, big) in [("6000", "small"), ("20", "big")] {
        let _ = std::fs::remove_file(&s.audit);
        let state = s.dir.path().join("state");
        let (p, j, pins) = (
            s.profile.display().to_string(),
            s.audit.display().to_string(),
            s.pins.display().to_string(),
        );
        let k = kit();
        let out = std::process::Command::new("/usr/bin/time")
            .args(["-f", "peak-rss-kb:%M", "--"])
            .arg(&k.glove)
            .args([
                "run",
                "--json",
                "--profile",
                &p,
                "--audit-journal",
                &j,
                "--pins",
                &pins,
            ])
            .args(["--ro-bind", &probe, "--"])
            .args(["/usr/bin/python3", "/probe/mcp_stall.py", count, big])
            .env("XDG_STATE_HOME", &state)
            .current_dir(&k.root)
            .output()
            .expect("glove run");
        let (v, text) = outcome(&out);
        assert_eq!(v["exit"]["code"], 0, "{v} {text}");
        let p = last_json_line(&text);
        assert_eq!(p["other_answered"], true, "{big}: {p}");
        // Many small answers fill the socket and stall the writer: the
        // stalled connection is then cut off. (Sixty big frames get small
        // answers that fit: nothing stalls, nothing is cut.)
        if big == "small" {
            assert_eq!(p["stalled_closed"], true, "{big}: {p}");
        }
        let err = String::from_utf8_lossy(&out.stderr);
        let peak: u64 = err
            .lines()
            .find_map(|l| l.strip_prefix("peak-rss-kb:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("peak rss");
        eprintln!("{big}: the host process peaked at {peak} kB");
        // Before the frame budget, 60 padded pings took about 1.7 GB (20,
        // about 0.6 GB).
        assert!(
            peak < 400 * 1024,
            "{big}: the host process peaked at {peak} kB"
        );
    }
}

#[test]
fn sigterm_to_glove_run_reaches_the_command_and_the_run_still_ends_with_its_summary() {
    use std::io::{BufRead, Read};
    let Some(nm) = ready() else {
        return;
    };
    let s = setup(&[everything(&nm, json!([{"name": "echo"}]))]);
    let state = s.dir.path().join("state");
    let (p, j, pins) = (
        s.profile.display().to_string(),
        s.audit.display().to_string(),
        s.pins.display().to_string(),
    );
    let k = kit();
    let mut child = std::process::Command::new(&k.glove)
        .args([
            "run",
            "--json",
            "--profile",
            &p,
            "--audit-journal",
            &j,
            "--pins",
            &pins,
        ])
        .args(["--", "/bin/sh", "-c"])
        // "ready" a moment after the start, once glove forwards signals.
        .arg("trap 'echo got-term; exit 7' TERM; sleep 1; echo ready; while :; do sleep 0.1; done")
        .env("XDG_STATE_HOME", &state)
        .current_dir(&k.root)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("glove run");
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    while !line.contains("ready") {
        line.clear();
        assert!(
            out.read_line(&mut line).expect("read") > 0,
            "glove run ended early"
        );
    }
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("read");
    let status = child.wait().expect("wait");
    assert!(rest.contains("got-term"), "{rest}");
    assert_eq!(status.code(), Some(7), "{rest}");
    let record: Value = serde_json::from_str(rest.lines().last().unwrap_or("")).expect("outcome");
    assert_eq!(record["exit"]["code"], 7, "{record}");
    let head = record["mcp"]["journal_head"].as_str().expect("mcp summary");
    audit(&["verify", "--journal", &j, "--head", head]);
}

#[test]
fn after_the_command_ended_a_sigterm_still_stops_a_glove_stuck_writing_its_output() {
    if !sandbox_ok(As::Caller) {
        return;
    }
    let dir = safe_tempdir();
    let fifo = dir.path().join("out");
    common::mkfifo(&fifo);
    // A reader that never reads: glove's output backs up once the command
    // has written more than the pipe holds.
    let _reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(&fifo)
        .expect("open the reader");
    let out = std::fs::OpenOptions::new()
        .write(true)
        .open(&fifo)
        .expect("open");
    let k = kit();
    let mut child = std::process::Command::new(&k.glove)
        .args([
            "exec",
            "--raw-output",
            "--",
            "/bin/sh",
            "-c",
            "head -c 300000 /dev/zero; echo done >&2",
        ])
        .current_dir(&k.root)
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("glove exec");
    // The command ends at once; glove is then stuck writing to the fifo.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(
        child.try_wait().expect("wait").is_none(),
        "glove ended early"
    );
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    let mut status = None;
    for _ in 0..100 {
        if let Some(s) = child.try_wait().expect("wait") {
            status = Some(s);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let Some(status) = status else {
        let _ = child.kill();
        panic!("glove did not stop on SIGTERM after its command ended");
    };
    assert_eq!(status.code(), Some(128 + 15));
}

/// `glove run demo`, the README's first command: the built-in scripted
/// agent, contained, reaches the built-in server only through the relay
/// and the mediator; two calls are allowed, three refused (an argument
/// over its rule, a path climbing out of the root, a tool the policy does
/// not allow), and the audit journal holds all five.
#[test]
fn the_built_in_demo_mediates_a_contained_agent() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    assert_eq!(
        readme.lines().nth(3),
        Some("cargo run -q --bin glove -- run demo"),
        "the README's first command is this demo"
    );
    if !sandbox_ok(As::Caller) {
        return;
    }
    let out = glove(As::Caller, &["run", "demo"], None);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}{err}");
    let agent: Vec<&str> = text.lines().filter(|l| l.starts_with("agent: ")).collect();
    assert_eq!(agent.len(), 7, "{text}");
    assert!(
        agent[0].starts_with("agent: connected to \"glove-mcp\""),
        "{text}"
    );
    assert_eq!(
        agent[1], "agent: tools I am shown: echo, read_file",
        "{text}"
    );
    assert!(
        agent[2].ends_with("-> Echo: hello from the sandbox"),
        "{text}"
    );
    assert!(
        agent[3].ends_with("-> refused [mcp_argument_refused]"),
        "{text}"
    );
    assert!(
        agent[4].ends_with("-> a note on the host, read through the mediator"),
        "{text}"
    );
    assert!(
        agent[5].ends_with("-> refused [mcp_argument_refused]"),
        "{text}"
    );
    assert!(agent[6].ends_with("-> refused [mcp_tool_denied]"), "{text}");
    // The audit listing: every call, in order, with its verdict.
    let calls: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" tools/call "))
        .collect();
    assert_eq!(calls.len(), 5, "{text}");
    for (line, want) in calls.iter().zip([
        "allowed",
        "DENIED mcp_argument_refused",
        "allowed",
        "DENIED mcp_argument_refused",
        "DENIED mcp_tool_denied",
    ]) {
        assert!(line.contains(want), "{line} (wanted {want}): {text}");
    }
    // Nothing is left behind in the temporary directory's place.
    let dir = text
        .lines()
        .find_map(|l| l.strip_prefix("glove run demo: profile "))
        .and_then(|p| Path::new(p).parent().map(Path::to_path_buf))
        .expect("the profile's directory");
    assert!(dir.starts_with(std::env::temp_dir()), "{}", dir.display());
    assert!(!dir.exists(), "{} was left behind", dir.display());

    // --json: glove run's outcome record, with the mediator's counts.
    let out = glove(As::Caller, &["run", "demo", "--json"], None);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Standard output is the record alone; the agent spoke on stderr.
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["exit"]["code"], 0, "{v}");
    assert_eq!(v["mcp"]["denied"], 3, "{v}");
    // initialize, tools/list and the two calls.
    assert_eq!(v["mcp"]["allowed"], 4, "{v}");
    // The demo agent gives the relay socket pairs: handed over.
    assert_eq!(v["mcp"]["connections"]["handed_over"], 1, "{v}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("agent: tools I am shown: echo, read_file"),
        "{err}"
    );
    assert_eq!(v["mcp"]["audit_failed"], false, "{v}");
}

/// `glove run --workspace` is `glove exec`'s retained workspace with the
/// mediator beside it: the command's edits stay in the stage and the
/// outcome record names it.
#[test]
fn glove_run_keeps_its_workspace_for_review() {
    let Some(nm) = ready() else {
        return;
    };
    if !common::need(common::is_root(), "retained workspaces need root") {
        return;
    }
    let src = safe_tempdir();
    std::fs::write(src.path().join("a.txt"), "alpha\n").expect("write");
    let s = setup(&[everything(&nm, json!([{"name": "echo"}]))]);
    let dir = src.path().display().to_string();
    let (v, _, out) = run(
        &s,
        &["--workspace", &dir, "--disk", "64M"],
        &["/bin/sh", "-c", "echo beta > a.txt && echo new > b.txt"],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(v["workspace"]["state"], "frozen", "{v}");
    assert_eq!(v["workspace"]["changed"], true, "{v}");
    assert_eq!(
        std::fs::read_to_string(src.path().join("a.txt")).expect("a"),
        "alpha\n"
    );
    let session = v["workspace"]["session_id"].as_str().expect("session");
    let state = s.dir.path().join("state");
    let stat = glove_with_env(
        As::Caller,
        &["diff", session, "--stat"],
        None,
        &[("XDG_STATE_HOME", state.as_os_str())],
    );
    let text = String::from_utf8_lossy(&stat.stdout).into_owned();
    assert!(text.contains("a.txt") && text.contains("b.txt"), "{text}");
    let rm = glove_with_env(
        As::Caller,
        &["stages", "rm", session],
        None,
        &[("XDG_STATE_HOME", state.as_os_str())],
    );
    assert!(rm.status.success());
}
