//! `ParkedTxn<S>`: an apply transaction at rest, outside any brand scope
//! (what replay and recovery hand out). Readable; to log or move it, give it
//! a fresh [`Brand`] ([`ParkedTxn::enter`], or [`ParkedTxn::brand`] inside
//! [`with_brand`]), which makes it a [`Txn<'id, S>`](Txn).

use super::states::{AmbiguityReason, Ambiguous, Applied, ApplyStage};
use super::txn::Txn;
use super::{Reservation, TransactionId};
use crate::brand::{with_brand, Brand};
use crate::error::LifecycleError;
use crate::ports::{BaselineCleanup, PortError};
use core::fmt;
use glove_types::stage::ApplyState;
use glove_types::Sha256Digest;

/// An apply transaction in state `S`, not branded. Not `Clone`.
pub struct ParkedTxn<S: ApplyStage> {
    pub(crate) id: TransactionId,
    pub(crate) reservation: Reservation,
    pub(crate) history: Vec<(ApplyState, Sha256Digest)>,
    pub(crate) head_seq: u64,
    pub(crate) head_digest: Sha256Digest,
    pub(crate) stage: S,
}

impl<S: ApplyStage> fmt::Debug for ParkedTxn<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ParkedTxn")
            .field("id", &self.id)
            .field("state", &S::STATE)
            .field("head_seq", &self.head_seq)
            .finish_non_exhaustive()
    }
}

impl<S: ApplyStage> ParkedTxn<S> {
    /// Names this transaction with `brand`, so it can log and move.
    pub fn brand<'id>(self, brand: Brand<'id>) -> Txn<'id, S> {
        Txn::branded(self, brand)
    }

    /// Runs `f` on this transaction under a fresh brand. `f`'s result cannot
    /// contain the branded transaction or its proofs: park it to return it.
    pub fn enter<R>(self, f: impl for<'id> FnOnce(Txn<'id, S>) -> R) -> R {
        with_brand(|brand| f(self.brand(brand)))
    }

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

impl ParkedTxn<Applied> {
    /// Removes the retained baseline through the port, at most once per
    /// value: after a success, later calls return `Ok` without calling the
    /// port. After a restart the recovered value calls it again, so the port
    /// itself must treat "already removed" as success. (No record is
    /// appended, so no brand is needed.)
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

impl ParkedTxn<Ambiguous> {
    /// Why the transaction is ambiguous. (There is no transition out: an
    /// operator resolves it outside Glove.)
    pub fn reason(&self) -> AmbiguityReason {
        self.stage.reason
    }
}
