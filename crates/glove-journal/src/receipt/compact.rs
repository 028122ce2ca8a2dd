//! Compaction of the receipt journal: what it would reclaim, when it is
//! due, and the rewrite that drops acknowledged receipts.

use super::*;

/// What compaction did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactReport {
    /// Receipts dropped (all acknowledged).
    pub removed: u64,
    /// Receipts kept.
    pub kept: u64,
}

/// What [`ReceiptJournal::compact`] would reclaim now (see
/// [`ReceiptJournal::reclaimable`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reclaimable {
    /// Acknowledged receipts still in the file.
    pub receipts: u64,
    /// Records compaction would drop (those receipts, spent and released
    /// reservations).
    pub records: u64,
    /// Bytes compaction would drop.
    pub bytes: u64,
}

/// [`ReceiptJournal::needs_compaction`] says yes once this many
/// acknowledged receipts are in the file, whatever the budget: each costs
/// open time (a few microseconds) and nothing else.
pub const COMPACT_AFTER_RECEIPTS: u64 = 10_000;

/// ... or once what compaction would drop is at least this fraction
/// (1/`COMPACT_BUDGET_DIVISOR`) of the byte or record budget, so
/// reservations are not refused for want of room that compaction would
/// give back.
pub const COMPACT_BUDGET_DIVISOR: u64 = 4;

impl ReceiptJournal {
    /// What [`compact`](Self::compact) would drop now: acknowledged
    /// receipts, and the records and bytes the file would shrink by. Cheap
    /// (no I/O; linear only in the outstanding reservations).
    pub fn reclaimable(&self) -> Reclaimable {
        let Some(acked) = self.acked else {
            return Reclaimable::default();
        };
        let receipts = acked.seq.saturating_sub(self.base.seq);
        if receipts == 0 {
            return Reclaimable::default();
        }
        let unacked = self.head().seq.saturating_sub(acked.seq);
        let kept_records = 1 + self.state.outstanding.len() as u64 + unacked;
        let kept_bytes = HEADER_LEN as u64
            + record_len(40) as u64
            + self
                .state
                .outstanding
                .iter()
                .map(|s| record_len(1 + s.as_str().len()) as u64)
                .sum::<u64>()
            + self.unacked_bytes;
        Reclaimable {
            receipts,
            records: self.journal.record_count().saturating_sub(kept_records),
            bytes: self.journal.len_bytes().saturating_sub(kept_bytes),
        }
    }

    /// The compaction policy: whether [`compact`](Self::compact) is due.
    /// Yes when there are acknowledged receipts to drop and either there
    /// are at least [`COMPACT_AFTER_RECEIPTS`] of them (open time grows with
    /// every receipt kept) or compaction would give back at least
    /// 1/[`COMPACT_BUDGET_DIVISOR`] of the byte or record budget. Cheap
    /// enough to call after every [`ack`](Self::ack).
    pub fn needs_compaction(&self) -> bool {
        let r = self.reclaimable();
        r.receipts > 0
            && (r.receipts >= COMPACT_AFTER_RECEIPTS
                || r.bytes.saturating_mul(COMPACT_BUDGET_DIVISOR) >= self.config.max_bytes
                || r.records.saturating_mul(COMPACT_BUDGET_DIVISOR) >= self.config.max_records)
    }

    /// Drops acknowledged receipts by rewriting the file to start at the
    /// acknowledged head.
    pub fn compact(&mut self) -> Result<CompactReport, JournalError> {
        self.writable()?;
        let Some(acked) = self.acked else {
            return Ok(CompactReport {
                removed: 0,
                kept: self.state.receipts.len() as u64,
            });
        };
        let removed = acked.seq - self.base.seq;
        let keep: Vec<&StoredReceipt> = self
            .state
            .receipts
            .iter()
            .filter(|r| r.seq > acked.seq)
            .collect();
        if removed == 0 {
            return Ok(CompactReport {
                removed: 0,
                kept: keep.len() as u64,
            });
        }
        let mut payloads: Vec<(u16, Vec<u8>)> = vec![(KIND_BASE, encode_base(&acked))];
        for s in &self.state.outstanding {
            payloads.push((KIND_RESERVE, encode_id(Some(s), &[])));
        }
        for r in &keep {
            payloads.push((KIND_RECEIPT, encode_id(None, &r.envelope)));
        }
        let kept = keep.len() as u64;
        // The anchor file names the old and the new file until the new one
        // is in place, so a crash at any step leaves a match.
        let mut announced = false;
        let (journal_id, current) = (self.journal.journal_id(), self.journal.anchor());
        let anchor_file = &self.anchor_file;
        let new =
            self.journal
                .rewrite_announced(payloads.iter().map(|(k, p)| (*k, &p[..])), |next| {
                    announced = true;
                    anchor_file.store(&AnchorRecord {
                        journal_id,
                        current,
                        next: Some(*next),
                    })
                });
        let new = match new {
            Ok(n) => n,
            Err(e) => {
                if announced {
                    // The anchor may name a file that never came, or the
                    // rename may have happened: refuse writes until a
                    // reopen sorts it out.
                    self.anchor_failed = true;
                }
                return Err(e);
            }
        };
        self.journal = new;
        self.state.drop_through(acked.seq);
        self.state.base = Some(acked);
        self.base = acked;
        self.refresh_anchor(None)?;
        Ok(CompactReport { removed, kept })
    }
}
