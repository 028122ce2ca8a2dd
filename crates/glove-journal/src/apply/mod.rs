//! The apply journal: the durable log of apply transactions.
//!
//! One [`Journal`] of kind [`JournalKind::APPLY`] (guarded: no generic
//! handle can open it), one record kind, each record's payload a
//! glove-lifecycle `ApplyRecord`'s canonical bytes exactly as the lifecycle
//! appended them. So it inherits the journal's guarantees: bounded, append
//! only, every append `fdatasync`'d before it returns, strict replay with a
//! torn tail cut off once (and saved aside), anything else corrupt, one
//! exclusive writer. With an [`AnchorFile`] (domain
//! [`APPLY_ANCHOR_DOMAIN`]) it also refuses a file cut back at a record
//! boundary or replaced by an older copy, which matters here: a lost
//! reservation would make its grant, authorization and manifest usable
//! again.
//!
//! * [`ApplyLog`] implements the lifecycle's [`TransitionLog`] for apply
//!   subjects (a session record is refused with
//!   `journal_record_kind_refused`): record `seq` of a transaction is
//!   accepted only as its next record, record 0 only as a reservation whose
//!   three single-use values were never reserved before in the file.
//! * On open every record is decoded and every transaction replayed
//!   strictly (`replay_apply`); every reservation in history goes into a
//!   fresh [`SingleUseRegistry`] (entries are never removed, failed or
//!   ambiguous transactions included), so each grant id, authorization
//!   digest and manifest digest is used at most once across restarts. A
//!   record that does not decode, a history that does not replay or a value
//!   reserved twice is corrupt (`apply_journal_record_invalid`).
//! * [`ApplyJournal::transactions`] hands every transaction's `AnyApply` to
//!   start-up recovery.
//! * Room: a transaction needs at most [`RECORDS_PER_TRANSACTION`] records.
//!   A reservation is refused (`apply_journal_no_room`) unless the file has
//!   room for its records *and* for the records every live transaction may
//!   still need, each at the largest record size, so a reserved
//!   transaction can always reach `failed`, `applied` or `ambiguous`.
//!
//! There is no compaction: the file is the single-use registry's memory.
//! At [`MAX_APPLY_JOURNAL_RECORDS`] records it holds a few thousand
//! transactions; an operator rotates it by hand (keeping the old one's
//! values out of use is then theirs to ensure).

pub use crate::anchor_file::APPLY_ANCHOR_DOMAIN;
use crate::anchor_file::{AnchorFile, AnchorRecord};
use crate::error::{CorruptKind, JournalError};
use crate::format::{record_len, JournalKind};
use crate::journal::{Journal, OpenReport};
use crate::spec::JournalSpec;
use glove_lifecycle::apply::{
    replay_apply, AnyApply, ApplyEntry, ApplyRecord, SingleUseRegistry, TransactionId,
};
use glove_lifecycle::{
    AppendReceipt, LifecycleError, PendingRecord, PortError, StoredRecord, Subject, TransitionLog,
};
use glove_types::codes::apply::APPLY_JOURNAL_NO_ROOM;
use glove_types::codes::journal::JOURNAL_RECORD_KIND_REFUSED;
use glove_types::codes::lifecycle::{
    LIFECYCLE_RECORD_INVALID, LIFECYCLE_RECORD_MISSING_CREATION, LIFECYCLE_RECORD_SEQUENCE,
};
use glove_types::stage::ApplyState;
use std::collections::BTreeMap;
use std::path::Path;

/// The one record kind: an apply record's canonical bytes.
pub const KIND_APPLY_RECORD: u16 = 1;
/// Largest apply record payload (the lifecycle's records are a few hundred
/// bytes).
pub const MAX_APPLY_RECORD_BYTES: usize = 1024;
/// Byte bound of the apply journal file.
pub const MAX_APPLY_JOURNAL_BYTES: u64 = 16 * 1024 * 1024;
/// Record bound of the apply journal file.
pub const MAX_APPLY_JOURNAL_RECORDS: u64 = 16_000;
/// Most records one transaction has: reserved, prepared, committed and a
/// terminal or ambiguous record.
pub const RECORDS_PER_TRANSACTION: u64 = 4;

