//! The session store: durable identity and the latest stage of every
//! session, on top of one [`Journal`].
//!
//! * Bounded at [`MAX_STORE_BYTES`] (64 MiB) and [`MAX_STORE_RECORDS`]
//!   (10,000) per file, not per lifetime (see compaction below); one
//!   exclusive writer.
//! * [`SessionStore::create_session`] stores the canonical plan, the
//!   controller's BLAKE3 `controller_plan_digest`, Glove's SHA-256
//!   `plan_content_digest` (computed here from the exact bytes) and the
//!   idempotency key. A byte-identical retry with the same key returns the
//!   original record without appending; the same session id or key with any
//!   other content is `session_conflict`.
//! * [`SessionStore::transition`] appends a stage change with canonical-JSON
//!   evidence, checked against [`SessionStage::can_transition`]. Repeating
//!   the current stage with the same evidence is a no-op (transitions are
//!   idempotent); with other evidence it is `store_transition_conflict`.
//! * [`SessionStore::transitions`] returns a session's transitions in order
//!   with their evidence byte for byte (a layer above can keep its own
//!   records there, see `glove-proptests`' lifecycle adapter).
//! * Replay rebuilds every session's latest stage and fails closed on an
//!   impossible sequence (a transition the graph forbids, a transition for
//!   an unknown session, a duplicate creation).
//! * Anchored ([`SessionStore::create_anchored`],
//!   [`SessionStore::open_anchored`]): the store keeps its
//!   [`AnchorFile`] and rewrites it after every durable append, from the
//!   journal's durable state, before the append returns. So a store cut back
//!   to any earlier point, or replaced by an older copy, is refused at the
//!   next open, crash or not. If the anchor cannot be written the append's
//!   record is durable but the store is poisoned: that call and every later
//!   write fail, and a reopen (which rewrites the anchor) recovers.
//!
//! * Compaction ([`SessionStore::compact`], when the caller decides;
//!   [`SessionStore::needs_compaction`] is the policy): the store is
//!   rewritten through [`Journal::rewrite_announced`] as a snapshot record
//!   (generation, the caller's clock, the unexpired used
//!   start-authorization nonces it is asked to carry) followed by every
//!   record of every session that is not terminal, byte for byte and in
//!   order; terminal sessions are dropped. The anchor file names both files
//!   while the new one is put in place, so a crash at any step opens to the
//!   old file or the new one. `docs/journal.md` has the argument.
//! * Room: every live session keeps room set aside for the records it may
//!   still need to become terminal (one, its `failed`, until it is
//!   started; up to three once started), each at the largest transition
//!   size, plus room for a snapshot record. A creation, `preparing` or
//!   `starting` that would eat into that is refused up front with
//!   `store_no_room`; the appends on the way to a terminal stage always
//!   fit. [`SessionStore::room`], [`SessionStore::has_room_for`] and
//!   [`SessionStore::check_room_to_start`] let the caller ask first.
//!
//! Content checks (canonical plan, bounds) run when a record is appended;
//! replay trusts the plan bytes that the digest chain covers and does not
//! re-hash them, which keeps a full 64 MiB replay close to the cost of
//! reading and hashing the file once.

mod compact;
mod index;
pub mod record;

pub use index::{SessionIndex, SessionRecord, StoredTransition};

use crate::anchor::Anchor;
use crate::anchor_file::{AnchorFile, AnchorRecord};
use crate::error::{ConflictReason, CorruptKind, JournalError};
use crate::format::{record_len, JournalKind};
use crate::journal::{Journal, OpenReport};
use crate::replay::replay_bytes;
use crate::spec::JournalSpec;
use glove_types::canon::parse_canonical;
use glove_types::ids::{IdempotencyKey, SessionId};
use glove_types::stage::SessionStage;
use glove_types::{Blake3Digest, Sha256Digest};
use record::{
    encode_create, encode_snapshot, encode_transition, CarriedNonce, Snapshot, KIND_CREATE,
    KIND_SNAPSHOT, KIND_TRANSITION, MAX_CARRIED_NONCES, MAX_SNAPSHOT_PAYLOAD,
};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// Byte bound of the session store file.
pub const MAX_STORE_BYTES: u64 = 64 * 1024 * 1024;
/// Record bound of the session store.
pub const MAX_STORE_RECORDS: u64 = 10_000;
/// Largest canonical plan, in bytes.
pub const MAX_PLAN_BYTES: usize = 1024 * 1024;
/// Largest transition evidence, in bytes.
pub const MAX_EVIDENCE_BYTES: usize = 64 * 1024;

