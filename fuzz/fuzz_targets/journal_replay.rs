//! Fuzz the journal replay decoders: the raw input as a file image, and the
//! input reinterpreted as records sealed with valid digests (so the fuzzer
//! reaches the checks behind the digests: sequence rules, record bounds,
//! session-store and receipt-journal record decoding).
//!
//! Every decoder must return `Ok` or a classified corruption; none may
//! panic.
#![no_main]

use glove_journal::format::{encode_image, JournalKind};
use glove_journal::receipt::{verify_bytes, ReceiptConfig, ReceiptHead, ReceiptKey};
use glove_journal::session::{replay_session_bytes, SESSION_STORE_SPEC};
use glove_journal::{replay_bytes, JournalError};
use libfuzzer_sys::fuzz_target;

fn check<T>(r: Result<T, JournalError>) {
    if let Err(e) = r {
        assert!(e.is_corrupt(), "unclassified failure: {e:?}");
    }
}

fn decode_all(bytes: &[u8]) {
    let key = ReceiptKey::from_bytes([0x5a; 32]);
    let anchor = ReceiptHead {
        seq: 0,
        chain: [0; 32],
    };
    check(replay_bytes(bytes, &SESSION_STORE_SPEC, None));
    check(replay_bytes(bytes, &ReceiptConfig::default().spec(), None));
    check(replay_session_bytes(bytes, None));
    check(verify_bytes(bytes, &key, &anchor));
}

/// Splits the input into records: `kind seq_delta len payload[len]`.
fn records(mut data: &[u8]) -> Vec<(u16, u64, &[u8])> {
    let mut out = Vec::new();
    let mut seq = 0u64;
    while let [kind, delta, len, rest @ ..] = data {
        let n = usize::from(*len).min(rest.len());
        let (payload, tail) = rest.split_at(n);
        // Mostly consecutive numbers, sometimes anything.
        seq = match delta {
            0..=239 => seq.wrapping_add(1),
            d => seq.wrapping_add(u64::from(*d)).wrapping_sub(248),
        };
        out.push((u16::from(*kind % 6), seq, payload));
        data = tail;
    }
    out
}

fuzz_target!(|data: &[u8]| {
    decode_all(data);
    if let Some((&selector, rest)) = data.split_first() {
        let kind = if selector & 1 == 0 {
            JournalKind::SESSION_STORE
        } else {
            JournalKind::RECEIPTS
        };
        let image = encode_image(kind, [7; 16], &records(rest));
        decode_all(&image);
    }
});
