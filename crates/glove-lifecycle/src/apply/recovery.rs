//! Apply recovery: replay a transaction strictly, then classify it from
//! descriptor-proven findings into exactly one of reserved, prepared,
//! committed or ambiguous.
//!
//! The runtime gathers [`DescriptorFindings`] by re-opening the exposure
//! parent through the journaled locator and identifying, by descriptor, what
//! sits at the source and at the staging location. [`classify`] then
//! applies this table (first matching row wins):
//!
//! | journal | locator | source | staging | class |
//! | --- | --- | --- | --- | --- |
//! | any | not verified | any | any | ambiguous |
//! | reserved | verified | baseline | absent, incomplete or candidate | reserved |
//! | prepared | verified | baseline | candidate | prepared |
//! | committed | verified | candidate | baseline | committed |
//! | anything else | | | | ambiguous |
//!
//! A reserved journal with a complete candidate at the staging location is
//! still *reserved*: the source is proven untouched and the staging area is
//! Glove's own scratch, so discarding it is safe. Every other disagreement
//! between the journal and the descriptors — an exchange the journal does
//! not record, a missing or unrecognised tree, a prepared journal without
//! its candidate — is ambiguous.
//!
//! Applied and failed transactions are terminal and are not classified (an
//! applied one is handed back so its baseline cleanup can be retried); an
//! ambiguous one stays ambiguous whatever the findings say.

use super::parked::ParkedTxn;
use super::record::{ApplyEntry, ApplyRecord};
use super::states::{
    AmbiguityReason, Ambiguous, Applied, ApplyStage, Committed, Failed, Prepared, Reserved,
};
use super::Reservation;
use crate::error::{LifecycleError, Refused};
use crate::ports::TransitionLog;
use crate::proof::{record_digest, SubjectKind};
use glove_types::codes::lifecycle::APPLY_AMBIGUOUS;
use glove_types::stage::ApplyState;
use glove_types::Sha256Digest;

/// Whether the exposure parent was re-opened by its journaled locator
/// (exposure id, generation, scope digest, source identity digest, parent
/// directory identity).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LocatorCheck {
    /// Re-opened and every identity matched.
    Verified,
    /// Something at the path has another identity.
    Mismatch,
    /// Could not be re-opened.
    Unavailable,
}

/// What a descriptor check found at one location.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TreeFinding {
    /// Nothing there.
    Absent,
    /// The original source tree (identity and digest of the baseline).
    Baseline,
    /// The complete, synced candidate (its recorded digest).
    Candidate,
    /// A partial staging tree (creation began, never completed).
    Incomplete,
    /// Something else.
    Unrecognized,
}

/// Descriptor-proven findings for one transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DescriptorFindings {
    /// The locator re-open.
    pub locator: LocatorCheck,
    /// What sits at the source location.
    pub source: TreeFinding,
    /// What sits at the staging location beside it.
    pub staging: TreeFinding,
}

/// The classification of a non-terminal transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Classification {
    /// Reserved: discard any staging, then fail with a durable receipt.
    Reserved,
    /// Prepared: the candidate may be discarded safely (then fail), or the
    /// exchange may proceed.
    Prepared,
    /// Committed: append the applied receipt, then clean up the baseline.
    Committed,
    /// Ambiguous: stays consumed; an operator decides.
    Ambiguous(AmbiguityReason),
}

/// Classifies from the journal's non-terminal state and the findings (see
/// the module docs for the table). A journal state of applied, failed or
/// ambiguous yields ambiguous: those are not for this function to decide.
pub fn classify(journal: ApplyState, f: &DescriptorFindings) -> Classification {
    use TreeFinding as T;
    if f.locator != LocatorCheck::Verified {
        return Classification::Ambiguous(AmbiguityReason::LocatorUnverified);
    }
    match (journal, f.source, f.staging) {
        (ApplyState::Reserved, T::Baseline, T::Absent | T::Incomplete | T::Candidate) => {
            Classification::Reserved
        }
        (ApplyState::Prepared, T::Baseline, T::Candidate) => Classification::Prepared,
        (ApplyState::Committed, T::Candidate, T::Baseline) => Classification::Committed,
        (
            ApplyState::Reserved
            | ApplyState::Prepared
            | ApplyState::Committed
            | ApplyState::Applied
            | ApplyState::Failed
            | ApplyState::Ambiguous,
            _,
            _,
        ) => Classification::Ambiguous(AmbiguityReason::EvidenceConflict {
            journal,
            source: f.source,
            staging: f.staging,
        }),
    }
}

