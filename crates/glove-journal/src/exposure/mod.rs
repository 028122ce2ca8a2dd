//! The path-exposure journal: the durable record of the owner's exposure
//! leases.
//!
//! One [`Journal`] of kind [`JournalKind::EXPOSURES`] (guarded: no generic
//! handle opens it) with two record kinds, each payload the canonical
//! bytes of a glove-types record: [`KIND_CREATED`]
//! ([`CreatedRecord`]) and [`KIND_REVOKED`] ([`RevokedRecord`]). So it is
//! bounded, append only, hash-chained, `fdatasync`'d before an append
//! returns, held by one writer (an exclusive lock), and replayed strictly:
//! a torn tail is cut off once and kept aside, a tampered record
//! (`journal_record_digest_mismatch`), a reordered one
//! (`journal_sequence_reordered`) and anything else are corrupt. With an
//! [`AnchorFile`] (domain [`EXPOSURE_ANCHOR_DOMAIN`]) a file cut back at a
//! record boundary or replaced by an older copy is refused too
//! (`journal_shorter_than_anchor`, `journal_anchor_mismatch`): a lost
//! revocation would make a revoked lease usable again.
//!
//! Replay rebuilds each exposure's generations and refuses
//! (`exposure_journal_history_invalid`) a history that could not have been
//! written: a generation that is not the next of its exposure, a created
//! record for an id another project owns, a revocation of anything but the
//! newest unrevoked generation, or a second live lease of one project (the
//! same root and path, or the same device and inode) while an earlier one
//! was live at that record's creation time.
//!
//! A lease is a typestate: [`LiveLease`] becomes a [`RevokedLease`] only
//! by [`LiveLease::revoke`], which takes the [`Revoked`] proof that only
//! this journal mints after the revocation record is durable. Expiry is
//! read from the clock ([`Lease::state`]); it needs no record.

pub use crate::anchor_file::EXPOSURE_ANCHOR_DOMAIN;
use crate::anchor_file::{AnchorFile, AnchorRecord};
use crate::error::{CorruptKind, JournalError};
use crate::format::JournalKind;
use crate::journal::{Journal, OpenReport};
use crate::spec::JournalSpec;
use glove_types::codes::exposure::*;
use glove_types::exposure::lease::{CatalogEntry, CreatedRecord, RevokedRecord, MAX_RECORD_BYTES};
use glove_types::exposure::LeaseState;
use glove_types::ids::{ExposureId, ExposureRootId};
use glove_types::Rejection;
use std::path::Path;

/// A lease was granted.
pub const KIND_CREATED: u16 = 1;
/// A lease was revoked.
pub const KIND_REVOKED: u16 = 2;
/// Byte bound of the journal file.
pub const MAX_EXPOSURE_JOURNAL_BYTES: u64 = 16 * 1024 * 1024;
/// Record bound of the journal file.
pub const MAX_EXPOSURE_JOURNAL_RECORDS: u64 = 20_000;
/// Most exposures (distinct ids) one journal holds.
pub const MAX_EXPOSURES: usize = 4096;

/// The path-exposure journal's spec.
pub const EXPOSURE_JOURNAL_SPEC: JournalSpec = JournalSpec {
    kind: JournalKind::EXPOSURES,
    max_bytes: MAX_EXPOSURE_JOURNAL_BYTES,
    max_records: MAX_EXPOSURE_JOURNAL_RECORDS,
    max_payload: MAX_RECORD_BYTES as u32,
    record_kinds: &[KIND_CREATED, KIND_REVOKED],
};

/// Proof that a revocation record is durable: minted only by
/// [`ExposureJournal`] after the append returned, spent by
/// [`LiveLease::revoke`].
#[must_use = "a revocation proof must be spent on its lease"]
#[derive(Debug)]
pub struct Revoked {
    generation: u64,
    at_ms: u64,
}

/// A lease nobody revoked (it may still have expired: see [`Lease::state`]).
#[derive(Debug, PartialEq, Eq)]
pub struct LiveLease {
    rec: CreatedRecord,
}

/// A revoked lease.
#[derive(Debug, PartialEq, Eq)]
pub struct RevokedLease {
    rec: CreatedRecord,
    revoked_at_ms: u64,
}

impl LiveLease {
    /// Revokes the lease with the proof that its revocation is durable; a
    /// proof for another generation is refused and the lease given back.
    pub fn revoke(self, proof: Revoked) -> Result<RevokedLease, Box<LiveLease>> {
        if proof.generation != self.rec.generation {
            return Err(Box::new(self));
        }
        Ok(RevokedLease {
            rec: self.rec,
            revoked_at_ms: proof.at_ms,
        })
    }
}

