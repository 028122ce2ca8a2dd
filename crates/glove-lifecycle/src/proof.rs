//! Write-ahead proofs.
//!
//! A transition completes only with a [`Durable<R>`]: a zero-copy token that
//! says "the record entering `R` was durably appended for this subject at this
//! sequence number, after that predecessor". Only this crate mints one, and
//! only inside a `log_*` method, after the [`TransitionLog`] acknowledged the
//! exact record it was handed (or already held those exact bytes).
//!
//! Why a log implementation cannot forge a proof: the log never builds a
//! [`Durable`]. It sees a [`PendingRecord`] (built here, not constructible
//! elsewhere) and answers with an [`AppendReceipt`], which it can only obtain
//! from that pending record via [`PendingRecord::acknowledge`]. The crate then
//! checks that the receipt names the same subject, sequence number and record
//! digest before minting. A receipt kept from an earlier append, or from
//! another session, fails with `lifecycle_append_receipt_mismatch`. What the
//! crate must trust is the *truth* of the acknowledgement (that the bytes
//! really are durable): that is the port's contract.
//!
//! Proofs are not `Clone`, `Copy`, `Default` or `Deserialize`, have private
//! fields, are `#[must_use]` and are consumed by the transition that spends
//! them. A proof carries the [brand](crate::brand) `'id` of the session (or
//! transaction) that minted it, and a transition accepts only proofs with
//! its own brand, so spending a proof of session A on session B does not
//! compile. The binding is checked again when the proof is spent, as
//! defence in depth: a proof naming another subject is refused with
//! `lifecycle_proof_subject_mismatch`.
//!
//! [`TransitionLog`]: crate::ports::TransitionLog

use crate::brand::Invariant;
use crate::error::LifecycleError;
use crate::evidence::PlanDigests;
use crate::ports::TransitionLog;
use crate::record::{SessionEntry, SessionRecord};
use core::fmt;
use glove_types::ids::SessionId;
use glove_types::stage::SessionStage;
use glove_types::Sha256Digest;

use crate::apply::TransactionId;

/// What kind of subject a record belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum SubjectKind {
    /// A session and its lifecycle records.
    Session,
    /// An apply transaction and its records.
    Apply,
}

impl SubjectKind {
    /// Lowercase name, also the record-digest domain suffix.
    pub const fn as_str(self) -> &'static str {
        match self {
            SubjectKind::Session => "session",
            SubjectKind::Apply => "apply",
        }
    }

    /// The domain under which records of this kind are digested.
    pub const fn record_domain(self) -> &'static str {
        match self {
            SubjectKind::Session => SESSION_RECORD_DOMAIN,
            SubjectKind::Apply => APPLY_RECORD_DOMAIN,
        }
    }
}

/// Digest domain of session records: `SHA-256(domain || 0x00 || bytes)`.
pub const SESSION_RECORD_DOMAIN: &str = "glove.lifecycle.session-record.v1";
/// Digest domain of apply-transaction records.
pub const APPLY_RECORD_DOMAIN: &str = "glove.lifecycle.apply-record.v1";

/// The subject a record is about, borrowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subject<'a> {
    /// A session.
    Session(&'a SessionId),
    /// An apply transaction.
    Apply(&'a TransactionId),
}

impl Subject<'_> {
    /// The kind of subject.
    pub fn kind(&self) -> SubjectKind {
        match self {
            Subject::Session(_) => SubjectKind::Session,
            Subject::Apply(_) => SubjectKind::Apply,
        }
    }

    /// The subject's identifier.
    pub fn id(&self) -> &str {
        match self {
            Subject::Session(s) => s.as_str(),
            Subject::Apply(t) => t.as_str(),
        }
    }

    fn key(&self) -> SubjectKey {
        SubjectKey {
            kind: self.kind(),
            id: self.id().to_owned(),
        }
    }
}

/// An owned subject, kept inside proofs and receipts.
#[derive(PartialEq, Eq)]
struct SubjectKey {
    kind: SubjectKind,
    id: String,
}

impl fmt::Debug for SubjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.as_str(), self.id)
    }
}