/// The session store's journal spec.
pub const SESSION_STORE_SPEC: JournalSpec = JournalSpec {
    kind: JournalKind::SESSION_STORE,
    max_bytes: MAX_STORE_BYTES,
    max_records: MAX_STORE_RECORDS,
    // Two length-prefixed ids, two digests and the plan.
    max_payload: (MAX_PLAN_BYTES + 2 + 2 * 64 + 64) as u32,
    record_kinds: &[KIND_CREATE, KIND_TRANSITION, KIND_SNAPSHOT],
};

/// Records and bytes: of room in the store, of what something needs, of
/// what a set of sessions holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Room {
    /// Records.
    pub records: u64,
    /// Bytes on disk (frames and digests included).
    pub bytes: u64,
}

impl Room {
    /// Both components added (saturating).
    pub const fn plus(self, o: Room) -> Room {
        Room {
            records: self.records.saturating_add(o.records),
            bytes: self.bytes.saturating_add(o.bytes),
        }
    }

    /// Both components subtracted (saturating at zero).
    pub const fn minus(self, o: Room) -> Room {
        Room {
            records: self.records.saturating_sub(o.records),
            bytes: self.bytes.saturating_sub(o.bytes),
        }
    }

    /// Whether both components are at least `need`'s.
    pub const fn covers(self, need: Room) -> bool {
        self.records >= need.records && self.bytes >= need.bytes
    }

    /// `n` times this room (saturating).
    pub const fn times(self, n: u64) -> Room {
        Room {
            records: self.records.saturating_mul(n),
            bytes: self.bytes.saturating_mul(n),
        }
    }
}

/// The bounds of the store file as a [`Room`].
pub const STORE_BOUNDS: Room = Room {
    records: MAX_STORE_RECORDS,
    bytes: MAX_STORE_BYTES,
};

/// The largest transition record: one record of a 64-byte session id, a
/// stage byte and [`MAX_EVIDENCE_BYTES`] of evidence. Every record a live
/// session may still need is reserved at this size.
pub const TRANSITION_RESERVE: Room = Room {
    records: 1,
    bytes: record_len(1 + 64 + 1 + MAX_EVIDENCE_BYTES) as u64,
};

/// Kept free at all times for the snapshot record a compaction adds, so a
/// compaction of a store within its reserve always fits.
pub const SNAPSHOT_RESERVE: Room = Room {
    records: 1,
    bytes: record_len(MAX_SNAPSHOT_PAYLOAD) as u64,
};

/// What a start takes: the `starting`, `running`, `stopping` and
/// `exited`/`failed` records, each at the largest size.
pub const START_RESERVE: Room = TRANSITION_RESERVE.times(4);

/// A whole session with a plan of at most [`MAX_EVIDENCE_BYTES`]: its
/// creation and five transitions, each at the largest transition size.
/// [`SessionStore::needs_compaction`] asks for compaction when less than
/// this is free.
pub const SESSION_RESERVE: Room = TRANSITION_RESERVE.times(6);

/// What [`SessionStore::compact`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactReport {
    /// The generation of the new file (1 for the first compaction).
    pub generation: u64,
    /// Sessions kept (not terminal).
    pub sessions_kept: u64,
    /// Terminal sessions dropped.
    pub sessions_dropped: u64,
    /// The file before: records and bytes.
    pub before: Room,
    /// The file after.
    pub after: Room,
    /// Nonces the new snapshot carries.
    pub nonces_carried: u64,
    /// Supplied or carried nonces dropped as expired at `now_ms`.
    pub nonces_expired: u64,
}

