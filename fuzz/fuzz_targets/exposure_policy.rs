//! The path-exposure policy decoder never panics; an accepted policy
//! re-decodes equal from its canonical bytes, and every project path it
//! locates lies strictly beneath the root it names.
#![no_main]

use glove_types::exposure::ExposurePolicy;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = ExposurePolicy::decode(data) else {
        return;
    };
    let bytes = p.canonical_bytes().expect("an accepted policy encodes");
    assert_eq!(ExposurePolicy::decode(&bytes).expect("re-decodes"), p);
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(Some((root, rel))) = p.locate(text) {
            assert_eq!(format!("{}/{rel}", root.path()), text);
        }
    }
});
