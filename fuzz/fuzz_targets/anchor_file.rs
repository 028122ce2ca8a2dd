//! Fuzz the anchor-file decoder (`<journal>.anchor`): the raw input as a
//! file under both domains, and the input read as the fields of an anchor
//! record that is encoded (so the MAC holds) and decoded again, which
//! reaches the checks behind the MAC: magic, version, slot count, the
//! unused slot, byte lengths.
//!
//! Oracles: no panic; raw input that decodes re-encodes to itself; a record
//! encodes and decodes to itself exactly when all its byte lengths cover a
//! journal header.
#![no_main]

use glove_journal::anchor_file::{decode, encode, AnchorRecord, RECEIPT_ANCHOR_DOMAIN, STORE_ANCHOR_DOMAIN};
use glove_journal::receipt::ReceiptKey;
use glove_journal::Anchor;
use libfuzzer_sys::fuzz_target;

fn anchor(b: &[u8]) -> Option<Anchor> {
    Some(Anchor {
        records: u64::from_le_bytes(b.get(0..8)?.try_into().ok()?),
        byte_len: u64::from_le_bytes(b.get(8..16)?.try_into().ok()?),
        head: b.get(16..48)?.try_into().ok()?,
    })
}

fuzz_target!(|data: &[u8]| {
    let key = ReceiptKey::from_bytes([0x5a; 32]);
    for domain in [STORE_ANCHOR_DOMAIN, RECEIPT_ANCHOR_DOMAIN] {
        if let Ok(rec) = decode(&key, domain, data) {
            assert_eq!(encode(&key, domain, &rec), data);
        }
    }
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let (Some(id), Some(current)) = (rest.get(0..16), rest.get(16..).and_then(anchor)) else {
        return;
    };
    let next = if flags & 1 == 1 { rest.get(64..).and_then(anchor) } else { None };
    let rec = AnchorRecord {
        journal_id: id.try_into().unwrap_or([0; 16]),
        current,
        next,
    };
    let encoded = encode(&key, STORE_ANCHOR_DOMAIN, &rec);
    let plausible = rec.candidates().all(|a| a.byte_len >= 80);
    match decode(&key, STORE_ANCHOR_DOMAIN, &encoded) {
        Ok(back) => {
            assert!(plausible);
            assert_eq!(back, rec);
        }
        Err(e) => {
            assert!(!plausible, "{e:?}");
            assert_eq!(e.code().as_str(), "journal_anchor_file_invalid");
        }
    }
    assert!(decode(&key, RECEIPT_ANCHOR_DOMAIN, &encoded).is_err());
});