/// A request to create a session.
#[derive(Clone, Copy, Debug)]
pub struct NewSession<'a> {
    /// The controller's session id.
    pub session_id: &'a SessionId,
    /// The controller's idempotency key.
    pub idempotency_key: &'a IdempotencyKey,
    /// The controller's BLAKE3 correlation digest.
    pub controller_plan_digest: Blake3Digest,
    /// The plan's canonical JSON bytes (checked).
    pub plan: &'a [u8],
}

/// What [`SessionStore::create_session`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Creation {
    /// A new session was durably created.
    Created(SessionRecord),
    /// A byte-identical retry: the original record, nothing appended.
    Existing(SessionRecord),
}

impl Creation {
    /// The session record either way.
    pub fn record(&self) -> &SessionRecord {
        match self {
            Creation::Created(r) | Creation::Existing(r) => r,
        }
    }
}

/// What [`SessionStore::transition`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transitioned {
    /// The session after the transition.
    pub record: SessionRecord,
    /// False when the session already was in the stage with this evidence.
    pub appended: bool,
}

/// The durable session store (see the module docs).
#[derive(Debug)]
pub struct SessionStore {
    journal: Journal,
    index: SessionIndex,
    /// Rewritten after every durable append when present.
    anchor_file: Option<AnchorFile>,
    /// Set when the anchor could not be rewritten: the store refuses writes.
    anchor_failed: bool,
}

/// Builds the index of a file that would hold exactly `records`, numbered
/// from 1, without writing anything (compaction checks its snapshot this
/// way before the rewrite).
fn index_of(records: &[(u16, Vec<u8>)]) -> Result<SessionIndex, JournalError> {
    let total: usize = records.iter().map(|(_, p)| p.len()).sum();
    let mut image = Vec::with_capacity(total);
    let mut metas = Vec::with_capacity(records.len());
    let mut offset = crate::format::HEADER_LEN as u64;
    for (i, (kind, payload)) in records.iter().enumerate() {
        let start = image.len();
        image.extend_from_slice(payload);
        metas.push(crate::replay::RecordMeta {
            kind: *kind,
            seq: i as u64 + 1,
            offset,
            payload: start..image.len(),
            digest: [0; 32],
        });
        offset += record_len(payload.len()) as u64;
    }
    let image = Arc::new(image);
    let mut index = SessionIndex::default();
    for m in &metas {
        index.apply(&image, m)?;
    }
    Ok(index)
}

impl SessionStore {
    /// Creates an empty store at `path` (its directory must be mode 0700).
    pub fn create(path: &Path) -> Result<SessionStore, JournalError> {
        Ok(SessionStore {
            journal: Journal::create_with_unguarded(path, &SESSION_STORE_SPEC, [])?,
            index: SessionIndex::default(),
            anchor_file: None,
            anchor_failed: false,
        })
    }

    /// Creates an empty store at `path` that keeps `anchor` (see the module
    /// docs). Refused with `journal_missing_but_anchored` when an anchor
    /// file is already there: the store it vouches for is gone, and that is
    /// for an operator to look into, not to paper over.
    pub fn create_anchored(path: &Path, anchor: AnchorFile) -> Result<SessionStore, JournalError> {
        if anchor.exists() {
            return Err(JournalError::corrupt(CorruptKind::MissingButAnchored, 0));
        }
        let mut store = SessionStore::create(path)?;
        store.anchor_file = Some(anchor);
        store.refresh_anchor()?;
        Ok(store)
    }

    /// Opens the store, replays it strictly (torn tail repaired, anything
    /// else corrupt) and rebuilds the index.
    pub fn open(
        path: &Path,
        anchor: Option<&Anchor>,
    ) -> Result<(SessionStore, OpenReport), JournalError> {
        SessionStore::from_opened(Journal::open_unguarded(path, &SESSION_STORE_SPEC, anchor)?)
    }

    /// The store over a journal just opened: its index rebuilt.
    fn from_opened(opened: crate::Opened) -> Result<(SessionStore, OpenReport), JournalError> {
        let (journal, report, image, records) = opened.into_parts();
        let image = Arc::new(image);
        let mut index = SessionIndex::default();
        for rec in &records {
            index.apply(&image, rec)?;
        }
        Ok((
            SessionStore {
                journal,
                index,
                anchor_file: None,
                anchor_failed: false,
            },
            report,
        ))
    }

