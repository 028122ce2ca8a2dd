//! What replay of a receipt journal rebuilds, and the rules it enforces.
//!
//! The first record is the base head; receipts follow it with consecutive
//! sequence numbers, each envelope verified against the previous head with
//! the receipt key. Reservations are tracked per subject key (a session
//! id, or an apply transaction's id for an apply receipt: both are in the
//! shared id charset, and the journal calls the key "session" throughout):
//! a reservation for a key that already holds one, a release or receipt for
//! a key without one, a second base record, or a record before the base is
//! `receipt_record_invalid`; a MAC failure is `receipt_mac_mismatch`; a
//! sequence that does not follow is `receipt_sequence_invalid`.

use super::envelope::{verify, verify_stored, EnvelopeProblem, ReceiptKind};
use super::mac::{ReceiptHead, ReceiptKey};
use super::records::{decode_base, decode_id, KIND_BASE, KIND_RECEIPT, KIND_RELEASE, KIND_RESERVE};
use crate::error::{CorruptKind, JournalError};
use crate::journal::RecordView;
use glove_types::ids::SessionId;
use std::collections::{BTreeSet, HashMap};
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

/// The subject key an envelope's body names, when it names a valid one:
/// its `transaction_id` for an apply receipt, its `session_id` otherwise
/// ([`ReceiptKind::subject_field`]).
fn body_subject_key(kind: ReceiptKind, envelope: &[u8]) -> Option<SessionId> {
    let v: serde_json::Value = serde_json::from_slice(envelope).ok()?;
    SessionId::new(v.get("body")?.get(kind.subject_field())?.as_str()?).ok()
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
    /// The sequence numbers of each subject key's kept receipts (the key
    /// named by the receipt record: a session id, or an apply transaction's
    /// id), so a lookup is not a scan.
    pub(crate) by_session: HashMap<SessionId, Vec<u64>>,
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

    /// Keeps a receipt (of `session`, when its record names one).
    pub(crate) fn push(&mut self, session: Option<SessionId>, r: StoredReceipt) {
        if let Some(id) = session {
            self.by_session.entry(id).or_default().push(r.seq);
        }
        self.receipts.push(r);
    }

    /// Forgets the receipts up to and including `seq` (compaction).
    pub(crate) fn drop_through(&mut self, seq: u64) {
        self.receipts.retain(|r| r.seq > seq);
        self.by_session.retain(|_, seqs| {
            seqs.retain(|s| *s > seq);
            !seqs.is_empty()
        });
    }

    /// The kept receipts whose records name `session`, oldest first.
    pub(crate) fn of_session(&self, session: &SessionId) -> Vec<&StoredReceipt> {
        let first = self.receipts.first().map_or(0, |r| r.seq);
        self.by_session
            .get(session)
            .into_iter()
            .flatten()
            .filter_map(|seq| {
                let idx = usize::try_from(seq.checked_sub(first)?).ok()?;
                self.receipts.get(idx).filter(|r| r.seq == *seq)
            })
            .collect()
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
                super::body::check_stored(v.kind, rest, id.as_ref()).map_err(|_| invalid())?;
                if let Some(id) = &id {
                    self.outstanding.remove(id);
                }
                // A compacted file keeps receipts without the record's
                // key (their reservations are gone): index those by the
                // subject the MAC-covered body names.
                let session = id.or_else(|| body_subject_key(v.kind, rest));
                self.push(
                    session,
                    StoredReceipt {
                        seq: v.head.seq,
                        kind: v.kind,
                        chain: v.head.chain,
                        envelope: Arc::from(rest),
                    },
                );
                Ok(())
            }
            _ => Err(bad(CorruptKind::UnknownKind)),
        }
    }
}
