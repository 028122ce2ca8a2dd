//! [`LeaseTable`]: every exposure's generations, rebuilt record by record
//! with the replay rules of the module docs; and
//! [`replay_exposure_bytes`], the pure decoder of a whole journal image.

use super::*;
use crate::replay::replay_bytes;
use std::collections::BTreeMap;

/// Every exposure's generations, oldest first, by id.
#[derive(Debug, Default)]
pub struct LeaseTable {
    pub(super) leases: BTreeMap<ExposureId, Vec<Lease>>,
}

/// Whether two records expose the same project.
fn same_project(a: &CreatedRecord, b: &CreatedRecord) -> bool {
    (a.root_id == b.root_id && a.relative_path == b.relative_path)
        || (a.dev == b.dev && a.ino == b.ino)
}

/// Replays a whole exposure journal image without a file (for checks and
/// the fuzz target): the generic replay (header, chain, sequence,
/// bounds), then every record through [`LeaseTable`]. A torn tail is
/// left out, as open would cut it.
pub fn replay_exposure_bytes(bytes: &[u8]) -> Result<LeaseTable, JournalError> {
    let replayed = replay_bytes(bytes, &EXPOSURE_JOURNAL_SPEC, None)?;
    let mut table = LeaseTable::default();
    for m in &replayed.records {
        let payload = bytes
            .get(m.payload.clone())
            .ok_or_else(|| JournalError::corrupt(CorruptKind::ExposureRecordInvalid, m.offset))?;
        table.replay_one(m.kind, payload, m.offset)?;
    }
    Ok(table)
}

impl LeaseTable {
    pub(super) fn replay_one(
        &mut self,
        kind: u16,
        bytes: &[u8],
        offset: u64,
    ) -> Result<(), JournalError> {
        let record = |_| JournalError::corrupt(CorruptKind::ExposureRecordInvalid, offset);
        let history = |_| JournalError::corrupt(CorruptKind::ExposureHistoryInvalid, offset);
        match kind {
            KIND_CREATED => {
                let rec = CreatedRecord::decode(bytes).map_err(record)?;
                let at = rec.created_at_ms;
                self.check_grant(&rec, at, None).map_err(history)?;
                self.keep(rec);
            }
            KIND_REVOKED => {
                let rec = RevokedRecord::decode(bytes).map_err(record)?;
                self.check_revoke(&rec.exposure_id, rec.generation)
                    .map_err(history)?;
                self.apply_revoke(&rec.exposure_id, rec.generation, rec.revoked_at_ms);
            }
            _ => return Err(JournalError::corrupt(CorruptKind::UnknownKind, offset)),
        }
        Ok(())
    }

    /// The next generation for a grant of `rec`'s project: the id and
    /// generation a new lease of the project at `root`/`relative` must
    /// carry (a known project keeps its id), or `None` for a new project.
    pub fn next_for(&self, root: &ExposureRootId, relative: &str) -> Option<(ExposureId, u64)> {
        self.leases.iter().find_map(|(id, gens)| {
            let last = gens.last()?.record();
            (&last.root_id == root && last.relative_path == relative)
                .then(|| (id.clone(), last.generation + 1))
        })
    }

    /// The live (unrevoked, unexpired at `now_ms`) lease of the project
    /// `rec` names, if any.
    pub fn live_of(&self, rec: &CreatedRecord, now_ms: u64) -> Option<&Lease> {
        self.live_matches(rec, now_ms).into_iter().next()
    }

    /// Every newest live lease of the same project as `rec` (by place or
    /// by identity: a directory moved or swapped may match two).
    pub fn live_matches(&self, rec: &CreatedRecord, now_ms: u64) -> Vec<&Lease> {
        self.leases
            .values()
            .filter_map(|g| g.last())
            .filter(|l| l.state(now_ms) == LeaseState::Live && same_project(l.record(), rec))
            .collect()
    }