pub(crate) mod sealed {
    /// Seals [`super::Recordable`] and the stage traits.
    pub trait Sealed {}
}

/// What a [`Durable`] proof can be about: the stage (or apply state) a record
/// enters. Sealed: implemented only by this crate's stage types.
pub trait Recordable: sealed::Sealed {
    /// The kind of subject whose records enter this stage.
    const KIND: SubjectKind;
}

/// Proof that the record entering `R` was durably appended.
///
/// Minted only by this crate's `log_*` methods; spent by the matching
/// transition. It carries the record's typed evidence (the new stage value),
/// so the transition cannot use evidence other than what was recorded, and
/// the [brand](crate::brand) `'id` of the session or transaction that
/// minted it, so no other one can spend it.
#[must_use = "a durable proof must be spent on exactly one transition"]
pub struct Durable<'id, R: Recordable> {
    brand: Invariant<'id>,
    subject: SubjectKey,
    seq: u64,
    prev: Option<Sha256Digest>,
    digest: Sha256Digest,
    entered: R,
}

impl<'id, R: Recordable> Durable<'id, R> {
    /// Sequence number of the durable record.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Domain-separated SHA-256 of the durable record's bytes.
    pub fn record_digest(&self) -> Sha256Digest {
        self.digest
    }

    /// The identifier of the subject the proof is bound to.
    pub fn subject_id(&self) -> &str {
        &self.subject.id
    }

    /// The brand the proof carries.
    pub(crate) fn brand(&self) -> Invariant<'id> {
        self.brand
    }

    /// The evidence the proof carries.
    pub(crate) fn entered(&self) -> &R {
        &self.entered
    }

    /// Checks the binding to `subject` and to its last record, then yields
    /// the evidence and the new chain head `(seq, digest)`.
    pub(crate) fn spend(
        self,
        subject: Subject<'_>,
        last_seq: u64,
        last_digest: Sha256Digest,
    ) -> Result<(R, u64, Sha256Digest), (R, LifecycleError)> {
        let key = subject.key();
        if self.subject != key {
            let e = LifecycleError::ProofSubjectMismatch {
                expected: key.id,
                found: self.subject.id,
            };
            return Err((self.entered, e));
        }
        if self.seq != last_seq.saturating_add(1) || self.prev != Some(last_digest) {
            let e = LifecycleError::ProofStale {
                expected_seq: last_seq.saturating_add(1),
                found_seq: self.seq,
            };
            return Err((self.entered, e));
        }
        Ok((self.entered, self.seq, self.digest))
    }

    /// Spends a proof of a first record (creation or reservation).
    pub(crate) fn spend_first(self) -> (String, R, Sha256Digest) {
        (self.subject.id, self.entered, self.digest)
    }
}

impl<R: Recordable> fmt::Debug for Durable<'_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Durable")
            .field("subject", &self.subject)
            .field("seq", &self.seq)
            .field("digest", &self.digest)
            .finish_non_exhaustive()
    }
}

/// A record handed to a [`TransitionLog`] for appending.
///
/// Built only by this crate. The log stores [`PendingRecord::bytes`] (canonical
/// JSON, opaque to the log) under the subject and sequence number, makes them
/// durable, and answers with [`PendingRecord::acknowledge`].
pub struct PendingRecord<'a> {
    subject: Subject<'a>,
    seq: u64,
    bytes: &'a [u8],
    digest: Sha256Digest,
}

