//! `glove run demo`: a contained agent whose MCP tool calls are mediated,
//! in one command, with nothing to install.
//!
//! In a new private temporary directory it writes a file to read, an MCP
//! profile and nothing else. The profile's one upstream, `demo`, is this
//! same binary as a small stdio MCP server (`glove mcp-demo-server`, on the
//! host like every upstream) with three tools: `echo`, `read_file` and
//! `delete_files` (which the policy does not allow; it only says what it
//! would do). It then runs
//! `glove run` with that profile, a new audit journal and a new pin file,
//! and as the contained command the scripted agent `glove mcp-demo-agent`
//! (the binary the sandbox already has at `/run/glove/bin/glove`). The
//! agent starts its stdio server the way a harness does, from the relay
//! `glove run` hands it, lists the tools it is shown, and makes five calls:
//! two that are allowed and three that the policy refuses (an argument
//! over its length rule, a path climbing out of the root, a tool that is
//! not allowed). Last, the audit journal is shown (`glove audit show`).
//! Everything is removed at the end.

use glove_mcp::frame::{self, Id, Message, RpcError};
use serde_json::{json, Map, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// The note the agent reads through the `read_file` tool.
const NOTE: &str = "a note on the host, read through the mediator\n";

/// Longest line either demo peer reads (the mediator's own frame bound).
const MAX_LINE: usize = 1 << 20;

/// The demo's directory, removed when dropped.
struct Dir(crate::demo::TempDir);

impl Dir {
    fn path(&self) -> &Path {
        &self.0 .0
    }
}

fn fail(msg: impl std::fmt::Display) -> i32 {
    eprintln!("glove run demo: {msg}");
    1
}

/// `glove run demo`.
pub fn run(json_out: bool) -> i32 {
    let Ok(glove) = std::env::current_exe() else {
        return fail("cannot find this glove binary");
    };
    let dir = match crate::demo::TempDir::with_prefix("glove-run-demo-") {
        Ok(d) => d,
        Err(e) => return fail(format!("temporary directory: {e}")),
    };
    let dir = Dir(dir);
    let root = dir.path().join("files");
    let setup = std::fs::create_dir(&root)
        .and_then(|()| std::fs::write(root.join("notes.txt"), NOTE))
        .and_then(|()| std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o700)));
    if let Err(e) = setup {
        return fail(format!("setting up {}: {e}", dir.path().display()));
    }
    let roots = root.display().to_string();
    let profile = json!({
        "schema_version": 1,
        "servers": [{
            "server_id": "demo",
            "command": {
                "path": glove.display().to_string(),
                "arguments": ["mcp-demo-server", "--root", roots],
                "environment": [],
                "working_directory": "/",
            },
            "tools": [
                {"name": "echo", "arguments": {"message": {"required": true, "length": {"max": 64}}}},
                {"name": "read_file", "arguments": {"path": {"required": true, "path": {"roots": [roots], "no_symlinks": true}}}},
            ],
        }],
    });
    let profile_path = dir.path().join("profile.json");
    let written = std::fs::write(&profile_path, profile.to_string())
        .and_then(|()| std::fs::set_permissions(&profile_path, PermissionsExt::from_mode(0o600)));
    if let Err(e) = written {
        return fail(format!("writing the profile: {e}"));
    }
    let audit = dir.path().join("audit.journal");
    if !json_out {
        println!("glove run demo: profile {}", profile_path.display());
        println!("  upstream `demo` (this glove as a stdio MCP server, on the host): echo, read_file, delete_files");
        println!("  allowed: echo (message of at most 64 characters), read_file (paths under {roots}, no links)");
        println!("  the contained agent: /run/glove/bin/glove mcp-demo-agent");
        println!();
    }
    let mut cmd = Command::new(&glove);
    cmd.arg("run")
        .arg("--profile")
        .arg(&profile_path)
        .arg("--audit-journal")
        .arg(&audit)
        .arg("--pins")
        .arg(dir.path().join("pins.json"));
    if json_out {
        cmd.arg("--json");
    }
    let status = cmd
        .args([
            "--",
            super::run::RELAY_EXECUTABLE,
            "mcp-demo-agent",
            "--root",
            &roots,
        ])
        .status();
    let code = match status {
        Ok(s) => s.code().unwrap_or(1),
        Err(e) => return fail(format!("cannot run glove run: {e}")),
    };
    if code != 0 {
        return fail(format!("glove run ended with {code}"));
    }
    if !json_out {
        println!();
        println!("glove run demo: the audit journal (glove audit show --journal FILE)");
        let shown = Command::new(&glove)
            .args(["audit", "show", "--journal"])
            .arg(&audit)
            .status();
        if !shown.is_ok_and(|s| s.success()) {
            return fail("glove audit show failed");
        }
    }
    0
}

