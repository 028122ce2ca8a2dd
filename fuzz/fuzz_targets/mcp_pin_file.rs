//! Bytes as an MCP pin file: never panics, every refusal is
//! `mcp_pin_file_invalid`, and an accepted file re-encodes to one that
//! decodes the same.
#![no_main]

use glove_mcp::pin::PinFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match PinFile::decode(data) {
        Ok(f) => assert_eq!(PinFile::decode(&f.encode()).ok(), Some(f)),
        Err(r) => assert_eq!(r.code().as_str(), "mcp_pin_file_invalid"),
    }
});