impl RevokedLease {
    /// When it was revoked (Unix ms).
    pub fn revoked_at_ms(&self) -> u64 {
        self.revoked_at_ms
    }
}

/// One generation of an exposure, in either state.
#[derive(Debug, PartialEq, Eq)]
pub enum Lease {
    /// Not revoked.
    Live(LiveLease),
    /// Revoked.
    Revoked(RevokedLease),
}

impl Lease {
    /// Its record.
    pub fn record(&self) -> &CreatedRecord {
        match self {
            Lease::Live(l) => &l.rec,
            Lease::Revoked(r) => &r.rec,
        }
    }

    /// Its state at `now_ms`.
    pub fn state(&self, now_ms: u64) -> LeaseState {
        match self {
            Lease::Revoked(_) => LeaseState::Revoked,
            Lease::Live(l) if now_ms >= l.rec.expires_at_ms => LeaseState::Expired,
            Lease::Live(_) => LeaseState::Live,
        }
    }

    /// The redacted catalog entry at `now_ms`.
    pub fn catalog(&self, now_ms: u64) -> CatalogEntry {
        CatalogEntry::of(self.record(), self.state(now_ms))
    }
}

fn refused(code: glove_types::ErrorCode, msg: impl Into<String>) -> JournalError {
    JournalError::Invalid {
        field: "exposure",
        rejection: Rejection::new(code, msg),
    }
}

/// The durable path-exposure journal and the leases replayed from it.
#[derive(Debug)]
pub struct ExposureJournal {
    journal: Journal,
    /// Every exposure's generations, replayed.
    table: LeaseTable,
    anchor_file: Option<AnchorFile>,
    anchor_failed: bool,
}

impl ExposureJournal {
    /// Creates an empty journal at `path` (its directory mode 0700, the
    /// service user's). With `anchor`, keeps it (refused with
    /// `journal_missing_but_anchored` when an anchor file is already there).
    pub fn create(
        path: &Path,
        anchor: Option<AnchorFile>,
    ) -> Result<ExposureJournal, JournalError> {
        if anchor.as_ref().is_some_and(AnchorFile::exists) {
            return Err(JournalError::corrupt(CorruptKind::MissingButAnchored, 0));
        }
        let journal = Journal::create_with_unguarded(path, &EXPOSURE_JOURNAL_SPEC, [])?;
        let mut j = ExposureJournal {
            journal,
            table: LeaseTable::default(),
            anchor_file: anchor,
            anchor_failed: false,
        };
        j.refresh_anchor()?;
        Ok(j)
    }