/// Reads one newline-terminated line of at most [`MAX_LINE`] bytes;
/// `None` at the end of input (or on a longer line).
fn read_line(r: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut line = Vec::new();
    loop {
        let buf = r.fill_buf().ok()?;
        if buf.is_empty() {
            return None;
        }
        match buf.iter().position(|b| *b == b'\n') {
            Some(i) => {
                line.extend_from_slice(&buf[..i]);
                r.consume(i + 1);
                return Some(line);
            }
            None => {
                let n = buf.len();
                line.extend_from_slice(buf);
                r.consume(n);
            }
        }
        if line.len() > MAX_LINE {
            return None;
        }
    }
}

fn text_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}

fn tool_error(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// `read_file`: the file at `path` when it resolves under `root`. The
/// mediator's path rule refuses anything else before it gets here; this
/// check is only there so that the demo server, run by hand under another
/// profile, is no file reader for the whole host.
fn read_under(root: &Path, path: &str) -> Value {
    let inside = std::fs::canonicalize(root)
        .and_then(|r| std::fs::canonicalize(path).map(|p| p.starts_with(r)))
        .unwrap_or(false);
    if !inside {
        return tool_error("not a file under the demo's root");
    }
    match std::fs::read_to_string(path) {
        Ok(s) => text_result(&s),
        Err(e) => tool_error(&format!("cannot read: {e}")),
    }
}

/// `glove mcp-demo-server --root DIR`: the demo's upstream, a stdio MCP
/// server (2025-11-25) with `echo`, `read_file` and `delete_files`
/// (`delete_files` only says what it would do, and `read_file` reads
/// nothing outside DIR). Its policy is the mediator's job.
pub fn server(root: &Path) -> i32 {
    let tools = json!([
        {"name": "echo", "description": "Echoes the message back.",
         "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}},
        {"name": "read_file", "description": "Reads a text file.",
         "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
        {"name": "delete_files", "description": "Deletes every file under the root.",
         "inputSchema": {"type": "object", "properties": {}}},
    ]);
    let mut input = BufReader::new(std::io::stdin().lock());
    let mut out = std::io::stdout().lock();
    while let Some(line) = read_line(&mut input) {
        let Ok(Message::Request { id, method, params }) = frame::decode(&line) else {
            continue;
        };
        let params = params.unwrap_or_default();
        let arg = |k: &str| {
            params
                .get("arguments")
                .and_then(|a| a.get(k))
                .and_then(Value::as_str)
        };
        let reply = match method.as_str() {
            "initialize" => Ok(json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "glove-demo", "version": env!("CARGO_PKG_VERSION")},
            })),
            "ping" => Ok(json!({})),
            "tools/list" => Ok(json!({"tools": tools})),
            "tools/call" => Ok(match params.get("name").and_then(Value::as_str) {
                Some("echo") => text_result(&format!("Echo: {}", arg("message").unwrap_or(""))),
                Some("read_file") => read_under(root, arg("path").unwrap_or("")),
                Some("delete_files") => {
                    text_result(&format!("would delete everything under {}", root.display()))
                }
                _ => tool_error("no such tool"),
            }),
            _ => Err(RpcError {
                code: -32601,
                message: "method not found".into(),
                data: None,
            }),
        };
        let bytes = match reply {
            Ok(v) => frame::encode_result(&id, v),
            Err(e) => frame::encode_error(&id, &e),
        };
        if out
            .write_all(&bytes)
            .and_then(|()| out.write_all(b"\n"))
            .and_then(|()| out.flush())
            .is_err()
        {
            break;
        }
    }
    0
}

