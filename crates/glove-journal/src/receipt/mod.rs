//! The receipt journal: capacity reservations and HMAC-chained receipts,
//! delivered in pages and acknowledged by exact head.
//!
//! * **Reservations.** Before a session launches, [`ReceiptJournal::reserve`]
//!   durably sets aside room for one receipt of the largest size (one slot:
//!   bytes and one record). A reservation is refused when the file could not
//!   hold every outstanding slot plus the new one, so a held reservation can
//!   always be spent ([`ReceiptJournal::append_receipt`]) or released
//!   ([`ReceiptJournal::release`]), even when the journal is otherwise full.
//! * **Subjects.** Receipts, reservations and the index are keyed by a
//!   [`SessionId`], which is the receipt's *subject* id: the session of a
//!   `resource_v1` receipt, or the apply transaction of an `apply_v1`
//!   receipt (`SessionId::new(txn.as_str())`; both ids use the shared id
//!   charset). One key, one receipt: a session id equal to a transaction id
//!   shares the key, and the lifecycle's receipt log then fails closed
//!   (see [`crate::lifecycle`]).
//! * **Receipts.** A body is canonical JSON naming its [`ReceiptKind`]; it is
//!   sealed into an envelope whose `chain` MAC links it to the previous head
//!   and, transitively, to the trusted anchor (see [`envelope`]). The record
//!   is durable before `append_receipt` returns.
//! * **Delivery.** [`ReceiptJournal::page`] returns receipts after a sequence
//!   number within record and byte bounds, plus the head of what it
//!   delivered. [`ReceiptJournal::ack`] succeeds only for exactly that head
//!   (compared in constant time) and durably records it in the
//!   acknowledged-head file (see [`ack`](self::ack)), which is a second
//!   anchor: on open, a journal shorter than it, or diverging from it, is
//!   corrupt.
//! * **Anchor file.** `<journal>.anchor` (see [`crate::anchor_file`])
//!   holds the authenticated record count, byte length and head digest of
//!   the durable journal; it is rewritten after every durable append
//!   (reservation, receipt, release) before the call returns, and checked
//!   on open: a journal shorter than it (a cut, even at a record boundary,
//!   or an older copy put back), or diverging from it (a damaged record that
//!   would otherwise be cut off as a torn tail), is corrupt. If the anchor
//!   cannot be rewritten, that call fails and the handle refuses every later
//!   write (`journal_poisoned`); reopening recovers.
//! * **Evidence is never deleted.** [`ReceiptJournal::create`] refuses
//!   (`journal_missing_but_anchored`) where an anchor or acknowledged-head
//!   file is still present: the journal they vouch for is gone.
//! * **Compaction.** [`ReceiptJournal::compact`] rewrites the file to start
//!   at the acknowledged head, keeping outstanding reservations and unacked
//!   receipts byte for byte, so the chain stays verifiable from that head.
//!   The anchor file names both the old and the new file while the new one
//!   is renamed in place, so a crash at any step opens.
//!   [`ReceiptJournal::needs_compaction`] is the policy (call it after each
//!   ack); [`ReceiptJournal::reclaimable`] says what compaction would drop.
//! * **Open is cheap.** Replay checks each stored envelope over its stored
//!   canonical bytes (see [`scan`]) and falls back to the full parse only
//!   when that check does not accept, so the result — and every error code
//!   — is the full check's.
//! * **Verification.** [`verify_file`], [`verify_bytes`] and [`verify_page`]
//!   check receipts offline with only the key and a trusted head;
//!   [`verify_file_with`] also checks the anchor and acknowledged-head
//!   files.

mod ack;
mod body;
mod compact;
pub mod envelope;
pub mod mac;
pub mod records;
pub mod scan;
mod state;
mod verify;

pub use compact::{CompactReport, Reclaimable, COMPACT_AFTER_RECEIPTS, COMPACT_BUDGET_DIVISOR};
pub use envelope::ReceiptKind;
pub use mac::{ReceiptHead, ReceiptKey};
pub use state::StoredReceipt;
pub use verify::{
    verify_bytes, verify_evidence, verify_file, verify_file_with, verify_page, Evidence,
    EvidenceFiles, VerifyReport, VERIFY_MAX_BYTES,
};

