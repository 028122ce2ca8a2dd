//! Offline verification of receipts with only the key and a trusted anchor.
//!
//! [`verify_file`] reads a receipt-journal file (read-only, no placement
//! demands, nothing repaired), replays it strictly and verifies every
//! envelope's sequence number and both MACs from the file's base head. The
//! trusted anchor must be the base or a head on the verified chain; a file
//! compacted past the anchor cannot be checked against it and is refused.
//! [`verify_page`] checks a delivered page the same way, starting from the
//! head the consumer already trusts. Every kind shares the one chain; an
//! `apply_v1` body must also decode strictly and name the transaction its
//! record is filed under (see [`super::body`]), else
//! `receipt_record_invalid`.
//!
//! [`verify_file_with`] (and [`verify_evidence`] on bytes) also checks the
//! evidence kept beside the journal: the anchor file (the file must match
//! it — not be shorter, cut at a boundary, an older copy, or another
//! journal; a damaged record inside the anchored prefix is corruption, not
//! a torn tail) and the acknowledged-head file (it must verify, belong to
//! this journal and name a head on the verified chain).

use super::ack;
use super::envelope::{verify, EnvelopeProblem, ReceiptKind};
use super::mac::{ReceiptHead, ReceiptKey};
use super::records::KINDS;
use super::state::{Check, ReceiptState};
use crate::anchor_file::{self, ANCHOR_FILE_LEN, RECEIPT_ANCHOR_DOMAIN};
use crate::error::{CorruptKind, IoOp, JournalError};
use crate::format::{JournalKind, HEADER_LEN};
use crate::journal::RecordView;
use crate::placement;
use crate::replay::replay_bytes;
use crate::spec::JournalSpec;
use glove_types::receipt::ApplyReceiptV1;
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
    /// Whether the file was checked against an anchor file.
    pub anchor_checked: bool,
    /// The acknowledged head, when an acknowledged-head file was checked.
    pub acknowledged: Option<ReceiptHead>,
    /// Receipts verified, per kind (kinds with none left out, in
    /// [`ReceiptKind::ALL`] order).
    pub by_kind: Vec<(ReceiptKind, u64)>,
    /// The apply receipts verified, with their sequence numbers, oldest
    /// first (their bodies decoded strictly), for a person to read.
    pub apply_receipts: Vec<(u64, ApplyReceiptV1)>,
}

/// The evidence kept beside a receipt journal, as bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Evidence<'a> {
    /// The anchor file; `None` skips the anchor check.
    pub anchor_file: Option<&'a [u8]>,
    /// The acknowledged-head file; `None` when there is none.
    pub ack_file: Option<&'a [u8]>,
}

/// Where the evidence kept beside a receipt journal is.
#[derive(Clone, Copy, Debug, Default)]
pub struct EvidenceFiles<'a> {
    /// The anchor file, which must exist; `None` skips the anchor check.
    pub anchor_file: Option<&'a Path>,
    /// The acknowledged-head file; checked when it exists.
    pub ack_file: Option<&'a Path>,
}

/// Verifies a whole receipt-journal image.
pub fn verify_bytes(
    bytes: &[u8],
    key: &ReceiptKey,
    anchor: &ReceiptHead,
) -> Result<VerifyReport, JournalError> {
    verify_evidence(bytes, key, anchor, &Evidence::default())
}

