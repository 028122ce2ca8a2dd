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
//! ```
//!
//! Identifiers are at most 64 bytes, so one length byte suffices.

use glove_types::ids::{IdempotencyKey, SessionId};
use glove_types::stage::SessionStage;
use glove_types::{Blake3Digest, Sha256Digest};

/// Record kind of a session creation.
pub const KIND_CREATE: u16 = 1;
/// Record kind of a stage transition.
pub const KIND_TRANSITION: u16 = 2;

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
}
