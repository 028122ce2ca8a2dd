//! The on-disk format shared by every journal: a fixed header, then records.
//!
//! All integers are little-endian. `docs/journal.md` describes the layout
//! byte by byte; the constants below are its single source.
//!
//! ```text
//! header (80 bytes)
//!   0  8  magic "GLOVEJNL"
//!   8  2  format version (1)
//!  10  2  journal kind
//!  12  4  reserved, zero
//!  16 16  journal id (random at creation, kept by compaction)
//!  32 16  salt (random per file)
//!  48 32  header digest = SHA-256("glove-journal-header-v1" 0x00 || bytes 0..48)
//!
//! record (FRAME_LEN + payload + 32 bytes)
//!   0  4  payload length
//!   4  2  record kind
//!   6  2  flags, zero
//!   8  8  sequence number (first record is 1)
//!  16  4  frame check = SHA-256("glove-journal-frame-v1" 0x00 || salt || bytes 0..16)[0..4]
//!  20  n  payload
//! 20+n 32 digest = SHA-256("glove-journal-record-v1" 0x00 || previous digest || bytes 0..20+n)
//! ```
//!
//! The previous digest of the first record is the header digest, so every
//! record digest commits to the journal id, the salt and all earlier records.

use sha2::{Digest as _, Sha256};

/// Length of the file header in bytes.
pub const HEADER_LEN: usize = 80;
/// Length of a record frame (the part before the payload).
pub const FRAME_LEN: usize = 20;
/// Length of the digest after each payload.
pub const DIGEST_LEN: usize = 32;
/// Bytes a record adds around its payload.
pub const RECORD_OVERHEAD: usize = FRAME_LEN + DIGEST_LEN;
/// The magic at offset 0.
pub const MAGIC: [u8; 8] = *b"GLOVEJNL";
/// The only format version this crate reads and writes.
pub const FORMAT_VERSION: u16 = 1;

const HEADER_DOMAIN: &[u8] = b"glove-journal-header-v1\0";
const FRAME_DOMAIN: &[u8] = b"glove-journal-frame-v1\0";
const RECORD_DOMAIN: &[u8] = b"glove-journal-record-v1\0";

/// What a journal file holds; written in the header and checked on open.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct JournalKind(pub u16);

impl JournalKind {
    /// The session store.
    pub const SESSION_STORE: JournalKind = JournalKind(1);
    /// The receipt journal.
    pub const RECEIPTS: JournalKind = JournalKind(2);
    /// A session's egress journal (`glove-egress`).
    pub const EGRESS: JournalKind = JournalKind(3);
    /// A session's MCP audit journal (`glove-mcp`).
    pub const MCP_AUDIT: JournalKind = JournalKind(4);
    /// The apply journal (`apply::ApplyJournal`).
    pub const APPLY: JournalKind = JournalKind(5);
    /// The path-exposure journal (`exposure::ExposureJournal`).
    pub const EXPOSURES: JournalKind = JournalKind(6);
    /// Free-form journals used by tests and tools.
    pub const GENERIC: JournalKind = JournalKind(0x7f00);
}

/// A decoded, digest-checked header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The journal kind.
    pub kind: JournalKind,
    /// The journal id.
    pub journal_id: [u8; 16],
    /// The per-file salt.
    pub salt: [u8; 16],
    /// The header digest (the chain's starting value).
    pub digest: [u8; 32],
}

impl Header {
    /// Builds a header and computes its digest.
    pub fn new(kind: JournalKind, journal_id: [u8; 16], salt: [u8; 16]) -> Header {
        let mut h = Header {
            kind,
            journal_id,
            salt,
            digest: [0; 32],
        };
        let bytes = h.encode();
        let mut d = Sha256::new();
        d.update(HEADER_DOMAIN);
        d.update(&bytes[..48]);
        h.digest = d.finalize().into();
        h
    }

    /// The header's 80 bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[10..12].copy_from_slice(&self.kind.0.to_le_bytes());
        b[16..32].copy_from_slice(&self.journal_id);
        b[32..48].copy_from_slice(&self.salt);
        b[48..80].copy_from_slice(&self.digest);
        b
    }
}

/// Why a header did not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HeaderProblem {
    /// Truncated or failing its digest.
    Corrupt,
    /// Intact but another magic, version, kind or non-zero reserved bytes.
    Mismatch,
}

/// Decodes and checks a header against the expected kind.
pub(crate) fn decode_header(bytes: &[u8], expect: JournalKind) -> Result<Header, HeaderProblem> {
    let b: &[u8; HEADER_LEN] = bytes
        .get(..HEADER_LEN)
        .and_then(|s| s.try_into().ok())
        .ok_or(HeaderProblem::Corrupt)?;
    let mut d = Sha256::new();
    d.update(HEADER_DOMAIN);
    d.update(&b[..48]);
    let digest: [u8; 32] = d.finalize().into();
    if digest[..] != b[48..80] {
        return Err(HeaderProblem::Corrupt);
    }
    let version = u16::from_le_bytes([b[8], b[9]]);
    let kind = u16::from_le_bytes([b[10], b[11]]);
    if b[0..8] != MAGIC || version != FORMAT_VERSION || kind != expect.0 || b[12..16] != [0; 4] {
        return Err(HeaderProblem::Mismatch);
    }
    let mut journal_id = [0u8; 16];
    journal_id.copy_from_slice(&b[16..32]);
    let mut salt = [0u8; 16];
    salt.copy_from_slice(&b[32..48]);
    Ok(Header {
        kind: JournalKind(kind),
        journal_id,
        salt,
        digest,
    })
}

