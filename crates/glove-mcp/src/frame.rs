//! Framing: newline-delimited JSON-RPC 2.0 over a byte stream, the MCP
//! stdio transport, in both directions (agent ↔ mediator, mediator ↔
//! upstream).
//!
//! One frame is one line of at most [`MAX_FRAME_BYTES`] bytes (a trailing
//! `\r` is tolerated, empty lines are skipped); longer lines are discarded
//! up to their newline ([`LineReader`]). [`decode`] is pure and total: it
//! returns one [`Message`] or a [`FrameRejection`] with an `mcp_*` code, and
//! never panics. It refuses:
//!
//! * a line over the bound (`mcp_frame_too_large`);
//! * anything [`crate::json::parse`] refuses — malformed JSON, invalid
//!   UTF-8, a duplicate key at any depth, nesting past 64
//!   (`mcp_frame_invalid`);
//! * an array, i.e. a batch (`mcp_batch_refused`);
//! * a non-object, a `jsonrpc` other than the string `"2.0"`, a member
//!   other than `jsonrpc`, `id`, `method`, `params`, `result`, `error`;
//! * an id that is not a string of at most [`MAX_ID_BYTES`] bytes or an
//!   integer within ±(2^53−1) — `null`, a fraction, an exponent, a bool,
//!   a huge integer;
//! * a method that is empty, longer than [`MAX_METHOD_BYTES`] or not a
//!   string; params that are not an object (MCP has no positional params);
//! * a response without exactly one of `result` and `error`, an error
//!   object other than `{code: integer, message: string, data?}`.
//!
//! [`FrameRejection::reply_to`] carries the id of a rejected frame that
//! was recognisably a *request* with a usable id: the receiver answers it
//! with a JSON-RPC error. Every other rejected frame (no id, a bad id, a
//! notification, a batch, bytes that are not JSON) except a recognisable
//! response is answered with `id: null` by the mediator
//! ([`FrameRejection::answers_null`]; `-32700` when the bytes do not
//! parse, `-32600` otherwise), so an agent is never left waiting on a
//! frame it got wrong; nothing of it is decided, and the mediator audits
//! it as `dropped`. Encoding ([`encode_request`] and friends) goes through
//! `serde_json`, which never writes a raw newline inside a value, so every
//! encoded message is exactly one line.

use crate::json::{self, JsonError};
use glove_types::codes::mcp::*;
use glove_types::ErrorCode;
use serde_json::{Map, Value};
use std::fmt;
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// Longest frame accepted or sent, in bytes (without the newline). The
/// SDK servers exit on a frame over 10 MiB; 4 MiB leaves room.
pub const MAX_FRAME_BYTES: usize = 4 << 20;

/// Longest string id.
pub const MAX_ID_BYTES: usize = 256;

/// Longest method name.
pub const MAX_METHOD_BYTES: usize = 256;

/// Largest integer id magnitude (2^53 − 1).
pub const MAX_ID_INT: i64 = (1 << 53) - 1;

/// A JSON-RPC request id: an integer within ±(2^53−1) or a bounded string.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Id {
    /// An integer id.
    Int(i64),
    /// A string id.
    Str(String),
}

impl Id {
    /// The id as JSON.
    pub fn to_value(&self) -> Value {
        match self {
            Id::Int(i) => Value::from(*i),
            Id::Str(s) => Value::String(s.clone()),
        }
    }

    /// Reads an id; `None` for anything not usable as one.
    pub fn from_value(v: &Value) -> Option<Id> {
        match v {
            Value::Number(n) => n
                .as_i64()
                .filter(|i| i.unsigned_abs() <= MAX_ID_INT.unsigned_abs())
                .map(Id::Int),
            Value::String(s) if s.len() <= MAX_ID_BYTES => Some(Id::Str(s.clone())),
            _ => None,
        }
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::Int(i) => write!(f, "{i}"),
            Id::Str(s) => write!(f, "{s:?}"),
        }
    }
}

/// A JSON-RPC error object.
#[derive(Clone, Debug, PartialEq)]
pub struct RpcError {
    /// The numeric code.
    pub code: i64,
    /// The message.
    pub message: String,
    /// Optional data.
    pub data: Option<Value>,
}

