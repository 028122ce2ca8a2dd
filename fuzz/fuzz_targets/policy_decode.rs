//! Policy decoding and validation never panic; a valid policy's
//! explanation agrees with it.
#![no_main]

use glove_types::policy::{Explanation, ValidatedPolicy};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let valid = ValidatedPolicy::from_json(data);
    let explained = Explanation::from_json(data);
    if valid.is_ok() {
        assert!(explained.map(|x| x.valid).unwrap_or(false));
    }
});
