//! Property tests of every decoder: no input panics, every refusal has a
//! code of the `mcp` area, and what is accepted has one encoding.

use glove_mcp::audit::AuditEvent;
use glove_mcp::frame::{self, Message};
use glove_mcp::pin::PinFile;
use glove_mcp::{Decision, Profile};
use glove_types::codes::mcp::*;
use glove_types::codes::Area;
use glove_types::ids::SessionId;
use glove_types::{ErrorCode, Sha256Digest};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        "[a-z0-9./_ -]{0,12}".prop_map(Value::from),
        Just(Value::from("2.0")),
        Just(Value::from("tools/call")),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("jsonrpc".to_owned()),
                    Just("id".to_owned()),
                    Just("method".to_owned()),
                    Just("params".to_owned()),
                    Just("result".to_owned()),
                    Just("error".to_owned()),
                    Just("code".to_owned()),
                    Just("message".to_owned()),
                    "[a-z]{1,6}",
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn mcp(code: ErrorCode) -> bool {
    code.area() == Area::Mcp
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Arbitrary bytes: no panic; a refusal is an mcp code.
    #[test]
    fn frame_decode_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        if let Err(r) = frame::decode(&bytes) {
            prop_assert!(mcp(r.code()));
        }
    }

    /// JSON-shaped frames: no panic, refusals in the mcp area, only a
    /// request is ever answered, and an accepted message re-encodes to
    /// a frame that decodes to itself.
    #[test]
    fn frame_decode_json(v in json_value()) {
        let bytes = serde_json::to_vec(&v).expect("json");
        match frame::decode(&bytes) {
            Err(r) => {
                prop_assert!(mcp(r.code()));
                if r.reply_to().is_some() {
                    prop_assert!(v.get("method").is_some());
                }
            }
            Ok(m) => {
                let again = match &m {
                    Message::Request { id, method, params } => frame::encode_request(id, method, params.clone()),
                    Message::Notification { method, params } => frame::encode_notification(method, params.clone()),
                    Message::Response { id, result } => frame::encode_result(id, result.clone()),
                    Message::Error { id, error } => frame::encode_error(id, error),
                };
                prop_assert!(!again.contains(&b'\n'));
                prop_assert_eq!(frame::decode(&again), Ok(m));
            }
        }
    }

    /// A valid request with one key doubled anywhere is refused.
    #[test]
    fn frame_duplicates_refused(key in "[a-z]{1,5}", depth in 0usize..3) {
        let mut inner = format!(r#"{{"{key}":1,"{key}":2}}"#);
        for _ in 0..depth {
            inner = format!(r#"{{"x":{inner}}}"#);
        }
        let f = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{inner}}}"#);
        let r = frame::decode(f.as_bytes());
        prop_assert_eq!(r.map_err(|r| r.code()), Err(MCP_FRAME_INVALID));
    }
}

fn decision() -> impl Strategy<Value = Decision> {
    prop_oneof![
        Just(Decision::Allowed),
        Just(Decision::Denied),
        Just(Decision::UpstreamError),
        Just(Decision::Dropped),
        Just(Decision::Pinned),
        Just(Decision::Cancelled),
        Just(Decision::Counted),
    ]
}

fn code_for(d: Decision) -> impl Strategy<Value = Option<ErrorCode>> {
    let set: Vec<Option<ErrorCode>> = match d {
        Decision::Allowed | Decision::Pinned | Decision::Cancelled | Decision::Counted => {
            vec![None]
        }
        Decision::Denied => vec![
            Some(MCP_TOOL_UNKNOWN),
            Some(MCP_TOOL_DENIED),
            Some(MCP_ARGUMENT_REFUSED),
            Some(MCP_PIN_MISMATCH),
            Some(MCP_REQUEST_DENIED),
        ],
        Decision::UpstreamError => vec![
            Some(MCP_UPSTREAM_FAILED),
            Some(MCP_UPSTREAM_TIMEOUT),
            Some(MCP_INPUT_REFUSED),
        ],
        Decision::Dropped => vec![
            Some(MCP_FRAME_INVALID),
            Some(MCP_BATCH_REFUSED),
            Some(MCP_NOTIFICATION_IGNORED),
        ],
    };
    prop::sample::select(set)
}

fn digest() -> impl Strategy<Value = Sha256Digest> {
    any::<[u8; 32]>().prop_map(Sha256Digest::from_bytes)
}