use crate::anchor_file::{AnchorFile, AnchorRecord, RECEIPT_ANCHOR_DOMAIN};
use crate::error::{CorruptKind, JournalError, ReceiptRefusal};
use crate::format::{record_len, JournalKind, HEADER_LEN};
use crate::journal::{Journal, OpenReport};
use crate::placement;
use crate::spec::JournalSpec;
use envelope::{seal, ENVELOPE_OVERHEAD};
use glove_types::ids::SessionId;
use records::{encode_base, encode_id, KINDS, KIND_BASE, KIND_RECEIPT, KIND_RELEASE, KIND_RESERVE};
use state::{Check, ReceiptState};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Bounds of a receipt journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiptConfig {
    /// Largest file size in bytes.
    pub max_bytes: u64,
    /// Largest number of records (reservations, releases and receipts).
    pub max_records: u64,
    /// Largest receipt body in bytes.
    pub max_body_bytes: u32,
}

impl Default for ReceiptConfig {
    fn default() -> Self {
        ReceiptConfig {
            max_bytes: 64 * 1024 * 1024,
            max_records: 100_000,
            max_body_bytes: 64 * 1024,
        }
    }
}

impl ReceiptConfig {
    /// Largest envelope.
    pub fn max_envelope(&self) -> usize {
        self.max_body_bytes as usize + ENVELOPE_OVERHEAD
    }

    /// The journal spec these bounds give.
    pub fn spec(&self) -> JournalSpec {
        JournalSpec {
            kind: JournalKind::RECEIPTS,
            max_bytes: self.max_bytes,
            max_records: self.max_records,
            max_payload: u32::try_from(1 + 64 + self.max_envelope()).unwrap_or(u32::MAX),
            record_kinds: KINDS,
        }
    }

    /// Bytes one reservation sets aside: the largest receipt record.
    pub fn slot_bytes(&self) -> u64 {
        record_len(1 + 64 + self.max_envelope()) as u64
    }
}

/// The size of a receipt's record in a compacted file (no session id).
fn kept_receipt_len(envelope: &[u8]) -> u64 {
    record_len(1 + envelope.len()) as u64
}

/// A held reservation for one subject's receipt: a session's, or an apply
/// transaction's under the key `SessionId::new(txn.as_str())` (see the
/// module docs). Spend it with
/// [`ReceiptJournal::append_receipt`] or give it back with
/// [`ReceiptJournal::release`]. Not `Clone`: one token per reservation.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a reservation holds journal capacity until spent or released"]
pub struct Reservation {
    session: SessionId,
}

impl Reservation {
    /// The session the reservation is for.
    pub fn session(&self) -> &SessionId {
        &self.session
    }
}

/// A page of receipts and the head of what it delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// Receipts in sequence order.
    pub receipts: Vec<StoredReceipt>,
    /// The head after the last delivered receipt (the head at `after_seq`
    /// for an empty page). Acknowledge exactly this.
    pub head: ReceiptHead,
}

/// The durable receipt journal (see the module docs).
#[derive(Debug)]
pub struct ReceiptJournal {
    journal: Journal,
    key: ReceiptKey,
    config: ReceiptConfig,
    state: ReceiptState,
    /// The chain's starting head in the current file.
    base: ReceiptHead,
    /// The last durably acknowledged head.
    acked: Option<ReceiptHead>,
    /// The head of the last page served (in memory only).
    delivered: Option<ReceiptHead>,
    /// Bytes the unacknowledged receipts would take in a compacted file
    /// (kept up to date on append and ack, for [`Self::reclaimable`]).
    unacked_bytes: u64,
    dir: PathBuf,
    name: OsString,
    /// `<journal>.anchor`, rewritten after every durable append.
    anchor_file: AnchorFile,
    /// Set when the anchor file could not be rewritten: writes are refused.
    anchor_failed: bool,
}

