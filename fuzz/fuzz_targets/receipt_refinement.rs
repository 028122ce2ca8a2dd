//! The `refinement_v1` receipt body decoder never panics, and whatever it
//! accepts is exactly the encoding of the value it returns.
#![no_main]

use glove_types::receipt::RefinementReceiptV1;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = RefinementReceiptV1::decode(data) {
        assert_eq!(r.encode().expect("an accepted body encodes"), data);
    }
});
