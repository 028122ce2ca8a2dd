//! What a decision yields: the request it answers, the reply, and the
//! audit facts (decision, code, server, tool, arguments digest).

use crate::audit::Decision;
use crate::frame::{glove_error, Id, RpcError};
use crate::sanitize::{neutralize_value, strip_paths, strip_value};
use crate::upstream::CallError;
use glove_types::codes::mcp::*;
use glove_types::{ErrorCode, Sha256Digest};
use serde_json::{Map, Value};
use std::time::Instant;

/// One agent request being decided.
pub(super) struct Req {
    pub(super) id: Id,
    pub(super) method: String,
    pub(super) params: Map<String, Value>,
    pub(super) modern: bool,
    pub(super) started: Instant,
    pub(super) started_at_ms: u64,
    /// The agent connection it came on (0 for the upstream's own).
    pub(super) conn: u64,
    /// The one server that connection reaches (`None`: all of them).
    pub(super) scope: Option<String>,
}

pub(super) enum Reply {
    Result(Value),
    Error(RpcError),
    Nothing,
}

pub(super) struct Outcome {
    pub(super) reply: Reply,
    pub(super) decision: Decision,
    pub(super) code: Option<ErrorCode>,
    pub(super) server: Option<String>,
    pub(super) tool: Option<String>,
    pub(super) arguments: Option<Sha256Digest>,
}

impl Outcome {
    pub(super) fn allowed(v: Value) -> Outcome {
        Outcome {
            reply: Reply::Result(v),
            decision: Decision::Allowed,
            code: None,
            server: None,
            tool: None,
            arguments: None,
        }
    }
    pub(super) fn denied(code: ErrorCode, message: &str) -> Outcome {
        Outcome {
            reply: Reply::Error(glove_error(code, message)),
            decision: Decision::Denied,
            code: Some(code),
            server: None,
            tool: None,
            arguments: None,
        }
    }
    pub(super) fn on(mut self, server: Option<&str>, tool: Option<&str>) -> Outcome {
        self.server = server.map(str::to_owned);
        self.tool = tool
            .filter(|t| crate::profile::is_tool_name(t))
            .map(str::to_owned);
        self
    }
    pub(super) fn args(mut self, d: Sha256Digest) -> Outcome {
        self.arguments = Some(d);
        self
    }
}

/// The most input requests of one `input_required` result audited one by
/// one.
pub(super) const MAX_INPUT_REQUESTS_AUDITED: usize = 16;

/// Whether a result asks the client for input: `resultType:
/// "input_required"`, or `inputRequests` present whatever its
/// `resultType` (or none, or `"complete"`): such a result is never
/// released.
fn asks_input(m: &Map<String, Value>) -> bool {
    m.get("resultType") == Some(&Value::from("input_required")) || m.contains_key("inputRequests")
}

/// The methods of a result's `inputRequests` (a map of key to request, or
/// a list) when it asks for input ([`asks_input`]), at most
/// [`MAX_INPUT_REQUESTS_AUDITED`]; `None` for a request without a usable
/// method. Empty for any other result.
pub(super) fn input_requests(r: &Result<Value, CallError>) -> Vec<Option<String>> {
    let Ok(Value::Object(v)) = r else {
        return Vec::new();
    };
    if !asks_input(v) {
        return Vec::new();
    }
    let asked: Vec<&Value> = match v.get("inputRequests") {
        Some(Value::Object(m)) => m.values().collect(),
        Some(Value::Array(a)) => a.iter().collect(),
        _ => Vec::new(),
    };
    let methods: Vec<Option<String>> = asked
        .into_iter()
        .take(MAX_INPUT_REQUESTS_AUDITED)
        .map(|q| {
            q.get("method")
                .and_then(Value::as_str)
                .filter(|m| crate::audit::is_method(m))
                .map(str::to_owned)
        })
        .collect();
    // At least one denial is recorded, even for a malformed request set.
    if methods.is_empty() {
        vec![None]
    } else {
        methods
    }
}

/// The outcome of a request forwarded to `server` (see the module docs).
pub(super) fn upstream_outcome(
    r: Result<Value, CallError>,
    server: &str,
    roots: &[String],
    raw: bool,
) -> Outcome {
    match r {
        Ok(Value::Object(m)) if asks_input(&m) => {
            Outcome {
                decision: Decision::UpstreamError,
                ..Outcome::denied(
                    MCP_INPUT_REFUSED,
                    "the upstream asked the client for input (sampling, elicitation or roots), which the mediator does not provide",
                )
            }
        }
        Ok(Value::Object(m))
            if m
                .get("resultType")
                .is_some_and(|t| t != &Value::from("complete")) =>
        {
            Outcome {
                decision: Decision::UpstreamError,
                ..Outcome::denied(
                    MCP_UPSTREAM_FAILED,
                    "the upstream answered with a result of a type the mediator does not release",
                )
            }
        }
        Ok(Value::Object(mut m)) => {
            m.remove("resultType");
            let mut v = Value::Object(m);
            if v.get("isError") == Some(&Value::Bool(true)) {
                strip_value(&mut v, roots);
            }
            if !raw {
                neutralize_value(&mut v);
            }
            Outcome::allowed(v)
        }
        Ok(_) => Outcome {
            decision: Decision::UpstreamError,
            ..Outcome::denied(
                MCP_UPSTREAM_FAILED,
                "the upstream answered with a non-object result",
            )
        },
        Err(CallError::Rpc(e)) => {
            // Neutralised as a result is: the message reaches the same
            // terminal.
            let mut shown = Value::from(strip_paths(&e.message, roots));
            if !raw {
                neutralize_value(&mut shown);
            }
            let message = format!("upstream {server}: {}", shown.as_str().unwrap_or_default());
            let mut data = Map::new();
            data.insert(
                "glove_code".into(),
                Value::from(MCP_UPSTREAM_ERROR.as_str()),
            );
            Outcome {
                reply: Reply::Error(RpcError {
                    code: e.code,
                    // Never mistaken for Glove's own `glove: <code>: …`.
                    message,
                    data: Some(Value::Object(data)),
                }),
                decision: Decision::UpstreamError,
                code: Some(MCP_UPSTREAM_ERROR),
                server: None,
                tool: None,
                arguments: None,
            }
        }
        Err(CallError::Timeout) => Outcome {
            decision: Decision::UpstreamError,
            ..Outcome::denied(MCP_UPSTREAM_TIMEOUT, "the upstream did not answer in time")
        },
        Err(CallError::Failed(m)) => Outcome {
            decision: Decision::UpstreamError,
            ..Outcome::denied(MCP_UPSTREAM_FAILED, &m)
        },
        Err(CallError::Cancelled) => Outcome {
            reply: Reply::Nothing,
            decision: Decision::Cancelled,
            code: None,
            server: None,
            tool: None,
            arguments: None,
        },
    }
}
