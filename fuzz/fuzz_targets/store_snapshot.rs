//! Fuzz the session store's snapshot record (kind 3, written by compaction):
//! the raw input as a snapshot payload, and the input sealed as the payload
//! of the first (and of a later) record of a session-store image.
//!
//! Oracles: no panic; a payload that decodes re-encodes to the input
//! exactly; replay of an image classifies every failure as corruption.
#![no_main]

use glove_journal::format::{encode_image, JournalKind};
use glove_journal::session::record::{decode_snapshot, encode_snapshot, KIND_SNAPSHOT};
use glove_journal::session::replay_session_bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(s) = decode_snapshot(data) {
        assert_eq!(encode_snapshot(&s), data, "a decoded snapshot re-encodes to its bytes");
        assert!(s.generation >= 1);
        assert!(s.nonces.windows(2).all(|w| w[0].nonce < w[1].nonce));
    }
    for records in [
        vec![(KIND_SNAPSHOT, 1, data)],
        vec![(KIND_SNAPSHOT, 1, data), (KIND_SNAPSHOT, 2, data)],
    ] {
        let image = encode_image(JournalKind::SESSION_STORE, [7; 16], &records);
        match replay_session_bytes(&image, None) {
            Ok((index, _)) => {
                assert_eq!(records.len(), 1, "a second snapshot is refused");
                assert!(decode_snapshot(data).is_some());
                assert_eq!(index.snapshot().nonces.len(), index.carried_nonces().len());
            }
            Err(e) => assert!(e.is_corrupt(), "unclassified failure: {e:?}"),
        }
    }
});