fn event() -> impl Strategy<Value = AuditEvent> {
    decision().prop_flat_map(|d| {
        (
            1u64..1 << 40,
            "[a-z][a-z0-9-]{0,20}",
            prop::option::of("[a-z][a-z0-9.-]{0,10}"),
            prop::option::of("[A-Za-z0-9_./-]{1,40}"),
            prop::option::of("[a-z/]{1,30}"),
            code_for(d),
            prop::option::of(digest()),
            digest(),
            0u64..1 << 50,
            0u64..1 << 50,
        )
            .prop_map(
                move |(seq, sid, server, tool, method, code, args, res, lat, at)| {
                    let result = match d {
                        Decision::Allowed | Decision::Pinned => Some(res),
                        _ => None,
                    };
                    let tool = match d {
                        Decision::Pinned => Some(tool.unwrap_or_else(|| "t".into())),
                        Decision::Dropped | Decision::Counted => None,
                        _ => tool,
                    };
                    let server = match d {
                        Decision::Pinned => Some(server.unwrap_or_else(|| "s".into())),
                        Decision::Counted => None,
                        _ => server,
                    };
                    let (method, args, count) = match d {
                        Decision::Counted => (None, None, Some(lat.max(1))),
                        _ => (method, args, None),
                    };
                    AuditEvent {
                        seq,
                        session_id: SessionId::new(sid).expect("id"),
                        server,
                        tool,
                        method,
                        decision: d,
                        code,
                        arguments_sha256: args,
                        result_sha256: result,
                        latency_ms: lat,
                        started_at_ms: at,
                        count,
                    }
                },
            )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// decode(encode(e)) == e.
    #[test]
    fn audit_event_round_trip(e in event()) {
        let b = e.encode().expect("a valid event encodes");
        prop_assert_eq!(AuditEvent::decode(&b).expect("decodes"), e);
    }

    /// Any accepted bytes re-encode identically; refusals are mcp codes.
    #[test]
    fn audit_event_mutations(e in event(), at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut b = e.encode().expect("valid");
        let i = at.index(b.len());
        b[i] = byte;
        match AuditEvent::decode(&b) {
            Ok(d) => prop_assert_eq!(d.encode().expect("re-encodes"), b),
            Err(r) => prop_assert_eq!(r.code(), MCP_EVENT_INVALID),
        }
    }

    /// Arbitrary bytes as an event.
    #[test]
    fn audit_event_bytes(b in prop::collection::vec(any::<u8>(), 0..200)) {
        match AuditEvent::decode(&b) {
            Ok(d) => prop_assert_eq!(d.encode().expect("re-encodes"), b),
            Err(r) => prop_assert_eq!(r.code(), MCP_EVENT_INVALID),
        }
    }
}

const PROFILE: &str = r#"{"schema_version":1,"servers":[{"server_id":"files",
  "command":{"path":"/usr/bin/node","arguments":["x.js"],"environment":["PATH=/usr/bin"],"working_directory":"/"},
  "tools":[{"name":"read","arguments":{"path":{"required":true,"path":{"roots":["/srv"]}},
                                        "n":{"range":{"min":1,"max":3}},"p":{"pattern":"[a-z]+"}}},
           {"name":"raw","allow_hidden_characters":true,"raw_results":true}],
  "resources":["file:///srv/a"],"prompts":["p"]}],"limits":{"request_timeout_ms":500}}"#;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// A profile with one byte changed: no panic, refusals are
    /// `mcp_profile_invalid`.
    #[test]
    fn profile_mutations(at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut b = PROFILE.as_bytes().to_vec();
        let i = at.index(b.len());
        b[i] = byte;
        if let Err(r) = Profile::decode(&b) {
            prop_assert_eq!(r.code(), MCP_PROFILE_INVALID);
        }
    }

    /// JSON-shaped profiles.
    #[test]
    fn profile_json(v in json_value()) {
        let b = serde_json::to_vec(&v).expect("json");
        if let Err(r) = Profile::decode(&b) {
            prop_assert_eq!(r.code(), MCP_PROFILE_INVALID);
        }
    }

    /// Patterns from anywhere compile within bounds or are refused.
    #[test]
    fn profile_patterns(p in ".{0,40}") {
        let doc = json!({"schema_version":1,"servers":[{"server_id":"s",
            "command":{"path":"/bin/true","working_directory":"/"},
            "tools":[{"name":"t","arguments":{"a":{"pattern":p}}}]}]});
        if let Err(r) = Profile::decode(&serde_json::to_vec(&doc).expect("json")) {
            prop_assert_eq!(r.code(), MCP_PROFILE_INVALID);
        }
    }

    /// Pin files: no panic; refusals are `mcp_pin_file_invalid`; what is
    /// accepted re-encodes to a file that decodes the same.
    #[test]
    fn pin_file_json(v in json_value()) {
        let b = serde_json::to_vec(&v).expect("json");
        match PinFile::decode(&b) {
            Ok(f) => prop_assert_eq!(PinFile::decode(&f.encode()).expect("again"), f),
            Err(r) => prop_assert_eq!(r.code(), MCP_PIN_FILE_INVALID),
        }
    }
}

#[test]
fn the_good_profile_decodes() {
    assert!(Profile::decode(PROFILE.as_bytes()).is_ok());
}
