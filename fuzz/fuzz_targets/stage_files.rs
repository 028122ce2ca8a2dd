//! The files a stage and an apply keep beside their data never panic when
//! read back, whatever their bytes: the stage record (`stage.json`), the
//! baseline stat table (`baseline.stat`), an apply's locator and its
//! candidate identity. What decodes re-encodes to something that decodes
//! to the same value.
#![no_main]

use glove_control::apply::books::{parse_candidate, Locator};
use glove_control::stages::StageRecord;
use glove_control::workspace::known::StatTable;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = StageRecord::decode(data) {
        assert_eq!(StageRecord::decode(&r.encode()).ok(), Some(r));
    }
    let _ = StatTable::decode(data);
    let any = glove_types::Sha256Digest::of(data);
    if let Ok(l) = Locator::decode(data, &any) {
        assert_eq!(l.digest().ok(), Some(any));
    }
    if let Some((d, i)) = parse_candidate(data) {
        assert_eq!(parse_candidate(format!("{d} {i}\n").as_bytes()), Some((d, i)));
    }
});
