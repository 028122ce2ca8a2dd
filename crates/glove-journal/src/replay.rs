//! Strict replay of a journal's bytes: the pure decoder behind every open.
//!
//! [`replay_bytes`] walks the records of an in-memory file image and either
//! returns every valid record (plus, at most, one torn tail to cut off) or
//! fails closed with [`JournalError::Corrupt`]. It does no I/O and never
//! panics, whatever the input; the fuzz target feeds it arbitrary bytes.
//!
//! The classification, in the order the checks run at each record start:
//!
//! | situation | class |
//! | --- | --- |
//! | file shorter than the anchor's byte length | corrupt, `journal_shorter_than_anchor` |
//! | file longer than the byte bound | corrupt, `journal_bound_exceeded` |
//! | header truncated or failing its digest | corrupt, `journal_header_corrupt` |
//! | header for another magic/version/kind | corrupt, `journal_header_mismatch` |
//! | fewer bytes left than a frame | torn |
//! | frame check fails, and every byte left is zero | torn (a zero-filled extension) |
//! | frame check fails otherwise, or reserved flags set | corrupt, `journal_frame_corrupt` |
//! | length past the record bound | corrupt, `journal_record_too_long` |
//! | record kind not carried | corrupt, `journal_record_kind_unknown` |
//! | sequence ahead / equal to previous / behind | corrupt, gap / duplicate / reordered |
//! | one record more than the record bound | corrupt, `journal_bound_exceeded` |
//! | record extends past the end of the file | torn |
//! | digest wrong, record ends exactly at end of file | torn |
//! | digest wrong, bytes follow | corrupt, `journal_record_digest_mismatch` |
//!
//! A torn tail inside the anchored prefix, or records that do not end where
//! the anchor says with the anchored digest, are `journal_anchor_mismatch`.
//! Because the frame carries its own check value, a damaged length field in a
//! complete frame is corrupt rather than mistaken for a torn tail.

use crate::anchor::Anchor;
use crate::error::{CorruptKind, JournalError};
use crate::format::{
    decode_frame, decode_header, record_digest, Header, HeaderProblem, DIGEST_LEN, FRAME_LEN,
    HEADER_LEN,
};
use crate::spec::JournalSpec;
use core::ops::Range;

/// One valid record found by replay; the payload is a range of the image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordMeta {
    /// The record kind.
    pub kind: u16,
    /// The sequence number (1-based, contiguous).
    pub seq: u64,
    /// Byte offset of the record's frame in the file.
    pub offset: u64,
    /// Where the payload lies in the replayed image.
    pub payload: Range<usize>,
    /// The record's chained digest.
    pub digest: [u8; 32],
}

/// A torn tail that open will cut off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TornTail {
    /// Where the valid prefix ends (and the tail starts).
    pub offset: u64,
    /// How many bytes the tail holds.
    pub len: u64,
}

/// The result of a successful replay.
#[derive(Clone, Debug)]
pub struct Replayed {
    /// The checked header.
    pub header: Header,
    /// Every valid record, in order.
    pub records: Vec<RecordMeta>,
    /// Length of the valid prefix in bytes.
    pub valid_len: u64,
    /// The chained digest at the end of the valid prefix.
    pub head: [u8; 32],
    /// The torn tail after the valid prefix, if any.
    pub torn: Option<TornTail>,
}

impl Replayed {
    /// The anchor describing the valid prefix.
    pub fn anchor(&self) -> Anchor {
        Anchor {
            records: self.records.len() as u64,
            byte_len: self.valid_len,
            head: self.head,
        }
    }
}

