//! `glove run demo`'s two MCP peers, with the MCP code they exercise: the
//! upstream (`glove mcp-demo-server`, a small stdio MCP server on the host)
//! and the scripted agent (`glove mcp-demo-agent`, inside the sandbox,
//! which starts its server through the relay as a harness does). Each is a
//! whole subcommand: it reads and prints, and returns the exit status.
//! `glove-bin` only wires them to the command line and sets the demo up.

use crate::frame::{self, Id, Message, RpcError};
use crate::sockets::RELAY_EXECUTABLE;
use serde_json::{json, Map, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};

/// The note the agent reads through the `read_file` tool (the demo writes
/// it under the server's root).
pub const NOTE: &str = "a note on the host, read through the mediator\n";

/// Longest line either demo peer reads (the mediator's own frame bound).
const MAX_LINE: usize = frame::MAX_FRAME_BYTES;
/// Most bytes `read_file` returns.
const MAX_READ: u64 = 1 << 20;

/// `println!` that ignores a closed standard output (`… | head`).
macro_rules! out {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

fn fail(msg: impl std::fmt::Display) -> i32 {
    eprintln!("glove run demo: {msg}");
    1
}

/// Open flags, as the platform numbers them.
mod open_flags {
    pub(super) const NOFOLLOW: i32 = rustix::fs::OFlags::NOFOLLOW.bits() as i32;
    pub(super) const NONBLOCK: i32 = rustix::fs::OFlags::NONBLOCK.bits() as i32;
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

/// `read_file`: at most [`MAX_READ`] bytes of the regular file at `path`
/// when it resolves within `root`. The mediator's path rule refuses
/// anything else before it gets here; this check is only there so that
/// the demo server, run by hand under another profile, is no reader of
/// other files: the resolved path is what is opened, without following a
/// link, without waiting on a FIFO, and checked to be a regular file.
fn read_under(root: &Path, path: &str) -> Value {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let resolved = std::fs::canonicalize(root)
        .and_then(|r| std::fs::canonicalize(path).map(|p| (p.starts_with(&r), p)));
    let Ok((true, p)) = resolved else {
        return tool_error("not a file within the demo's root");
    };
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(open_flags::NOFOLLOW | open_flags::NONBLOCK)
        .open(&p);
    let f = match opened {
        Ok(f) if f.metadata().is_ok_and(|m| m.is_file()) => f,
        _ => return tool_error("not a regular file within the demo's root"),
    };
    let mut s = String::new();
    match f.take(MAX_READ).read_to_string(&mut s) {
        Ok(_) => text_result(&s),
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
    to: UnixStream,
    from: BufReader<UnixStream>,
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
pub fn agent(root: &str, to_stderr: bool) -> i32 {
    // Socket pairs for the server's standard streams, as a Node client
    // gives them: the relay hands them to the mediator (glove_mcp::handoff).
    let pairs = UnixStream::pair().and_then(|a| UnixStream::pair().map(|b| (a, b)));
    let Ok(((to, their_in), (from, their_out))) = pairs else {
        return fail("cannot make the relay's socket pairs");
    };
    let spawned = Command::new(RELAY_EXECUTABLE)
        .args(["mcp-relay", "demo"])
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(their_in)))
        .stdout(Stdio::from(std::os::fd::OwnedFd::from(their_out)))
        .spawn();
    let child = match spawned {
        Ok(c) => c,
        Err(e) => return fail(format!("cannot start the relay: {e}")),
    };
    let mut peer = Peer {
        child,
        to,
        from: BufReader::new(from),
        next: 0,
    };
    let r = script(&mut peer, root, to_stderr);
    let _ = peer.to.shutdown(std::net::Shutdown::Write);
    let _ = peer.child.wait();
    match r {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

fn script(p: &mut Peer, root: &str, to_stderr: bool) -> Result<(), String> {
    let say = |line: String| {
        if to_stderr {
            eprintln!("{line}");
        } else {
            out!("{line}");
        }
    };
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
    say(format!(
        "agent: connected to {:?} (protocol {})",
        init["serverInfo"]["name"].as_str().unwrap_or("?"),
        init["protocolVersion"].as_str().unwrap_or("?")
    ));
    let listed = p.call("tools/list", json!({}))?.map_err(|e| e.message)?;
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .collect();
    say(format!("agent: tools I am shown: {}", names.join(", ")));
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
            Ok(v) => say(format!("agent: {tool} {shown} -> {}", first_text(&v))),
            Err(e) => say(format!(
                "agent: {tool} {shown} -> refused [{}]",
                e.data
                    .as_ref()
                    .and_then(|d| d["glove_code"].as_str())
                    .unwrap_or("upstream")
            )),
        }
    }
    Ok(())
}
