//! JSON-RPC 2.0 as `gloved` speaks it: strict request parsing, responses,
//! and the one function that maps a rejection to a wire error.
//!
//! A request is decoded in two steps. First the payload goes through the
//! strict JSON decoder (`glove_types::canon::parse_strict`: size bound,
//! UTF-8, duplicate keys at any depth, floats, nesting depth); a failure is
//! a parse error (-32700) carrying the decoder's own code. Then the shape
//! is checked: a single object (an array is a batch and is refused), exactly
//! the members `jsonrpc` (`"2.0"`), `method` (a string), `id` (an integer
//! or a string of at most [`MAX_ID_LEN`] bytes; absent means notification)
//! and `params` (an object; absent means `{}`), nothing else.

use glove_types::canon::{self, MAX_SAFE_INTEGER};
use glove_types::codes::control::*;
use glove_types::codes::json::JSON_TOO_LARGE;
use glove_types::codes::Area;
use glove_types::{ErrorCode, Rejection};
use serde_json::{json, Map, Value};

/// The protocol version reported by `capabilities` and the handshake.
pub const PROTOCOL_VERSION: u64 = 1;

/// Longest string id accepted, in bytes.
pub const MAX_ID_LEN: usize = 128;

/// Longest method name accepted, in bytes.
pub const MAX_METHOD_LEN: usize = 64;

/// JSON-RPC: the payload is not valid JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC: the method is not advertised.
pub const METHOD_NOT_FOUND_RPC: i64 = -32601;
/// JSON-RPC: the parameters are malformed.
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC: the service failed.
pub const INTERNAL_ERROR: i64 = -32603;
/// Glove: the request was refused by a rule (plan, store, receipts).
pub const REFUSED: i64 = -32000;
/// Glove: authentication is missing or failed.
pub const AUTH_ERROR: i64 = -32001;
/// Glove: a service bound was hit (busy, too many connections, shutdown).
pub const LIMIT_ERROR: i64 = -32002;

/// A parsed request.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// The id, `None` for a notification.
    pub id: Option<Value>,
    /// The method name.
    pub method: String,
    /// The parameters (an empty object when absent).
    pub params: Map<String, Value>,
}

/// A wire error: the JSON-RPC code, the stable Glove code, a message and a
/// location inside the params, plus the id of the request it answers.
#[derive(Clone, Debug, PartialEq)]
pub struct RpcError {
    /// The JSON-RPC error code.
    pub rpc_code: i64,
    /// The stable Glove code (`error.data.code` on the wire).
    pub code: ErrorCode,
    /// A human message without host paths.
    pub message: String,
    /// Where in the params the problem is (may be empty).
    pub location: String,
}

impl RpcError {
    /// An error with an explicit JSON-RPC code.
    pub fn new(rpc_code: i64, code: ErrorCode, message: impl Into<String>) -> Self {
        RpcError {
            rpc_code,
            code,
            message: message.into(),
            location: String::new(),
        }
    }

    /// `method_not_found` for `method`.
    pub fn method_not_found(method: &str) -> Self {
        RpcError::new(
            METHOD_NOT_FOUND_RPC,
            METHOD_NOT_FOUND,
            format!("method {method:?} is not advertised by this service"),
        )
    }

    /// Maps a rejection to the wire: the JSON-RPC code follows from the
    /// code's area (the one place this mapping is made).
    pub fn from_rejection(r: &Rejection) -> Self {
        let c = r.code();
        let rpc_code = rpc_code_for(c);
        RpcError {
            rpc_code,
            code: c,
            message: r.message().to_owned(),
            location: r.location().to_owned(),
        }
    }

    /// The error as a response object answering `id`.
    pub fn to_response(&self, id: Option<&Value>) -> Value {
        let mut data = Map::new();
        data.insert("code".into(), Value::String(self.code.as_str().into()));
        if !self.location.is_empty() {
            data.insert("location".into(), Value::String(self.location.clone()));
        }
        json!({
            "jsonrpc": "2.0",
            "id": id.cloned().unwrap_or(Value::Null),
            "error": {"code": self.rpc_code, "message": self.message, "data": data},
        })
    }
}

fn rpc_code_for(c: ErrorCode) -> i64 {
    if c == METHOD_NOT_FOUND {
        METHOD_NOT_FOUND_RPC
    } else if c == CONTROL_INVALID_REQUEST
        || c == CONTROL_BATCH_REFUSED
        || c == CONTROL_FRAME_TOO_LARGE
    {
        INVALID_REQUEST
    } else if c == CONTROL_INVALID_PARAMS {
        INVALID_PARAMS
    } else if c == CONTROL_BUSY || c == CONTROL_TOO_MANY_CONNECTIONS || c == CONTROL_SHUTTING_DOWN {
        LIMIT_ERROR
    } else if c.as_str().starts_with("auth_") {
        AUTH_ERROR
    } else if c == CONTROL_INTERNAL || c.area() == Area::Control {
        INTERNAL_ERROR
    } else {
        REFUSED
    }
}

