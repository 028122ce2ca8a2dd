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
use super::config::SOCKET_FILE;
use super::frame;
use super::protocol::{self, PROTOCOL_VERSION};
use crate::protected::{self, Requirements};
use glove_types::canon;
use glove_types::codes::control::*;
use glove_types::digest::to_hex;
use glove_types::{ErrorCode, Rejection};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// How long the client waits for any one message.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

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

/// An authenticated connection.
#[derive(Debug)]
pub struct Client {
    stream: UnixStream,
    next_id: u64,
    max_frame_bytes: u32,
    /// Notifications (`output`, `session_ended`, …) read while waiting for
    /// an answer, in arrival order.
    notifications: std::collections::VecDeque<Value>,
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
        let secret = read_secret(runtime_dir)?;
        let path = runtime_dir.join(SOCKET_FILE);
        let stream = UnixStream::connect(&path).map_err(|e| {
            local(
                CONTROL_UNREACHABLE,
                format!("cannot connect to {}: {e}", path.display()),
            )
        })?;
        Client::over_as(stream, &secret, random_bytes()?, client_id)
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
        let f = frame::encode(payload, u32::MAX)?;
        self.stream
            .write_all(&f)
            .map_err(|e| local(CONTROL_CONNECTION_CLOSED, format!("socket: {e}")))
    }

    /// Reads one message.
    pub fn read_message(&mut self) -> Result<Value, ClientError> {
        let closed = |e: std::io::Error| local(CONTROL_CONNECTION_CLOSED, format!("socket: {e}"));
        let mut h = [0u8; frame::HEADER_LEN];
        self.stream.read_exact(&mut h).map_err(closed)?;
        let len = frame::payload_len(h, self.max_frame_bytes)?;
        let mut buf = vec![0u8; len];
        self.stream.read_exact(&mut buf).map_err(closed)?;
        canon::parse_strict(&buf, self.max_frame_bytes as usize)
            .map_err(|r| protocol_violation(&format!("unreadable reply: {}", r.message())))
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

    /// Sets the read timeout (attach streams wait longer than requests).
    pub fn set_read_timeout(&mut self, t: Option<std::time::Duration>) -> Result<(), ClientError> {
        self.stream
            .set_read_timeout(t)
            .map_err(|e| local(CONTROL_CONNECTION_CLOSED, format!("socket: {e}")))
    }

    /// Calls `method` and returns its result.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        self.send_raw_frame(&protocol::to_bytes(&protocol::request(id, method, params)))?;
        let reply = loop {
            let m = self.read_message()?;
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
