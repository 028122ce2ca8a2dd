//! A blocking client for `gloved`: connect, mutual handshake, one call at a
//! time. Plain `std` (no async runtime), so the single-threaded `glove`
//! binary can use it.
//!
//! ```no_run
//! use glove_bin::control::client::Client;
//! let mut c = Client::connect(&glove_bin::control::config::default_runtime_dir())?;
//! let caps = c.call("capabilities", serde_json::json!({}))?;
//! # Ok::<(), glove_bin::control::client::ClientError>(())
//! ```

use super::auth::{mac_matches, parse_hex32, random_bytes, BootstrapSecret, Nonce, SECRET_FILE};
use super::config::{OWNER_SOCKET_FILE, SOCKET_FILE};
use super::frame;
use super::protocol::{self, PROTOCOL_VERSION};
use crate::protected::{self, Requirements};
use glove_types::canon;
use glove_types::codes::control::*;
use glove_types::codes::file::FILE_NOT_FOUND;
use glove_types::digest::to_hex;
use glove_types::{ErrorCode, Rejection};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// How long the client waits for the answer to a request, and for any one
/// notification until [`Client::set_read_timeout`] says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the client waits for the answer to `start_session`. A start
/// legitimately takes longer than any other request: the service waits up to
/// 60 s for its launcher alone, then for the egress proxy and every MCP
/// upstream the plan names. A client that gave up first would report a
/// start as failed while the session went on to run.
pub const START_TIMEOUT: Duration = Duration::from_secs(180);

/// How long the client waits for each answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnswerBounds {
    /// Any request but `start_session`.
    pub request: Duration,
    /// `start_session`.
    pub start: Duration,
}

impl Default for AnswerBounds {
    fn default() -> Self {
        AnswerBounds {
            request: DEFAULT_TIMEOUT,
            start: START_TIMEOUT,
        }
    }
}

impl AnswerBounds {
    fn for_method(&self, method: &str) -> Duration {
        if method == "start_session" {
            self.start
        } else {
            self.request
        }
    }
}

/// What a failed socket read means: a read timeout (`EAGAIN` from
/// `SO_RCVTIMEO`) is no answer in time, not a closed connection.
fn read_failed(e: &std::io::Error, waited_for: &str) -> ClientError {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => local(
            CONTROL_TIMEOUT,
            format!("no {waited_for} from the service in time; the connection is given up"),
        ),
        std::io::ErrorKind::UnexpectedEof => local(
            CONTROL_CONNECTION_CLOSED,
            format!("the service closed the connection before the {waited_for} came"),
        ),
        _ => local(CONTROL_CONNECTION_CLOSED, format!("socket: {e}")),
    }
}

/// A failed call.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientError {
    /// Something failed on this side (connect, secret, I/O, a bad reply).
    Local(Rejection),
    /// The service answered with an error.
    Remote {
        /// The JSON-RPC code.
        rpc_code: i64,
        /// The stable code the service sent (`error.data.code`).
        code: String,
        /// The service's message.
        message: String,
        /// Where in the params, if said.
        location: String,
    },
}

impl ClientError {
    /// The stable code as a string.
    pub fn code(&self) -> &str {
        match self {
            ClientError::Local(r) => r.code().as_str(),
            ClientError::Remote { code, .. } => code,
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        match self {
            ClientError::Local(r) => r.message(),
            ClientError::Remote { message, .. } => message,
        }
    }

    /// The location (may be empty).
    pub fn location(&self) -> &str {
        match self {
            ClientError::Local(r) => r.location(),
            ClientError::Remote { location, .. } => location,
        }
    }
}

impl core::fmt::Display for ClientError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.location().is_empty() {
            write!(f, "{}", self.message())
        } else {
            write!(f, "{}: {}", self.location(), self.message())
        }
    }
}

impl std::error::Error for ClientError {}

impl From<Rejection> for ClientError {
    fn from(r: Rejection) -> Self {
        ClientError::Local(r)
    }
}

fn local(code: ErrorCode, msg: impl Into<String>) -> ClientError {
    ClientError::Local(Rejection::new(code, msg))
}

