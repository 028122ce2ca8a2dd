//! Receipt kinds and the authenticated envelope around a receipt body.
//!
//! A receipt body is a canonical JSON object whose `receipt_kind` field
//! names its [`ReceiptKind`]. The stored and delivered form is the envelope,
//! itself canonical JSON (keys sorted):
//!
//! ```text
//! {"body":{…},"body_mac":"<hex>","chain":"<hex>","receipt_kind":"resource_v1","seq":N}
//! ```
//!
//! * `body_mac = HMAC(key, D 0x00 || canonical body)`, with `D` the kind's
//!   body domain ([`ReceiptKind::body_domain`]: `"glove-receipt-body-v1"`
//!   for resource receipts, `"glove-apply-receipt-body-v1"` for apply
//!   receipts, `"glove-refinement-receipt-body-v1"` for refinement
//!   receipts);
//! * `chain = HMAC(key, E 0x00 || previous chain || canonical envelope
//!   without the "chain" field)`, with `E` the kind's envelope domain
//!   ([`ReceiptKind::envelope_domain`]: `"glove-refinement-receipt-envelope-v1"`
//!   for refinement receipts, `"glove-receipt-envelope-v1"` otherwise);
//! * `seq` is the previous head's sequence number plus one. Every receipt
//!   kind shares this one sequence and chain.

use super::mac::{
    ReceiptHead, ReceiptKey, APPLY_BODY_DOMAIN, BODY_DOMAIN, ENVELOPE_DOMAIN,
    REFINEMENT_BODY_DOMAIN, REFINEMENT_ENVELOPE_DOMAIN,
};
use super::scan::scan_envelope;
use crate::error::{JournalError, ReceiptRefusal};
use glove_types::canon::{parse_canonical, to_canonical, MAX_SAFE_INTEGER};
use glove_types::digest::to_hex;
use serde_json::{Map, Value};
use subtle::ConstantTimeEq;

/// Bytes an envelope adds around its body (keys, two MACs in hex, kind,
/// sequence number), rounded up.
pub const ENVELOPE_OVERHEAD: usize = 256;

/// What a receipt records. All kinds share one sequence and chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReceiptKind {
    /// A session's terminal resource receipt.
    ResourceV1,
    /// A refinement evaluation's terminal receipt; the body is
    /// `glove_types::receipt::RefinementReceiptV1`, which nests the
    /// session's resource receipt.
    RefinementV1,
    /// An apply transaction's terminal receipt (applied or failed); the body
    /// is `glove_types::receipt::ApplyReceiptV1`.
    ApplyV1,
}

