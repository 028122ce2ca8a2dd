//! The receipt journal's record kinds and their binary payloads.
//!
//! ```text
//! base     (kind 1)  8 seq (LE) | 32 chain      first record, exactly once
//! reserve  (kind 2)  1 len | session id
//! release  (kind 3)  1 len | session id
//! receipt  (kind 4)  1 len | session id | envelope (canonical JSON)
//! ```
//!
//! The base record holds the head the chain starts from: the trusted anchor
//! at creation, the last acknowledged head after compaction. A receipt with
//! an empty session id was carried over by compaction (its reservation was
//! spent in an earlier file).

use super::mac::ReceiptHead;
use glove_types::ids::SessionId;

/// The chain's starting head.
pub const KIND_BASE: u16 = 1;
/// A capacity reservation for one session's terminal receipt.
pub const KIND_RESERVE: u16 = 2;
/// A reservation released without a receipt.
pub const KIND_RELEASE: u16 = 3;
/// A sealed receipt envelope.
pub const KIND_RECEIPT: u16 = 4;
/// Every kind the receipt journal carries.
pub const KINDS: &[u16] = &[KIND_BASE, KIND_RESERVE, KIND_RELEASE, KIND_RECEIPT];

/// The payload of a base record.
pub fn encode_base(head: &ReceiptHead) -> Vec<u8> {
    let mut out = Vec::with_capacity(40);
    out.extend_from_slice(&head.seq.to_le_bytes());
    out.extend_from_slice(&head.chain);
    out
}

pub(crate) fn decode_base(b: &[u8]) -> Option<ReceiptHead> {
    if b.len() != 40 {
        return None;
    }
    let seq = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
    let chain = b.get(8..40)?.try_into().ok()?;
    Some(ReceiptHead { seq, chain })
}

/// The payload of a reserve or release record (`rest` empty) or of a
/// receipt record (`rest` the envelope); `None` for a receipt carried over
/// by compaction.
pub fn encode_id(id: Option<&SessionId>, rest: &[u8]) -> Vec<u8> {
    let s = id.map_or("", |i| i.as_str());
    let mut out = Vec::with_capacity(1 + s.len() + rest.len());
    // Validated identifiers are at most 64 bytes.
    out.push(u8::try_from(s.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(s.as_bytes());
    out.extend_from_slice(rest);
    out
}

/// Splits a payload into its session id (None when empty) and the rest.
/// `Err` when the id is malformed.
pub(crate) fn decode_id(b: &[u8]) -> Result<(Option<SessionId>, &[u8]), ()> {
    let (&len, rest) = b.split_first().ok_or(())?;
    let len = usize::from(len);
    if rest.len() < len {
        return Err(());
    }
    let (id, rest) = rest.split_at(len);
    if id.is_empty() {
        return Ok((None, rest));
    }
    let s = core::str::from_utf8(id).map_err(|_| ())?;
    let id = SessionId::new(s).map_err(|_| ())?;
    Ok((Some(id), rest))
}
