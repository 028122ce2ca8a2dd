//! Replay of arbitrary input never panics and never accepts a record that
//! was not sealed: random bytes, and random records sealed with valid
//! digests but arbitrary kinds, sequence numbers and payloads.

use crate::common::{anchor, key};
use glove_journal::format::{encode_image, JournalKind};
use glove_journal::receipt::{verify_bytes, ReceiptConfig};
use glove_journal::session::{replay_session_bytes, SESSION_STORE_SPEC};
use glove_journal::{replay_bytes, JournalError};
use proptest::prelude::*;

fn ok_or_classified<T>(r: Result<T, JournalError>) {
    if let Err(e) = r {
        assert!(e.is_corrupt(), "{e:?}");
    }
}

fn all_decoders(bytes: &[u8]) {
    ok_or_classified(replay_bytes(bytes, &SESSION_STORE_SPEC, None));
    ok_or_classified(replay_bytes(bytes, &ReceiptConfig::default().spec(), None));
    ok_or_classified(replay_session_bytes(bytes, None));
    ok_or_classified(verify_bytes(bytes, &key(), &anchor()));
}

fn records() -> impl Strategy<Value = Vec<(u16, u64, Vec<u8>)>> {
    prop::collection::vec(
        (0..6u16, 0..12u64, prop::collection::vec(any::<u8>(), 0..80)),
        0..10,
    )
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        all_decoders(&bytes);
    }

    #[test]
    fn sealed_random_records_never_panic(
        recs in records(),
        receipts in any::<bool>(),
        cut in any::<u16>(),
    ) {
        let kind = if receipts { JournalKind::RECEIPTS } else { JournalKind::SESSION_STORE };
        let borrowed: Vec<(u16, u64, &[u8])> =
            recs.iter().map(|(k, s, p)| (*k, *s, &p[..])).collect();
        let img = encode_image(kind, [7; 16], &borrowed);
        all_decoders(&img);
        let cut = usize::from(cut) % (img.len() + 1);
        all_decoders(&img[..cut]);
    }
}