/// What a person can do when the service is not there.
pub const UNREACHABLE_HINT: &str =
    "is gloved running? try `glove daemon status`, or pass --runtime-dir";

/// The socket did not answer (or, when gloved is stopped, its secret is
/// gone): what happened, and the hint.
fn unreachable(code: ErrorCode, what: String) -> ClientError {
    local(code, format!("{what}; {UNREACHABLE_HINT}"))
}

fn socket(path: &Path) -> Result<UnixStream, ClientError> {
    UnixStream::connect(path).map_err(|e| {
        let what = format!("cannot connect to {}: {e}", path.display());
        unreachable(CONTROL_UNREACHABLE, what)
    })
}

fn secret_for_client(runtime_dir: &Path) -> Result<BootstrapSecret, ClientError> {
    read_secret(runtime_dir).map_err(|r| match r.code() {
        FILE_NOT_FOUND => unreachable(FILE_NOT_FOUND, r.message().to_owned()),
        _ => r.into(),
    })
}

/// An authenticated connection.
#[derive(Debug)]
pub struct Client {
    stream: UnixStream,
    next_id: u64,
    max_frame_bytes: u32,
    /// Notifications (`output`, `session_ended`, …) read while waiting for
    /// an answer, in arrival order.
    notifications: std::collections::VecDeque<Value>,
    /// How long each call waits for its answer.
    bounds: AnswerBounds,
    /// The read timeout for notifications, restored after each call.
    notification_timeout: Option<Duration>,
    /// Set when a read failed part-way: the stream may be inside a frame,
    /// so nothing more is read from it.
    broken: Option<ClientError>,
}

/// Reads the bootstrap secret from `runtime_dir` (a protected file).
pub fn read_secret(runtime_dir: &Path) -> Result<BootstrapSecret, Rejection> {
    let bytes = protected::read(
        &runtime_dir.join(SECRET_FILE),
        Requirements {
            max_bytes: 128,
            mode: 0o600,
        },
    )?;
    BootstrapSecret::parse_file(&bytes)
}

impl Client {
    /// Connects to `runtime_dir/gloved.sock` and authenticates with the
    /// secret in `runtime_dir/bootstrap-secret`.
    pub fn connect(runtime_dir: &Path) -> Result<Client, ClientError> {
        Client::connect_as(runtime_dir, None)
    }

    /// Like [`Client::connect`], presenting a client label (sessions this
    /// client starts can only be driven by the same label).
    pub fn connect_as(runtime_dir: &Path, client_id: Option<&str>) -> Result<Client, ClientError> {
        let secret = secret_for_client(runtime_dir)?;
        let path = runtime_dir.join(SOCKET_FILE);
        let stream = socket(&path)?;
        Client::over_as(stream, &secret, random_bytes()?, client_id)
    }

    /// Connects to the owner socket, `runtime_dir/owner.sock` (the same
    /// handshake; the service answers the stage methods only here).
    pub fn connect_owner(runtime_dir: &Path) -> Result<Client, ClientError> {
        let secret = secret_for_client(runtime_dir)?;
        let path = runtime_dir.join(OWNER_SOCKET_FILE);
        let stream = socket(&path)?;
        Client::over_as(stream, &secret, random_bytes()?, None)
    }

    /// Authenticates over an already connected stream with a given client
    /// nonce (tests use this to replay one).
    pub fn over(
        stream: UnixStream,
        secret: &BootstrapSecret,
        client_nonce: Nonce,
    ) -> Result<Client, ClientError> {
        Client::over_as(stream, secret, client_nonce, None)
    }