    /// Opens the journal, replays it strictly (see the module docs) and
    /// rebuilds the leases. With `anchor`, the file must match it (a
    /// missing anchor file is reported as `unanchored`, then written).
    pub fn open(
        path: &Path,
        anchor: Option<AnchorFile>,
    ) -> Result<(ExposureJournal, OpenReport), JournalError> {
        let (opened, record) = match &anchor {
            None => (
                Journal::open_unguarded(path, &EXPOSURE_JOURNAL_SPEC, None)?,
                None,
            ),
            Some(file) => Journal::open_anchored_by(path, &EXPOSURE_JOURNAL_SPEC, || {
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
        let mut j = ExposureJournal {
            journal,
            table: LeaseTable::default(),
            anchor_file: anchor,
            anchor_failed: false,
        };
        for m in &metas {
            let bytes = image.get(m.payload.clone()).ok_or_else(|| {
                JournalError::corrupt(CorruptKind::ExposureRecordInvalid, m.offset)
            })?;
            j.table.replay_one(m.kind, bytes, m.offset)?;
        }
        j.refresh_anchor()?;
        Ok((j, report))
    }

    /// Durably grants `rec` at `now_ms`. With `replace`, a live lease of
    /// the same project is revoked first, its revocation and the grant
    /// written and synced as one batch (a crash keeps both, or the
    /// revocation alone, or neither: never a second live lease). Without
    /// it, a live lease is refused (`exposure_live_exists`).
    pub fn grant(
        &mut self,
        rec: CreatedRecord,
        replace: bool,
        now_ms: u64,
    ) -> Result<&Lease, JournalError> {
        crate::anchor_file::refuse_if_poisoned(self.anchor_failed)?;
        let matches = self.table.live_matches(&rec, now_ms);
        if replace && matches.len() > 1 {
            // A directory moved or swapped under the project's name: one
            // replace cannot tell which lease it stands for.
            return Err(JournalError::Invalid {
                field: "exposure",
                rejection: glove_types::Rejection::new(
                    glove_types::codes::exposure::EXPOSURE_LIVE_EXISTS,
                    format!(
                        "{} live exposures match this project (by place or by identity); revoke them first",
                        matches.len()
                    ),
                ),
            });
        }
        let revoke = match (replace, matches.first()) {
            (true, Some(live)) => Some(RevokedRecord {
                exposure_id: live.record().exposure_id.clone(),
                generation: live.record().generation,
                revoked_at_ms: now_ms,
            }),
            _ => None,
        };
        // Checked as if the revocation were in place.
        let skip = revoke.as_ref().map(|r| (&r.exposure_id, r.generation));
        self.table
            .check_grant(&rec, now_ms, skip)
            .map_err(|r| JournalError::Invalid {
                field: "exposure",
                rejection: r,
            })?;
        let created = rec.encode().map_err(|r| JournalError::Invalid {
            field: "exposure",
            rejection: r,
        })?;
        let mut lens = vec![created.len()];
        let revoked = match &revoke {
            Some(r) => {
                let b = r.encode().map_err(|r| JournalError::Invalid {
                    field: "exposure",
                    rejection: r,
                })?;
                lens.push(b.len());
                Some(b)
            }
            None => None,
        };
        // Room is kept for the new lease's own revocation too: a full
        // journal must never leave a live lease that cannot be revoked.
        let own_revocation = RevokedRecord {
            exposure_id: rec.exposure_id.clone(),
            generation: rec.generation,
            // The widest time a record can hold (JSON's exact integers).
            revoked_at_ms: 9_007_199_254_740_991,
        }
        .encode()
        .map_err(|r| JournalError::Invalid {
            field: "exposure",
            rejection: r,
        })?;
        lens.push(own_revocation.len());
        if !self.journal.has_room(&lens) {
            return Err(JournalError::Full(crate::error::Bound::Records));
        }
        if let Some(b) = &revoked {
            let _ = self.journal.queue(KIND_REVOKED, b)?;
        }
        let _ = self.journal.append(KIND_CREATED, &created)?;
        if let Some(r) = revoke {
            self.table
                .apply_revoke(&r.exposure_id, r.generation, r.revoked_at_ms);
        }
        let id = rec.exposure_id.clone();
        self.table.keep(rec);
        self.refresh_anchor()?;
        self.table
            .leases
            .get(&id)
            .and_then(|g| g.last())
            .ok_or(JournalError::Invalid {
                field: "exposure",
                rejection: Rejection::new(EXPOSURE_UNKNOWN, "the granted lease is missing"),
            })
    }

    /// Durably revokes the newest generation of `id` at `now_ms`
    /// (`exposure_unknown`, `exposure_revoked` when there is none to
    /// revoke); an expired lease may still be revoked.
    pub fn revoke(&mut self, id: &ExposureId, now_ms: u64) -> Result<&Lease, JournalError> {
        crate::anchor_file::refuse_if_poisoned(self.anchor_failed)?;
        let generation = match self.table.leases.get(id).and_then(|g| g.last()) {
            Some(l) => l.record().generation,
            None => return Err(refused(EXPOSURE_UNKNOWN, format!("no exposure {id}"))),
        };
        self.table
            .check_revoke(id, generation)
            .map_err(|r| JournalError::Invalid {
                field: "exposure",
                rejection: r,
            })?;
        let rec = RevokedRecord {
            exposure_id: id.clone(),
            generation,
            revoked_at_ms: now_ms,
        };
        let b = rec.encode().map_err(|r| JournalError::Invalid {
            field: "exposure",
            rejection: r,
        })?;
        let _ = self.journal.append(KIND_REVOKED, &b)?;
        self.table.apply_revoke(id, generation, now_ms);
        self.refresh_anchor()?;
        self.table
            .leases
            .get(id)
            .and_then(|g| g.last())
            .ok_or_else(|| refused(EXPOSURE_UNKNOWN, "the revoked lease is missing"))
    }

    /// The leases, as replayed and appended.
    pub fn leases(&self) -> &LeaseTable {
        &self.table
    }

    /// The anchor of what is durable.
    pub fn anchor(&self) -> crate::Anchor {
        self.journal.anchor()
    }

    /// Records stored.
    pub fn record_count(&self) -> u64 {
        self.journal.record_count()
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
}

mod table;
pub use table::{replay_exposure_bytes, LeaseTable};

#[cfg(test)]
mod tests;