/// An apply transaction in any state, as replayed.
#[derive(Debug)]
pub enum AnyApply {
    /// Reserved.
    Reserved(ParkedTxn<Reserved>),
    /// Prepared.
    Prepared(ParkedTxn<Prepared>),
    /// Committed.
    Committed(ParkedTxn<Committed>),
    /// Applied (terminal).
    Applied(ParkedTxn<Applied>),
    /// Failed (terminal).
    Failed(ParkedTxn<Failed>),
    /// Ambiguous.
    Ambiguous(ParkedTxn<Ambiguous>),
}

/// A transaction after recovery classification.
#[derive(Debug)]
pub enum RecoveredApply {
    /// Proven reserved.
    Reserved(ParkedTxn<Reserved>),
    /// Proven prepared.
    Prepared(ParkedTxn<Prepared>),
    /// Proven committed.
    Committed(ParkedTxn<Committed>),
    /// Ambiguous (now durably recorded, or already was).
    Ambiguous(ParkedTxn<Ambiguous>),
    /// Terminal applied: retry baseline cleanup.
    Applied(ParkedTxn<Applied>),
    /// Terminal failed: nothing to do.
    Failed(ParkedTxn<Failed>),
}

impl RecoveredApply {
    /// The recovered state.
    pub fn state(&self) -> ApplyState {
        match self {
            RecoveredApply::Reserved(t) => t.state(),
            RecoveredApply::Prepared(t) => t.state(),
            RecoveredApply::Committed(t) => t.state(),
            RecoveredApply::Ambiguous(t) => t.state(),
            RecoveredApply::Applied(t) => t.state(),
            RecoveredApply::Failed(t) => t.state(),
        }
    }
}

impl AnyApply {
    /// The state.
    pub fn state(&self) -> ApplyState {
        match self {
            AnyApply::Reserved(t) => t.state(),
            AnyApply::Prepared(t) => t.state(),
            AnyApply::Committed(t) => t.state(),
            AnyApply::Applied(t) => t.state(),
            AnyApply::Failed(t) => t.state(),
            AnyApply::Ambiguous(t) => t.state(),
        }
    }

    /// What the transaction reserved (to rebuild the single-use registry).
    pub fn reservation(&self) -> &Reservation {
        match self {
            AnyApply::Reserved(t) => t.reservation(),
            AnyApply::Prepared(t) => t.reservation(),
            AnyApply::Committed(t) => t.reservation(),
            AnyApply::Applied(t) => t.reservation(),
            AnyApply::Failed(t) => t.reservation(),
            AnyApply::Ambiguous(t) => t.reservation(),
        }
    }

    /// The typed committed transaction, or `lifecycle_wrong_stage`.
    pub fn try_into_committed(self) -> Result<ParkedTxn<Committed>, Refused<AnyApply>> {
        match self {
            AnyApply::Committed(t) => Ok(t),
            other @ (AnyApply::Reserved(_)
            | AnyApply::Prepared(_)
            | AnyApply::Applied(_)
            | AnyApply::Failed(_)
            | AnyApply::Ambiguous(_)) => {
                let e = LifecycleError::WrongApplyState {
                    expected: ApplyState::Committed,
                    actual: other.state(),
                };
                Err(Refused::new(other, e))
            }
        }
    }

    /// Classifies a replayed transaction with `findings`. When the result is
    /// ambiguous, the ambiguous record (code `apply_ambiguous`) is appended
    /// to `log` first, so the classification survives the next restart even
    /// if the findings change.
    pub fn classify<L: TransitionLog + ?Sized>(
        self,
        findings: &DescriptorFindings,
        log: &mut L,
    ) -> Result<RecoveredApply, LifecycleError> {
        fn decide<S, L>(
            t: ParkedTxn<S>,
            f: &DescriptorFindings,
            log: &mut L,
            keep: fn(ParkedTxn<S>) -> RecoveredApply,
        ) -> Result<RecoveredApply, LifecycleError>
        where
            S: super::states::Undecided,
            L: TransitionLog + ?Sized,
        {
            match classify(S::STATE, f) {
                Classification::Ambiguous(reason) => t.enter(|t| {
                    let proof = t.log_ambiguous(APPLY_AMBIGUOUS, log)?;
                    let t = t.mark_ambiguous(proof).map_err(LifecycleError::from)?;
                    Ok(RecoveredApply::Ambiguous(with_reason(t.park(), reason)))
                }),
                Classification::Reserved | Classification::Prepared | Classification::Committed => {
                    Ok(keep(t))
                }
            }
        }
        match self {
            AnyApply::Reserved(t) => decide(t, findings, log, RecoveredApply::Reserved),
            AnyApply::Prepared(t) => decide(t, findings, log, RecoveredApply::Prepared),
            AnyApply::Committed(t) => decide(t, findings, log, RecoveredApply::Committed),
            AnyApply::Applied(t) => Ok(RecoveredApply::Applied(t)),
            AnyApply::Failed(t) => Ok(RecoveredApply::Failed(t)),
            AnyApply::Ambiguous(t) => Ok(RecoveredApply::Ambiguous(t)),
        }
    }
}