    /// Whether `rec` may be appended at `now_ms` (see the module docs),
    /// the lease `skip` (being revoked in the same batch) not counted as
    /// live.
    pub(super) fn check_grant(
        &self,
        rec: &CreatedRecord,
        now_ms: u64,
        skip: Option<(&ExposureId, u64)>,
    ) -> Result<(), Rejection> {
        rec.check()?;
        let gens = self.leases.get(&rec.exposure_id);
        let expected = gens
            .and_then(|g| g.last())
            .map_or(1, |l| l.record().generation + 1);
        if rec.generation != expected {
            return Err(Rejection::new(
                EXPOSURE_GENERATION_STALE,
                format!(
                    "generation {} of {} is not the next ({expected})",
                    rec.generation, rec.exposure_id
                ),
            ));
        }
        if let Some(last) = gens.and_then(|g| g.last()) {
            if last.record().root_id != rec.root_id
                || last.record().relative_path != rec.relative_path
            {
                return Err(Rejection::new(
                    EXPOSURE_JOURNAL_HISTORY_INVALID,
                    format!("exposure {} belongs to another project", rec.exposure_id),
                ));
            }
        } else if self.leases.len() >= MAX_EXPOSURES {
            return Err(Rejection::new(
                glove_types::codes::journal::JOURNAL_FULL,
                format!("the journal holds {MAX_EXPOSURES} exposures already"),
            ));
        }
        // Every live match counts but the one revoked in the same batch.
        let live = self
            .live_matches(rec, now_ms)
            .into_iter()
            .find(|l| skip != Some((&l.record().exposure_id, l.record().generation)));
        if let Some(live) = live {
            return Err(Rejection::new(
                EXPOSURE_LIVE_EXISTS,
                format!(
                    "the project already has the live exposure {} generation {}",
                    live.record().exposure_id,
                    live.record().generation
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn check_revoke(&self, id: &ExposureId, generation: u64) -> Result<(), Rejection> {
        match self.leases.get(id).and_then(|g| g.last()) {
            None => Err(Rejection::new(
                EXPOSURE_UNKNOWN,
                format!("no exposure {id}"),
            )),
            Some(Lease::Revoked(_)) => Err(Rejection::new(
                EXPOSURE_REVOKED,
                format!("exposure {id} is revoked already"),
            )),
            Some(Lease::Live(l)) if l.rec.generation != generation => Err(Rejection::new(
                EXPOSURE_GENERATION_STALE,
                format!("exposure {id} is at generation {}", l.rec.generation),
            )),
            Some(Lease::Live(_)) => Ok(()),
        }
    }

    pub(super) fn keep(&mut self, rec: CreatedRecord) {
        self.leases
            .entry(rec.exposure_id.clone())
            .or_default()
            .push(Lease::Live(LiveLease { rec }));
    }

    /// Moves the newest generation of `id` to revoked (checked before).
    pub(super) fn apply_revoke(&mut self, id: &ExposureId, generation: u64, at_ms: u64) {
        let Some(gens) = self.leases.get_mut(id) else {
            return;
        };
        let Some(last) = gens.pop() else {
            return;
        };
        let next = match last {
            Lease::Live(l) => match l.revoke(Revoked { generation, at_ms }) {
                Ok(r) => Lease::Revoked(r),
                Err(l) => Lease::Live(*l),
            },
            other => other,
        };
        gens.push(next);
    }

    /// The newest generation of every exposure, by id.
    pub fn newest(&self) -> impl Iterator<Item = &Lease> + '_ {
        self.leases.values().filter_map(|g| g.last())
    }

    /// Every generation of `id`, oldest first.
    pub fn generations(&self, id: &ExposureId) -> &[Lease] {
        self.leases.get(id).map_or(&[], Vec::as_slice)
    }

    /// The lease a plan may use: the newest generation of `id`, which must
    /// be `generation` and live at `now_ms`. Refused with
    /// `exposure_unknown`, `exposure_generation_stale`, `exposure_revoked`
    /// or `exposure_expired`.
    pub fn usable(
        &self,
        id: &ExposureId,
        generation: u64,
        now_ms: u64,
    ) -> Result<&CreatedRecord, Rejection> {
        let Some(newest) = self.leases.get(id).and_then(|g| g.last()) else {
            return Err(Rejection::new(
                EXPOSURE_UNKNOWN,
                format!("no exposure {id}"),
            ));
        };
        let rec = newest.record();
        if rec.generation != generation {
            return Err(Rejection::new(
                EXPOSURE_GENERATION_STALE,
                format!(
                    "exposure {id} is at generation {}, not {generation}",
                    rec.generation
                ),
            ));
        }
        match newest.state(now_ms) {
            LeaseState::Live => Ok(rec),
            LeaseState::Revoked => Err(Rejection::new(
                EXPOSURE_REVOKED,
                format!("exposure {id} generation {generation} was revoked"),
            )),
            LeaseState::Expired => Err(Rejection::new(
                EXPOSURE_EXPIRED,
                format!("exposure {id} generation {generation} has expired"),
            )),
        }
    }
}
