//! The session store: durable identity and the latest stage of every
//! session, on top of one [`Journal`].
//!
//! * Bounded at [`MAX_STORE_BYTES`] (64 MiB) and [`MAX_STORE_RECORDS`]
//!   (10,000); one exclusive writer.
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
//! Content checks (canonical plan, bounds) run when a record is appended;
//! replay trusts the plan bytes that the digest chain covers and does not
//! re-hash them, which keeps a full 64 MiB replay close to the cost of
//! reading and hashing the file once.

mod index;
pub mod record;

pub use index::{SessionIndex, SessionRecord, StoredTransition};

use crate::anchor::Anchor;
use crate::anchor_file::{open_matching, AnchorFile, AnchorRecord};
use crate::error::{ConflictReason, CorruptKind, JournalError};
use crate::format::JournalKind;
use crate::journal::{Journal, OpenReport};
use crate::replay::replay_bytes;
use crate::spec::JournalSpec;
use glove_types::canon::parse_canonical;
use glove_types::ids::{IdempotencyKey, SessionId};
use glove_types::stage::SessionStage;
use glove_types::{Blake3Digest, Sha256Digest};
use record::{encode_create, encode_transition, KIND_CREATE, KIND_TRANSITION};
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
    record_kinds: &[KIND_CREATE, KIND_TRANSITION],
};

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

impl SessionStore {
    /// Creates an empty store at `path` (its directory must be mode 0700).
    pub fn create(path: &Path) -> Result<SessionStore, JournalError> {
        Ok(SessionStore {
            journal: Journal::create(path, &SESSION_STORE_SPEC)?,
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
        let opened = Journal::open(path, &SESSION_STORE_SPEC, anchor)?;
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
        let (mut store, report) = match anchor.load()? {
            None => {
                let (s, mut r) = SessionStore::open(path, None)?;
                r.unanchored = true;
                (s, r)
            }
            Some(rec) => {
                let (s, r) = open_matching(&rec, |a| SessionStore::open(path, Some(a)))?;
                if s.journal.journal_id() != rec.journal_id {
                    return Err(JournalError::corrupt(CorruptKind::AnchorMismatch, 0));
                }
                (s, r)
            }
        };
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
        let appended = self.journal.append(KIND_CREATE, &payload)?;
        self.index.insert_created(
            req.session_id.clone(),
            req.idempotency_key.clone(),
            req.controller_plan_digest,
            content,
            index::SharedBytes::owned(req.plan),
            appended.seq,
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
        let appended = self
            .journal
            .append(KIND_TRANSITION, &encode_transition(id, to, evidence))?;
        self.index
            .set_stage(id, to, index::SharedBytes::owned(evidence), appended.seq);
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

    /// The underlying journal.
    pub fn journal(&self) -> &Journal {
        &self.journal
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
