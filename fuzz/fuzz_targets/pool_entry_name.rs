//! Names found in the network namespace pool directory, read as a claim
//! reads them: never panics, and a name read as a slot or a stamp is the
//! name that would be written for it.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    glove_sandbox::net_pool::fuzz_entry_name(data);
});