impl<'a> PendingRecord<'a> {
    /// The subject the record is about.
    pub fn subject(&self) -> Subject<'a> {
        self.subject
    }

    /// The record's sequence number within its subject (0 for the first).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The canonical-JSON record bytes to store verbatim.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// `SHA-256(domain || 0x00 || bytes)` with the subject kind's record domain.
    pub fn digest(&self) -> Sha256Digest {
        self.digest
    }

    /// For a session record, the stage it enters (`None` for an apply
    /// record). A store that files records by stage reads it here rather
    /// than decoding the bytes: the record types are private to this crate.
    pub fn session_stage(&self) -> Option<SessionStage> {
        self.session_entry().map(|e| e.stage())
    }

    /// For a session's record 0, the plan digests it binds the session to
    /// (`None` for every other record). A store that keeps record 0 in its
    /// own form ([`StoredRecord::Creation`](crate::StoredRecord)) reads them
    /// here.
    pub fn plan_digests(&self) -> Option<PlanDigests> {
        match self.session_entry()? {
            SessionEntry::Created { digests } => Some(digests),
            _ => None,
        }
    }

    fn session_entry(&self) -> Option<SessionEntry> {
        if self.subject.kind() != SubjectKind::Session {
            return None;
        }
        SessionRecord::decode(self.bytes).ok().map(|r| r.entry)
    }

    /// The acknowledgement a log returns once these bytes are durable.
    pub fn acknowledge(&self) -> AppendReceipt {
        AppendReceipt {
            subject: self.subject.key(),
            seq: self.seq,
            digest: self.digest,
        }
    }
}

impl fmt::Debug for PendingRecord<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingRecord")
            .field("subject", &self.subject)
            .field("seq", &self.seq)
            .field("digest", &self.digest)
            .finish_non_exhaustive()
    }
}

/// A log's acknowledgement that one [`PendingRecord`] is durable. Obtainable
/// only from [`PendingRecord::acknowledge`]; checked against the record
/// before a proof is minted.
#[must_use = "return the receipt from TransitionLog::append"]
#[derive(Debug)]
pub struct AppendReceipt {
    subject: SubjectKey,
    seq: u64,
    digest: Sha256Digest,
}

/// Digest of record bytes under the kind's domain.
pub(crate) fn record_digest(kind: SubjectKind, bytes: &[u8]) -> Sha256Digest {
    Sha256Digest::of_domain(kind.record_domain(), bytes)
}

/// Appends (or idempotently finds) `bytes` as record `seq` of `subject` and
/// mints the proof for `entered`.
///
/// * no record at `seq`: append, check the acknowledgement, mint;
/// * the same bytes at `seq`: mint without a second append (idempotent);
/// * other bytes at `seq`: `lifecycle_transition_conflict`, fail closed.
pub(crate) fn append_and_mint<'id, R: Recordable, L: TransitionLog + ?Sized>(
    brand: Invariant<'id>,
    log: &mut L,
    subject: Subject<'_>,
    seq: u64,
    prev: Option<Sha256Digest>,
    bytes: &[u8],
    entered: R,
) -> Result<Durable<'id, R>, LifecycleError> {
    debug_assert_eq!(subject.kind(), R::KIND);
    let digest = append_checked(log, subject, seq, bytes)?;
    Ok(Durable {
        brand,
        subject: subject.key(),
        seq,
        prev,
        digest,
        entered,
    })
}

/// Appends (or idempotently finds) `bytes` as record `seq` of `subject`,
/// checking the log's acknowledgement; the record's digest.
pub(crate) fn append_checked<L: TransitionLog + ?Sized>(
    log: &mut L,
    subject: Subject<'_>,
    seq: u64,
    bytes: &[u8],
) -> Result<Sha256Digest, LifecycleError> {
    let digest = record_digest(subject.kind(), bytes);
    let existing = log
        .lookup(subject, seq)
        .map_err(crate::ports::PortError::into_lifecycle)?
        .map(crate::ports::StoredRecord::into_bytes)
        .transpose()?;
    match existing {
        Some(existing) if existing.as_slice() == bytes => {}
        Some(_) => {
            return Err(LifecycleError::TransitionConflict {
                kind: subject.kind(),
                seq,
            })
        }
        None => {
            let pending = PendingRecord {
                subject,
                seq,
                bytes,
                digest,
            };
            let receipt = log
                .append(&pending)
                .map_err(crate::ports::PortError::into_lifecycle)?;
            if receipt.subject != subject.key() || receipt.seq != seq || receipt.digest != digest {
                return Err(LifecycleError::AppendReceiptMismatch {
                    expected_seq: seq,
                    acknowledged_seq: receipt.seq,
                });
            }
        }
    }
    Ok(digest)
}
