//! Offline verification of receipts with only the key and a trusted anchor.
//!
//! [`verify_file`] reads a receipt-journal file (read-only, no placement
//! demands, nothing repaired), replays it strictly and verifies every
//! envelope's sequence number and both MACs from the file's base head. The
//! trusted anchor must be the base or a head on the verified chain; a file
//! compacted past the anchor cannot be checked against it and is refused.
//! [`verify_page`] checks a delivered page the same way, starting from the
//! head the consumer already trusts.

use super::envelope::{verify, EnvelopeProblem};
use super::mac::{ReceiptHead, ReceiptKey};
use super::records::KINDS;
use super::state::ReceiptState;
use crate::error::{CorruptKind, IoOp, JournalError};
use crate::format::{JournalKind, HEADER_LEN};
use crate::journal::RecordView;
use crate::placement;
use crate::replay::replay_bytes;
use crate::spec::JournalSpec;
use rustix::fd::AsFd;
use std::path::Path;

/// Largest file the verifier reads.
pub const VERIFY_MAX_BYTES: u64 = 1 << 30;
/// Largest envelope the verifier accepts.
const VERIFY_MAX_ENVELOPE: usize = 16 << 20;

const VERIFY_SPEC: JournalSpec = JournalSpec {
    kind: JournalKind::RECEIPTS,
    max_bytes: VERIFY_MAX_BYTES,
    max_records: u64::MAX,
    max_payload: (VERIFY_MAX_ENVELOPE + 65) as u32,
    record_kinds: KINDS,
};

/// What a successful verification established.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyReport {
    /// The journal id from the header.
    pub journal_id: [u8; 16],
    /// The head the file's chain starts from.
    pub base: ReceiptHead,
    /// The head after the newest receipt.
    pub head: ReceiptHead,
    /// Receipts verified.
    pub receipts: u64,
    /// Receipts after the trusted anchor (the ones the anchor vouches for).
    pub receipts_after_anchor: u64,
    /// Reservations held at the end of the file.
    pub outstanding_reservations: u64,
    /// Bytes of a torn tail that a writer would cut off on open.
    pub torn_tail_bytes: Option<u64>,
}

/// Verifies a whole receipt-journal image.
pub fn verify_bytes(
    bytes: &[u8],
    key: &ReceiptKey,
    anchor: &ReceiptHead,
) -> Result<VerifyReport, JournalError> {
    let replayed = replay_bytes(bytes, &VERIFY_SPEC, None)?;
    let mut state = ReceiptState::default();
    for m in &replayed.records {
        let view = RecordView {
            kind: m.kind,
            seq: m.seq,
            offset: m.offset,
            payload: bytes.get(m.payload.clone()).unwrap_or(&[]),
        };
        state.apply(key, &view, VERIFY_MAX_ENVELOPE)?;
    }
    let at_base = HEADER_LEN as u64;
    let base = state.base.ok_or(JournalError::corrupt(
        CorruptKind::ReceiptRecordInvalid,
        at_base,
    ))?;
    let head = state.head().unwrap_or(base);
    if !state.head_at(anchor.seq).is_some_and(|h| h.ct_eq(anchor)) {
        return Err(JournalError::corrupt(
            CorruptKind::ReceiptAnchorMismatch,
            at_base,
        ));
    }
    Ok(VerifyReport {
        journal_id: replayed.header.journal_id,
        base,
        head,
        receipts: state.receipts.len() as u64,
        receipts_after_anchor: head.seq - anchor.seq,
        outstanding_reservations: state.outstanding.len() as u64,
        torn_tail_bytes: replayed.torn.map(|t| t.len),
    })
}

/// Verifies the receipt-journal file at `path` (see the module docs).
pub fn verify_file(
    path: &Path,
    key: &ReceiptKey,
    anchor: &ReceiptHead,
) -> Result<VerifyReport, JournalError> {
    let fd = placement::open_readonly(path)?;
    let size = rustix::fs::fstat(&fd)
        .map_err(JournalError::io(IoOp::Stat))?
        .st_size;
    let size = u64::try_from(size).unwrap_or(u64::MAX);
    if size > VERIFY_MAX_BYTES {
        return Err(JournalError::corrupt(
            CorruptKind::BoundExceeded,
            VERIFY_MAX_BYTES,
        ));
    }
    let bytes = placement::read_exact(fd.as_fd(), size)?;
    verify_bytes(&bytes, key, anchor)
}

/// Verifies the envelopes of a page, in order, starting after the trusted
/// head `from`; returns the head after the last one (compare it with the
/// page's head). A failure's offset is the index of the envelope.
pub fn verify_page<'a>(
    envelopes: impl IntoIterator<Item = &'a [u8]>,
    key: &ReceiptKey,
    from: &ReceiptHead,
) -> Result<ReceiptHead, JournalError> {
    let mut head = *from;
    for (i, env) in envelopes.into_iter().enumerate() {
        let v = verify(key, &head, env, VERIFY_MAX_ENVELOPE).map_err(|p| {
            let kind = match p {
                EnvelopeProblem::Malformed => CorruptKind::ReceiptRecordInvalid,
                EnvelopeProblem::Sequence => CorruptKind::ReceiptSequenceInvalid,
                EnvelopeProblem::Mac => CorruptKind::ReceiptMacMismatch,
            };
            JournalError::corrupt(kind, i as u64)
        })?;
        head = v.head;
    }
    Ok(head)
}
