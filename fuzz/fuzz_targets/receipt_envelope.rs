//! Fuzz the cheap check of stored receipt envelopes (the scanner replay
//! uses on open) against the full check (canonical JSON parse and
//! re-encoding).
//!
//! The input is used three ways: as stored envelope bytes after a fixed
//! previous head; as a receipt body inside an envelope whose two MACs are
//! computed with the key over exactly those bytes (so only the canonical
//! checks can refuse it); and as a body given to the scanner alone.
//!
//! Oracles: no panic; the cheap check accepts only what the full check
//! accepts, with the same kind and head, and the stored check returns the
//! full check's result (hence the same error code); a body the scanner
//! accepts parses canonically and names the same kind.
#![no_main]

use glove_journal::receipt::envelope::{cheap_check_agrees, forge_envelope};
use glove_journal::receipt::scan::body_kind;
use glove_journal::receipt::{ReceiptHead, ReceiptKey};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let key = ReceiptKey::from_bytes([0x5a; 32]);
    let prev = ReceiptHead {
        seq: 6,
        chain: [0x11; 32],
    };
    assert!(cheap_check_agrees(&key, &prev, data, 1 << 16));
    for kind in [&b"resource_v1"[..], b"refinement_v1"] {
        let env = forge_envelope(&key, &prev, data, kind, b"7");
        assert!(cheap_check_agrees(&key, &prev, &env, 1 << 16));
    }
    if let Some(kind) = body_kind(data, 2) {
        let v = glove_types::canon::parse_canonical(data, 1 << 16).expect("scanner accepted");
        let named = v.get("receipt_kind").and_then(|k| k.as_str());
        assert_eq!(named.map(str::as_bytes), Some(kind));
    }
});