/// One decoded JSON-RPC 2.0 message.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// A request (has an id, expects an answer).
    Request {
        /// Its id.
        id: Id,
        /// Its method.
        method: String,
        /// Its params (an object), if any.
        params: Option<Map<String, Value>>,
    },
    /// A notification (no id, no answer).
    Notification {
        /// Its method.
        method: String,
        /// Its params (an object), if any.
        params: Option<Map<String, Value>>,
    },
    /// A successful response.
    Response {
        /// The id it answers.
        id: Id,
        /// The result.
        result: Value,
    },
    /// An error response.
    Error {
        /// The id it answers.
        id: Id,
        /// The error.
        error: RpcError,
    },
}

/// Why a frame was refused, and whom to answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameRejection {
    code: ErrorCode,
    reply_to: Option<Id>,
    message: String,
    /// The bytes are not JSON the strict parser takes (JSON-RPC's
    /// "parse error").
    unparsed: bool,
    /// The frame was recognisably a response (no `method`, a `result` or
    /// an `error`): never answered.
    response: bool,
}

impl FrameRejection {
    fn new(code: ErrorCode, reply_to: Option<Id>, message: impl Into<String>) -> Self {
        Self {
            code,
            reply_to,
            message: message.into(),
            unparsed: false,
            response: false,
        }
    }

    /// Whether the receiver answers it with an error whose id is `null`
    /// (JSON-RPC's rule when the id cannot be told): every refused frame
    /// that has no usable id and was not recognisably a response.
    pub fn answers_null(&self) -> bool {
        self.reply_to.is_none() && !self.response
    }

    /// The JSON-RPC error code of that answer: `-32700` (parse error)
    /// for bytes that are not JSON the strict parser takes — malformed,
    /// invalid UTF-8, a duplicate key, nesting too deep — and `-32600`
    /// (invalid request) for everything else, a batch included.
    pub fn rpc_code(&self) -> i64 {
        if self.unparsed {
            PARSE_ERROR
        } else {
            INVALID_REQUEST
        }
    }

    /// The stable code (always in the `mcp` area).
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The id of the request to answer with an error, when the frame was a
    /// request with a usable id; `None` means drop (and audit).
    pub fn reply_to(&self) -> Option<&Id> {
        self.reply_to.as_ref()
    }