    /// [`Client::over`] with an optional client label.
    pub fn over_as(
        stream: UnixStream,
        secret: &BootstrapSecret,
        client_nonce: Nonce,
        client_id: Option<&str>,
    ) -> Result<Client, ClientError> {
        let io = |e: std::io::Error| local(CONTROL_CONNECTION_CLOSED, format!("socket: {e}"));
        stream.set_read_timeout(Some(DEFAULT_TIMEOUT)).map_err(io)?;
        stream
            .set_write_timeout(Some(DEFAULT_TIMEOUT))
            .map_err(io)?;
        let mut c = Client {
            stream,
            next_id: 1,
            max_frame_bytes: super::limits::Limits::default().max_frame_bytes,
            notifications: std::collections::VecDeque::new(),
            bounds: AnswerBounds::default(),
            notification_timeout: Some(DEFAULT_TIMEOUT),
            broken: None,
        };
        let hello = c.read_message()?;
        let server_nonce = hello
            .get("method")
            .and_then(Value::as_str)
            .filter(|m| *m == "hello")
            .and_then(|_| hello.pointer("/params/server_nonce"))
            .and_then(Value::as_str)
            .and_then(parse_hex32)
            .ok_or_else(|| {
                protocol_violation("the service did not open with hello and a server nonce")
            })?;
        if hello
            .pointer("/params/protocol_version")
            .and_then(Value::as_u64)
            != Some(PROTOCOL_VERSION)
        {
            return Err(protocol_violation(
                "the service speaks another protocol version",
            ));
        }
        let mac = secret.client_mac(&server_nonce, &client_nonce);
        let mut params = json!({"client_nonce": to_hex(&client_nonce), "client_mac": to_hex(&mac)});
        if let (Some(id), Some(m)) = (client_id, params.as_object_mut()) {
            m.insert("client_id".into(), json!(id));
        }
        let result = c.call("authenticate", params)?;
        let proof = result
            .get("server_mac")
            .and_then(Value::as_str)
            .and_then(parse_hex32)
            .ok_or_else(|| protocol_violation("the handshake answer has no server_mac"))?;
        if !mac_matches(&secret.server_mac(&server_nonce, &client_nonce), &proof) {
            return Err(local(
                AUTH_SERVER_PROOF_INVALID,
                "the service could not prove it holds the bootstrap secret",
            ));
        }
        Ok(c)
    }