/// The apply journal's spec.
pub const APPLY_JOURNAL_SPEC: JournalSpec = JournalSpec {
    kind: JournalKind::APPLY,
    max_bytes: MAX_APPLY_JOURNAL_BYTES,
    max_records: MAX_APPLY_JOURNAL_RECORDS,
    max_payload: MAX_APPLY_RECORD_BYTES as u32,
    record_kinds: &[KIND_APPLY_RECORD],
};

/// One transaction's stored records.
#[derive(Debug, Default)]
struct Stored {
    records: Vec<Vec<u8>>,
    /// The state its last record entered.
    last: Option<ApplyState>,
}

impl Stored {
    /// Records it may still need (0 once terminal or ambiguous).
    fn remaining(&self) -> u64 {
        let live = self
            .last
            .is_some_and(|s| ApplyState::ALL.iter().any(|t| s.can_transition(*t)));
        if live {
            RECORDS_PER_TRANSACTION.saturating_sub(self.records.len() as u64)
        } else {
            0
        }
    }
}

/// The lifecycle's [`TransitionLog`] over the apply journal file.
#[derive(Debug)]
pub struct ApplyLog {
    journal: Journal,
    txns: BTreeMap<TransactionId, Stored>,
    /// Every reservation in the file: the file's own check that record 0
    /// never reuses a value (the lifecycle's registry checks first).
    history: SingleUseRegistry,
    anchor_file: Option<AnchorFile>,
    anchor_failed: bool,
    /// The record bound room is counted against ([`MAX_APPLY_JOURNAL_RECORDS`];
    /// smaller in tests).
    max_records: u64,
}

/// The durable apply journal: its log and the single-use registry rebuilt
/// from it.
#[derive(Debug)]
pub struct ApplyJournal {
    log: ApplyLog,
    registry: SingleUseRegistry,
}

fn corrupt(offset: u64) -> JournalError {
    JournalError::corrupt(CorruptKind::ApplyRecordInvalid, offset)
}

impl ApplyJournal {
    /// Creates an empty apply journal at `path` (its directory must be
    /// mode 0700 and the service user's). With `anchor`, keeps it (refused
    /// with `journal_missing_but_anchored` when an anchor file is already
    /// there).
    pub fn create(path: &Path, anchor: Option<AnchorFile>) -> Result<ApplyJournal, JournalError> {
        if anchor.as_ref().is_some_and(AnchorFile::exists) {
            return Err(JournalError::corrupt(CorruptKind::MissingButAnchored, 0));
        }
        let journal = Journal::create_with_unguarded(path, &APPLY_JOURNAL_SPEC, [])?;
        let mut log = ApplyLog::new(journal, anchor);
        log.refresh_anchor()?;
        Ok(ApplyJournal {
            log,
            registry: SingleUseRegistry::new(registry_capacity()),
        })
    }

