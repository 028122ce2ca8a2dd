//! Properties of the `apply_v1` receipt body, for auditors:
//!
//! 1. every valid body encodes to canonical bytes that decode back to the
//!    same value, and the fuzz seeds are such bodies;
//! 2. changing, inserting or deleting any byte of an encoded body either
//!    fails to decode or decodes to a value whose encoding is exactly the
//!    changed bytes (no second encoding of any value is accepted);
//! 3. arbitrary bytes never panic the decoder.

use glove_types::ids::{ApplyGrantId, ApplyTargetId, ApplyTransactionId, SessionId};
use glove_types::receipt::{ApplyOutcome, ApplyReceiptV1, FailedIn};
use glove_types::Sha256Digest;
use proptest::prelude::*;

const ID: &str = "[a-z0-9][a-z0-9._-]{0,63}";
const CODE: &str = "[a-z0-9_]{1,64}";

fn outcome() -> impl Strategy<Value = ApplyOutcome> {
    prop_oneof![
        Just(ApplyOutcome::Applied),
        (CODE, any::<bool>()).prop_map(|(code, prepared)| ApplyOutcome::Failed {
            code,
            failed_in: if prepared {
                FailedIn::Prepared
            } else {
                FailedIn::Reserved
            },
        }),
    ]
}

fn receipt() -> impl Strategy<Value = ApplyReceiptV1> {
    (
        (ID, ID, ID, ID),
        any::<[[u8; 32]; 3]>(),
        outcome(),
        any::<bool>(),
    )
        .prop_map(
            |((t, s, a, g), [d1, d2, d3], outcome, recovered)| ApplyReceiptV1 {
                transaction_id: ApplyTransactionId::new(t).unwrap(),
                session_id: SessionId::new(s).unwrap(),
                target: ApplyTargetId::new(a).unwrap(),
                grant_id: ApplyGrantId::new(g).unwrap(),
                authorization_digest: Sha256Digest::from_bytes(d1),
                baseline_digest: Sha256Digest::from_bytes(d2),
                manifest_digest: Sha256Digest::from_bytes(d3),
                outcome,
                recovered,
            },
        )
}

#[test]
fn fuzz_seeds_are_valid_bodies() {
    for seed in [
        &include_bytes!("../../fuzz/seeds/apply_receipt_body/applied")[..],
        &include_bytes!("../../fuzz/seeds/apply_receipt_body/failed")[..],
    ] {
        let r = ApplyReceiptV1::decode(seed).unwrap();
        assert_eq!(r.encode().unwrap(), seed);
    }
}

proptest! {
    #[test]
    fn apply_receipts_round_trip(r in receipt()) {
        let b = r.encode().unwrap();
        prop_assert_eq!(ApplyReceiptV1::decode(&b).unwrap(), r);
    }

    #[test]
    fn mutated_bodies_never_decode_to_another_encoding(
        r in receipt(),
        at in any::<usize>(),
        how in 0u8..3,
        byte in any::<u8>(),
    ) {
        let mut b = r.encode().unwrap();
        let at = at % b.len();
        match how {
            0 => b[at] = byte,
            1 => b.insert(at, byte),
            _ => { b.remove(at); }
        }
        if let Ok(v) = ApplyReceiptV1::decode(&b) {
            prop_assert_eq!(v.encode().unwrap(), b);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..600)) {
        if let Ok(v) = ApplyReceiptV1::decode(&b) {
            prop_assert_eq!(v.encode().unwrap(), b);
        }
    }
}
