//! The receipt key, receipt heads, and the HMAC-SHA-256 domains.
//!
//! Every MAC in the receipt journal is
//! `HMAC-SHA-256(key, domain || 0x00 || message)` with one of three domains:
//!
//! * [`BODY_DOMAIN`] over the receipt body's canonical bytes (`body_mac`),
//!   [`APPLY_BODY_DOMAIN`] for an apply receipt's body, or
//!   [`REFINEMENT_BODY_DOMAIN`] for a refinement receipt's (see
//!   [`ReceiptKind::body_domain`](super::ReceiptKind::body_domain));
//! * [`ENVELOPE_DOMAIN`] (or [`REFINEMENT_ENVELOPE_DOMAIN`] for a
//!   refinement receipt) over the previous chain value followed by the
//!   canonical bytes of the envelope without its `chain` field — the result
//!   *is* the envelope's `chain` value, so each receipt authenticates all
//!   earlier ones back to the trusted anchor;
//! * [`ACK_DOMAIN`] over the acknowledged-head file.
//!
//! Separate domains mean a MAC computed for one purpose never verifies for
//! another.

use crate::error::{JournalError, ReceiptRefusal};
use glove_types::digest::to_hex;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Domain of the receipt body MAC of a session's resource receipt
/// (`resource_v1`).
pub const BODY_DOMAIN: &[u8] = b"glove-receipt-body-v1";
/// Domain of the body MAC of a refinement evaluation receipt
/// (`refinement_v1`).
pub const REFINEMENT_BODY_DOMAIN: &[u8] = b"glove-refinement-receipt-body-v1";
/// Domain of the body MAC of an apply receipt (`apply_v1`).
pub const APPLY_BODY_DOMAIN: &[u8] = b"glove-apply-receipt-body-v1";
/// Domain of the envelope MAC (the chain value) of resource and apply
/// receipts.
pub const ENVELOPE_DOMAIN: &[u8] = b"glove-receipt-envelope-v1";
/// Domain of the envelope MAC (the chain value) of a refinement receipt:
/// the chain is one, but a refinement link is keyed apart, so an envelope
/// sealed as one kind never verifies as the other.
pub const REFINEMENT_ENVELOPE_DOMAIN: &[u8] = b"glove-refinement-receipt-envelope-v1";
/// Domain of the acknowledged-head file MAC.
pub const ACK_DOMAIN: &[u8] = b"glove-receipt-ack-v1";

/// The 32-byte receipt key. Its `Debug` form never shows the key.
#[derive(Clone)]
pub struct ReceiptKey {
    /// HMAC keyed once (the inner and outer pads already absorbed), cloned
    /// for every MAC: two compressions fewer per MAC on replay.
    keyed: Hmac<Sha256>,
}

impl core::fmt::Debug for ReceiptKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("ReceiptKey(..)")
    }
}

impl ReceiptKey {
    /// Wraps raw key bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> ReceiptKey {
        // HMAC zero-pads keys shorter than the 64-byte block, so this is the
        // same MAC as keying with the 32 bytes directly.
        let mut block = [0u8; 64];
        block[..32].copy_from_slice(&bytes);
        let keyed = <Hmac<Sha256> as hmac::digest::KeyInit>::new(&block.into());
        ReceiptKey { keyed }
    }

    /// Parses a key file: 64 lowercase hex characters, optionally followed
    /// by one newline.
    pub fn from_key_file(bytes: &[u8]) -> Result<ReceiptKey, JournalError> {
        let trimmed = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let s = core::str::from_utf8(trimmed)
            .map_err(|_| JournalError::Receipt(ReceiptRefusal::KeyInvalid))?;
        let d = glove_types::Sha256Digest::parse(s)
            .map_err(|_| JournalError::Receipt(ReceiptRefusal::KeyInvalid))?;
        Ok(ReceiptKey::from_bytes(*d.as_bytes()))
    }

    /// `HMAC-SHA-256(key, domain || 0x00 || parts...)`.
    pub(crate) fn mac(&self, domain: &[u8], parts: &[&[u8]]) -> [u8; 32] {
        let mut m = self.keyed.clone();
        m.update(domain);
        m.update(&[0]);
        for p in parts {
            m.update(p);
        }
        m.finalize().into_bytes().into()
    }
}

/// A position in the receipt chain: a sequence number and the chain value
/// after it. The trusted anchor, a page's head and an acknowledgement are
/// all heads.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReceiptHead {
    /// The sequence number of the last receipt covered (the anchor's own
    /// sequence number for the chain's start).
    pub seq: u64,
    /// The chain value at that point.
    pub chain: [u8; 32],
}

impl ReceiptHead {
    /// Parses `<seq>:<64 lowercase hex>`.
    pub fn parse(s: &str) -> Result<ReceiptHead, JournalError> {
        let bad = || JournalError::Receipt(ReceiptRefusal::HeadInvalid);
        let (seq, hex) = s.trim_end().split_once(':').ok_or_else(bad)?;
        if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let seq: u64 = seq.parse().map_err(|_| bad())?;
        let chain = glove_types::Sha256Digest::parse(hex).map_err(|_| bad())?;
        Ok(ReceiptHead {
            seq,
            chain: *chain.as_bytes(),
        })
    }

    /// Constant-time equality (the chain value is compared without an
    /// early exit).
    pub fn ct_eq(&self, other: &ReceiptHead) -> bool {
        let chain_eq: bool = self.chain.ct_eq(&other.chain).into();
        let seq_eq: bool = self
            .seq
            .to_le_bytes()
            .ct_eq(&other.seq.to_le_bytes())
            .into();
        chain_eq & seq_eq
    }
}

impl core::fmt::Display for ReceiptHead {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}:{}", self.seq, to_hex(&self.chain))
    }
}

impl core::fmt::Debug for ReceiptHead {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "ReceiptHead({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_parse_roundtrip() {
        let h = ReceiptHead {
            seq: 7,
            chain: [0xab; 32],
        };
        assert_eq!(ReceiptHead::parse(&h.to_string()).unwrap(), h);
        for bad in [
            "",
            "7",
            ":ab",
            "x:00",
            "-1:00",
            &format!("7:{}", "A".repeat(64)),
        ] {
            assert!(ReceiptHead::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn padded_key_equals_plain_hmac() {
        let key = ReceiptKey::from_bytes([7; 32]);
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&[7; 32]).unwrap();
        m.update(b"d\0m");
        let want: [u8; 32] = m.finalize().into_bytes().into();
        assert_eq!(key.mac(b"d", &[b"m"]), want);
        assert_ne!(
            key.mac(BODY_DOMAIN, &[b"m"]),
            key.mac(ENVELOPE_DOMAIN, &[b"m"])
        );
    }

    #[test]
    fn key_file() {
        let k = ReceiptKey::from_key_file(format!("{}\n", "0f".repeat(32)).as_bytes()).unwrap();
        let want = ReceiptKey::from_bytes([0x0f; 32]);
        assert_eq!(k.mac(b"d", &[b"m"]), want.mac(b"d", &[b"m"]));
        assert!(ReceiptKey::from_key_file(b"short").is_err());
    }
}