    /// Opens the apply journal, replays it strictly (torn tail repaired,
    /// anything else corrupt) and rebuilds the single-use registry. With
    /// `anchor`, the file must match it (a missing anchor file is reported
    /// as `unanchored`, then written).
    pub fn open(
        path: &Path,
        anchor: Option<AnchorFile>,
    ) -> Result<(ApplyJournal, OpenReport), JournalError> {
        let (opened, record) = match &anchor {
            None => (
                Journal::open_unguarded(path, &APPLY_JOURNAL_SPEC, None)?,
                None,
            ),
            Some(file) => Journal::open_anchored_by(path, &APPLY_JOURNAL_SPEC, || {
                let record = file.load()?;
                let candidates = record.iter().flat_map(|r| r.candidates().copied());
                Ok((candidates.collect(), record))
            })?,
        };
        let (journal, mut report, image, metas) = opened.into_parts();
        if let Some(rec) = &record {
            if journal.journal_id() != rec.journal_id {
                return Err(JournalError::corrupt(CorruptKind::AnchorMismatch, 0));
            }
        } else if anchor.is_some() {
            report.unanchored = true;
        }
        let mut log = ApplyLog::new(journal, anchor);
        let mut registry = SingleUseRegistry::new(registry_capacity());
        for m in &metas {
            let bytes = image
                .get(m.payload.clone())
                .ok_or_else(|| corrupt(m.offset))?;
            let rec = ApplyRecord::decode(bytes).map_err(|_| corrupt(m.offset))?;
            log.check(&rec).map_err(|_| corrupt(m.offset))?;
            if let ApplyEntry::Reserved { reservation } = &rec.entry {
                registry
                    .insert_recovered(reservation)
                    .map_err(|_| corrupt(m.offset))?;
                log.history
                    .insert_recovered(reservation)
                    .map_err(|_| corrupt(m.offset))?;
            }
            log.keep(&rec, bytes);
        }
        // Every history must replay strictly (chain, sequence, edges).
        for stored in log.txns.values() {
            replay_apply(&stored.records).map_err(|_| corrupt(0))?;
        }
        log.refresh_anchor()?;
        Ok((ApplyJournal { log, registry }, report))
    }

    /// The single-use registry and the log, together: what
    /// `Txn::log_reserve` takes.
    pub fn registry_and_log(&mut self) -> (&mut SingleUseRegistry, &mut ApplyLog) {
        (&mut self.registry, &mut self.log)
    }

    /// The log (every transition after the reservation takes only it).
    pub fn log_mut(&mut self) -> &mut ApplyLog {
        &mut self.log
    }

    /// The log, read-only.
    pub fn log(&self) -> &ApplyLog {
        &self.log
    }

    /// The single-use registry, read-only.
    pub fn registry(&self) -> &SingleUseRegistry {
        &self.registry
    }

    /// Every transaction, replayed, in transaction-id order: for start-up
    /// recovery (`AnyApply::classify`).
    pub fn transactions(&self) -> Result<Vec<AnyApply>, LifecycleError> {
        self.log
            .txns
            .values()
            .map(|s| replay_apply(&s.records))
            .collect()
    }

    /// Whether a new reservation would fit now (see the module docs on
    /// room). Ask before `Txn::log_reserve`: a reservation the log refuses
    /// for room has already consumed its values in the registry, which
    /// then stay unusable until the journal is reopened.
    pub fn room_for_reservation(&self) -> bool {
        self.log.room_for_new()
    }

    /// The number of transactions stored.
    pub fn transaction_count(&self) -> usize {
        self.log.txns.len()
    }
}

impl ApplyLog {
    fn new(journal: Journal, anchor_file: Option<AnchorFile>) -> ApplyLog {
        ApplyLog {
            journal,
            txns: BTreeMap::new(),
            history: SingleUseRegistry::new(registry_capacity()),
            anchor_file,
            anchor_failed: false,
            max_records: MAX_APPLY_JOURNAL_RECORDS,
        }
    }

    /// Keeps a checked record.
    fn keep(&mut self, rec: &ApplyRecord, bytes: &[u8]) {
        let stored = self.txns.entry(rec.txn_id.clone()).or_default();
        stored.records.push(bytes.to_vec());
        stored.last = Some(rec.entry.state());
    }

