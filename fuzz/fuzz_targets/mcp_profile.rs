//! Bytes as an MCP profile: never panics (patterns are compiled within
//! their bounds), and every refusal is `mcp_profile_invalid`.
#![no_main]

use glove_mcp::Profile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(r) = Profile::decode(data) {
        assert_eq!(r.code().as_str(), "mcp_profile_invalid");
    }
});