fn to_u64(n: usize) -> u64 {
    // usize is at most 64 bits on every supported target.
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Replays a whole journal image strictly (see the module docs).
pub fn replay_bytes(
    bytes: &[u8],
    spec: &JournalSpec,
    anchor: Option<&Anchor>,
) -> Result<Replayed, JournalError> {
    let file_len = to_u64(bytes.len());
    if let Some(a) = anchor {
        if file_len < a.byte_len {
            return Err(JournalError::corrupt(
                CorruptKind::ShorterThanAnchor,
                file_len,
            ));
        }
    }
    if file_len > spec.max_bytes {
        return Err(JournalError::corrupt(
            CorruptKind::BoundExceeded,
            spec.max_bytes,
        ));
    }
    let header = decode_header(bytes, spec.kind).map_err(|p| {
        let kind = match p {
            HeaderProblem::Corrupt => CorruptKind::HeaderCorrupt,
            HeaderProblem::Mismatch => CorruptKind::HeaderMismatch,
        };
        JournalError::corrupt(kind, 0)
    })?;

    let mut off = HEADER_LEN;
    let mut prev = header.digest;
    let mut records: Vec<RecordMeta> = Vec::new();
    let check_anchor = |count: u64, end: usize, head: &[u8; 32]| -> Result<(), JournalError> {
        match anchor {
            Some(a) if a.records == count && (a.byte_len != to_u64(end) || a.head != *head) => Err(
                JournalError::corrupt(CorruptKind::AnchorMismatch, to_u64(end)),
            ),
            _ => Ok(()),
        }
    };
    check_anchor(0, off, &prev)?;

    let torn_at = loop {
        let rest = bytes.get(off..).unwrap_or(&[]);
        if rest.is_empty() {
            break None;
        }
        let Some(frame_bytes) = rest.get(..FRAME_LEN).and_then(|s| s.try_into().ok()) else {
            break Some(off);
        };
        let here = to_u64(off);
        let Some(frame) = decode_frame(&header.salt, frame_bytes) else {
            if rest.iter().all(|b| *b == 0) {
                break Some(off);
            }
            return Err(JournalError::corrupt(CorruptKind::FrameCorrupt, here));
        };
        if frame.flags != 0 {
            return Err(JournalError::corrupt(CorruptKind::FrameCorrupt, here));
        }
        if frame.len > spec.max_payload {
            return Err(JournalError::corrupt(CorruptKind::RecordTooLong, here));
        }
        if !spec.carries(frame.kind) {
            return Err(JournalError::corrupt(CorruptKind::UnknownKind, here));
        }
        let count = to_u64(records.len());
        let expected = count + 1;
        if frame.seq != expected {
            let kind = if frame.seq > expected {
                CorruptKind::SequenceGap
            } else if frame.seq == count && count > 0 {
                CorruptKind::SequenceDuplicate
            } else {
                CorruptKind::SequenceReordered
            };
            return Err(JournalError::corrupt(kind, here));
        }
        if count >= spec.max_records {
            return Err(JournalError::corrupt(CorruptKind::BoundExceeded, here));
        }
        // frame.len <= max_payload (a u32), so this cannot overflow usize.
        let payload_start = off + FRAME_LEN;
        let payload_end = payload_start + frame.len as usize;
        let end = payload_end + DIGEST_LEN;
        let (Some(payload), Some(stored)) = (
            bytes.get(payload_start..payload_end),
            bytes.get(payload_end..end),
        ) else {
            break Some(off);
        };
        let digest = record_digest(&prev, frame_bytes, payload);
        if digest[..] != stored[..] {
            if end == bytes.len() {
                break Some(off);
            }
            return Err(JournalError::corrupt(CorruptKind::DigestMismatch, here));
        }
        records.push(RecordMeta {
            kind: frame.kind,
            seq: frame.seq,
            offset: here,
            payload: payload_start..payload_end,
            digest,
        });
        prev = digest;
        off = end;
        check_anchor(expected, off, &prev)?;
    };

    let valid_len = to_u64(off);
    if let Some(a) = anchor {
        if to_u64(records.len()) < a.records || valid_len < a.byte_len {
            return Err(JournalError::corrupt(
                CorruptKind::AnchorMismatch,
                valid_len,
            ));
        }
    }
    Ok(Replayed {
        header,
        records,
        valid_len,
        head: prev,
        torn: torn_at.map(|o| TornTail {
            offset: to_u64(o),
            len: file_len - to_u64(o),
        }),
    })
}