    /// A path-free description.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for FrameRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

const MEMBERS: &[&str] = &["jsonrpc", "id", "method", "params", "result", "error"];

/// Decodes one frame (without its newline). See the module docs.
pub fn decode(bytes: &[u8]) -> Result<Message, FrameRejection> {
    if bytes.len() > MAX_FRAME_BYTES {
        return Err(FrameRejection::new(
            MCP_FRAME_TOO_LARGE,
            None,
            format!(
                "a frame of {} bytes; the bound is {MAX_FRAME_BYTES}",
                bytes.len()
            ),
        ));
    }
    let value = json::parse(bytes).map_err(|e| {
        let m = match e {
            JsonError::Malformed(_) => "malformed JSON".to_owned(),
            other => other.to_string(),
        };
        FrameRejection {
            unparsed: true,
            ..FrameRejection::new(MCP_FRAME_INVALID, None, m)
        }
    })?;
    let mut obj = match value {
        Value::Object(o) => o,
        Value::Array(_) => {
            return Err(FrameRejection::new(
                MCP_BATCH_REFUSED,
                None,
                "JSON-RPC batches are not allowed",
            ))
        }
        _ => {
            return Err(FrameRejection::new(
                MCP_FRAME_INVALID,
                None,
                "a frame must be a JSON object",
            ))
        }
    };
    let id_value = obj.remove("id");
    let id = id_value.as_ref().and_then(Id::from_value);
    let method = obj.remove("method");
    // Only a request with a usable id is ever answered.
    let reply = match (&method, &id) {
        (Some(_), Some(id)) => Some(id.clone()),
        _ => None,
    };
    let response = method.is_none() && (obj.contains_key("result") || obj.contains_key("error"));
    let bad = |m: &str| FrameRejection {
        response,
        ..FrameRejection::new(MCP_FRAME_INVALID, reply.clone(), m)
    };
    if let Some(k) = obj.keys().find(|k| !MEMBERS.contains(&k.as_str())) {
        let shown: String = k.chars().take(32).collect();
        return Err(bad(&format!("unknown member {shown:?}")));
    }
    match obj.remove("jsonrpc") {
        Some(Value::String(s)) if s == "2.0" => {}
        _ => return Err(bad("`jsonrpc` must be \"2.0\"")),
    }
    if id_value.is_some() && id.is_none() {
        return Err(bad(
            "an id must be a string of at most 256 bytes or an integer within ±(2^53-1)",
        ));
    }
    if let Some(method) = method {
        let method = match method {
            Value::String(s) if !s.is_empty() && s.len() <= MAX_METHOD_BYTES => s,
            _ => return Err(bad("`method` must be a string of 1-256 bytes")),
        };
        if obj.contains_key("result") || obj.contains_key("error") {
            return Err(bad("a request has no `result` or `error`"));
        }
        let params = match obj.remove("params") {
            None => None,
            Some(Value::Object(p)) => Some(p),
            Some(_) => return Err(bad("`params` must be an object")),
        };
        return Ok(match id {
            Some(id) => Message::Request { id, method, params },
            None => Message::Notification { method, params },
        });
    }
    let Some(id) = id else {
        return Err(bad("a response must carry the id it answers"));
    };
    if obj.contains_key("params") {
        return Err(bad("a response has no `params`"));
    }
    match (obj.remove("result"), obj.remove("error")) {
        (Some(result), None) => Ok(Message::Response { id, result }),
        (None, Some(Value::Object(mut e))) => {
            let code = match e.remove("code") {
                Some(Value::Number(n)) => n.as_i64(),
                _ => None,
            };
            let message = match e.remove("message") {
                Some(Value::String(s)) => Some(s),
                _ => None,
            };
            let data = e.remove("data");
            match (code, message, e.is_empty()) {
                (Some(code), Some(message), true) => Ok(Message::Error {
                    id,
                    error: RpcError {
                        code,
                        message,
                        data,
                    },
                }),
                _ => Err(bad(
                    "an error must be {code: integer, message: string, data?}",
                )),
            }
        }
        _ => Err(bad("a response has exactly one of `result` and `error`")),
    }
}

fn envelope(members: Vec<(&str, Value)>) -> Vec<u8> {
    let mut m = Map::new();
    m.insert("jsonrpc".into(), Value::from("2.0"));
    for (k, v) in members {
        m.insert(k.into(), v);
    }
    // Infallible for a `Value`; an empty frame would be skipped.
    serde_json::to_vec(&Value::Object(m)).unwrap_or_default()
}

/// Encodes a request.
pub fn encode_request(id: &Id, method: &str, params: Option<Map<String, Value>>) -> Vec<u8> {
    let mut m = vec![("id", id.to_value()), ("method", Value::from(method))];
    if let Some(p) = params {
        m.push(("params", Value::Object(p)));
    }
    envelope(m)
}

/// Encodes a notification.
pub fn encode_notification(method: &str, params: Option<Map<String, Value>>) -> Vec<u8> {
    let mut m = vec![("method", Value::from(method))];
    if let Some(p) = params {
        m.push(("params", Value::Object(p)));
    }
    envelope(m)
}

/// Encodes a successful response.
pub fn encode_result(id: &Id, result: Value) -> Vec<u8> {
    envelope(vec![("id", id.to_value()), ("result", result)])
}

/// Encodes an error response.
pub fn encode_error(id: &Id, error: &RpcError) -> Vec<u8> {
    envelope(vec![("id", id.to_value()), ("error", error_object(error))])
}

/// Encodes an error response whose id is `null`: the answer to a frame
/// whose id could not be told ([`FrameRejection::answers_null`]).
pub fn encode_error_null(error: &RpcError) -> Vec<u8> {
    envelope(vec![("id", Value::Null), ("error", error_object(error))])
}

fn error_object(error: &RpcError) -> Value {
    let mut e = Map::new();
    e.insert("code".into(), Value::from(error.code));
    e.insert("message".into(), Value::from(error.message.clone()));
    if let Some(d) = &error.data {
        e.insert("data".into(), d.clone());
    }
    Value::Object(e)
}

/// JSON-RPC "parse error".
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC "invalid request".
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC "method not found".
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC "invalid params".
pub const INVALID_PARAMS: i64 = -32602;
/// MCP's `UnsupportedProtocolVersionError` (2026-07-28, as the pinned
/// SDKs of that revision send it).
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// The code drafts of 2026-07-28 used for it; still read from upstreams.
pub const UNSUPPORTED_PROTOCOL_VERSION_DRAFT: i64 = -32004;
/// The server-defined code Glove answers its own refusals with.
pub const GLOVE_REFUSED: i64 = -32001;

/// The JSON-RPC error code the agent sees for a Glove code: `-32600` for
/// frame and protocol refusals, `-32601` for an unknown method, `-32602`
/// for unusable params, an unknown tool or refused arguments, `-32001` for
/// every other refusal or failure. The Glove code itself is always in
/// `data.glove_code`.
pub fn rpc_code(code: ErrorCode) -> i64 {
    let c = code.as_str();
    if c == MCP_METHOD_UNKNOWN.as_str() {
        METHOD_NOT_FOUND
    } else if [MCP_FRAME_INVALID, MCP_FRAME_TOO_LARGE, MCP_PROTOCOL_REFUSED]
        .iter()
        .any(|x| x.as_str() == c)
    {
        INVALID_REQUEST
    } else if [
        MCP_PARAMS_INVALID,
        MCP_TOOL_UNKNOWN,
        MCP_ARGUMENT_REFUSED,
        MCP_SCHEMA_REFUSED,
    ]
    .iter()
    .any(|x| x.as_str() == c)
    {
        INVALID_PARAMS
    } else {
        GLOVE_REFUSED
    }
}

/// The error Glove answers a refusal with: `message` is
/// `glove: <code>: <message>`, `data` is `{"glove_code": <code>}`.
pub fn glove_error(code: ErrorCode, message: &str) -> RpcError {
    let mut data = Map::new();
    data.insert("glove_code".into(), Value::from(code.as_str()));
    RpcError {
        code: rpc_code(code),
        message: format!("glove: {code}: {message}"),
        data: Some(Value::Object(data)),
    }
}

/// One line read by [`LineReader`].
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A frame (without its newline or a trailing `\r`).
    Frame(Vec<u8>),
    /// A line over the bound, discarded; its length in bytes.
    TooLong(usize),
    /// The stream ended.
    Eof,
}