    /// Opens the store checked against the anchor file `anchor` (a store
    /// shorter than it, or diverging from it, is corrupt; an anchor that
    /// does not verify is `journal_anchor_file_invalid`), then rewrites the
    /// anchor from what was opened and keeps it for every later append. A
    /// missing anchor file is reported (`unanchored`), not refused, so a
    /// store from before anchor files still opens.
    pub fn open_anchored(
        path: &Path,
        anchor: AnchorFile,
    ) -> Result<(SessionStore, OpenReport), JournalError> {
        // The anchor is read under the store's lock (a holder that appended
        // or compacted meanwhile cannot leave it stale).
        let (opened, record) = Journal::open_anchored_by(path, &SESSION_STORE_SPEC, || {
            let record = anchor.load()?;
            let candidates = record.iter().flat_map(|r| r.candidates().copied());
            Ok((candidates.collect(), record))
        })?;
        let (mut store, mut report) = SessionStore::from_opened(opened)?;
        match &record {
            None => report.unanchored = true,
            Some(rec) => {
                if store.journal.journal_id() != rec.journal_id {
                    return Err(JournalError::corrupt(CorruptKind::AnchorMismatch, 0));
                }
            }
        }
        store.anchor_file = Some(anchor);
        store.refresh_anchor()?;
        Ok((store, report))
    }

    /// Rewrites the anchor file (if kept) from the journal's durable state.
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

    fn writable(&self) -> Result<(), JournalError> {
        crate::anchor_file::refuse_if_poisoned(self.anchor_failed)
    }

    /// Creates a session, or returns the original on a byte-identical retry.
    pub(crate) fn create_session(&mut self, req: NewSession<'_>) -> Result<Creation, JournalError> {
        self.writable()?;
        if req.plan.len() > MAX_PLAN_BYTES {
            return Err(JournalError::PlanTooLarge {
                len: req.plan.len() as u64,
                max: MAX_PLAN_BYTES as u64,
            });
        }
        parse_canonical(req.plan, MAX_PLAN_BYTES).map_err(|rejection| JournalError::Invalid {
            field: "plan",
            rejection,
        })?;
        let content = Sha256Digest::of(req.plan);
        if let Some(existing) = self.index.by_idempotency_key(req.idempotency_key) {
            let same = existing.session_id() == req.session_id
                && existing.controller_plan_digest() == &req.controller_plan_digest
                && existing.plan_content_digest() == &content
                && existing.plan() == req.plan;
            return if same {
                Ok(Creation::Existing(existing.clone()))
            } else {
                Err(JournalError::SessionConflict {
                    session: req.session_id.clone(),
                    reason: ConflictReason::IdempotencyKeyReused,
                })
            };
        }
        if self.index.get(req.session_id).is_some() {
            return Err(JournalError::SessionConflict {
                session: req.session_id.clone(),
                reason: ConflictReason::SessionIdReused,
            });
        }
        let payload = encode_create(
            req.session_id,
            req.idempotency_key,
            &req.controller_plan_digest,
            &content,
            req.plan,
        );
        self.admit(
            0,
            index::remaining_records(SessionStage::Created),
            payload.len(),
        )?;
        let appended = self.journal.append(KIND_CREATE, &payload)?;
        self.index.insert_created(
            req.session_id.clone(),
            req.idempotency_key.clone(),
            req.controller_plan_digest,
            content,
            index::SharedBytes::owned(req.plan),
            appended.seq,
            record_len(payload.len()) as u64,
        );
        self.refresh_anchor()?;
        self.index
            .get(req.session_id)
            .cloned()
            .map(Creation::Created)
            .ok_or_else(|| JournalError::SessionNotFound {
                session: req.session_id.clone(),
            })
    }

