//! Workspace manifest decoding never panics; what decodes re-encodes to a
//! manifest that decodes to itself, with the same digest.
#![no_main]

use glove_types::manifest::Manifest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = Manifest::decode(data) {
        let bytes = m.canonical_bytes().expect("a decoded manifest encodes");
        let again = Manifest::decode(&bytes).expect("its encoding decodes");
        assert_eq!(again, m);
        assert_eq!(again.digest().ok(), m.digest().ok());
        let _ = m.blockers();
    }
});