/// A successful response object.
pub fn result_response(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// A notification object (the server's `hello`).
pub fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// A request object (the client side).
pub fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// Encodes a message canonically (responses only hold strings, integers,
/// booleans and null, so this cannot fail for them).
pub fn to_bytes(v: &Value) -> Vec<u8> {
    canon::to_canonical(v).unwrap_or_else(|_| {
        // Unreachable for the values built here; keep a valid fallback.
        br#"{"error":{"code":-32603,"data":{"code":"control_internal"},"message":"encoding failed"},"id":null,"jsonrpc":"2.0"}"#.to_vec()
    })
}

fn invalid(msg: impl Into<String>) -> RpcError {
    RpcError::new(INVALID_REQUEST, CONTROL_INVALID_REQUEST, msg)
}

/// The `id` of a message, if it has a well-formed one (used to address an
/// error about an otherwise malformed request).
fn usable_id(v: &Value) -> Option<Value> {
    let id = v.as_object()?.get("id")?;
    check_id(id).ok().map(|()| id.clone())
}

fn check_id(id: &Value) -> Result<(), RpcError> {
    match id {
        Value::String(s) if s.len() <= MAX_ID_LEN => Ok(()),
        Value::String(_) => Err(invalid(format!(
            "id strings are at most {MAX_ID_LEN} bytes"
        ))),
        Value::Number(n)
            if n.as_i64()
                .is_some_and(|i| i.unsigned_abs() <= MAX_SAFE_INTEGER) =>
        {
            Ok(())
        }
        _ => Err(invalid("id must be an integer or a string")),
    }
}

/// A message that is not a valid request: the error, and the request's id
/// when one could be read (else the answer's id is null, as JSON-RPC
/// requires).
#[derive(Clone, Debug, PartialEq)]
pub struct BadRequest {
    /// The id to answer, if readable.
    pub id: Option<Value>,
    /// What is wrong.
    pub error: RpcError,
}

impl BadRequest {
    /// The error response.
    pub fn to_response(&self) -> Value {
        self.error.to_response(self.id.as_ref())
    }
}

fn bad(id: Option<Value>, error: RpcError) -> Box<BadRequest> {
    Box::new(BadRequest { id, error })
}

/// Parses one frame payload into a request.
pub fn parse_request(payload: &[u8], max_bytes: usize) -> Result<Request, Box<BadRequest>> {
    let value = canon::parse_strict(payload, max_bytes).map_err(|r| {
        let rpc = if r.code() == JSON_TOO_LARGE {
            INVALID_REQUEST
        } else {
            PARSE_ERROR
        };
        bad(
            None,
            RpcError {
                rpc_code: rpc,
                code: r.code(),
                message: r.message().to_owned(),
                location: r.location().to_owned(),
            },
        )
    })?;
    let id = usable_id(&value);
    let obj = match value {
        Value::Object(m) => m,
        Value::Array(_) => {
            return Err(bad(
                None,
                RpcError::new(
                    INVALID_REQUEST,
                    CONTROL_BATCH_REFUSED,
                    "batch arrays are not accepted; send one request per frame",
                ),
            ))
        }
        _ => return Err(bad(None, invalid("a request must be a JSON object"))),
    };
    shape(obj).map_err(|e| bad(id, e))
}

fn shape(mut obj: Map<String, Value>) -> Result<Request, RpcError> {
    if let Some(k) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "jsonrpc" | "method" | "id" | "params"))
    {
        return Err(invalid(format!("unknown request member {k:?}")));
    }
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid("jsonrpc must be \"2.0\""));
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) if !m.is_empty() && m.len() <= MAX_METHOD_LEN => m,
        Some(Value::String(_)) => {
            return Err(invalid(format!(
                "method must be 1 to {MAX_METHOD_LEN} bytes"
            )))
        }
        _ => return Err(invalid("method must be a string")),
    };
    let id = match obj.remove("id") {
        None => None,
        Some(id) => {
            check_id(&id)?;
            Some(id)
        }
    };
    let params = match obj.remove("params") {
        None => Map::new(),
        Some(Value::Object(p)) => p,
        Some(_) => {
            return Err(RpcError::new(
                INVALID_PARAMS,
                CONTROL_INVALID_PARAMS,
                "params must be an object",
            ))
        }
    };
    Ok(Request { id, method, params })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(s: &str) -> (Option<Value>, RpcError) {
        let b = parse_request(s.as_bytes(), 1 << 20).expect_err("rejected");
        (b.id, b.error)
    }

    #[test]
    fn shapes() {
        let r = parse_request(
            br#"{"jsonrpc":"2.0","id":1,"method":"capabilities"}"#,
            1 << 20,
        )
        .expect("ok");
        assert_eq!(r.method, "capabilities");
        assert_eq!(err("[]").1.code, CONTROL_BATCH_REFUSED);
        assert_eq!(err("{").1.rpc_code, PARSE_ERROR);
        assert_eq!(
            err(r#"{"a":1,"a":2}"#).1.code.as_str(),
            "json_duplicate_key"
        );
        let (id, e) = err(r#"{"jsonrpc":"1.0","id":"x","method":"m"}"#);
        assert_eq!((id, e.code), (Some(json!("x")), CONTROL_INVALID_REQUEST));
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":1.5,"method":"m"}"#)
                .1
                .code
                .as_str(),
            "json_float"
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":1,"method":"m","extra":0}"#)
                .1
                .code,
            CONTROL_INVALID_REQUEST
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}"#)
                .1
                .code,
            CONTROL_INVALID_PARAMS
        );
    }

    #[test]
    fn error_mapping() {
        let r = Rejection::new(glove_types::codes::plan::PLAN_EXPIRED, "old").at("expires_at_ms");
        let e = RpcError::from_rejection(&r);
        assert_eq!(e.rpc_code, REFUSED);
        let v = e.to_response(Some(&json!(3)));
        assert_eq!(v["error"]["data"]["code"], "plan_expired");
        assert_eq!(v["error"]["data"]["location"], "expires_at_ms");
        assert_eq!(rpc_code_for(AUTH_FAILED), AUTH_ERROR);
        assert_eq!(rpc_code_for(METHOD_NOT_FOUND), METHOD_NOT_FOUND_RPC);
    }
}
