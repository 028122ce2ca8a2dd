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
//! * `body_mac = HMAC(key, "glove-receipt-body-v1" 0x00 || canonical body)`;
//! * `chain = HMAC(key, "glove-receipt-envelope-v1" 0x00 || previous chain ||
//!   canonical envelope without the "chain" field)`;
//! * `seq` is the previous head's sequence number plus one. Every receipt
//!   kind shares this one sequence and chain.

use super::mac::{ReceiptHead, ReceiptKey, BODY_DOMAIN, ENVELOPE_DOMAIN};
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
    /// A refinement evaluation receipt (reserved for a later issue).
    RefinementV1,
}

impl ReceiptKind {
    /// Every kind.
    pub const ALL: [ReceiptKind; 2] = [ReceiptKind::ResourceV1, ReceiptKind::RefinementV1];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            ReceiptKind::ResourceV1 => "resource_v1",
            ReceiptKind::RefinementV1 => "refinement_v1",
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

/// Checks a body and seals it into an envelope after `prev`.
pub(crate) fn seal(
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
    let body_mac = key.mac(BODY_DOMAIN, &[body]);
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
    let chain = key.mac(ENVELOPE_DOMAIN, &[&prev.chain, &unsigned]);
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
    let want_body: bool = key.mac(BODY_DOMAIN, &[&body_bytes]).ct_eq(&body_mac).into();
    env.remove("chain");
    let unsigned = to_canonical(&Value::Object(env)).map_err(|_| EnvelopeProblem::Malformed)?;
    let want_chain: bool = key
        .mac(ENVELOPE_DOMAIN, &[&prev.chain, &unsigned])
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
