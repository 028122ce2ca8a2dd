//! The two session-store record payloads and their binary codec.
//!
//! ```text
//! create (kind 1)
//!   1  session id length s      s  session id
//!   1  idempotency key length k k  idempotency key
//!  32  controller_plan_digest (BLAKE3)
//!  32  plan_content_digest (SHA-256 of the plan bytes)
//!   …  the canonical plan bytes (the rest of the payload)
//!
//! transition (kind 2)
//!   1  session id length s      s  session id
//!   1  target stage (index in SessionStage::ALL)
//!   …  evidence: canonical JSON bytes (the rest of the payload)
//!
//!
//! snapshot (kind 3; only ever the first record, written by compaction)
//!   8  generation: how many compactions the store has been through (≥ 1)
//!   8  compacted_at_ms: the caller's clock when it was written
//!   4  n: number of carried nonces (≤ MAX_CARRIED_NONCES)
//!   n × 24  carried start-authorization nonces, strictly ascending by nonce:
//!           16 nonce | 8 expiry (ms)
//! ```
//!
//! Identifiers are at most 64 bytes, so one length byte suffices. Integers
//! are little-endian.

use glove_types::ids::{IdempotencyKey, SessionId};
use glove_types::stage::SessionStage;
use glove_types::{Blake3Digest, Sha256Digest};

/// Record kind of a session creation.
pub const KIND_CREATE: u16 = 1;
/// Record kind of a stage transition.
pub const KIND_TRANSITION: u16 = 2;
/// Record kind of a compaction snapshot (the first record of a compacted
/// store, never anywhere else).
pub const KIND_SNAPSHOT: u16 = 3;

/// Most start-authorization nonces a snapshot carries.
pub const MAX_CARRIED_NONCES: usize = 4096;
/// Bytes of a snapshot payload before its nonces.
pub const SNAPSHOT_FIXED_LEN: usize = 20;
/// Bytes of one carried nonce in a snapshot payload.
pub const NONCE_ENTRY_LEN: usize = 24;
/// Largest snapshot payload.
pub const MAX_SNAPSHOT_PAYLOAD: usize = SNAPSHOT_FIXED_LEN + NONCE_ENTRY_LEN * MAX_CARRIED_NONCES;

/// A used start-authorization nonce carried through compaction, with the
/// time after which the authorization it belonged to is void anyway.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CarriedNonce {
    /// The 16-byte nonce.
    pub nonce: [u8; 16],
    /// When its authorization expires, in milliseconds since the epoch.
    pub expires_at_ms: u64,
}

/// A decoded snapshot record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// How many compactions the store has been through (≥ 1 when stored).
    pub generation: u64,
    /// The caller's clock at compaction, in milliseconds.
    pub compacted_at_ms: u64,
    /// Carried nonces, strictly ascending by nonce.
    pub nonces: Vec<CarriedNonce>,
}

/// Encodes a snapshot record. The caller keeps `nonces` strictly ascending
/// and at most [`MAX_CARRIED_NONCES`] long ([`decode_snapshot`] refuses
/// anything else).
pub fn encode_snapshot(s: &Snapshot) -> Vec<u8> {
    let mut out = Vec::with_capacity(SNAPSHOT_FIXED_LEN + NONCE_ENTRY_LEN * s.nonces.len());
    out.extend_from_slice(&s.generation.to_le_bytes());
    out.extend_from_slice(&s.compacted_at_ms.to_le_bytes());
    let n = u32::try_from(s.nonces.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&n.to_le_bytes());
    for c in &s.nonces {
        out.extend_from_slice(&c.nonce);
        out.extend_from_slice(&c.expires_at_ms.to_le_bytes());
    }
    out
}

fn take_u64(b: &mut &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(take(b, 8)?.try_into().ok()?))
}

/// Strictly decodes a snapshot payload: generation at least 1, at most
/// [`MAX_CARRIED_NONCES`] nonces, the exact length for their count, and
/// nonces strictly ascending (so none twice). Never panics.
pub fn decode_snapshot(mut b: &[u8]) -> Option<Snapshot> {
    let generation = take_u64(&mut b)?;
    let compacted_at_ms = take_u64(&mut b)?;
    let n = usize::try_from(u32::from_le_bytes(take(&mut b, 4)?.try_into().ok()?)).ok()?;
    if generation == 0 || n > MAX_CARRIED_NONCES || b.len() != n.checked_mul(NONCE_ENTRY_LEN)? {
        return None;
    }
    let mut nonces: Vec<CarriedNonce> = Vec::with_capacity(n);
    for _ in 0..n {
        let nonce: [u8; 16] = take(&mut b, 16)?.try_into().ok()?;
        let expires_at_ms = take_u64(&mut b)?;
        if nonces.last().is_some_and(|p| p.nonce >= nonce) {
            return None;
        }
        nonces.push(CarriedNonce {
            nonce,
            expires_at_ms,
        });
    }
    Some(Snapshot {
        generation,
        compacted_at_ms,
        nonces,
    })
}

/// A decoded creation record.
#[derive(Debug)]
pub(crate) struct CreateRecord<'a> {
    pub(crate) session_id: SessionId,
    pub(crate) idempotency_key: IdempotencyKey,
    pub(crate) controller_plan_digest: Blake3Digest,
    pub(crate) plan_content_digest: Sha256Digest,
    pub(crate) plan: &'a [u8],
}

/// A decoded transition record.
#[derive(Debug)]
pub(crate) struct TransitionRecord<'a> {
    pub(crate) session_id: SessionId,
    pub(crate) stage: SessionStage,
    pub(crate) evidence: &'a [u8],
}