/// The demo agent's connection to its stdio MCP server.
struct Peer {
    child: std::process::Child,
    to: std::process::ChildStdin,
    from: BufReader<std::process::ChildStdout>,
    next: i64,
}

impl Peer {
    fn send(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.to
            .write_all(bytes)
            .and_then(|()| self.to.write_all(b"\n"))
            .and_then(|()| self.to.flush())
            .map_err(|e| format!("writing to the relay: {e}"))
    }

    /// Sends a request and waits for its answer: the result, or the error.
    fn call(&mut self, method: &str, params: Value) -> Result<Result<Value, RpcError>, String> {
        self.next += 1;
        let id = Id::Int(self.next);
        let params: Option<Map<String, Value>> = params.as_object().cloned();
        self.send(&frame::encode_request(&id, method, params))?;
        loop {
            let line = read_line(&mut self.from).ok_or("the relay closed")?;
            match frame::decode(&line) {
                Ok(Message::Response { id: got, result }) if got == id => return Ok(Ok(result)),
                Ok(Message::Error { id: got, error }) if got == id => return Ok(Err(error)),
                // Notifications (a changed tool list, say) are not for this demo.
                _ => {}
            }
        }
    }
}

/// The text of a tool result's first content block.
fn first_text(v: &Value) -> String {
    v["content"][0]["text"]
        .as_str()
        .unwrap_or("")
        .trim_end()
        .to_owned()
}

/// `glove mcp-demo-agent --root DIR`, inside the sandbox of `glove run
/// demo`: a scripted agent. It runs `/run/glove/bin/glove mcp-relay demo`
/// as its stdio MCP server, as a harness's configuration would, and prints
/// one line per step.
pub fn agent(root: &str) -> i32 {
    let spawned = Command::new(super::run::RELAY_EXECUTABLE)
        .args(["mcp-relay", "demo"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return fail(format!("cannot start the relay: {e}")),
    };
    let (Some(to), Some(from)) = (child.stdin.take(), child.stdout.take()) else {
        return fail("the relay has no pipes");
    };
    let mut peer = Peer {
        child,
        to,
        from: BufReader::new(from),
        next: 0,
    };
    let r = script(&mut peer, root);
    drop(peer.to);
    let _ = peer.child.wait();
    match r {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

fn script(p: &mut Peer, root: &str) -> Result<(), String> {
    let init = p.call(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "glove-demo-agent", "version": env!("CARGO_PKG_VERSION")}}),
    )?;
    let init = init.map_err(|e| format!("initialize refused: {}", e.message))?;
    p.send(&frame::encode_notification(
        "notifications/initialized",
        None,
    ))?;
    println!(
        "agent: connected to {:?} (protocol {})",
        init["serverInfo"]["name"].as_str().unwrap_or("?"),
        init["protocolVersion"].as_str().unwrap_or("?")
    );
    let listed = p.call("tools/list", json!({}))?.map_err(|e| e.message)?;
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .collect();
    println!("agent: tools I am shown: {}", names.join(", "));
    let long = "x".repeat(100);
    let calls = [
        ("echo", json!({"message": "hello from the sandbox"})),
        ("echo", json!({"message": long})),
        ("read_file", json!({"path": format!("{root}/notes.txt")})),
        (
            "read_file",
            json!({"path": format!("{root}/../../../etc/passwd")}),
        ),
        ("delete_files", json!({})),
    ];
    for (tool, args) in calls {
        let shown = args.to_string();
        let shown = if shown.chars().count() > 60 {
            format!("{}…", shown.chars().take(57).collect::<String>())
        } else {
            shown
        };
        let answer = p.call("tools/call", json!({"name": tool, "arguments": args}))?;
        match answer {
            Ok(v) => println!("agent: {tool} {shown} -> {}", first_text(&v)),
            Err(e) => println!(
                "agent: {tool} {shown} -> refused [{}]",
                e.data
                    .as_ref()
                    .and_then(|d| d["glove_code"].as_str())
                    .unwrap_or("upstream")
            ),
        }
    }
    Ok(())
}
