//! The test harness: a mediator over real upstream servers, a test agent
//! speaking JSON-RPC over a tokio duplex, and the audit journal read back.

use glove_journal::JournalSpec;
use glove_mcp::audit::RESULT_DOMAIN;
use glove_mcp::frame::{Line, LineReader};
use glove_mcp::{
    journal_spec, read_events, AuditEvent, Decision, Mediator, MediatorConfig, Profile, Summary,
};
use glove_types::ids::SessionId;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncWriteExt, BufReader, DuplexStream, ReadHalf, WriteHalf};

/// Whether CI demands every test run for real.
fn required() -> bool {
    std::env::var_os("GLOVE_REQUIRE_SANDBOX").is_some_and(|v| v == "1")
}

/// `true` when `ok`; otherwise skips (prints why), or fails under CI.
pub(crate) fn need(ok: bool, what: &str) -> bool {
    if ok {
        return true;
    }
    assert!(!required(), "GLOVE_REQUIRE_SANDBOX=1 but {what}");
    eprintln!("skipping: {what}");
    false
}

/// The `node_modules` with the npm peers (`GLOVE_MCP_SERVERS`), if set.
pub(crate) fn servers() -> Option<PathBuf> {
    let p = std::env::var_os("GLOVE_MCP_SERVERS").map(PathBuf::from);
    let ok = p.as_ref().is_some_and(|p| {
        p.join("@modelcontextprotocol/server-everything/dist/index.js")
            .is_file()
    });
    if need(
        ok,
        "GLOVE_MCP_SERVERS does not name a node_modules with @modelcontextprotocol/server-everything (see mcp/package.json)",
    ) {
        p
    } else {
        None
    }
}

/// Whether node and python3 are there.
pub(crate) fn have_node() -> bool {
    need(
        Path::new("/usr/bin/node").is_file(),
        "/usr/bin/node is missing",
    )
}

/// Whether python3 is there.
pub(crate) fn have_python() -> bool {
    need(
        Path::new("/usr/bin/python3").is_file(),
        "/usr/bin/python3 is missing",
    )
}

/// A server entry for server-everything.
pub(crate) fn everything(nm: &Path, extra: &str) -> String {
    format!(
        r#"{{"server_id":"everything","command":{{"path":"/usr/bin/node",
          "arguments":["{}","stdio"],"environment":["PATH=/usr/bin:/bin"],"working_directory":"/"}}{extra}}}"#,
        nm.join("@modelcontextprotocol/server-everything/dist/index.js")
            .display()
    )
}

/// A server entry for server-filesystem over `root`.
pub(crate) fn filesystem(nm: &Path, root: &str, extra: &str) -> String {
    format!(
        r#"{{"server_id":"files","command":{{"path":"/usr/bin/node",
          "arguments":["{}","{root}"],"environment":["PATH=/usr/bin:/bin"],"working_directory":"/"}}{extra}}}"#,
        nm.join("@modelcontextprotocol/server-filesystem/dist/index.js")
            .display()
    )
}

/// The scripted server (`tests/peers/script_server.py`), marking calls in
/// `mark`.
pub(crate) fn script(id: &str, mark: &Path, modern: bool, extra: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/script_server.py");
    let m = if modern { r#","modern""# } else { "" };
    format!(
        r#"{{"server_id":"{id}","command":{{"path":"/usr/bin/python3",
          "arguments":["-u","{}"{m}],"environment":["MARK_FILE={}"],"working_directory":"/"}}{extra}}}"#,
        path.display(),
        mark.display()
    )
}

/// A whole profile from server entries and optional limits.
pub(crate) fn profile(servers: &[String], limits: &str) -> String {
    let l = if limits.is_empty() {
        String::new()
    } else {
        format!(r#","limits":{limits}"#)
    };
    format!(
        r#"{{"schema_version":1,"servers":[{}]{l}}}"#,
        servers.join(",")
    )
}

/// A private directory (mode 0700) for journals and pins.
pub(crate) fn private_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    d
}

/// The test agent's side of the connection.
pub(crate) struct Agent {
    lines: LineReader<BufReader<ReadHalf<DuplexStream>>>,
    writer: Option<WriteHalf<DuplexStream>>,
    next: i64,
    /// Notifications and stray frames seen while waiting for answers.
    pub(crate) other: VecDeque<Value>,
}

impl Agent {
    /// Sends raw bytes and a newline.
    pub(crate) async fn send_raw(&mut self, b: &[u8]) {
        let w = self.writer.as_mut().expect("open");
        w.write_all(b).await.expect("write");
        w.write_all(b"\n").await.expect("write");
        w.flush().await.expect("flush");
    }

    /// The next frame from the mediator (30 s at most), or `None` at EOF.
    pub(crate) async fn recv(&mut self) -> Option<Value> {
        let line = tokio::time::timeout(Duration::from_secs(30), self.lines.next())
            .await
            .expect("an answer within 30 s")
            .expect("read");
        match line {
            Line::Frame(f) => Some(serde_json::from_slice(&f).expect("the mediator sends JSON")),
            Line::TooLong(_) => panic!("the mediator sent an overlong frame"),
            Line::Eof => None,
        }
    }

    /// Waits for the answer to `id`, keeping everything else in `other`.
    pub(crate) async fn answer(&mut self, id: &Value) -> Value {
        loop {
            let f = self.recv().await.expect("an answer before EOF");
            if f.get("id") == Some(id) && f.get("method").is_none() {
                return f;
            }
            self.other.push_back(f);
        }
    }