fn with_reason(mut t: ParkedTxn<Ambiguous>, reason: AmbiguityReason) -> ParkedTxn<Ambiguous> {
    t.stage.reason = reason;
    t
}

/// Rebuilds one transaction from its records, strictly (same rules as
/// session replay: record 0 reserves, same id, next seq, digest chain,
/// legal edges of [`ApplyState::can_transition`]).
pub fn replay_apply<B: AsRef<[u8]>>(records: &[B]) -> Result<AnyApply, LifecycleError> {
    let missing = || LifecycleError::MissingCreation {
        kind: SubjectKind::Apply,
    };
    let mut iter = records.iter().map(|b| {
        let bytes = b.as_ref();
        ApplyRecord::decode(bytes).map(|r| (r, record_digest(SubjectKind::Apply, bytes)))
    });
    let (first, first_digest) = iter.next().ok_or_else(missing)??;
    let reservation = match (&first.entry, first.seq) {
        (ApplyEntry::Reserved { reservation }, 0) => reservation.clone(),
        _ => return Err(missing()),
    };
    let id = first.txn_id;
    let mut history = vec![(ApplyState::Reserved, first_digest)];
    let (mut head_seq, mut head_digest, mut last) = (0u64, first_digest, first.entry);
    let mut candidate: Option<Sha256Digest> = None;
    for item in iter {
        let (rec, digest) = item?;
        if rec.txn_id != id {
            return Err(LifecycleError::RecordForeign {
                expected: id.as_str().to_owned(),
                found: rec.txn_id.as_str().to_owned(),
            });
        }
        let expected_seq = head_seq.saturating_add(1);
        if rec.seq != expected_seq || rec.prev != Some(head_digest) {
            return Err(LifecycleError::RecordSequence {
                expected_seq,
                found_seq: rec.seq,
            });
        }
        let (from, to) = (last.state(), rec.entry.state());
        let failed_elsewhere =
            matches!(&rec.entry, ApplyEntry::Failed { failed_in, .. } if *failed_in != from);
        if !from.can_transition(to) || failed_elsewhere {
            return Err(LifecycleError::IllegalApplyTransition { from, to });
        }
        if let ApplyEntry::Prepared { candidate_digest } = &rec.entry {
            candidate = Some(*candidate_digest);
        }
        history.push((to, digest));
        head_seq = rec.seq;
        head_digest = digest;
        last = rec.entry;
    }
    let parts = (id, reservation, history, head_seq, head_digest);
    // `Committed` is reachable only through `Prepared`, which set it.
    let cand = candidate.unwrap_or(head_digest);
    Ok(match last {
        ApplyEntry::Reserved { reservation } => {
            AnyApply::Reserved(build(parts, Reserved { reservation }))
        }
        ApplyEntry::Prepared { candidate_digest } => {
            AnyApply::Prepared(build(parts, Prepared { candidate_digest }))
        }
        ApplyEntry::Committed => AnyApply::Committed(build(
            parts,
            Committed {
                candidate_digest: cand,
            },
        )),
        ApplyEntry::Applied { receipt } => AnyApply::Applied(build(
            parts,
            Applied {
                receipt,
                cleaned: false,
            },
        )),
        ApplyEntry::Failed {
            code,
            failed_in,
            receipt,
        } => AnyApply::Failed(build(
            parts,
            Failed {
                code,
                failed_in,
                receipt,
            },
        )),
        ApplyEntry::Ambiguous { code } => AnyApply::Ambiguous(build(
            parts,
            Ambiguous {
                reason: AmbiguityReason::Recorded { code },
            },
        )),
    })
}

type Parts = (
    super::TransactionId,
    Reservation,
    Vec<(ApplyState, Sha256Digest)>,
    u64,
    Sha256Digest,
);

fn build<S: ApplyStage>((id, r, h, seq, d): Parts, stage: S) -> ParkedTxn<S> {
    ParkedTxn::from_parts(id, r, h, seq, d, stage)
}
