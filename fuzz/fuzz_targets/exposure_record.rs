//! The exposure journal's record decoders and its replay never panic: an
//! accepted record re-encodes to the input exactly; a journal image (the
//! raw input, and the input cut into records sealed with valid digests so
//! the lease rules are reached) replays or fails with a classified
//! corruption.
#![no_main]

use glove_journal::exposure::{replay_exposure_bytes, KIND_CREATED, KIND_REVOKED};
use glove_journal::format::{encode_image, JournalKind};
use glove_types::exposure::lease::{CreatedRecord, RevokedRecord};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = CreatedRecord::decode(data) {
        assert_eq!(r.encode().expect("encodes"), data);
    }
    if let Ok(r) = RevokedRecord::decode(data) {
        assert_eq!(r.encode().expect("encodes"), data);
    }
    if let Err(e) = replay_exposure_bytes(data) {
        assert!(e.is_corrupt(), "unclassified: {e:?}");
    }
    // `kind len payload[len]`, sealed in order.
    let mut records = Vec::new();
    let mut rest = data;
    let mut seq = 0u64;
    while let [kind, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (payload, after) = tail.split_at(n);
        seq += 1;
        let kind = if kind % 2 == 0 { KIND_CREATED } else { KIND_REVOKED };
        records.push((kind, seq, payload));
        rest = after;
    }
    let image = encode_image(JournalKind::EXPOSURES, [3; 16], &records);
    if let Err(e) = replay_exposure_bytes(&image) {
        assert!(e.is_corrupt(), "unclassified: {e:?}");
    }
});