impl ReceiptJournal {
    /// Creates a receipt journal whose chain starts at the trusted `anchor`,
    /// with its anchor file. Refused with `journal_missing_but_anchored`
    /// when an anchor file or an acknowledged-head file is already at the
    /// name: nothing is deleted, the operator decides.
    pub fn create(
        path: &Path,
        key: ReceiptKey,
        anchor: &ReceiptHead,
        config: ReceiptConfig,
    ) -> Result<ReceiptJournal, JournalError> {
        let anchor_file = AnchorFile::beside(path, key.clone(), RECEIPT_ANCHOR_DOMAIN)?;
        let (dir, name) = placement::split(path);
        let name = name.to_os_string();
        if anchor_file.exists() || ack::exists(&dir, &name)? {
            return Err(JournalError::corrupt(CorruptKind::MissingButAnchored, 0));
        }
        let base = encode_base(anchor);
        let journal =
            Journal::create_with_unguarded(path, &config.spec(), [(KIND_BASE, &base[..])])?;
        let mut j = ReceiptJournal {
            journal,
            key,
            config,
            state: ReceiptState {
                base: Some(*anchor),
                ..ReceiptState::default()
            },
            base: *anchor,
            acked: None,
            delivered: None,
            unacked_bytes: 0,
            dir,
            name,
            anchor_file,
            anchor_failed: false,
        };
        j.refresh_anchor(None)?;
        Ok(j)
    }

    /// Rewrites the anchor file from the journal's durable state (plus the
    /// anchor of a file about to replace it, during compaction).
    fn refresh_anchor(&mut self, next: Option<crate::Anchor>) -> Result<(), JournalError> {
        let rec = AnchorRecord {
            journal_id: self.journal.journal_id(),
            current: self.journal.anchor(),
            next,
        };
        crate::anchor_file::store_or_poison(&self.anchor_file, &mut self.anchor_failed, &rec)
    }

    fn writable(&self) -> Result<(), JournalError> {
        crate::anchor_file::refuse_if_poisoned(self.anchor_failed)
    }

    /// Opens a receipt journal: strict replay checked against the anchor
    /// file (a torn tail past the anchored prefix repaired), every receipt
    /// MAC verified, the chain checked against the trusted `anchor` and
    /// against the acknowledged head. The anchor file is then rewritten from
    /// what was opened. A missing anchor file is reported (`unanchored`) and
    /// a fresh one written, so a journal from before anchor files opens.
    ///
    /// The anchor must be the file's base or a head on its chain; after
    /// compaction the base may lie past the anchor, which is accepted only
    /// when the acknowledged head covers it.
    pub fn open(
        path: &Path,
        key: ReceiptKey,
        anchor: &ReceiptHead,
        config: ReceiptConfig,
    ) -> Result<(ReceiptJournal, OpenReport), JournalError> {
        let anchor_file = AnchorFile::beside(path, key.clone(), RECEIPT_ANCHOR_DOMAIN)?;
        let spec = config.spec();
        // The anchor (and, without one, the ack) is read under the
        // journal's lock: a holder that appended, compacted or anchored
        // meanwhile cannot leave what is checked stale.
        let (mut opened, record) = Journal::open_anchored_by(path, &spec, || {
            let record = anchor_file.load()?;
            if record.is_none() {
                // A journal that was ever acknowledged has been anchored
                // since: its anchor file missing now is a deletion, not a
                // journal from before anchors (that would reopen it to a
                // rollback).
                let (dir, name) = placement::split(path);
                if ack::exists(&dir, name)? {
                    return Err(JournalError::corrupt(CorruptKind::AnchorFileMissing, 0));
                }
            }
            let candidates = record.iter().flat_map(|r| r.candidates().copied());
            Ok((candidates.collect(), record))
        })?;
        match &record {
            None => opened.report.unanchored = true,
            Some(rec) => {
                if opened.journal.journal_id() != rec.journal_id {
                    return Err(JournalError::corrupt(CorruptKind::AnchorMismatch, 0));
                }
            }
        }
        let report = std::mem::take(&mut opened.report);
        let mut state = ReceiptState::default();
        for rec in opened.records() {
            state.apply(&key, &rec, config.max_envelope(), Check::Stored)?;
        }
        let at_base = HEADER_LEN as u64;
        let base = state.base.ok_or(JournalError::corrupt(
            CorruptKind::ReceiptRecordInvalid,
            at_base,
        ))?;
        let head = state.head().unwrap_or(base);
        let (dir, name) = placement::split(path);
        let name = name.to_os_string();
        let journal = opened.into_parts().0;
        let acked = ack::read(&dir, &name, &key, &journal.journal_id())?;
        let on_chain = |h: &ReceiptHead| state.head_at(h.seq).is_some_and(|x| x.ct_eq(h));
        if let Some(a) = &acked {
            if a.seq < base.seq {
                return Err(JournalError::corrupt(CorruptKind::ReceiptAckFileInvalid, 0));
            }
            if a.seq > head.seq || !on_chain(a) {
                return Err(JournalError::corrupt(
                    CorruptKind::ReceiptBehindAck,
                    journal.len_bytes(),
                ));
            }
        }
        if !on_chain(anchor) {
            if anchor.seq >= base.seq {
                return Err(JournalError::corrupt(
                    CorruptKind::ReceiptAnchorMismatch,
                    at_base,
                ));
            }
            if acked.is_none() {
                return Err(JournalError::corrupt(
                    CorruptKind::ReceiptAckMissing,
                    at_base,
                ));
            }
        }
        let acked_seq = acked.map_or(base.seq, |a| a.seq);
        let unacked_bytes = state
            .receipts
            .iter()
            .filter(|r| r.seq > acked_seq)
            .map(|r| kept_receipt_len(&r.envelope))
            .sum();
        let mut j = ReceiptJournal {
            journal,
            key,
            config,
            state,
            base,
            acked,
            delivered: None,
            unacked_bytes,
            dir,
            name,
            anchor_file,
            anchor_failed: false,
        };
        j.refresh_anchor(None)?;
        Ok((j, report))
    }

