//! The in-memory view of the session store and the rules replay enforces.
//!
//! [`SessionIndex`] holds every session's creation data, latest stage and
//! ordered transitions, keyed by session id, plus a map from idempotency key
//! to session id, so lookups never reread the file. Replay feeds it every stored record in
//! order; a record that the rules forbid is corruption at that record's
//! offset.

use super::record::{
    decode_create, decode_snapshot, decode_transition, encode_create, encode_transition,
    CarriedNonce, Snapshot, KIND_CREATE, KIND_SNAPSHOT, KIND_TRANSITION,
};
use super::{Room, MAX_EVIDENCE_BYTES};
use crate::error::{CorruptKind, JournalError};
use crate::format::record_len;
use crate::replay::RecordMeta;
use glove_types::ids::{IdempotencyKey, SessionId};
use glove_types::stage::SessionStage;
use glove_types::{Blake3Digest, Sha256Digest};
use std::collections::HashMap;
use std::sync::Arc;

/// Bytes shared with a larger buffer (the replayed file image), so replay
/// does not copy every stored plan.
#[derive(Clone)]
pub(crate) struct SharedBytes {
    buf: Arc<Vec<u8>>,
    start: usize,
    end: usize,
}

impl SharedBytes {
    pub(crate) fn new(buf: Arc<Vec<u8>>, start: usize, end: usize) -> SharedBytes {
        SharedBytes { buf, start, end }
    }

    pub(crate) fn owned(bytes: &[u8]) -> SharedBytes {
        SharedBytes::new(Arc::new(bytes.to_vec()), 0, bytes.len())
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        self.buf.get(self.start..self.end).unwrap_or(&[])
    }
}

impl PartialEq for SharedBytes {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for SharedBytes {}

impl core::fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "<{} bytes>", self.end.saturating_sub(self.start))
    }
}

/// One session as the store knows it: its creation data and latest stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRecord {
    session_id: SessionId,
    idempotency_key: IdempotencyKey,
    controller_plan_digest: Blake3Digest,
    plan_content_digest: Sha256Digest,
    plan: SharedBytes,
    created_seq: u64,
    stage: SessionStage,
    stage_seq: u64,
    evidence: Arc<[u8]>,
}

impl SessionRecord {
    /// The controller's session id.
    pub fn session_id(&self) -> &SessionId {
        &self.session_id
    }
    /// The idempotency key of the creation.
    pub fn idempotency_key(&self) -> &IdempotencyKey {
        &self.idempotency_key
    }
    /// The controller's BLAKE3 correlation digest of the plan.
    pub fn controller_plan_digest(&self) -> &Blake3Digest {
        &self.controller_plan_digest
    }
    /// SHA-256 of the exact canonical plan bytes.
    pub fn plan_content_digest(&self) -> &Sha256Digest {
        &self.plan_content_digest
    }
    /// The canonical plan bytes as stored.
    pub fn plan(&self) -> &[u8] {
        self.plan.as_slice()
    }
    /// Sequence number of the creation record.
    pub fn created_seq(&self) -> u64 {
        self.created_seq
    }
    /// The latest stage.
    pub fn stage(&self) -> SessionStage {
        self.stage
    }
    /// Sequence number of the record that set the latest stage.
    pub fn stage_seq(&self) -> u64 {
        self.stage_seq
    }
    /// Evidence of the latest transition (empty while `created`).
    pub fn evidence(&self) -> &[u8] {
        &self.evidence
    }
}

/// One stored transition of a session: its place in the journal, the stage
/// it entered and its evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredTransition {
    seq: u64,
    stage: SessionStage,
    evidence: SharedBytes,
}

impl StoredTransition {
    /// The journal sequence number of the transition record.
    pub fn seq(&self) -> u64 {
        self.seq
    }
    /// The stage entered.
    pub fn stage(&self) -> SessionStage {
        self.stage
    }
    /// The canonical-JSON evidence, byte for byte as stored.
    pub fn evidence(&self) -> &[u8] {
        self.evidence.as_slice()
    }
}

/// The most records a session in `stage` may still append to reach a
/// terminal stage without a further admission: a session that was not
/// admitted to start (`created`, `preparing`) can always be failed (one
/// record); a started one may still run, stop and exit.
pub(crate) const fn remaining_records(stage: SessionStage) -> u64 {
    match stage {
        SessionStage::Created | SessionStage::Preparing => 1,
        SessionStage::Starting => 3,
        SessionStage::Running => 2,
        SessionStage::Stopping => 1,
        SessionStage::Exited | SessionStage::Failed => 0,
    }
}

