//! What replay of a receipt journal rebuilds, and the rules it enforces.
//!
//! The first record is the base head; receipts follow it with consecutive
//! sequence numbers, each envelope verified against the previous head with
//! the receipt key. Reservations are tracked per session: a reservation for
//! a session that already holds one, a release or receipt for a session
//! without one, a second base record, or a record before the base is
//! `receipt_record_invalid`; a MAC failure is `receipt_mac_mismatch`; a
//! sequence that does not follow is `receipt_sequence_invalid`.

use super::envelope::{verify, verify_stored, EnvelopeProblem, ReceiptKind};
use super::mac::{ReceiptHead, ReceiptKey};
use super::records::{decode_base, decode_id, KIND_BASE, KIND_RECEIPT, KIND_RELEASE, KIND_RESERVE};
use crate::error::{CorruptKind, JournalError};
use crate::journal::RecordView;
use glove_types::ids::SessionId;
use std::collections::BTreeSet;
use std::sync::Arc;

/// One stored receipt, kept in memory for paging.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredReceipt {
    /// The receipt sequence number.
    pub seq: u64,
    /// The receipt kind.
    pub kind: ReceiptKind,
    /// The chain value after this receipt.
    pub chain: [u8; 32],
    /// The canonical envelope bytes, exactly as stored and delivered.
    pub envelope: Arc<[u8]>,
}

impl StoredReceipt {
    /// The head after this receipt.
    pub fn head(&self) -> ReceiptHead {
        ReceiptHead {
            seq: self.seq,
            chain: self.chain,
        }
    }
}

/// How replay checks each envelope. Both give the same result for every
/// input (see [`verify_stored`]); `Full` is kept for the offline verifier,
/// which does not depend on the cheap check's argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// Parse every envelope into a JSON tree and re-encode it.
    Full,
    /// The cheap check over the stored bytes, the full one when it does
    /// not accept.
    Stored,
}

/// The replayed state of a receipt journal.
#[derive(Clone, Debug, Default)]
pub(crate) struct ReceiptState {
    pub(crate) base: Option<ReceiptHead>,
    pub(crate) receipts: Vec<StoredReceipt>,
    pub(crate) outstanding: BTreeSet<SessionId>,
}

impl ReceiptState {
    /// The head after the last receipt (the base when there is none).
    pub(crate) fn head(&self) -> Option<ReceiptHead> {
        self.receipts.last().map(StoredReceipt::head).or(self.base)
    }

    /// The head at `seq`, if it is the base or a kept receipt.
    pub(crate) fn head_at(&self, seq: u64) -> Option<ReceiptHead> {
        let base = self.base?;
        if seq == base.seq {
            return Some(base);
        }
        let idx = usize::try_from(seq.checked_sub(base.seq)?.checked_sub(1)?).ok()?;
        self.receipts.get(idx).map(StoredReceipt::head)
    }

    /// Applies one stored record.
    pub(crate) fn apply(
        &mut self,
        key: &ReceiptKey,
        rec: &RecordView<'_>,
        max_envelope: usize,
        check: Check,
    ) -> Result<(), JournalError> {
        let bad = |kind| JournalError::corrupt(kind, rec.offset);
        let invalid = || bad(CorruptKind::ReceiptRecordInvalid);
        if rec.kind == KIND_BASE {
            if self.base.is_some() {
                return Err(invalid());
            }
            self.base = Some(decode_base(rec.payload).ok_or_else(invalid)?);
            return Ok(());
        }
        let prev = self.head().ok_or_else(invalid)?;
        let (id, rest) = decode_id(rec.payload).map_err(|_| invalid())?;
        match rec.kind {
            KIND_RESERVE | KIND_RELEASE => {
                let id = id.ok_or_else(invalid)?;
                if !rest.is_empty() {
                    return Err(invalid());
                }
                let ok = if rec.kind == KIND_RESERVE {
                    self.outstanding.insert(id)
                } else {
                    self.outstanding.remove(&id)
                };
                if ok {
                    Ok(())
                } else {
                    Err(invalid())
                }
            }
            KIND_RECEIPT => {
                if let Some(id) = &id {
                    if !self.outstanding.contains(id) {
                        return Err(invalid());
                    }
                }
                let v = match check {
                    Check::Full => verify(key, &prev, rest, max_envelope),
                    Check::Stored => verify_stored(key, &prev, rest, max_envelope),
                };
                let v = v.map_err(|p| match p {
                    EnvelopeProblem::Malformed => invalid(),
                    EnvelopeProblem::Sequence => bad(CorruptKind::ReceiptSequenceInvalid),
                    EnvelopeProblem::Mac => bad(CorruptKind::ReceiptMacMismatch),
                })?;
                if let Some(id) = &id {
                    self.outstanding.remove(id);
                }
                self.receipts.push(StoredReceipt {
                    seq: v.head.seq,
                    kind: v.kind,
                    chain: v.head.chain,
                    envelope: Arc::from(rest),
                });
                Ok(())
            }
            _ => Err(bad(CorruptKind::UnknownKind)),
        }
    }
}