/// Reads newline-delimited frames with a bound, never buffering more than
/// the bound (plus the reader's buffer) for one line.
#[derive(Debug)]
pub struct LineReader<R> {
    inner: R,
    max: usize,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    /// A reader of lines of at most `max` bytes.
    pub fn new(inner: R, max: usize) -> Self {
        Self { inner, max }
    }

    /// The next non-empty line.
    pub async fn next(&mut self) -> std::io::Result<Line> {
        loop {
            match self.one().await? {
                Line::Frame(f) if f.is_empty() => continue,
                other => return Ok(other),
            }
        }
    }

    async fn one(&mut self) -> std::io::Result<Line> {
        let mut acc: Vec<u8> = Vec::new();
        let mut total = 0usize;
        loop {
            let buf = self.inner.fill_buf().await?;
            if buf.is_empty() {
                if total == 0 {
                    return Ok(Line::Eof);
                }
                return Ok(self.finish(acc, total));
            }
            let (take, done) = match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (i, true),
                None => (buf.len(), false),
            };
            if total.saturating_add(take) <= self.max.saturating_add(1) {
                acc.extend_from_slice(&buf[..take]);
            } else {
                acc = Vec::new();
            }
            total = total.saturating_add(take);
            self.inner.consume(if done { take + 1 } else { take });
            if done {
                return Ok(self.finish(acc, total));
            }
        }
    }

    fn finish(&self, mut acc: Vec<u8>, total: usize) -> Line {
        let mut len = total;
        if acc.last() == Some(&b'\r') {
            acc.pop();
            len -= 1;
        }
        if len > self.max {
            Line::TooLong(total)
        } else {
            Line::Frame(acc)
        }
    }
}

#[cfg(test)]
mod tests;
