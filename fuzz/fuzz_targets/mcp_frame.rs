//! Bytes as one MCP (JSON-RPC 2.0) frame: never panics, every refusal has
//! an `mcp` code, only a request is answered, and an accepted message
//! re-encodes to one line that decodes to itself.
#![no_main]

use glove_mcp::frame::{self, Message};
use glove_types::codes::Area;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match frame::decode(data) {
        Err(r) => assert_eq!(r.code().area(), Area::Mcp),
        Ok(m) => {
            let again = match &m {
                Message::Request { id, method, params } => {
                    frame::encode_request(id, method, params.clone())
                }
                Message::Notification { method, params } => {
                    frame::encode_notification(method, params.clone())
                }
                Message::Response { id, result } => frame::encode_result(id, result.clone()),
                Message::Error { id, error } => frame::encode_error(id, error),
            };
            assert!(!again.contains(&b'\n'));
            assert_eq!(frame::decode(&again), Ok(m));
        }
    }
});