fn put_id(out: &mut Vec<u8>, id: &str) {
    // Validated identifiers are at most 64 bytes.
    out.push(u8::try_from(id.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(id.as_bytes());
}

fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if b.len() < n {
        return None;
    }
    let (head, rest) = b.split_at(n);
    *b = rest;
    Some(head)
}

fn take_id(b: &mut &[u8]) -> Option<String> {
    let len = usize::from(*take(b, 1)?.first()?);
    let s = core::str::from_utf8(take(b, len)?).ok()?;
    Some(s.to_owned())
}

fn take32(b: &mut &[u8]) -> Option<[u8; 32]> {
    take(b, 32)?.try_into().ok()
}

pub(crate) fn encode_create(
    session_id: &SessionId,
    key: &IdempotencyKey,
    controller: &Blake3Digest,
    content: &Sha256Digest,
    plan: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + 128 + 64 + plan.len());
    put_id(&mut out, session_id.as_str());
    put_id(&mut out, key.as_str());
    out.extend_from_slice(controller.as_bytes());
    out.extend_from_slice(content.as_bytes());
    out.extend_from_slice(plan);
    out
}

pub(crate) fn decode_create(mut b: &[u8]) -> Option<CreateRecord<'_>> {
    let session_id = SessionId::new(take_id(&mut b)?).ok()?;
    let idempotency_key = IdempotencyKey::new(take_id(&mut b)?).ok()?;
    let controller_plan_digest = Blake3Digest::from_bytes(take32(&mut b)?);
    let plan_content_digest = Sha256Digest::from_bytes(take32(&mut b)?);
    Some(CreateRecord {
        session_id,
        idempotency_key,
        controller_plan_digest,
        plan_content_digest,
        plan: b,
    })
}

pub(crate) fn stage_index(stage: SessionStage) -> u8 {
    match stage {
        SessionStage::Created => 0,
        SessionStage::Preparing => 1,
        SessionStage::Starting => 2,
        SessionStage::Running => 3,
        SessionStage::Stopping => 4,
        SessionStage::Exited => 5,
        SessionStage::Failed => 6,
    }
}

pub(crate) fn encode_transition(
    session_id: &SessionId,
    stage: SessionStage,
    evidence: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + 64 + evidence.len());
    put_id(&mut out, session_id.as_str());
    out.push(stage_index(stage));
    out.extend_from_slice(evidence);
    out
}

pub(crate) fn decode_transition(mut b: &[u8]) -> Option<TransitionRecord<'_>> {
    let session_id = SessionId::new(take_id(&mut b)?).ok()?;
    let idx = usize::from(*take(&mut b, 1)?.first()?);
    let stage = *SessionStage::ALL.get(idx)?;
    Some(TransitionRecord {
        session_id,
        stage,
        evidence: b,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let s = SessionId::new("s1").unwrap();
        let k = IdempotencyKey::new("k1").unwrap();
        let b = Blake3Digest::of(b"x");
        let c = Sha256Digest::of(b"{}");
        let enc = encode_create(&s, &k, &b, &c, b"{}");
        let d = decode_create(&enc).unwrap();
        assert_eq!(
            (
                d.session_id,
                d.idempotency_key,
                d.controller_plan_digest,
                d.plan_content_digest,
                d.plan
            ),
            (s.clone(), k, b, c, &b"{}"[..])
        );
        for stage in SessionStage::ALL {
            let enc = encode_transition(&s, stage, b"{}");
            let d = decode_transition(&enc).unwrap();
            assert_eq!(
                (d.session_id.as_str(), d.stage, d.evidence),
                ("s1", stage, &b"{}"[..])
            );
        }
        assert!(decode_transition(&[2, b's', b'1', 7]).is_none());
        assert!(decode_create(&[]).is_none());
    }

    #[test]
    fn snapshot_roundtrip_and_strictness() {
        let n = |b: u8, e: u64| CarriedNonce {
            nonce: [b; 16],
            expires_at_ms: e,
        };
        let s = Snapshot {
            generation: 3,
            compacted_at_ms: 77,
            nonces: vec![n(1, 10), n(2, 5)],
        };
        let enc = encode_snapshot(&s);
        assert_eq!(enc.len(), SNAPSHOT_FIXED_LEN + 2 * NONCE_ENTRY_LEN);
        assert_eq!(decode_snapshot(&enc), Some(s.clone()));
        for len in 0..enc.len() {
            assert!(decode_snapshot(&enc[..len]).is_none(), "{len}");
        }
        let mut longer = enc.clone();
        longer.push(0);
        assert!(decode_snapshot(&longer).is_none());
        for bad in [
            Snapshot {
                generation: 0,
                ..s.clone()
            },
            Snapshot {
                nonces: vec![n(2, 1), n(1, 1)],
                ..s.clone()
            },
            Snapshot {
                nonces: vec![n(1, 1), n(1, 2)],
                ..s.clone()
            },
        ] {
            assert!(decode_snapshot(&encode_snapshot(&bad)).is_none(), "{bad:?}");
        }
        let many = Snapshot {
            nonces: (0..=MAX_CARRIED_NONCES as u32)
                .map(|i| {
                    let mut nonce = [0u8; 16];
                    nonce[..4].copy_from_slice(&i.to_be_bytes());
                    CarriedNonce {
                        nonce,
                        expires_at_ms: 1,
                    }
                })
                .collect(),
            ..s
        };
        assert!(decode_snapshot(&encode_snapshot(&many)).is_none());
    }
}
