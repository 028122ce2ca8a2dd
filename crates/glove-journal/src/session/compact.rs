//! The store's room and its compaction: what the file uses, what live
//! sessions reserve, what is reclaimable, and the rewrite that keeps only
//! live sessions and the carried nonces.

use super::*;

impl SessionStore {
    /// Records and bytes the file holds.
    pub fn used(&self) -> Room {
        Room {
            records: self.journal.record_count(),
            bytes: self.journal.len_bytes(),
        }
    }

    /// What is set aside: every record a live session may still append to
    /// become terminal (at [`TRANSITION_RESERVE`] each; a session not yet
    /// started needs one, its `failed`; a started one up to three) and the
    /// [`SNAPSHOT_RESERVE`].
    pub fn reserved(&self) -> Room {
        TRANSITION_RESERVE
            .times(self.index.outstanding_records())
            .plus(SNAPSHOT_RESERVE)
    }

    /// What is free for admissions (a creation, `preparing`, `starting`):
    /// the bounds less what is used and what is [`reserved`](Self::reserved).
    pub fn room(&self) -> Room {
        STORE_BOUNDS.minus(self.used()).minus(self.reserved())
    }

    /// Whether `records` more records of `bytes` bytes in all fit beside
    /// the reserve.
    pub fn has_room_for(&self, records: u64, bytes: u64) -> bool {
        self.room().covers(Room { records, bytes })
    }

    /// `Ok` when session `id` can be moved to `starting` with evidence of
    /// any size and still reach a terminal stage (the start record plus two
    /// more reserved, beside its reserved `failed`); `store_no_room`
    /// otherwise, `store_session_not_found` for an unknown id. The
    /// transition itself checks the same, with the evidence's real size.
    pub fn check_room_to_start(&self, id: &SessionId) -> Result<(), JournalError> {
        let s = self
            .index
            .get(id)
            .ok_or_else(|| JournalError::SessionNotFound {
                session: id.clone(),
            })?;
        let largest = (TRANSITION_RESERVE.bytes as usize).saturating_sub(record_len(0));
        self.admit(
            index::remaining_records(s.stage()),
            index::remaining_records(SessionStage::Starting),
            largest,
        )
    }

    /// Records and bytes held by terminal sessions, which compaction drops.
    pub fn reclaimable(&self) -> Room {
        self.index.reclaimable()
    }

    /// The compaction policy: true when compaction would drop something
    /// and either more than half of a bound is used and at least a quarter
    /// of what is used would go, or less than a whole session
    /// ([`SESSION_RESERVE`]) is free. Calling [`compact`](Self::compact) when
    /// this is true keeps the file within about half its bounds plus the
    /// live sessions.
    pub fn needs_compaction(&self) -> bool {
        let dead = self.reclaimable();
        if dead.records == 0 {
            return false;
        }
        let used = self.used();
        let over_half = used.records.saturating_mul(2) > MAX_STORE_RECORDS
            || used.bytes.saturating_mul(2) > MAX_STORE_BYTES;
        let worth = dead.records.saturating_mul(4) >= used.records
            || dead.bytes.saturating_mul(4) >= used.bytes;
        (over_half && worth) || !self.room().covers(SESSION_RESERVE)
    }

    /// The used start-authorization nonces the last compaction carried,
    /// ascending by nonce, with their expiry (expired ones included: the
    /// store has no clock; compare with yours). Empty for a store never
    /// compacted. Nonces in the records of the sessions kept are in those
    /// records, not here.
    pub fn carried_nonces(&self) -> &[CarriedNonce] {
        self.index.carried_nonces()
    }

    /// The expiry of `nonce` if the last compaction carried it.
    pub fn carried_nonce(&self, nonce: &[u8; 16]) -> Option<u64> {
        let all = self.index.carried_nonces();
        all.binary_search_by(|c| c.nonce.cmp(nonce))
            .ok()
            .and_then(|i| all.get(i))
            .map(|c| c.expires_at_ms)
    }

