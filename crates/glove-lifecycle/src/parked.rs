//! `ParkedSession<S>`: a session at rest, outside any brand scope.
//!
//! This is the form the dynamic world holds ([`AnySession`](crate::AnySession),
//! recovery's [`Recovered`](crate::Recovered), a registry): it can be read,
//! stored and moved between threads, but it has no `log_*` method and no
//! transition. To advance it, give it a fresh [`Brand`] — with
//! [`ParkedSession::enter`], or [`ParkedSession::brand`] inside
//! [`with_brand`] — which turns it into a [`Session<'id, S>`](Session). A
//! branded session parks again with [`Session::park`] (or `AnySession::from`).

use crate::brand::{with_brand, Brand};
#[cfg(feature = "test-support")]
use crate::error::LifecycleError;
use crate::evidence::{
    LaunchBinding, PlanDigests, ProcessIdentity, StopReason, TerminalReceiptRef,
};
#[cfg(feature = "test-support")]
use crate::record::{self, SessionEntry};
#[cfg(feature = "test-support")]
use crate::session::Repeat;
use crate::session::Session;
use crate::stage::{Exited, Failed, Running, Stage, Starting, Stopping};
use core::fmt;
use glove_types::ids::SessionId;
use glove_types::stage::SessionStage;
use glove_types::{ErrorCode, Sha256Digest};

/// A session in stage `S`, not branded: readable, not advanceable. Not
/// `Clone`: exactly one value stands for the session's current stage.
pub struct ParkedSession<S: Stage> {
    pub(crate) id: SessionId,
    pub(crate) digests: PlanDigests,
    /// `(stage entered, record digest)` for records `0..=head`; at most one
    /// per stage, so at most seven. Used for idempotent repeats.
    pub(crate) history: Vec<(SessionStage, Sha256Digest)>,
    pub(crate) head_seq: u64,
    pub(crate) head_digest: Sha256Digest,
    pub(crate) stage: S,
}

impl<S: Stage> fmt::Debug for ParkedSession<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ParkedSession")
            .field("id", &self.id)
            .field("stage", &S::STAGE)
            .field("head_seq", &self.head_seq)
            .finish_non_exhaustive()
    }
}

impl<S: Stage> ParkedSession<S> {
    /// Names this session with `brand`, so it can log and take transitions.
    pub fn brand<'id>(self, brand: Brand<'id>) -> Session<'id, S> {
        Session::branded(self, brand)
    }

    /// Runs `f` on this session under a fresh brand. `f`'s result cannot
    /// contain the branded session or its proofs: park the session (or turn
    /// it into an `AnySession`) to return it.
    pub fn enter<R>(self, f: impl for<'id> FnOnce(Session<'id, S>) -> R) -> R {
        with_brand(|brand| f(self.brand(brand)))
    }

    /// The session id.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// Both plan digests, fixed at creation.
    pub fn digests(&self) -> &PlanDigests {
        &self.digests
    }

    /// The stage, as data.
    pub fn stage(&self) -> SessionStage {
        S::STAGE
    }

    /// The stage value with its evidence.
    pub fn stage_data(&self) -> &S {
        &self.stage
    }

    /// Sequence number of the last durable record.
    pub fn last_seq(&self) -> u64 {
        self.head_seq
    }

    /// Digest of the last durable record.
    pub fn last_record_digest(&self) -> Sha256Digest {
        self.head_digest
    }

    /// `(stage, record digest)` of every durable record, in order.
    pub fn history(&self) -> &[(SessionStage, Sha256Digest)] {
        &self.history
    }

    /// Rebuilds a session from replayed, already checked parts.
    pub(crate) fn from_parts(
        id: SessionId,
        digests: PlanDigests,
        history: Vec<(SessionStage, Sha256Digest)>,
        head_seq: u64,
        head_digest: Sha256Digest,
        stage: S,
    ) -> Self {
        Self {
            id,
            digests,
            history,
            head_seq,
            head_digest,
            stage,
        }
    }

    /// Whether a record entering `entry.stage()` would repeat, conflict with,
    /// or extend this session's history (see `AnySession::check_repeat`).
    #[cfg(feature = "test-support")]
    pub(crate) fn repeat_of(&self, entry: &SessionEntry) -> Result<Repeat, LifecycleError> {
        let target = entry.stage();
        for (seq, (stage, digest)) in self.history.iter().enumerate() {
            if *stage != target {
                continue;
            }
            let seq = u64::try_from(seq).unwrap_or(u64::MAX);
            let prev = match seq.checked_sub(1) {
                None => None,
                Some(p) => self
                    .history
                    .get(usize::try_from(p).unwrap_or(usize::MAX))
                    .map(|(_, d)| *d),
            };
            let bytes = record::encode(&self.id, seq, prev, entry)?;
            if crate::proof::record_digest(crate::proof::SubjectKind::Session, &bytes) == *digest {
                return Ok(Repeat::AlreadyRecorded { seq });
            }
            return Err(LifecycleError::TransitionConflict {
                kind: crate::proof::SubjectKind::Session,
                seq,
            });
        }
        if S::STAGE.can_transition(target) {
            Ok(Repeat::New)
        } else {
            Err(LifecycleError::IllegalTransition {
                from: S::STAGE,
                to: target,
            })
        }
    }
}

impl ParkedSession<Starting> {
    /// The launch binding recorded for this start.
    pub fn launch_binding(&self) -> LaunchBinding {
        self.stage.binding
    }
}

impl ParkedSession<Running> {
    /// The recorded process identity.
    pub fn process_identity(&self) -> &ProcessIdentity {
        &self.stage.identity
    }

    /// The launch binding the session was started under.
    pub fn launch_binding(&self) -> LaunchBinding {
        self.stage.binding
    }
}

impl ParkedSession<Stopping> {
    /// The process identity recorded when the session ran.
    pub fn process_identity(&self) -> &ProcessIdentity {
        &self.stage.identity
    }

    /// The launch binding the session was started under.
    pub fn launch_binding(&self) -> LaunchBinding {
        self.stage.binding
    }

    /// Why the session is stopping.
    pub fn stop_reason(&self) -> StopReason {
        self.stage.reason
    }
}

impl ParkedSession<Exited> {
    /// The terminal receipt.
    pub fn receipt(&self) -> TerminalReceiptRef {
        self.stage.receipt
    }
}

impl ParkedSession<Failed> {
    /// The failure code.
    pub fn failure_code(&self) -> ErrorCode {
        self.stage.code
    }

    /// The stage the session failed in.
    pub fn failed_in(&self) -> SessionStage {
        self.stage.failed_in
    }

    /// The terminal receipt.
    pub fn receipt(&self) -> TerminalReceiptRef {
        self.stage.receipt
    }
}