    /// Sends a request and waits for its answer (the whole frame).
    pub(crate) async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = json!(self.next);
        let mut f = json!({"jsonrpc":"2.0","id":id,"method":method});
        if !params.is_null() {
            f["params"] = params;
        }
        self.send_raw(&serde_json::to_vec(&f).expect("json")).await;
        self.answer(&id).await
    }

    /// `initialize` in 2025-11-25, then `notifications/initialized`.
    pub(crate) async fn initialize(&mut self) -> Value {
        let r = self
            .request(
                "initialize",
                json!({"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"test","version":"0"}}),
            )
            .await;
        self.send_raw(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        r
    }

    /// `tools/call`; the whole answer.
    pub(crate) async fn call(&mut self, name: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
            .await
    }

    /// The names `tools/list` shows.
    pub(crate) async fn tool_names(&mut self) -> Vec<String> {
        let r = self.request("tools/list", Value::Null).await;
        r["result"]["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|t| t["name"].as_str().expect("name").to_owned())
            .collect()
    }

    /// Closes the agent's writing side.
    pub(crate) async fn close(&mut self) {
        if let Some(mut w) = self.writer.take() {
            let _ = w.shutdown().await;
        }
    }
}

/// The Glove code of an error answer.
pub(crate) fn code(answer: &Value) -> &str {
    answer["error"]["data"]["glove_code"]
        .as_str()
        .unwrap_or_else(|| panic!("not a Glove error: {answer}"))
}

/// The first text item of a result.
pub(crate) fn text(answer: &Value) -> &str {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text result: {answer}"))
}

/// A mediator serving one test agent.
pub(crate) struct Harness {
    /// Holds the journal; removed with the harness.
    _dir: tempfile::TempDir,
    pub(crate) agent: Agent,
    pub(crate) mediator: Arc<Mediator>,
    serving: tokio::task::JoinHandle<()>,
    pub(crate) audit: PathBuf,
    pub(crate) spec: JournalSpec,
}

/// Starts a mediator for `profile` with the default journal bounds.
pub(crate) async fn start(profile: &str) -> Harness {
    start_with(profile, journal_spec(16 << 20, 100_000), None).await
}

/// Starts a mediator with this journal spec and pin file.
pub(crate) async fn start_with(profile: &str, spec: JournalSpec, pins: Option<PathBuf>) -> Harness {
    let dir = private_dir();
    let audit = dir.path().join("mcp.journal");
    let p = Profile::decode(profile.as_bytes()).expect("the test profile is valid");
    let config = MediatorConfig {
        session_id: SessionId::new("test-session").expect("id"),
        audit_path: audit.clone(),
        audit_spec: spec,
        pin_file: pins,
    };
    let mediator = Arc::new(Mediator::start(p, config).await.expect("start"));
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let m = mediator.clone();
    let serving = tokio::spawn(async move {
        m.serve(theirs).await.expect("serve");
    });
    let (r, w) = tokio::io::split(ours);
    let agent = Agent {
        lines: LineReader::new(BufReader::new(r), 16 << 20),
        writer: Some(w),
        next: 0,
        other: VecDeque::new(),
    };
    Harness {
        _dir: dir,
        agent,
        mediator,
        serving,
        audit,
        spec,
    }
}

impl Harness {
    /// The events durable on disk now (the journal is still open).
    pub(crate) fn events_on_disk(&self) -> Vec<AuditEvent> {
        let bytes = std::fs::read(&self.audit).expect("read journal");
        let r = glove_journal::replay_bytes(&bytes, &self.spec, None).expect("replay");
        r.records
            .iter()
            .map(|m| AuditEvent::decode(&bytes[m.payload.clone()]).expect("event"))
            .collect()
    }

    /// Closes the agent, finishes the mediator, reopens the journal.
    pub(crate) async fn finish(mut self) -> (Summary, Vec<AuditEvent>) {
        self.agent.close().await;
        tokio::time::timeout(Duration::from_secs(30), &mut self.serving)
            .await
            .expect("serve ends")
            .expect("serve task");
        let m = Arc::try_unwrap(self.mediator).expect("the only handle");
        let summary = m.finish().await;
        let events = read_events(&self.audit, &self.spec).expect("the journal replays");
        // Every event is numbered from 1 without a gap and belongs to the session.
        for (i, e) in events.iter().enumerate() {
            assert_eq!(e.seq, i as u64 + 1);
            assert_eq!(e.session_id.as_str(), "test-session");
        }
        assert_eq!(summary.journal_records, events.len() as u64);
        (summary, events)
    }
}

/// The events of one decision and method.
pub(crate) fn of<'a>(
    events: &'a [AuditEvent],
    decision: Decision,
    method: &str,
) -> Vec<&'a AuditEvent> {
    events
        .iter()
        .filter(|e| e.decision == decision && e.method.as_deref() == Some(method))
        .collect()
}

/// The code of an event as a string.
pub(crate) fn ecode(e: &AuditEvent) -> &'static str {
    e.code.map(|c| c.as_str()).unwrap_or("")
}

/// The digest the audit records for a released result.
pub(crate) fn result_digest(answer: &Value) -> glove_types::Sha256Digest {
    glove_mcp::json::digest(RESULT_DOMAIN, &answer["result"])
}

/// The lines the script server marked.
pub(crate) fn marks(mark: &Path) -> Vec<String> {
    std::fs::read_to_string(mark)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}