/// A decoded record frame (not yet checked against the journal's rules).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Frame {
    pub(crate) len: u32,
    pub(crate) kind: u16,
    pub(crate) flags: u16,
    pub(crate) seq: u64,
}

fn frame_check(salt: &[u8; 16], first16: &[u8]) -> [u8; 4] {
    let mut d = Sha256::new();
    d.update(FRAME_DOMAIN);
    d.update(salt);
    d.update(first16);
    let out: [u8; 32] = d.finalize().into();
    [out[0], out[1], out[2], out[3]]
}

/// Decodes a frame; `None` if the check value does not match.
pub(crate) fn decode_frame(salt: &[u8; 16], b: &[u8; FRAME_LEN]) -> Option<Frame> {
    if frame_check(salt, &b[..16]) != b[16..20] {
        return None;
    }
    Some(Frame {
        len: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        kind: u16::from_le_bytes([b[4], b[5]]),
        flags: u16::from_le_bytes([b[6], b[7]]),
        seq: u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]),
    })
}

/// The chained digest of one record, given the frame bytes and payload.
pub(crate) fn record_digest(prev: &[u8; 32], frame: &[u8], payload: &[u8]) -> [u8; 32] {
    let mut d = Sha256::new();
    d.update(RECORD_DOMAIN);
    d.update(prev);
    d.update(frame);
    d.update(payload);
    d.finalize().into()
}

/// Appends one encoded record to `out` and returns its digest.
pub(crate) fn encode_record(
    out: &mut Vec<u8>,
    salt: &[u8; 16],
    prev: &[u8; 32],
    kind: u16,
    seq: u64,
    payload: &[u8],
) -> [u8; 32] {
    let mut frame = [0u8; FRAME_LEN];
    // Callers check the payload against a u32-sized bound first.
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    frame[0..4].copy_from_slice(&len.to_le_bytes());
    frame[4..6].copy_from_slice(&kind.to_le_bytes());
    frame[8..16].copy_from_slice(&seq.to_le_bytes());
    let check = frame_check(salt, &frame[..16]);
    frame[16..20].copy_from_slice(&check);
    let digest = record_digest(prev, &frame, payload);
    out.reserve(RECORD_OVERHEAD + payload.len());
    out.extend_from_slice(&frame);
    out.extend_from_slice(payload);
    out.extend_from_slice(&digest);
    digest
}

/// Builds a complete file image from records with caller-chosen kinds and
/// sequence numbers, with valid frame checks and chained digests, under a
/// fixed journal id and the given salt.
///
/// Nothing is checked: the image may break every rule replay enforces
/// (gaps, unknown kinds, oversized payloads). Tests and the fuzz target use
/// it to reach the checks behind the digests, which random bytes never pass.
pub fn encode_image(kind: JournalKind, salt: [u8; 16], records: &[(u16, u64, &[u8])]) -> Vec<u8> {
    let header = Header::new(kind, [0x4a; 16], salt);
    let mut out = header.encode().to_vec();
    let mut prev = header.digest;
    for (k, seq, payload) in records {
        prev = encode_record(&mut out, &salt, &prev, *k, *seq, payload);
    }
    out
}

/// Total on-disk size of a record with a payload of `payload_len` bytes.
pub const fn record_len(payload_len: usize) -> usize {
    RECORD_OVERHEAD + payload_len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip_and_checks() {
        let h = Header::new(JournalKind::GENERIC, [1; 16], [2; 16]);
        let b = h.encode();
        assert_eq!(decode_header(&b, JournalKind::GENERIC), Ok(h));
        assert_eq!(
            decode_header(&b, JournalKind::RECEIPTS),
            Err(HeaderProblem::Mismatch)
        );
        assert_eq!(
            decode_header(&b[..79], JournalKind::GENERIC),
            Err(HeaderProblem::Corrupt)
        );
        let mut bad = b;
        bad[20] ^= 1;
        assert_eq!(
            decode_header(&bad, JournalKind::GENERIC),
            Err(HeaderProblem::Corrupt)
        );
    }

    #[test]
    fn frame_roundtrip() {
        let mut out = Vec::new();
        let salt = [9; 16];
        encode_record(&mut out, &salt, &[0; 32], 3, 7, b"hello");
        assert_eq!(out.len(), record_len(5));
        let fb: [u8; FRAME_LEN] = out[..FRAME_LEN].try_into().unwrap();
        let f = decode_frame(&salt, &fb).unwrap();
        assert_eq!((f.len, f.kind, f.flags, f.seq), (5, 3, 0, 7));
        assert!(decode_frame(&[8; 16], &fb).is_none());
    }
}
