//! Bytes as `/proc/self/stat`, read by the sandbox init to find its own
//! argument area (fields 48 and 49): never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    glove_sandbox::launch::fuzz_proc_stat(data);
});