impl ReceiptKind {
    /// Every kind.
    pub const ALL: [ReceiptKind; 3] = [
        ReceiptKind::ResourceV1,
        ReceiptKind::RefinementV1,
        ReceiptKind::ApplyV1,
    ];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            ReceiptKind::ResourceV1 => "resource_v1",
            ReceiptKind::RefinementV1 => "refinement_v1",
            ReceiptKind::ApplyV1 => "apply_v1",
        }
    }

    /// The domain of this kind's body MAC: apply receipts have their own,
    /// so a body MAC made for a session receipt never verifies for an apply
    /// receipt, nor the reverse.
    pub const fn body_domain(self) -> &'static [u8] {
        match self {
            ReceiptKind::ResourceV1 => BODY_DOMAIN,
            ReceiptKind::RefinementV1 => REFINEMENT_BODY_DOMAIN,
            ReceiptKind::ApplyV1 => APPLY_BODY_DOMAIN,
        }
    }

    /// The domain of this kind's chain MAC. Every kind shares the one
    /// sequence and chain; a refinement link is keyed under its own domain.
    pub const fn envelope_domain(self) -> &'static [u8] {
        match self {
            ReceiptKind::ResourceV1 | ReceiptKind::ApplyV1 => ENVELOPE_DOMAIN,
            ReceiptKind::RefinementV1 => REFINEMENT_ENVELOPE_DOMAIN,
        }
    }

    /// The body field that names the receipt's subject, the key the journal
    /// files it under: `transaction_id` for an apply receipt, `session_id`
    /// otherwise.
    pub const fn subject_field(self) -> &'static str {
        match self {
            ReceiptKind::ResourceV1 | ReceiptKind::RefinementV1 => "session_id",
            ReceiptKind::ApplyV1 => "transaction_id",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<ReceiptKind> {
        ReceiptKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Why an envelope did not verify.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EnvelopeProblem {
    /// Not the envelope shape.
    Malformed,
    /// Sequence number does not follow the previous head.
    Sequence,
    /// A MAC does not verify.
    Mac,
}

/// A checked envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Verified {
    pub(crate) kind: ReceiptKind,
    pub(crate) head: ReceiptHead,
}

fn body_kind(body: &Value) -> Option<ReceiptKind> {
    ReceiptKind::parse(body.as_object()?.get("receipt_kind")?.as_str()?)
}

/// Checks a body and seals it into an envelope after `prev`: the envelope
/// bytes and the head after it. (Public for tools and benchmarks that build
/// journal images; [`super::ReceiptJournal::append_receipt`] is the way to
/// add a receipt.)
pub fn seal(
    key: &ReceiptKey,
    prev: &ReceiptHead,
    kind: ReceiptKind,
    body: &[u8],
    max_body: usize,
) -> Result<(Vec<u8>, ReceiptHead), JournalError> {
    if body.len() > max_body {
        return Err(JournalError::Receipt(ReceiptRefusal::TooLarge {
            len: body.len() as u64,
            max: max_body as u64,
        }));
    }
    let value = parse_canonical(body, max_body).map_err(|rejection| JournalError::Invalid {
        field: "receipt body",
        rejection,
    })?;
    if body_kind(&value) != Some(kind) {
        return Err(JournalError::Receipt(ReceiptRefusal::KindMismatch));
    }
    let seq = prev.seq + 1;
    if seq > MAX_SAFE_INTEGER {
        return Err(JournalError::Receipt(ReceiptRefusal::ReservationRefused));
    }
    let body_mac = key.mac(kind.body_domain(), &[body]);
    let mut env = Map::new();
    env.insert("body".into(), value);
    env.insert("body_mac".into(), Value::String(to_hex(&body_mac)));
    env.insert("receipt_kind".into(), Value::String(kind.as_str().into()));
    env.insert("seq".into(), Value::from(seq));
    let encode = |v: &Map<String, Value>| {
        to_canonical(&Value::Object(v.clone())).map_err(|rejection| JournalError::Invalid {
            field: "receipt envelope",
            rejection,
        })
    };
    let unsigned = encode(&env)?;
    let chain = key.mac(kind.envelope_domain(), &[&prev.chain, &unsigned]);
    env.insert("chain".into(), Value::String(to_hex(&chain)));
    let sealed = encode(&env)?;
    Ok((sealed, ReceiptHead { seq, chain }))
}

fn hex32(v: Option<&Value>) -> Option<[u8; 32]> {
    let d = glove_types::Sha256Digest::parse(v?.as_str()?).ok()?;
    Some(*d.as_bytes())
}

/// Verifies an envelope that must follow `prev`.
pub(crate) fn verify(
    key: &ReceiptKey,
    prev: &ReceiptHead,
    envelope: &[u8],
    max_envelope: usize,
) -> Result<Verified, EnvelopeProblem> {
    let value = parse_canonical(envelope, max_envelope).map_err(|_| EnvelopeProblem::Malformed)?;
    let Value::Object(mut env) = value else {
        return Err(EnvelopeProblem::Malformed);
    };
    if env.len() != 5 {
        return Err(EnvelopeProblem::Malformed);
    }
    let seq = env
        .get("seq")
        .and_then(Value::as_u64)
        .ok_or(EnvelopeProblem::Malformed)?;
    let kind = env
        .get("receipt_kind")
        .and_then(Value::as_str)
        .and_then(ReceiptKind::parse)
        .ok_or(EnvelopeProblem::Malformed)?;
    let body = env.get("body").ok_or(EnvelopeProblem::Malformed)?;
    if body_kind(body) != Some(kind) {
        return Err(EnvelopeProblem::Malformed);
    }
    let body_mac = hex32(env.get("body_mac")).ok_or(EnvelopeProblem::Malformed)?;
    let chain = hex32(env.get("chain")).ok_or(EnvelopeProblem::Malformed)?;
    if prev.seq.checked_add(1) != Some(seq) {
        return Err(EnvelopeProblem::Sequence);
    }
    let body_bytes = to_canonical(body).map_err(|_| EnvelopeProblem::Malformed)?;
    let want_body: bool = key
        .mac(kind.body_domain(), &[&body_bytes])
        .ct_eq(&body_mac)
        .into();
    env.remove("chain");
    let unsigned = to_canonical(&Value::Object(env)).map_err(|_| EnvelopeProblem::Malformed)?;
    let want_chain: bool = key
        .mac(kind.envelope_domain(), &[&prev.chain, &unsigned])
        .ct_eq(&chain)
        .into();
    if !(want_body & want_chain) {
        return Err(EnvelopeProblem::Mac);
    }
    Ok(Verified {
        kind,
        head: ReceiptHead { seq, chain },
    })
}

/// The cheap check alone: `Some` only when the stored bytes are certainly
/// a canonical envelope following `prev` whose two MACs verify; `None`
/// whenever anything is off or unsure (the caller then runs [`verify`]).
///
/// No JSON tree is built: [`scan_envelope`] locates the fields in the bytes
/// and checks the body is a canonical object; the body MAC is computed over
/// the body's bytes as stored and the chain MAC over the stored bytes with
/// the `chain` field cut out (two slices). Those are exactly the bytes
/// [`verify`] re-encodes, because the envelope is canonical.
pub(crate) fn verify_cheap(
    key: &ReceiptKey,
    prev: &ReceiptHead,
    envelope: &[u8],
    max_envelope: usize,
) -> Option<Verified> {
    if envelope.len() > max_envelope {
        return None;
    }
    let s = scan_envelope(envelope)?;
    let hex = |b: &[u8]| {
        let d = glove_types::Sha256Digest::parse(core::str::from_utf8(b).ok()?).ok()?;
        Some(*d.as_bytes())
    };
    let body_mac = hex(s.body_mac)?;
    let chain = hex(s.chain)?;
    if prev.seq.checked_add(1) != Some(s.seq) {
        return None;
    }
    let want_body: bool = key
        .mac(s.kind.body_domain(), &[s.body])
        .ct_eq(&body_mac)
        .into();
    let want_chain: bool = key
        .mac(
            s.kind.envelope_domain(),
            &[&prev.chain, s.unsigned_head, s.unsigned_tail],
        )
        .ct_eq(&chain)
        .into();
    (want_body & want_chain).then_some(Verified {
        kind: s.kind,
        head: ReceiptHead { seq: s.seq, chain },
    })
}

/// Verifies a stored envelope: the cheap check, and the full [`verify`]
/// whenever the cheap check does not accept. The result is [`verify`]'s for
/// every input (the cheap check accepts only what [`verify`] accepts, with
/// the same fields, and every refusal and its reason come from [`verify`]).
pub(crate) fn verify_stored(
    key: &ReceiptKey,
    prev: &ReceiptHead,
    envelope: &[u8],
    max_envelope: usize,
) -> Result<Verified, EnvelopeProblem> {
    match verify_cheap(key, prev, envelope, max_envelope) {
        Some(v) => Ok(v),
        None => verify(key, prev, envelope, max_envelope),
    }
}

/// For the fuzz target and tests: whether the cheap check agrees with the
/// full check on `envelope` after `prev` — it accepts only what the full
/// check accepts, with the same kind and head. Never panics.
#[doc(hidden)]
pub fn cheap_check_agrees(
    key: &ReceiptKey,
    prev: &ReceiptHead,
    envelope: &[u8],
    max_envelope: usize,
) -> bool {
    let full = verify(key, prev, envelope, max_envelope);
    match verify_cheap(key, prev, envelope, max_envelope) {
        Some(v) => full == Ok(v),
        None => verify_stored(key, prev, envelope, max_envelope) == full,
    }
}

/// For the fuzz target and tests: an envelope frame around arbitrary
/// `body` bytes, kind text and sequence text, with both MACs computed by
/// `key` over exactly those bytes — what a writer holding the key but
/// ignoring the canonical rules could store. Only the canonical-form checks
/// stand between such bytes and acceptance.
#[doc(hidden)]
pub fn forge_envelope(
    key: &ReceiptKey,
    prev: &ReceiptHead,
    body: &[u8],
    kind: &[u8],
    seq: &[u8],
) -> Vec<u8> {
    let parsed = core::str::from_utf8(kind).ok().and_then(ReceiptKind::parse);
    let domain = parsed.map_or(BODY_DOMAIN, ReceiptKind::body_domain);
    let envelope_domain = parsed.map_or(ENVELOPE_DOMAIN, ReceiptKind::envelope_domain);
    let body_mac = to_hex(&key.mac(domain, &[body]));
    let mut head = b"{\"body\":".to_vec();
    head.extend_from_slice(body);
    head.extend_from_slice(format!(",\"body_mac\":\"{body_mac}\",").as_bytes());
    let mut tail = b"\"receipt_kind\":\"".to_vec();
    tail.extend_from_slice(kind);
    tail.extend_from_slice(b"\",\"seq\":");
    tail.extend_from_slice(seq);
    tail.push(b'}');
    let chain = to_hex(&key.mac(envelope_domain, &[&prev.chain, &head, &tail]));
    let mut env = head;
    env.extend_from_slice(format!("\"chain\":\"{chain}\",").as_bytes());
    env.extend_from_slice(&tail);
    env
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn seal_then_verify() {
        let key = ReceiptKey::from_bytes([1; 32]);
        let prev = ReceiptHead {
            seq: 4,
            chain: [2; 32],
        };
        let body = br#"{"cpu_ms":12,"receipt_kind":"resource_v1"}"#;
        let (env, head) = seal(&key, &prev, ReceiptKind::ResourceV1, body, 1024).unwrap();
        assert_eq!(head.seq, 5);
        let v = verify(&key, &prev, &env, 4096).unwrap();
        assert_eq!(v.head, head);
        assert_eq!(v.kind, ReceiptKind::ResourceV1);
        let other = ReceiptKey::from_bytes([9; 32]);
        assert_eq!(verify(&other, &prev, &env, 4096), Err(EnvelopeProblem::Mac));
        let wrong_prev = ReceiptHead {
            seq: 4,
            chain: [3; 32],
        };
        assert_eq!(
            verify(&key, &wrong_prev, &env, 4096),
            Err(EnvelopeProblem::Mac)
        );
        let behind = ReceiptHead {
            seq: 3,
            chain: [2; 32],
        };
        assert_eq!(
            verify(&key, &behind, &env, 4096),
            Err(EnvelopeProblem::Sequence)
        );
        assert_eq!(
            seal(&key, &prev, ReceiptKind::RefinementV1, body, 1024)
                .unwrap_err()
                .code()
                .as_str(),
            "receipt_kind_mismatch"
        );
    }

    #[test]
    fn apply_bodies_have_their_own_mac_domain() {
        let key = ReceiptKey::from_bytes([1; 32]);
        let prev = ReceiptHead {
            seq: 4,
            chain: [2; 32],
        };
        let body = br#"{"receipt_kind":"apply_v1"}"#;
        let (env, _) = seal(&key, &prev, ReceiptKind::ApplyV1, body, 1024).unwrap();
        assert_eq!(
            verify(&key, &prev, &env, 4096).map(|v| v.kind),
            Ok(ReceiptKind::ApplyV1)
        );
        let env = String::from_utf8(env).unwrap();
        let apply_mac = to_hex(&key.mac(APPLY_BODY_DOMAIN, &[body]));
        assert!(env.contains(&apply_mac), "{env}");
        // The session body domain's MAC does not verify for an apply body.
        let swapped = env.replace(&apply_mac, &to_hex(&key.mac(BODY_DOMAIN, &[body])));
        assert_eq!(
            verify(&key, &prev, swapped.as_bytes(), 4096),
            Err(EnvelopeProblem::Mac)
        );
    }

    #[test]
    fn refinement_receipts_have_their_own_body_and_envelope_domains() {
        let key = ReceiptKey::from_bytes([1; 32]);
        let prev = ReceiptHead {
            seq: 4,
            chain: [2; 32],
        };
        let body = br#"{"receipt_kind":"refinement_v1"}"#;
        let (env, head) = seal(&key, &prev, ReceiptKind::RefinementV1, body, 1024).unwrap();
        assert_eq!(
            verify(&key, &prev, &env, 4096).map(|v| v.kind),
            Ok(ReceiptKind::RefinementV1)
        );
        assert_eq!(verify_stored(&key, &prev, &env, 4096).unwrap().head, head);
        let text = String::from_utf8(env).unwrap();
        let mac = to_hex(&key.mac(REFINEMENT_BODY_DOMAIN, &[body]));
        assert!(text.contains(&mac), "{text}");
        // A resource receipt's body MAC does not verify for a refinement
        // body.
        let swapped = text.replace(&mac, &to_hex(&key.mac(BODY_DOMAIN, &[body])));
        assert_eq!(
            verify(&key, &prev, swapped.as_bytes(), 4096),
            Err(EnvelopeProblem::Mac)
        );
        // The chain value is the refinement envelope domain's: re-chained
        // under the resource domain (body MAC intact) it is refused.
        let unsigned = {
            let mut v: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
            v.remove("chain");
            to_canonical(&Value::Object(v)).unwrap()
        };
        let good = to_hex(&key.mac(REFINEMENT_ENVELOPE_DOMAIN, &[&prev.chain, &unsigned]));
        assert_eq!(good, to_hex(&head.chain));
        let wrong = to_hex(&key.mac(ENVELOPE_DOMAIN, &[&prev.chain, &unsigned]));
        let rechained = text.replace(&good, &wrong);
        assert_eq!(
            verify(&key, &prev, rechained.as_bytes(), 4096),
            Err(EnvelopeProblem::Mac)
        );
        assert!(verify_cheap(&key, &prev, rechained.as_bytes(), 4096).is_none());
    }

    fn sealed(body: &[u8], prev_seq: u64) -> (ReceiptKey, ReceiptHead, Vec<u8>) {
        let key = ReceiptKey::from_bytes([3; 32]);
        let prev = ReceiptHead {
            seq: prev_seq,
            chain: [4; 32],
        };
        let (env, _) = seal(&key, &prev, ReceiptKind::ResourceV1, body, 1 << 16).unwrap();
        (key, prev, env)
    }

    #[test]
    fn cheap_check_accepts_what_seal_writes() {
        for prev_seq in [0, 9, 10, 99, MAX_SAFE_INTEGER - 1] {
            let (key, prev, env) = sealed(
                br#"{"a":"\u0000\"\\","receipt_kind":"resource_v1","z":[]}"#,
                prev_seq,
            );
            let cheap = verify_cheap(&key, &prev, &env, 4096);
            assert!(cheap.is_some(), "{}", String::from_utf8_lossy(&env));
            assert_eq!(cheap.map(Ok), Some(verify(&key, &prev, &env, 4096)));
            // Over the size bound: left to the full check, which refuses.
            assert_eq!(verify_cheap(&key, &prev, &env, env.len() - 1), None);
            assert_eq!(
                verify_stored(&key, &prev, &env, env.len() - 1),
                Err(EnvelopeProblem::Malformed)
            );
        }
    }

    fn body_strategy() -> impl Strategy<Value = Vec<u8>> {
        (
            prop::collection::btree_map(
                "[a-z_\u{e9}\u{1f600}]{1,5}",
                prop_oneof![
                    (-1000i64..1000).prop_map(serde_json::Value::from),
                    "[a-z\\\\\"\x00-\x1f\u{e9}]{0,5}".prop_map(serde_json::Value::String),
                    Just(serde_json::json!([1, {"k": null}, true])),
                ],
                0..5,
            ),
            prop_oneof![Just("resource_v1"), Just("refinement_v1"), Just("apply_v1")],
        )
            .prop_map(|(m, k)| {
                let mut m: Map<String, Value> = m.into_iter().collect();
                m.insert("receipt_kind".into(), Value::String(k.into()));
                to_canonical(&Value::Object(m)).unwrap()
            })
    }

    /// The kind a generated body names (its only kind name).
    fn kind_in(body: &[u8]) -> ReceiptKind {
        ReceiptKind::ALL
            .into_iter()
            .find(|k| {
                body.windows(k.as_str().len())
                    .any(|w| w == k.as_str().as_bytes())
            })
            .unwrap_or(ReceiptKind::ResourceV1)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1500))]

        /// The cheap check against the full check on sealed envelopes and
        /// on every kind of mutation of them (byte changes, insertions,
        /// deletions, wrong key, wrong previous head): it accepts exactly the
        /// sealed ones, and `verify_stored` returns the full check's result
        /// (same problem, hence the same error code) for all of them.
        #[test]
        fn cheap_check_is_the_full_check(
            body in body_strategy(),
            prev_seq in prop_oneof![0u64..20, Just(MAX_SAFE_INTEGER - 1)],
            muts in prop::collection::vec((any::<usize>(), 0u8..4, any::<u8>()), 0..3),
            wrong_prev in any::<bool>(),
            wrong_key in any::<bool>(),
        ) {
            let key = ReceiptKey::from_bytes([3; 32]);
            let prev = ReceiptHead { seq: prev_seq, chain: [4; 32] };
            let kind = kind_in(&body);
            let (mut env, _) = seal(&key, &prev, kind, &body, 1 << 16).unwrap();
            let check_key = if wrong_key { ReceiptKey::from_bytes([5; 32]) } else { key.clone() };
            let check_prev = if wrong_prev {
                ReceiptHead { seq: prev_seq.saturating_sub(1), chain: [4; 32] }
            } else {
                prev
            };
            const ALPHABET: &[u8] = b"{}[]\",:\\-0159abcdef.eu \x00\x7f";
            for (at, how, byte) in &muts {
                let at = at % (env.len() + 1);
                let b = if byte & 1 == 0 { ALPHABET[usize::from(*byte) % ALPHABET.len()] } else { *byte };
                match how {
                    0 if at < env.len() => env[at] = b,
                    1 => env.insert(at, b),
                    2 if at < env.len() => { env.remove(at); }
                    _ => env.truncate(at),
                }
            }
            prop_assert!(cheap_check_agrees(&check_key, &check_prev, &env, 1 << 17));
            let full = verify(&check_key, &check_prev, &env, 1 << 17);
            prop_assert_eq!(verify_stored(&check_key, &check_prev, &env, 1 << 17), full);
            let cheap = verify_cheap(&check_key, &check_prev, &env, 1 << 17);
            prop_assert_eq!(cheap.is_some(), full.is_ok());
        }

        /// Envelopes forged with the key around any body bytes (a mutated
        /// canonical body, MACs computed over exactly those bytes): the MACs
        /// verify, so only the canonical-form checks stand between such a
        /// record and acceptance. The cheap check must refuse every one the
        /// full check refuses.
        #[test]
        fn cheap_check_refuses_forged_non_canonical_bodies(
            body in body_strategy(),
            muts in prop::collection::vec((any::<usize>(), 0u8..3, any::<u8>()), 0..3),
            seq_text in prop_oneof![Just("1".to_owned()), Just("01".to_owned()), "[0-9]{1,17}"],
        ) {
            let key = ReceiptKey::from_bytes([3; 32]);
            let prev = ReceiptHead { seq: 0, chain: [4; 32] };
            let mut body = body;
            const ALPHABET: &[u8] = b"{}[]\",:\\-0159abcdef.eu \x00\x1f\x7f";
            for (at, how, byte) in &muts {
                let at = at % (body.len() + 1);
                let b = if byte & 1 == 0 { ALPHABET[usize::from(*byte) % ALPHABET.len()] } else { *byte };
                match how {
                    0 if at < body.len() => body[at] = b,
                    1 => body.insert(at, b),
                    _ if at < body.len() => { body.remove(at); }
                    _ => body.push(b),
                }
            }
            let kind = kind_in(&body).as_str();
            let env = forge_envelope(&key, &prev, &body, kind.as_bytes(), seq_text.as_bytes());
            prop_assert!(cheap_check_agrees(&key, &prev, &env, 1 << 17));
            let full = verify(&key, &prev, &env, 1 << 17);
            prop_assert_eq!(verify_stored(&key, &prev, &env, 1 << 17), full);
            prop_assert_eq!(verify_cheap(&key, &prev, &env, 1 << 17).is_some(), full.is_ok());
        }

        /// Arbitrary bytes never panic either check.
        #[test]
        fn stored_check_never_panics(b in prop::collection::vec(any::<u8>(), 0..400)) {
            let key = ReceiptKey::from_bytes([3; 32]);
            let prev = ReceiptHead { seq: 1, chain: [4; 32] };
            prop_assert!(cheap_check_agrees(&key, &prev, &b, 1 << 10));
        }
    }
}
