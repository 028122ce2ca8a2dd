//! `Txn<S>`: the apply transaction as a typestate. Same two-step shape as
//! sessions: `log_<step>(&self, …)` appends and proves, `<step>(self, proof)`
//! moves.

use super::record::{self, ApplyEntry};
use super::registry::SingleUseRegistry;
use super::states::{
    AmbiguityReason, Ambiguous, Applied, ApplyStage, Committed, Failable, Failed, Prepared,
    Reserved, Undecided,
};
use super::{Reservation, TransactionId};
use crate::error::{LifecycleError, Refused};
use crate::evidence::TerminalReceiptRef;
use crate::ports::{confirm_receipt, BaselineCleanup, PortError, ReceiptLog, TransitionLog};
use crate::proof::{append_and_mint, Durable, Subject};
use core::fmt;
use glove_types::stage::ApplyState;
use glove_types::{ErrorCode, Sha256Digest};

/// An apply transaction in state `S`. Not `Clone`.
pub struct Txn<S: ApplyStage> {
    id: TransactionId,
    reservation: Reservation,
    history: Vec<(ApplyState, Sha256Digest)>,
    head_seq: u64,
    head_digest: Sha256Digest,
    stage: S,
}

impl<S: ApplyStage> fmt::Debug for Txn<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Txn")
            .field("id", &self.id)
            .field("state", &S::STATE)
            .field("head_seq", &self.head_seq)
            .finish_non_exhaustive()
    }
}

impl<S: ApplyStage> Txn<S> {
    /// The transaction id.
    pub fn id(&self) -> &TransactionId {
        &self.id
    }

    /// What the transaction reserved.
    pub fn reservation(&self) -> &Reservation {
        &self.reservation
    }

    /// The state, as data.
    pub fn state(&self) -> ApplyState {
        S::STATE
    }

    /// The state value with its evidence.
    pub fn state_data(&self) -> &S {
        &self.stage
    }

    /// Sequence number of the last durable record.
    pub fn last_seq(&self) -> u64 {
        self.head_seq
    }

    /// `(state, record digest)` of every durable record.
    pub fn history(&self) -> &[(ApplyState, Sha256Digest)] {
        &self.history
    }

    fn subject(&self) -> Subject<'_> {
        Subject::Apply(&self.id)
    }

    fn log_next<N: ApplyStage, L: TransitionLog + ?Sized>(
        &self,
        entry: &ApplyEntry,
        next: N,
        log: &mut L,
    ) -> Result<Durable<N>, LifecycleError> {
        let seq = self.head_seq.saturating_add(1);
        let bytes = record::encode(&self.id, seq, Some(self.head_digest), entry)?;
        append_and_mint(
            log,
            self.subject(),
            seq,
            Some(self.head_digest),
            &bytes,
            next,
        )
    }

    fn advance<N: ApplyStage>(self, proof: Durable<N>) -> Result<Txn<N>, Refused<Self>> {
        match proof.spend(self.subject(), self.head_seq, self.head_digest) {
            Ok((stage, seq, digest)) => {
                let mut history = self.history;
                history.push((N::STATE, digest));
                Ok(Txn {
                    id: self.id,
                    reservation: self.reservation,
                    history,
                    head_seq: seq,
                    head_digest: digest,
                    stage,
                })
            }
            Err((_, e)) => Err(Refused::new(self, e)),
        }
    }

    pub(crate) fn stage_mut(&mut self) -> &mut S {
        &mut self.stage
    }

    /// Rebuilds a transaction from replayed, already checked parts.
    pub(crate) fn from_parts(
        id: TransactionId,
        reservation: Reservation,
        history: Vec<(ApplyState, Sha256Digest)>,
        head_seq: u64,
        head_digest: Sha256Digest,
        stage: S,
    ) -> Self {
        Self {
            id,
            reservation,
            history,
            head_seq,
            head_digest,
            stage,
        }
    }
}

impl Txn<Reserved> {
    /// Consumes the reservation's single-use values in `registry` (fail
    /// closed on any reuse), then appends record 0.
    ///
    /// A byte-identical repeat, already durable, returns a proof without
    /// touching the registry or appending again.
    pub fn log_reserve<L: TransitionLog + ?Sized>(
        id: &TransactionId,
        reservation: &Reservation,
        registry: &mut SingleUseRegistry,
        log: &mut L,
    ) -> Result<Durable<Reserved>, LifecycleError> {
        let entry = ApplyEntry::Reserved {
            reservation: reservation.clone(),
        };
        let bytes = record::encode(id, 0, None, &entry)?;
        let subject = Subject::Apply(id);
        let existing = log.lookup(subject, 0).map_err(PortError::into_lifecycle)?;
        if existing.is_none() {
            registry.consume(reservation)?;
        }
        let next = Reserved {
            reservation: reservation.clone(),
        };
        append_and_mint(log, subject, 0, None, &bytes, next)
    }