    /// Sends raw bytes as one frame (tests).
    pub fn send_raw_frame(&mut self, payload: &[u8]) -> Result<(), ClientError> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        let f = frame::encode(payload, u32::MAX)?;
        self.stream
            .write_all(&f)
            .map_err(|e| local(CONTROL_CONNECTION_CLOSED, format!("socket: {e}")))
    }

    /// Reads one message within the current read timeout. A timeout is
    /// `control_timeout`, an end of stream `control_connection_closed`;
    /// either leaves the client broken (the stream may be mid-frame), and
    /// every later read or call fails with the same error.
    pub fn read_message(&mut self) -> Result<Value, ClientError> {
        self.read_message_for("message")
    }

    fn read_message_for(&mut self, waited_for: &str) -> Result<Value, ClientError> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        let mut h = [0u8; frame::HEADER_LEN];
        let read = self
            .stream
            .read_exact(&mut h)
            .map_err(|e| read_failed(&e, waited_for))
            .and_then(|()| Ok(frame::payload_len(h, self.max_frame_bytes)?))
            .and_then(|len| {
                let mut buf = vec![0u8; len];
                self.stream
                    .read_exact(&mut buf)
                    .map_err(|e| read_failed(&e, waited_for))?;
                Ok(buf)
            });
        let buf = match read {
            Ok(buf) => buf,
            Err(e) => {
                self.broken = Some(e.clone());
                return Err(e);
            }
        };
        canon::parse_strict(&buf, self.max_frame_bytes as usize)
            .map_err(|r| protocol_violation(&format!("unreadable reply: {}", r.message())))
    }

    /// Sets how long each call waits for its answer.
    pub fn set_answer_bounds(&mut self, bounds: AnswerBounds) {
        self.bounds = bounds;
    }

    /// The next notification: one kept while waiting for an answer, or the
    /// next message read (which must then be a notification).
    pub fn next_notification(&mut self) -> Result<Value, ClientError> {
        if let Some(n) = self.notifications.pop_front() {
            return Ok(n);
        }
        let m = self.read_message()?;
        if m.get("id").is_some() || m.get("method").is_none() {
            return Err(protocol_violation("expected a notification"));
        }
        Ok(m)
    }

    /// Sets the read timeout for notifications (attach streams wait longer
    /// than requests; `None` waits as long as the stream lasts). A call
    /// waits for its answer by its own bound ([`AnswerBounds`]) and then
    /// puts this one back.
    pub fn set_read_timeout(&mut self, t: Option<std::time::Duration>) -> Result<(), ClientError> {
        self.stream
            .set_read_timeout(t)
            .map_err(|e| local(CONTROL_CONNECTION_CLOSED, format!("socket: {e}")))?;
        self.notification_timeout = t;
        Ok(())
    }

    /// Calls `method` and returns its result, waiting for the answer as
    /// long as the method's bound says (notifications that arrive first are
    /// kept and do not extend it).
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, ClientError> {
        let deadline = std::time::Instant::now() + self.bounds.for_method(method);
        let reply = self.call_until(method, params, deadline);
        let restored = self
            .stream
            .set_read_timeout(self.notification_timeout)
            .map_err(|e| local(CONTROL_CONNECTION_CLOSED, format!("socket: {e}")));
        let reply = reply?;
        restored?;
        Ok(reply)
    }

    fn call_until(
        &mut self,
        method: &str,
        params: Value,
        deadline: std::time::Instant,
    ) -> Result<Value, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        self.send_raw_frame(&protocol::to_bytes(&protocol::request(id, method, params)))?;
        let waited_for = format!("answer to {method}");
        let reply = loop {
            // A zero timeout would mean "block forever" to the socket.
            let left = deadline
                .saturating_duration_since(std::time::Instant::now())
                .max(Duration::from_millis(1));
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|e| local(CONTROL_CONNECTION_CLOSED, format!("socket: {e}")))?;
            let m = self.read_message_for(&waited_for)?;
            // After the handshake, a message with a method and no id is a
            // notification of an attached session: keep it for later.
            if method != "authenticate" && m.get("id").is_none() && m.get("method").is_some() {
                self.notifications.push_back(m);
                continue;
            }
            break m;
        };
        if reply.get("id").and_then(Value::as_u64) != Some(id) {
            if let Some(e) = remote_error(&reply) {
                return Err(e);
            }
            return Err(protocol_violation("the reply answers another request"));
        }
        if let Some(e) = remote_error(&reply) {
            return Err(e);
        }
        reply
            .get("result")
            .cloned()
            .ok_or_else(|| protocol_violation("the reply has neither result nor error"))
    }

    /// `capabilities`.
    pub fn capabilities(&mut self) -> Result<Value, ClientError> {
        self.call("capabilities", json!({}))
    }

    /// `validate_plan` with the plan's canonical bytes.
    pub fn validate_plan(
        &mut self,
        plan: &str,
        controller_digest: Option<&str>,
    ) -> Result<Value, ClientError> {
        self.call("validate_plan", plan_params(plan, controller_digest))
    }

    /// `create_session` with the plan's canonical bytes.
    pub fn create_session(
        &mut self,
        plan: &str,
        controller_digest: Option<&str>,
    ) -> Result<Value, ClientError> {
        self.call("create_session", plan_params(plan, controller_digest))
    }

    /// `session_status`.
    pub fn session_status(&mut self, session_id: &str) -> Result<Value, ClientError> {
        self.call("session_status", json!({"session_id": session_id}))
    }

    /// `receipts_page`.
    pub fn receipts_page(
        &mut self,
        after_seq: u64,
        max_records: Option<u64>,
    ) -> Result<Value, ClientError> {
        let mut p = json!({"after_seq": after_seq});
        if let (Some(m), Some(o)) = (max_records, p.as_object_mut()) {
            o.insert("max_records".into(), json!(m));
        }
        self.call("receipts_page", p)
    }

    /// `receipts_ack`.
    pub fn receipts_ack(&mut self, head: &str) -> Result<Value, ClientError> {
        self.call("receipts_ack", json!({"head": head}))
    }
}

fn plan_params(plan: &str, controller_digest: Option<&str>) -> Value {
    let mut p = json!({"plan": plan});
    if let (Some(d), Some(o)) = (controller_digest, p.as_object_mut()) {
        o.insert("controller_plan_digest".into(), json!(d));
    }
    p
}

