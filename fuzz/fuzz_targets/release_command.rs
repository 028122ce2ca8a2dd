//! The release command the sandbox agent decodes before its execve (counts,
//! then NUL-terminated strings): never panics, bounded, and whatever decodes
//! re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    glove_sandbox::launch::fuzz_release_command(data);
});