    /// Durably moves a session to `to`, with canonical-JSON `evidence`.
    pub(crate) fn transition(
        &mut self,
        id: &SessionId,
        to: SessionStage,
        evidence: &[u8],
    ) -> Result<Transitioned, JournalError> {
        self.writable()?;
        let current = self
            .index
            .get(id)
            .ok_or_else(|| JournalError::SessionNotFound {
                session: id.clone(),
            })?;
        parse_canonical(evidence, MAX_EVIDENCE_BYTES).map_err(|rejection| {
            JournalError::Invalid {
                field: "evidence",
                rejection,
            }
        })?;
        if current.stage() == to && current.stage_seq() != current.created_seq() {
            return if current.evidence() == evidence {
                Ok(Transitioned {
                    record: current.clone(),
                    appended: false,
                })
            } else {
                Err(JournalError::TransitionConflict {
                    session: id.clone(),
                    stage: to,
                })
            };
        }
        if !current.stage().can_transition(to) {
            return Err(JournalError::IllegalTransition {
                session: id.clone(),
                from: current.stage(),
                to,
            });
        }
        let payload = encode_transition(id, to, evidence);
        self.admit(
            index::remaining_records(current.stage()),
            index::remaining_records(to),
            payload.len(),
        )?;
        let appended = self.journal.append(KIND_TRANSITION, &payload)?;
        self.index.set_stage(
            id,
            to,
            index::SharedBytes::owned(evidence),
            appended.seq,
            record_len(payload.len()) as u64,
        );
        self.refresh_anchor()?;
        let record = self
            .index
            .get(id)
            .cloned()
            .ok_or_else(|| JournalError::SessionNotFound {
                session: id.clone(),
            })?;
        Ok(Transitioned {
            record,
            appended: true,
        })
    }

    /// Refuses (`store_no_room`) an append of a `payload_len`-byte record
    /// that moves a session from needing `from` more records to needing
    /// `to` (see [`index::remaining_records`]) unless the room left after
    /// it still covers what every live session may need. Appends on the way
    /// to a terminal stage need less than they free and always pass.
    fn admit(&self, from: u64, to: u64, payload_len: usize) -> Result<(), JournalError> {
        let record = Room {
            records: 1,
            bytes: record_len(payload_len) as u64,
        };
        let need = record.plus(TRANSITION_RESERVE.times(to));
        let have = self.room().plus(TRANSITION_RESERVE.times(from));
        if have.covers(need) {
            Ok(())
        } else {
            Err(JournalError::NoRoom {
                need: need.minus(TRANSITION_RESERVE.times(from)),
                room: self.room(),
            })
        }
    }

    /// The session with this id.
    pub fn get(&self, id: &SessionId) -> Option<&SessionRecord> {
        self.index.get(id)
    }

    /// Every transition of the session with this id, oldest first, with
    /// its evidence byte for byte (`None` for an unknown id).
    pub fn transitions(&self, id: &SessionId) -> Option<&[StoredTransition]> {
        self.index.transitions(id)
    }

    /// The session created with this idempotency key.
    pub fn by_idempotency_key(&self, key: &IdempotencyKey) -> Option<&SessionRecord> {
        self.index.by_idempotency_key(key)
    }

    /// The whole in-memory index.
    pub fn index(&self) -> &SessionIndex {
        &self.index
    }

    /// The anchor of what is durable in the store.
    pub fn anchor(&self) -> Anchor {
        self.journal.anchor()
    }

    /// A read-only view of the underlying journal (its size, count and
    /// anchor). No raw writer is handed out: records reach this file only
    /// through the lifecycle (`StoreLog`).
    pub fn journal(&self) -> crate::journal::JournalView<'_> {
        crate::journal::JournalView::new(&self.journal)
    }
}

/// Replays a session-store image without touching any file (for the fuzz
/// target and offline checks). A torn tail is reported, not repaired.
pub fn replay_session_bytes(
    bytes: &[u8],
    anchor: Option<&Anchor>,
) -> Result<(SessionIndex, crate::replay::Replayed), JournalError> {
    let replayed = replay_bytes(bytes, &SESSION_STORE_SPEC, anchor)?;
    let image = Arc::new(bytes.to_vec());
    let mut index = SessionIndex::default();
    for m in &replayed.records {
        index.apply(&image, m)?;
    }
    Ok((index, replayed))
}