    /// Checks that `rec` is its transaction's next record, record 0 a
    /// reservation and no other.
    fn check(&self, rec: &ApplyRecord) -> Result<(), PortError> {
        let next = self
            .txns
            .get(&rec.txn_id)
            .map_or(0, |s| s.records.len() as u64);
        if rec.seq != next {
            return Err(PortError::new(LIFECYCLE_RECORD_SEQUENCE));
        }
        let reserves = matches!(rec.entry, ApplyEntry::Reserved { .. });
        match (next, reserves) {
            (0, true) => Ok(()),
            (0, false) => Err(PortError::new(LIFECYCLE_RECORD_MISSING_CREATION)),
            (_, true) => Err(PortError::new(LIFECYCLE_RECORD_SEQUENCE)),
            (_, false) => Ok(()),
        }
    }

    /// Whether a new transaction's records fit beside what every live
    /// transaction may still need.
    fn room_for_new(&self) -> bool {
        let owed: u64 = self.txns.values().map(Stored::remaining).sum();
        let records = owed.saturating_add(RECORDS_PER_TRANSACTION);
        let per = record_len(MAX_APPLY_RECORD_BYTES) as u64;
        self.journal.record_count().saturating_add(records) <= self.max_records
            && self
                .journal
                .len_bytes()
                .saturating_add(records.saturating_mul(per))
                <= MAX_APPLY_JOURNAL_BYTES
    }

    fn refresh_anchor(&mut self) -> Result<(), JournalError> {
        let Some(file) = &self.anchor_file else {
            return Ok(());
        };
        let rec = AnchorRecord {
            journal_id: self.journal.journal_id(),
            current: self.journal.anchor(),
            next: None,
        };
        crate::anchor_file::store_or_poison(file, &mut self.anchor_failed, &rec)
    }

    /// The anchor of what is durable.
    pub fn anchor(&self) -> crate::Anchor {
        self.journal.anchor()
    }

    /// Records stored (all transactions).
    pub fn record_count(&self) -> u64 {
        self.journal.record_count()
    }
}

fn journal_err(e: JournalError) -> PortError {
    PortError::new(e.code())
}

impl TransitionLog for ApplyLog {
    fn append(&mut self, record: &PendingRecord<'_>) -> Result<AppendReceipt, PortError> {
        let Subject::Apply(id) = record.subject() else {
            return Err(PortError::new(JOURNAL_RECORD_KIND_REFUSED));
        };
        crate::anchor_file::refuse_if_poisoned(self.anchor_failed).map_err(journal_err)?;
        let rec = ApplyRecord::decode(record.bytes())
            .map_err(|_| PortError::new(LIFECYCLE_RECORD_INVALID))?;
        if &rec.txn_id != id || rec.seq != record.seq() {
            return Err(PortError::new(LIFECYCLE_RECORD_INVALID));
        }
        self.check(&rec)?;
        if let ApplyEntry::Reserved { reservation } = &rec.entry {
            if !self.room_for_new() {
                return Err(PortError::new(APPLY_JOURNAL_NO_ROOM));
            }
            // The file's own single-use check, before anything is
            // written. The values stay consumed even if the append fails
            // (fail closed; a reopen decides from what reached the disk).
            self.history
                .insert_recovered(reservation)
                .map_err(|e| PortError::new(e.code()))?;
        }
        let _ = self
            .journal
            .append(KIND_APPLY_RECORD, record.bytes())
            .map_err(journal_err)?;
        self.keep(&rec, record.bytes());
        self.refresh_anchor().map_err(journal_err)?;
        Ok(record.acknowledge())
    }

    fn lookup(&self, subject: Subject<'_>, seq: u64) -> Result<Option<StoredRecord>, PortError> {
        let Subject::Apply(id) = subject else {
            return Err(PortError::new(JOURNAL_RECORD_KIND_REFUSED));
        };
        Ok(self
            .txns
            .get(id)
            .and_then(|s| usize::try_from(seq).ok().and_then(|k| s.records.get(k)))
            .map(|b| StoredRecord::Bytes(b.clone())))
    }
}

fn registry_capacity() -> usize {
    usize::try_from(MAX_APPLY_JOURNAL_RECORDS).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests;
