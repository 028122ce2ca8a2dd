//! `Txn<'id, S>`: the apply transaction as a typestate. Same two-step shape
//! as sessions: `log_<step>(&self, …)` appends and proves, `<step>(self,
//! proof)` moves; the same brand rule: a transaction spends only proofs it
//! minted itself (see [`crate::brand`]).

use super::parked::ParkedTxn;
use super::record::{self, ApplyEntry};
use super::registry::SingleUseRegistry;
use super::states::{
    AmbiguityReason, Ambiguous, Applied, ApplyStage, Committed, Failable, Failed, Prepared,
    Reserved, Undecided,
};
use super::{Reservation, TransactionId};
use crate::brand::Brand;
use crate::error::{LifecycleError, Refused};
use crate::evidence::TerminalReceiptRef;
use crate::ports::{confirm_receipt, BaselineCleanup, PortError, ReceiptLog, TransitionLog};
use crate::proof::{append_and_mint, Durable, Subject};
use core::fmt;
use glove_types::stage::ApplyState;
use glove_types::{ErrorCode, Sha256Digest};

/// An apply transaction in state `S`, named by the brand `'id`. Not
/// `Clone`. Only a branded transaction has `log_*` methods and transitions,
/// and it spends only proofs carrying its own `'id` (see [`crate::brand`]).
pub struct Txn<'id, S: ApplyStage> {
    parked: ParkedTxn<S>,
    brand: Brand<'id>,
}

impl<S: ApplyStage> fmt::Debug for Txn<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Txn")
            .field("id", &self.parked.id)
            .field("state", &S::STATE)
            .field("head_seq", &self.parked.head_seq)
            .finish_non_exhaustive()
    }
}

impl<'id, S: ApplyStage> Txn<'id, S> {
    pub(crate) fn branded(parked: ParkedTxn<S>, brand: Brand<'id>) -> Self {
        Txn { parked, brand }
    }

    /// Drops the brand: the transaction leaves this scope as a
    /// [`ParkedTxn`], and proofs it minted can no longer be spent.
    pub fn park(self) -> ParkedTxn<S> {
        self.parked
    }

    /// The transaction id.
    pub fn id(&self) -> &TransactionId {
        self.parked.id()
    }

    /// What the transaction reserved.
    pub fn reservation(&self) -> &Reservation {
        self.parked.reservation()
    }

    /// The state, as data.
    pub fn state(&self) -> ApplyState {
        S::STATE
    }

    /// The state value with its evidence.
    pub fn state_data(&self) -> &S {
        self.parked.state_data()
    }

    /// Sequence number of the last durable record.
    pub fn last_seq(&self) -> u64 {
        self.parked.last_seq()
    }

    /// `(state, record digest)` of every durable record.
    pub fn history(&self) -> &[(ApplyState, Sha256Digest)] {
        self.parked.history()
    }

    fn subject(&self) -> Subject<'_> {
        Subject::Apply(&self.parked.id)
    }

    fn log_next<N: ApplyStage, L: TransitionLog + ?Sized>(
        &self,
        entry: &ApplyEntry,
        next: N,
        log: &mut L,
    ) -> Result<Durable<'id, N>, LifecycleError> {
        let p = &self.parked;
        let seq = p.head_seq.saturating_add(1);
        let bytes = record::encode(&p.id, seq, Some(p.head_digest), entry)?;
        append_and_mint(
            self.brand.marker(),
            log,
            self.subject(),
            seq,
            Some(p.head_digest),
            &bytes,
            next,
        )
    }

    fn advance<N: ApplyStage>(self, proof: Durable<'id, N>) -> Result<Txn<'id, N>, Refused<Self>> {
        let p = &self.parked;
        match proof.spend(self.subject(), p.head_seq, p.head_digest) {
            Ok((stage, seq, digest)) => {
                let ParkedTxn {
                    id,
                    reservation,
                    mut history,
                    ..
                } = self.parked;
                history.push((N::STATE, digest));
                Ok(Txn {
                    parked: ParkedTxn {
                        id,
                        reservation,
                        history,
                        head_seq: seq,
                        head_digest: digest,
                        stage,
                    },
                    brand: self.brand,
                })
            }
            Err((_, e)) => Err(Refused::new(self, e)),
        }
    }
}