/// Every session, indexed by id and by idempotency key, with each
/// session's transitions in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionIndex {
    sessions: HashMap<SessionId, SessionRecord>,
    by_key: HashMap<IdempotencyKey, SessionId>,
    /// Every transition of each session, oldest first (at most one per
    /// stage). Evidence read at open points into the file image.
    history: HashMap<SessionId, Vec<StoredTransition>>,
    /// Records and on-disk bytes of each session (for compaction's
    /// accounting).
    footprint: HashMap<SessionId, Room>,
    /// Records and bytes of sessions that are not terminal (compaction
    /// keeps them).
    live: Room,
    /// Records and bytes of terminal sessions (compaction drops them).
    dead: Room,
    /// Records the live sessions may still append (see
    /// [`remaining_records`]).
    outstanding: u64,
    /// The snapshot record a compacted store starts with (generation 0 and
    /// no nonces for a store never compacted).
    snapshot: Snapshot,
}

impl SessionIndex {
    /// The session with this id.
    pub fn get(&self, id: &SessionId) -> Option<&SessionRecord> {
        self.sessions.get(id)
    }

    /// The session created with this idempotency key.
    pub fn by_idempotency_key(&self, key: &IdempotencyKey) -> Option<&SessionRecord> {
        self.by_key.get(key).and_then(|id| self.sessions.get(id))
    }

    /// Every transition of the session with this id, oldest first (empty
    /// for a session that is only created; `None` for an unknown id).
    pub fn transitions(&self, id: &SessionId) -> Option<&[StoredTransition]> {
        self.sessions.get(id)?;
        Some(self.history.get(id).map_or(&[][..], Vec::as_slice))
    }