    /// The reserved transaction, from the proof of its record 0.
    pub fn reserve(proof: Durable<Reserved>) -> Result<Txn<Reserved>, LifecycleError> {
        if proof.seq() != 0 {
            return Err(LifecycleError::ProofStale {
                expected_seq: 0,
                found_seq: proof.seq(),
            });
        }
        let (id, stage, digest) = proof.spend_first();
        let id = TransactionId::new(id).map_err(LifecycleError::record)?;
        Ok(Txn {
            id,
            reservation: stage.reservation.clone(),
            history: vec![(ApplyState::Reserved, digest)],
            head_seq: 0,
            head_digest: digest,
            stage,
        })
    }

    /// Appends the prepared record: the candidate is staged and synced.
    pub fn log_prepare<L: TransitionLog + ?Sized>(
        &self,
        candidate_digest: Sha256Digest,
        log: &mut L,
    ) -> Result<Durable<Prepared>, LifecycleError> {
        self.log_next(
            &ApplyEntry::Prepared { candidate_digest },
            Prepared { candidate_digest },
            log,
        )
    }

    /// `Reserved → Prepared`.
    pub fn prepare(self, proof: Durable<Prepared>) -> Result<Txn<Prepared>, Refused<Self>> {
        self.advance(proof)
    }
}

impl Txn<Prepared> {
    /// Appends the committed record: the exchange happened.
    pub fn log_commit<L: TransitionLog + ?Sized>(
        &self,
        log: &mut L,
    ) -> Result<Durable<Committed>, LifecycleError> {
        let next = Committed {
            candidate_digest: self.stage.candidate_digest,
        };
        self.log_next(&ApplyEntry::Committed, next, log)
    }

    /// `Prepared → Committed`.
    pub fn commit(self, proof: Durable<Committed>) -> Result<Txn<Committed>, Refused<Self>> {
        self.advance(proof)
    }
}

impl Txn<Committed> {
    /// Confirms the durable applied receipt, then appends the applied record.
    pub fn log_apply<R: ReceiptLog + ?Sized, L: TransitionLog + ?Sized>(
        &self,
        receipt: TerminalReceiptRef,
        receipts: &R,
        log: &mut L,
    ) -> Result<Durable<Applied>, LifecycleError> {
        confirm_receipt(receipts, self.subject(), &receipt)?;
        let next = Applied {
            receipt,
            cleaned: false,
        };
        self.log_next(&ApplyEntry::Applied { receipt }, next, log)
    }

    /// `Committed → Applied` (terminal). Run
    /// [`cleanup_baseline`](Txn::cleanup_baseline) next.
    pub fn apply(self, proof: Durable<Applied>) -> Result<Txn<Applied>, Refused<Self>> {
        self.advance(proof)
    }
}

impl Txn<Applied> {
    /// Removes the retained baseline through the port, at most once per
    /// value: after a success, later calls return `Ok` without calling the
    /// port. After a restart the recovered value calls it again, so the port
    /// itself must treat "already removed" as success.
    pub fn cleanup_baseline<C: BaselineCleanup + ?Sized>(
        &mut self,
        cleanup: &mut C,
    ) -> Result<(), LifecycleError> {
        if self.stage.cleaned {
            return Ok(());
        }
        cleanup
            .cleanup_baseline(&self.id)
            .map_err(PortError::into_lifecycle)?;
        self.stage.cleaned = true;
        Ok(())
    }
}

impl<S: Failable> Txn<S> {
    /// Confirms the durable failed receipt, then appends the failed record.
    pub fn log_fail<R: ReceiptLog + ?Sized, L: TransitionLog + ?Sized>(
        &self,
        code: ErrorCode,
        receipt: TerminalReceiptRef,
        receipts: &R,
        log: &mut L,
    ) -> Result<Durable<Failed>, LifecycleError> {
        confirm_receipt(receipts, self.subject(), &receipt)?;
        let entry = ApplyEntry::Failed {
            code,
            failed_in: S::STATE,
            receipt,
        };
        let next = Failed {
            code,
            failed_in: S::STATE,
            receipt,
        };
        self.log_next(&entry, next, log)
    }

    /// `Reserved | Prepared → Failed` (terminal).
    pub fn fail(self, proof: Durable<Failed>) -> Result<Txn<Failed>, Refused<Self>> {
        self.advance(proof)
    }
}

impl<S: Undecided> Txn<S> {
    /// Appends an ambiguous record: an operation's outcome is unknown (for
    /// example the exchange call failed in a way that does not say whether
    /// it happened).
    pub fn log_ambiguous<L: TransitionLog + ?Sized>(
        &self,
        code: ErrorCode,
        log: &mut L,
    ) -> Result<Durable<Ambiguous>, LifecycleError> {
        let next = Ambiguous {
            reason: AmbiguityReason::Recorded { code },
        };
        self.log_next(&ApplyEntry::Ambiguous { code }, next, log)
    }

    /// `Reserved | Prepared | Committed → Ambiguous`. Nothing leaves it.
    pub fn mark_ambiguous(
        self,
        proof: Durable<Ambiguous>,
    ) -> Result<Txn<Ambiguous>, Refused<Self>> {
        self.advance(proof)
    }
}

impl Txn<Ambiguous> {
    /// Why the transaction is ambiguous. (There is no transition out: an
    /// operator resolves it outside Glove.)
    pub fn reason(&self) -> AmbiguityReason {
        self.stage.reason
    }
}
