//! Strict parse, canonical re-encode, canonical parse: never panics, and
//! canonical bytes are a fixed point.
#![no_main]

use glove_types::canon::{parse_canonical, parse_strict, to_canonical};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = parse_strict(data, 1 << 20) {
        let c = to_canonical(&v).expect("a strictly parsed value is encodable");
        let again = parse_canonical(&c, 1 << 20).expect("canonical bytes parse canonically");
        assert_eq!(again, v);
    }
    let _ = parse_canonical(data, 1 << 20);
});
