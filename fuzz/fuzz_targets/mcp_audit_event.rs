//! Bytes as an MCP audit event: never panics, and an accepted event is
//! exactly the canonical encoding of the value it decodes to.
#![no_main]

use glove_mcp::AuditEvent;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(e) = AuditEvent::decode(data) {
        assert_eq!(e.encode().ok().as_deref(), Some(data));
    }
});