fn protocol_violation(msg: &str) -> ClientError {
    local(CONTROL_PROTOCOL_VIOLATION, msg)
}

/// The error of a reply, if it is one.
pub fn remote_error(reply: &Value) -> Option<ClientError> {
    let e = reply.get("error")?;
    let s = |p: &str| {
        e.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    Some(ClientError::Remote {
        rpc_code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
        code: s("/data/code"),
        message: s("/message"),
        location: s("/data/location"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client over one end of a socket pair, past the handshake; the
    /// test plays the service on the other end.
    fn paired(bounds: AnswerBounds) -> (Client, UnixStream) {
        let (mine, theirs) = UnixStream::pair().expect("socketpair");
        let mut c = Client {
            stream: mine,
            next_id: 1,
            max_frame_bytes: super::super::limits::Limits::default().max_frame_bytes,
            notifications: std::collections::VecDeque::new(),
            bounds,
            notification_timeout: Some(DEFAULT_TIMEOUT),
            broken: None,
        };
        c.set_read_timeout(Some(DEFAULT_TIMEOUT)).expect("timeout");
        (c, theirs)
    }

    /// The service's side: reads one request and, after `delay`, answers
    /// it with an empty result.
    fn answer_after(mut s: UnixStream, delay: Duration) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            let mut h = [0u8; frame::HEADER_LEN];
            s.read_exact(&mut h).expect("header");
            let len = frame::payload_len(h, u32::MAX).expect("len");
            let mut buf = vec![0u8; len];
            s.read_exact(&mut buf).expect("request");
            let req: Value = serde_json::from_slice(&buf).expect("json");
            std::thread::sleep(delay);
            let reply = json!({"jsonrpc": "2.0", "id": req["id"], "result": {}});
            let f = frame::encode(&protocol::to_bytes(&reply), u32::MAX).expect("frame");
            // The client may have given up and gone: that is the point of
            // one of the tests.
            let _ = s.write_all(&f);
        })
    }

    /// Issue 26, finding 2: a start that takes longer than an ordinary
    /// request is waited for (the service's own launch bound is longer
    /// than the request bound), and a notification timeout set for an
    /// attach stream does not cut it short.
    #[test]
    fn a_slow_start_is_waited_for_by_its_own_bound() {
        let (mut c, peer) = paired(AnswerBounds {
            request: Duration::from_millis(50),
            start: Duration::from_secs(60),
        });
        c.set_read_timeout(Some(Duration::from_millis(50)))
            .expect("timeout");
        let t = answer_after(peer, Duration::from_millis(400));
        let got = c.call("start_session", json!({}));
        t.join().expect("peer");
        assert_eq!(got, Ok(json!({})));
        // The notification timeout is back in force after the call (the
        // kernel rounds it to its clock tick), not the start's bound.
        let back = c.stream.read_timeout().expect("timeout");
        assert!(back.is_some_and(|t| t < Duration::from_secs(1)), "{back:?}");
    }

    /// Issue 26, finding 2: no answer in time is `control_timeout`, not a
    /// closed connection; the client is then broken (the stream may be
    /// mid-frame) and says so again on the next call without reading.
    #[test]
    fn no_answer_in_time_is_a_timeout_not_a_closed_connection() {
        let (mut c, peer) = paired(AnswerBounds {
            request: Duration::from_millis(50),
            start: Duration::from_secs(60),
        });
        let t = answer_after(peer, Duration::from_millis(400));
        let e = c.call("capabilities", json!({})).expect_err("too slow");
        assert_eq!(e.code(), "control_timeout", "{e}");
        assert!(e.message().contains("capabilities"), "{e}");
        t.join().expect("peer");
        let again = c.call("capabilities", json!({})).expect_err("broken");
        assert_eq!(again.code(), "control_timeout", "{again}");
    }

    /// A peer that goes away is a closed connection.
    #[test]
    fn a_peer_that_goes_away_is_a_closed_connection() {
        let (mut c, peer) = paired(AnswerBounds::default());
        drop(peer);
        let e = c.read_message().expect_err("closed");
        assert_eq!(e.code(), "control_connection_closed", "{e}");
    }
}