    /// Durably reserves room for `session`'s receipt.
    pub fn reserve(&mut self, session: &SessionId) -> Result<Reservation, JournalError> {
        self.writable()?;
        if self.state.outstanding.contains(session) {
            return Err(JournalError::Receipt(ReceiptRefusal::ReservationExists {
                session: session.clone(),
            }));
        }
        let payload = encode_id(Some(session), &[]);
        let slots = self.state.outstanding.len() as u64 + 1;
        let need_bytes = self.journal.len_bytes()
            + record_len(payload.len()) as u64
            + slots * self.config.slot_bytes();
        let need_records = self.journal.record_count() + 1 + slots;
        if need_bytes > self.config.max_bytes || need_records > self.config.max_records {
            return Err(JournalError::Receipt(ReceiptRefusal::ReservationRefused));
        }
        let _ = self.journal.append(KIND_RESERVE, &payload)?;
        self.state.outstanding.insert(session.clone());
        self.refresh_anchor(None)?;
        Ok(Reservation {
            session: session.clone(),
        })
    }

    /// A token for a reservation that is held on disk (for recovery after a
    /// restart); `None` if `session` holds none.
    pub fn held_reservation(&self, session: &SessionId) -> Option<Reservation> {
        self.state
            .outstanding
            .contains(session)
            .then(|| Reservation {
                session: session.clone(),
            })
    }

