//! The library bundle decoder never panics; whatever it accepts is exactly
//! the encoding of the bundle it returns, and that bundle expands (or is
//! refused) without panicking, every expanded path beneath the skill
//! directory.
#![no_main]

use glove_types::bundle::{expand_skills, LibraryBundle};
use glove_types::Sha256Digest;
use libfuzzer_sys::fuzz_target;

const SKILL_DIR: &str = "/home/agent/.codex/skills";

fuzz_target!(|data: &[u8]| {
    let Ok(b) = LibraryBundle::decode(data) else {
        return;
    };
    assert_eq!(b.encode().expect("an accepted bundle encodes"), data);
    assert_eq!(b.sha256(), &Sha256Digest::of(data));
    let v = LibraryBundle::verify(data, b.sha256()).expect("verifies under its own digest");
    assert_eq!(v, b);
    if let Ok(x) = expand_skills(&[&b], SKILL_DIR) {
        for f in x.files() {
            assert!(glove_types::paths::is_within(f.path(), SKILL_DIR));
        }
    }
});