    /// Every session, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &SessionRecord> + '_ {
        self.sessions.values()
    }

    /// How many sessions exist.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// Whether no session exists.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Records and bytes held by sessions that are not terminal.
    pub fn live(&self) -> Room {
        self.live
    }

    /// Records and bytes held by terminal sessions (what compaction drops).
    pub fn reclaimable(&self) -> Room {
        self.dead
    }

    /// Records the live sessions may still append to become terminal.
    pub fn outstanding_records(&self) -> u64 {
        self.outstanding
    }

    /// The snapshot the store starts with (generation 0 if never compacted).
    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    /// The carried nonces of the snapshot, ascending by nonce.
    pub fn carried_nonces(&self) -> &[CarriedNonce] {
        &self.snapshot.nonces
    }

    /// Every record of every session that is not terminal, as (kind,
    /// payload), in the order they were appended. Payloads are re-encoded
    /// from the index; the codec is deterministic, so they equal the
    /// stored payloads byte for byte.
    pub(crate) fn live_records(&self) -> Vec<(u16, Vec<u8>)> {
        let mut out: Vec<(u64, u16, Vec<u8>)> = Vec::new();
        for r in self.sessions.values().filter(|r| !r.stage.is_terminal()) {
            out.push((
                r.created_seq,
                KIND_CREATE,
                encode_create(
                    &r.session_id,
                    &r.idempotency_key,
                    &r.controller_plan_digest,
                    &r.plan_content_digest,
                    r.plan.as_slice(),
                ),
            ));
            for t in self
                .history
                .get(&r.session_id)
                .map_or(&[][..], Vec::as_slice)
            {
                out.push((
                    t.seq,
                    KIND_TRANSITION,
                    encode_transition(&r.session_id, t.stage, t.evidence.as_slice()),
                ));
            }
        }
        out.sort_unstable_by_key(|(seq, _, _)| *seq);
        out.into_iter().map(|(_, k, p)| (k, p)).collect()
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "the fields of one creation record"
    )]
    pub(crate) fn insert_created(
        &mut self,
        session_id: SessionId,
        idempotency_key: IdempotencyKey,
        controller_plan_digest: Blake3Digest,
        plan_content_digest: Sha256Digest,
        plan: SharedBytes,
        seq: u64,
        record_bytes: u64,
    ) {
        let one = Room {
            records: 1,
            bytes: record_bytes,
        };
        self.footprint.insert(session_id.clone(), one);
        self.live = self.live.plus(one);
        self.outstanding += remaining_records(SessionStage::Created);
        self.by_key
            .insert(idempotency_key.clone(), session_id.clone());
        self.sessions.insert(
            session_id.clone(),
            SessionRecord {
                session_id,
                idempotency_key,
                controller_plan_digest,
                plan_content_digest,
                plan,
                created_seq: seq,
                stage: SessionStage::Created,
                stage_seq: seq,
                evidence: Arc::from(&[][..]),
            },
        );
    }

    pub(crate) fn set_stage(
        &mut self,
        id: &SessionId,
        stage: SessionStage,
        evidence: SharedBytes,
        seq: u64,
        record_bytes: u64,
    ) {
        if let Some(r) = self.sessions.get_mut(id) {
            let one = Room {
                records: 1,
                bytes: record_bytes,
            };
            let fp = self.footprint.entry(id.clone()).or_default();
            let before = *fp;
            *fp = fp.plus(one);
            if stage.is_terminal() {
                self.live = self.live.minus(before);
                self.dead = self.dead.plus(*fp);
            } else {
                self.live = self.live.plus(one);
            }
            self.outstanding = self.outstanding.saturating_sub(remaining_records(r.stage))
                + remaining_records(stage);
            r.stage = stage;
            r.stage_seq = seq;
            r.evidence = Arc::from(evidence.as_slice());
            self.history
                .entry(id.clone())
                .or_default()
                .push(StoredTransition {
                    seq,
                    stage,
                    evidence,
                });
        }
    }

    /// Applies one stored record during replay; `image` is the whole file.
    pub(crate) fn apply(
        &mut self,
        image: &Arc<Vec<u8>>,
        rec: &RecordMeta,
    ) -> Result<(), JournalError> {
        let bad = |kind| JournalError::corrupt(kind, rec.offset);
        let payload = image.get(rec.payload.clone()).unwrap_or(&[]);
        let bytes = record_len(payload.len()) as u64;
        match rec.kind {
            KIND_SNAPSHOT => {
                // Only compaction writes one, and only as the first record.
                if rec.seq != 1 {
                    return Err(bad(CorruptKind::StoreSnapshotInvalid));
                }
                self.snapshot =
                    decode_snapshot(payload).ok_or(bad(CorruptKind::StoreSnapshotInvalid))?;
                Ok(())
            }
            KIND_CREATE => {
                let c = decode_create(payload).ok_or(bad(CorruptKind::StoreRecordInvalid))?;
                if c.plan.len() > super::MAX_PLAN_BYTES {
                    return Err(bad(CorruptKind::StoreRecordInvalid));
                }
                if self.sessions.contains_key(&c.session_id)
                    || self.by_key.contains_key(&c.idempotency_key)
                {
                    return Err(bad(CorruptKind::StoreDuplicateSession));
                }
                // The plan is the tail of the payload.
                let plan = SharedBytes::new(
                    Arc::clone(image),
                    rec.payload.end - c.plan.len(),
                    rec.payload.end,
                );
                self.insert_created(
                    c.session_id,
                    c.idempotency_key,
                    c.controller_plan_digest,
                    c.plan_content_digest,
                    plan,
                    rec.seq,
                    bytes,
                );
                Ok(())
            }
            KIND_TRANSITION => {
                let t = decode_transition(payload).ok_or(bad(CorruptKind::StoreRecordInvalid))?;
                let from = self
                    .sessions
                    .get(&t.session_id)
                    .ok_or(bad(CorruptKind::StoreUnknownSession))?
                    .stage;
                if !from.can_transition(t.stage) {
                    return Err(bad(CorruptKind::StoreImpossibleTransition));
                }
                if glove_types::canon::parse_canonical(t.evidence, MAX_EVIDENCE_BYTES).is_err() {
                    return Err(bad(CorruptKind::StoreRecordInvalid));
                }
                // The evidence is the tail of the payload.
                let evidence = SharedBytes::new(
                    Arc::clone(image),
                    rec.payload.end - t.evidence.len(),
                    rec.payload.end,
                );
                self.set_stage(&t.session_id, t.stage, evidence, rec.seq, bytes);
                Ok(())
            }
            _ => Err(bad(CorruptKind::UnknownKind)),
        }
    }
}