impl<'id> Txn<'id, Reserved> {
    /// Consumes the reservation's single-use values in `registry` (fail
    /// closed on any reuse), then appends record 0.
    ///
    /// A byte-identical repeat, already durable, returns a proof without
    /// touching the registry or appending again.
    pub fn log_reserve<L: TransitionLog + ?Sized>(
        brand: Brand<'id>,
        id: &TransactionId,
        reservation: &Reservation,
        registry: &mut SingleUseRegistry,
        log: &mut L,
    ) -> Result<Durable<'id, Reserved>, LifecycleError> {
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
        append_and_mint(brand.marker(), log, subject, 0, None, &bytes, next)
    }

    /// The reserved transaction, from the proof of its record 0.
    pub fn reserve(proof: Durable<'id, Reserved>) -> Result<Txn<'id, Reserved>, LifecycleError> {
        if proof.seq() != 0 {
            return Err(LifecycleError::ProofStale {
                expected_seq: 0,
                found_seq: proof.seq(),
            });
        }
        // The proof consumed the brand in `log_reserve`; the transaction
        // carries it.
        let brand = Brand::carried(proof.brand());
        let (id, stage, digest) = proof.spend_first();
        let id = TransactionId::new(id).map_err(LifecycleError::record)?;
        let parked = ParkedTxn::from_parts(
            id,
            stage.reservation.clone(),
            vec![(ApplyState::Reserved, digest)],
            0,
            digest,
            stage,
        );
        Ok(Txn { parked, brand })
    }

    /// Appends the prepared record: the candidate is staged and synced.
    pub fn log_prepare<L: TransitionLog + ?Sized>(
        &self,
        candidate_digest: Sha256Digest,
        log: &mut L,
    ) -> Result<Durable<'id, Prepared>, LifecycleError> {
        self.log_next(
            &ApplyEntry::Prepared { candidate_digest },
            Prepared { candidate_digest },
            log,
        )
    }

    /// `Reserved → Prepared`.
    pub fn prepare(
        self,
        proof: Durable<'id, Prepared>,
    ) -> Result<Txn<'id, Prepared>, Refused<Self>> {
        self.advance(proof)
    }
}

impl<'id> Txn<'id, Prepared> {
    /// Appends the committed record: the exchange happened.
    pub fn log_commit<L: TransitionLog + ?Sized>(
        &self,
        log: &mut L,
    ) -> Result<Durable<'id, Committed>, LifecycleError> {
        let next = Committed {
            candidate_digest: self.parked.stage.candidate_digest,
        };
        self.log_next(&ApplyEntry::Committed, next, log)
    }

    /// `Prepared → Committed`.
    pub fn commit(
        self,
        proof: Durable<'id, Committed>,
    ) -> Result<Txn<'id, Committed>, Refused<Self>> {
        self.advance(proof)
    }
}

impl<'id> Txn<'id, Committed> {
    /// Confirms the durable applied receipt, then appends the applied record.
    pub fn log_apply<R: ReceiptLog + ?Sized, L: TransitionLog + ?Sized>(
        &self,
        receipt: TerminalReceiptRef,
        receipts: &R,
        log: &mut L,
    ) -> Result<Durable<'id, Applied>, LifecycleError> {
        confirm_receipt(receipts, self.subject(), &receipt, None)?;
        let next = Applied {
            receipt,
            cleaned: false,
        };
        self.log_next(&ApplyEntry::Applied { receipt }, next, log)
    }

    /// `Committed → Applied` (terminal). Run
    /// [`cleanup_baseline`](Txn::cleanup_baseline) next.
    pub fn apply(self, proof: Durable<'id, Applied>) -> Result<Txn<'id, Applied>, Refused<Self>> {
        self.advance(proof)
    }
}

impl<'id> Txn<'id, Applied> {
    /// Removes the retained baseline through the port, at most once per
    /// value (see [`ParkedTxn::cleanup_baseline`]).
    pub fn cleanup_baseline<C: BaselineCleanup + ?Sized>(
        &mut self,
        cleanup: &mut C,
    ) -> Result<(), LifecycleError> {
        self.parked.cleanup_baseline(cleanup)
    }
}

impl<'id, S: Failable> Txn<'id, S> {
    /// Confirms the durable failed receipt, then appends the failed record.
    pub fn log_fail<R: ReceiptLog + ?Sized, L: TransitionLog + ?Sized>(
        &self,
        code: ErrorCode,
        receipt: TerminalReceiptRef,
        receipts: &R,
        log: &mut L,
    ) -> Result<Durable<'id, Failed>, LifecycleError> {
        confirm_receipt(receipts, self.subject(), &receipt, None)?;
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
    pub fn fail(self, proof: Durable<'id, Failed>) -> Result<Txn<'id, Failed>, Refused<Self>> {
        self.advance(proof)
    }
}

impl<'id, S: Undecided> Txn<'id, S> {
    /// Appends an ambiguous record: an operation's outcome is unknown (for
    /// example the exchange call failed in a way that does not say whether
    /// it happened).
    pub fn log_ambiguous<L: TransitionLog + ?Sized>(
        &self,
        code: ErrorCode,
        log: &mut L,
    ) -> Result<Durable<'id, Ambiguous>, LifecycleError> {
        let next = Ambiguous {
            reason: AmbiguityReason::Recorded { code },
        };
        self.log_next(&ApplyEntry::Ambiguous { code }, next, log)
    }

    /// `Reserved | Prepared | Committed → Ambiguous`. Nothing leaves it.
    pub fn mark_ambiguous(
        self,
        proof: Durable<'id, Ambiguous>,
    ) -> Result<Txn<'id, Ambiguous>, Refused<Self>> {
        self.advance(proof)
    }
}

impl<'id> Txn<'id, Ambiguous> {
    /// Why the transaction is ambiguous. (There is no transition out: an
    /// operator resolves it outside Glove.)
    pub fn reason(&self) -> AmbiguityReason {
        self.parked.reason()
    }
}