    /// How many compactions the store has been through.
    pub fn generation(&self) -> u64 {
        self.index.snapshot().generation
    }

    /// Compacts the store: rewrites it as a snapshot record carrying the
    /// unexpired used start-authorization nonces (those of the previous
    /// snapshot and `carry`, deduplicated with the later expiry, dropped
    /// when `expires_at_ms <= now_ms`), followed by every record of every
    /// session that is not terminal, byte for byte and in order. Terminal
    /// sessions are dropped: their ids and idempotency keys are forgotten
    /// (see `docs/journal.md`, "Compaction").
    ///
    /// Crash-safe at every step (`docs/journal.md`): the anchor file, if
    /// kept, names both the old and the new file until the new one is in
    /// place; nothing changes on an error before the rename. More than
    /// [`MAX_CARRIED_NONCES`] unexpired nonces is `store_nonces_too_many`
    /// and nothing is written.
    pub fn compact(
        &mut self,
        carry: &[([u8; 16], u64)],
        now_ms: u64,
    ) -> Result<CompactReport, JournalError> {
        self.writable()?;
        let mut keep: BTreeMap<[u8; 16], u64> = BTreeMap::new();
        let mut nonces_expired = 0u64;
        let carried = self
            .index
            .carried_nonces()
            .iter()
            .map(|c| (c.nonce, c.expires_at_ms));
        for (nonce, expires) in carried.chain(carry.iter().copied()) {
            if expires <= now_ms {
                nonces_expired += 1;
                continue;
            }
            let e = keep.entry(nonce).or_insert(expires);
            *e = (*e).max(expires);
        }
        if keep.len() > MAX_CARRIED_NONCES {
            return Err(JournalError::NoncesTooMany {
                count: keep.len() as u64,
                max: MAX_CARRIED_NONCES as u64,
            });
        }
        let snapshot = Snapshot {
            generation: self.index.snapshot().generation.saturating_add(1),
            compacted_at_ms: now_ms,
            nonces: keep
                .into_iter()
                .map(|(nonce, expires_at_ms)| CarriedNonce {
                    nonce,
                    expires_at_ms,
                })
                .collect(),
        };
        let mut records = vec![(KIND_SNAPSHOT, encode_snapshot(&snapshot))];
        records.extend(self.index.live_records());
        // The new index first: a snapshot that would not replay is refused
        // before anything is written.
        let index = index_of(&records)?;
        let before = self.used();
        let sessions_before = self.index.len() as u64;
        let (journal_id, current) = (self.journal.journal_id(), self.journal.anchor());
        let anchor_file = self.anchor_file.as_ref();
        let mut announced = false;
        let new =
            self.journal
                .rewrite_announced(records.iter().map(|(k, p)| (*k, &p[..])), |next| {
                    crate::crash_point::reached("store_compact_built");
                    if let Some(file) = anchor_file {
                        announced = true;
                        file.store(&AnchorRecord {
                            journal_id,
                            current,
                            next: Some(*next),
                        })?;
                        crate::crash_point::reached("store_compact_announced");
                    }
                    Ok(())
                });
        let new = match new {
            Ok(n) => n,
            Err(e) => {
                if announced {
                    // The anchor names a file that may or may not have come:
                    // refuse writes until a reopen sorts it out.
                    self.anchor_failed = true;
                }
                return Err(e);
            }
        };
        self.journal = new;
        self.index = index;
        crate::crash_point::reached("store_compact_in_place");
        self.refresh_anchor()?;
        crate::crash_point::reached("store_compact_done");
        let sessions_kept = self.index.len() as u64;
        Ok(CompactReport {
            generation: snapshot.generation,
            sessions_kept,
            sessions_dropped: sessions_before.saturating_sub(sessions_kept),
            before,
            after: self.used(),
            nonces_carried: snapshot.nonces.len() as u64,
            nonces_expired,
        })
    }
}
