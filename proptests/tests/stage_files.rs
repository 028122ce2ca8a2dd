//! The files a stage and an apply keep beside their data (the stage
//! record, the baseline stat table, the apply locator, the candidate
//! identity) never panic on any bytes, and what they accept round-trips.
//! Twin of `fuzz/fuzz_targets/stage_files.rs`.

use glove_control::apply::books::{parse_candidate, Locator};
use glove_control::stages::StageRecord;
use glove_control::workspace::known::StatTable;
use proptest::prelude::*;

const SEED: &[u8] = include_bytes!("../../fuzz/seeds/stage_files/record.json");

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        if let Ok(r) = StageRecord::decode(&data) {
            prop_assert_eq!(StageRecord::decode(&r.encode()).ok(), Some(r));
        }
        let _ = StatTable::decode(&data);
        let any = glove_types::Sha256Digest::of(&data);
        if let Ok(l) = Locator::decode(&data, &any) {
            prop_assert_eq!(l.digest().ok(), Some(any));
        }
        let _ = parse_candidate(&data);
    }

    #[test]
    fn a_changed_byte_of_a_record_is_refused_or_decodes_consistently(
        at in 0usize..SEED.len(), b in any::<u8>()
    ) {
        let mut data = SEED.to_vec();
        data[at] = b;
        if let Ok(r) = StageRecord::decode(&data) {
            prop_assert_eq!(StageRecord::decode(&r.encode()).ok(), Some(r));
        }
    }

    #[test]
    fn candidate_identities_round_trip(d in any::<u64>(), i in any::<u64>()) {
        prop_assert_eq!(parse_candidate(format!("{d} {i}\n").as_bytes()), Some((d, i)));
        prop_assert_eq!(parse_candidate(format!("{d}\n").as_bytes()), None);
        prop_assert_eq!(parse_candidate(format!("{d} {i} 1\n").as_bytes()), None);
    }
}

#[test]
fn the_seed_record_decodes() {
    assert!(StageRecord::decode(SEED).is_ok());
}