    /// Sessions holding a reservation.
    pub fn outstanding(&self) -> impl Iterator<Item = &SessionId> + '_ {
        self.state.outstanding.iter()
    }

    /// Seals `body` as the next receipt, spending `reservation`, and returns
    /// once it is durable. On a refusal (bad body) the reservation stays
    /// held. An `apply_v1` body must decode strictly and name the
    /// reservation's key as its `transaction_id` (`receipt_body_invalid`).
    pub fn append_receipt(
        &mut self,
        reservation: &Reservation,
        kind: ReceiptKind,
        body: &[u8],
    ) -> Result<StoredReceipt, JournalError> {
        self.writable()?;
        if !self.state.outstanding.contains(&reservation.session) {
            return Err(JournalError::Receipt(ReceiptRefusal::ReservationUnknown {
                session: reservation.session.clone(),
            }));
        }
        let prev = self.state.head().unwrap_or(self.base);
        let (envelope, head) = seal(
            &self.key,
            &prev,
            kind,
            body,
            self.config.max_body_bytes as usize,
        )?;
        // After the kind and canonical-form checks of `seal`, before
        // anything is written.
        body::check_body(kind, body, Some(&reservation.session)).map_err(|rejection| {
            JournalError::Invalid {
                field: "receipt body",
                rejection,
            }
        })?;
        let payload = encode_id(Some(&reservation.session), &envelope);
        let _ = self.journal.append(KIND_RECEIPT, &payload)?;
        self.state.outstanding.remove(&reservation.session);
        self.unacked_bytes += kept_receipt_len(&envelope);
        let stored = StoredReceipt {
            seq: head.seq,
            kind,
            chain: head.chain,
            envelope: envelope.into(),
        };
        self.state
            .push(Some(reservation.session.clone()), stored.clone());
        self.refresh_anchor(None)?;
        Ok(stored)
    }

    /// Durably gives a reservation back.
    pub fn release(&mut self, reservation: Reservation) -> Result<(), JournalError> {
        self.writable()?;
        if !self.state.outstanding.contains(&reservation.session) {
            return Err(JournalError::Receipt(ReceiptRefusal::ReservationUnknown {
                session: reservation.session,
            }));
        }
        let _ = self
            .journal
            .append(KIND_RELEASE, &encode_id(Some(&reservation.session), &[]))?;
        self.state.outstanding.remove(&reservation.session);
        self.refresh_anchor(None)
    }

    /// Receipts after `after_seq`: at most `max_records` of them and at most
    /// `max_bytes` of envelopes. The page's head becomes the only head
    /// [`ack`](Self::ack) accepts.
    pub fn page(
        &mut self,
        after_seq: u64,
        max_records: usize,
        max_bytes: u64,
    ) -> Result<Page, JournalError> {
        let head = self.head();
        if after_seq < self.base.seq {
            return Err(JournalError::Receipt(ReceiptRefusal::PageCompacted {
                base_seq: self.base.seq,
            }));
        }
        if after_seq > head.seq {
            return Err(JournalError::Receipt(ReceiptRefusal::PageOutOfRange {
                head_seq: head.seq,
            }));
        }
        let start = usize::try_from(after_seq - self.base.seq).unwrap_or(usize::MAX);
        let mut receipts = Vec::new();
        let mut bytes = 0u64;
        for r in self.state.receipts.iter().skip(start).take(max_records) {
            let len = r.envelope.len() as u64;
            if bytes + len > max_bytes {
                if receipts.is_empty() {
                    return Err(JournalError::Receipt(ReceiptRefusal::PageTooSmall {
                        needed: len,
                    }));
                }
                break;
            }
            bytes += len;
            receipts.push(r.clone());
        }
        let page_head = match receipts.last() {
            Some(r) => r.head(),
            None => self.state.head_at(after_seq).unwrap_or(head),
        };
        self.delivered = Some(page_head);
        Ok(Page {
            receipts,
            head: page_head,
        })
    }

    /// Acknowledges delivery up to `head`, which must be exactly the head
    /// of the last page served. Durable when it returns.
    pub fn ack(&mut self, head: &ReceiptHead) -> Result<(), JournalError> {
        let mismatch = || JournalError::Receipt(ReceiptRefusal::AckMismatch);
        let delivered = self.delivered.ok_or_else(mismatch)?;
        if !delivered.ct_eq(head) {
            return Err(mismatch());
        }
        if let Some(a) = &self.acked {
            if a.seq == head.seq {
                return Ok(());
            }
            if a.seq > head.seq {
                return Err(mismatch());
            }
        }
        ack::write(
            &self.dir,
            &self.name,
            &self.key,
            &self.journal.journal_id(),
            head,
        )?;
        let from = self.acked.map_or(self.base.seq, |a| a.seq);
        let skip = usize::try_from(from.saturating_sub(self.base.seq)).unwrap_or(usize::MAX);
        let take = usize::try_from(head.seq.saturating_sub(from)).unwrap_or(usize::MAX);
        let newly: u64 = self
            .state
            .receipts
            .iter()
            .skip(skip)
            .take(take)
            .map(|r| kept_receipt_len(&r.envelope))
            .sum();
        self.unacked_bytes = self.unacked_bytes.saturating_sub(newly);
        self.acked = Some(*head);
        Ok(())
    }

    /// The head after the newest receipt.
    pub fn head(&self) -> ReceiptHead {
        self.state.head().unwrap_or(self.base)
    }

    /// The head the chain starts from in the current file.
    pub fn base(&self) -> ReceiptHead {
        self.base
    }

    /// The last acknowledged head.
    pub fn acked(&self) -> Option<ReceiptHead> {
        self.acked
    }

    /// Receipts kept in the file, oldest first.
    pub fn receipts(&self) -> &[StoredReceipt] {
        &self.state.receipts
    }

    /// The kept receipts whose records name `session`, oldest first (an
    /// index lookup, not a scan).
    pub fn receipts_of(&self, session: &SessionId) -> Vec<&StoredReceipt> {
        self.state.of_session(session)
    }

    /// A read-only view of the underlying journal (its size, count and
    /// anchor). No raw writer is handed out: records reach this file only
    /// through the MAC-chained receipt writer.
    pub fn journal(&self) -> crate::journal::JournalView<'_> {
        crate::journal::JournalView::new(&self.journal)
    }
}