/// Verifies a whole receipt-journal image and the evidence beside it (see
/// the module docs).
pub fn verify_evidence(
    bytes: &[u8],
    key: &ReceiptKey,
    anchor: &ReceiptHead,
    evidence: &Evidence<'_>,
) -> Result<VerifyReport, JournalError> {
    let replayed = match evidence.anchor_file {
        None => replay_bytes(bytes, &VERIFY_SPEC, None)?,
        Some(file) => {
            let rec = anchor_file::decode(key, RECEIPT_ANCHOR_DOMAIN, file)?;
            let r = anchor_file::open_matching(rec.candidates(), |a| {
                replay_bytes(bytes, &VERIFY_SPEC, Some(a))
            })?;
            if r.header.journal_id != rec.journal_id {
                return Err(JournalError::corrupt(CorruptKind::AnchorMismatch, 0));
            }
            r
        }
    };
    let mut state = ReceiptState::default();
    for m in &replayed.records {
        let view = RecordView {
            kind: m.kind,
            seq: m.seq,
            offset: m.offset,
            payload: bytes.get(m.payload.clone()).unwrap_or(&[]),
        };
        state.apply(key, &view, VERIFY_MAX_ENVELOPE, Check::Full)?;
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
    let acknowledged = match evidence.ack_file {
        None => None,
        Some(b) => {
            let a = ack::decode(key, &replayed.header.journal_id, b)?;
            if a.seq < base.seq {
                return Err(JournalError::corrupt(CorruptKind::ReceiptAckFileInvalid, 0));
            }
            if !state.head_at(a.seq).is_some_and(|h| h.ct_eq(&a)) {
                return Err(JournalError::corrupt(
                    CorruptKind::ReceiptBehindAck,
                    bytes.len() as u64,
                ));
            }
            Some(a)
        }
    };
    let by_kind = ReceiptKind::ALL
        .into_iter()
        .map(|k| {
            let n = state.receipts.iter().filter(|r| r.kind == k).count();
            (k, n as u64)
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    let apply_receipts = state
        .receipts
        .iter()
        .filter(|r| r.kind == ReceiptKind::ApplyV1)
        .map(|r| {
            // Replay already decoded every apply body strictly.
            let body = super::body::apply_body(&r.envelope)
                .map_err(|_| JournalError::corrupt(CorruptKind::ReceiptRecordInvalid, r.seq))?;
            Ok((r.seq, body))
        })
        .collect::<Result<_, JournalError>>()?;
    Ok(VerifyReport {
        by_kind,
        apply_receipts,
        anchor_checked: evidence.anchor_file.is_some(),
        acknowledged,
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
    verify_bytes(&read_journal(path)?, key, anchor)
}

fn read_journal(path: &Path) -> Result<Vec<u8>, JournalError> {
    crate::read_bounded(path, VERIFY_MAX_BYTES)
}

/// Reads a small evidence file of exactly `len` bytes; `None` when there
/// is none. A file of another size is `invalid`.
fn read_small(
    path: &Path,
    len: usize,
    invalid: CorruptKind,
) -> Result<Option<Vec<u8>>, JournalError> {
    let fd = match placement::open_readonly(path) {
        Ok(fd) => fd,
        Err(JournalError::NotFound) => return Ok(None),
        Err(e) => return Err(e),
    };
    let size = rustix::fs::fstat(&fd)
        .map_err(JournalError::io(IoOp::Stat))?
        .st_size;
    if u64::try_from(size).ok() != Some(len as u64) {
        return Err(JournalError::corrupt(invalid, 0));
    }
    placement::read_exact(fd.as_fd(), len as u64).map(Some)
}

/// Verifies the receipt-journal file at `path` and the evidence beside it
/// (see the module docs). A named anchor file must exist
/// (`journal_anchor_file_missing`); a named acknowledged-head file is
/// checked when it exists.
pub fn verify_file_with(
    path: &Path,
    key: &ReceiptKey,
    anchor: &ReceiptHead,
    files: &EvidenceFiles<'_>,
) -> Result<VerifyReport, JournalError> {
    let anchor_bytes = match files.anchor_file {
        None => None,
        Some(p) => Some(
            read_small(p, ANCHOR_FILE_LEN, CorruptKind::AnchorFileInvalid)?
                .ok_or(JournalError::corrupt(CorruptKind::AnchorFileMissing, 0))?,
        ),
    };
    let ack_bytes = match files.ack_file {
        None => None,
        Some(p) => read_small(p, ack::LEN, CorruptKind::ReceiptAckFileInvalid)?,
    };
    let bytes = read_journal(path)?;
    verify_evidence(
        &bytes,
        key,
        anchor,
        &Evidence {
            anchor_file: anchor_bytes.as_deref(),
            ack_file: ack_bytes.as_deref(),
        },
    )
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
        // A page carries envelopes only (no record keys): the body's own
        // rules are checked, the key binding was checked on append.
        super::body::check_stored(v.kind, env, None)
            .map_err(|_| JournalError::corrupt(CorruptKind::ReceiptRecordInvalid, i as u64))?;
        head = v.head;
    }
    Ok(head)
}
