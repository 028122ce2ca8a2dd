//! `Session<S>`: the session lifecycle as a typestate.
//!
//! Every transition is two steps, so that the record is durable *before* the
//! new stage exists (write-ahead):
//!
//! 1. `log_<step>(&self, evidence…, log)` builds the record, appends it to
//!    the [`TransitionLog`] (or finds the identical record already there) and
//!    returns a [`Durable`] proof carrying the evidence;
//! 2. `<step>(self, proof)` consumes the session and the proof and returns
//!    the next stage. It refuses a proof minted for another session, or one
//!    that does not follow this session's last record, and hands the session
//!    back inside [`Refused`].
//!
//! Only the methods below exist, so an illegal transition does not compile:
//! `Session<Created>` has no `log_run`, `Session<Exited>` no `log_fail`.
//!
//! ```compile_fail,E0599
//! use glove_lifecycle::{Created, Session, StopReason, TransitionLog};
//! fn f<L: TransitionLog>(s: Session<Created>, log: &mut L) {
//!     // A created session has no stop transition.
//!     let _ = s.log_stop(StopReason::Requested, log);
//! }
//! ```

use crate::error::{LifecycleError, Refused};
use crate::evidence::{
    LaunchBinding, PlanDigests, ProcessIdentity, StopReason, TerminalReceiptRef,
};
use crate::ports::{confirm_receipt, ReceiptLog, TransitionLog};
use crate::proof::{append_and_mint, Durable, Subject};
use crate::record::{self, SessionEntry};
use crate::stage::{Created, Exited, Failed, Live, Preparing, Running, Stage, Starting, Stopping};
use crate::start_auth::{StartAuthError, VerifiedStart};
use core::fmt;
use glove_types::ids::SessionId;
use glove_types::stage::SessionStage;
use glove_types::{ErrorCode, Sha256Digest};

/// A session in stage `S`. Not `Clone`: exactly one value stands for the
/// session's current stage.
pub struct Session<S: Stage> {
    id: SessionId,
    digests: PlanDigests,
    /// `(stage entered, record digest)` for records `0..=head`; at most one
    /// per stage, so at most seven. Used for idempotent repeats.
    history: Vec<(SessionStage, Sha256Digest)>,
    head_seq: u64,
    head_digest: Sha256Digest,
    stage: S,
}

impl<S: Stage> fmt::Debug for Session<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("stage", &S::STAGE)
            .field("head_seq", &self.head_seq)
            .finish_non_exhaustive()
    }
}

impl<S: Stage> Session<S> {
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

    fn subject(&self) -> Subject<'_> {
        Subject::Session(&self.id)
    }

    /// Builds, appends and proves the next record.
    fn log_next<N: Stage, L: TransitionLog + ?Sized>(
        &self,
        entry: &SessionEntry,
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

    /// Spends `proof` and moves to stage `N`.
    fn advance<N: Stage>(self, proof: Durable<N>) -> Result<Session<N>, Refused<Self>> {
        match proof.spend(self.subject(), self.head_seq, self.head_digest) {
            Ok((stage, seq, digest)) => {
                let mut history = self.history;
                history.push((N::STAGE, digest));
                Ok(Session {
                    id: self.id,
                    digests: self.digests,
                    history,
                    head_seq: seq,
                    head_digest: digest,
                    stage,
                })
            }
            Err((_, e)) => Err(Refused::new(self, e)),
        }
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
    /// or extend this session's history (see [`crate::AnySession::check_repeat`]).
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

/// What a requested transition is, relative to the durable history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repeat {
    /// The identical record is already durable at `seq`: answer with the
    /// current state and append nothing.
    AlreadyRecorded {
        /// Where the identical record is.
        seq: u64,
    },
    /// Not taken yet and legal from the current stage: perform it.
    New,
}

impl Session<Created> {
    /// Appends record 0 of a new session (write-ahead for creation).
    ///
    /// Repeating it with the same id and digests is idempotent; the same id
    /// with other digests fails with `lifecycle_transition_conflict`.
    pub fn log_create<L: TransitionLog + ?Sized>(
        id: &SessionId,
        digests: PlanDigests,
        log: &mut L,
    ) -> Result<Durable<Created>, LifecycleError> {
        let bytes = record::encode(id, 0, None, &SessionEntry::Created { digests })?;
        append_and_mint(
            log,
            Subject::Session(id),
            0,
            None,
            &bytes,
            Created { digests },
        )
    }

    /// The created session, from the proof of its record 0.
    pub fn create(proof: Durable<Created>) -> Result<Session<Created>, LifecycleError> {
        let seq = proof.seq();
        if seq != 0 {
            return Err(LifecycleError::ProofStale {
                expected_seq: 0,
                found_seq: seq,
            });
        }
        let (id, created, digest) = proof.spend_first();
        let id = SessionId::new(id).map_err(LifecycleError::record)?;
        Ok(Session {
            id,
            digests: created.digests,
            history: vec![(SessionStage::Created, digest)],
            head_seq: 0,
            head_digest: digest,
            stage: created,
        })
    }

    /// Appends the prepare record.
    pub fn log_prepare<L: TransitionLog + ?Sized>(
        &self,
        log: &mut L,
    ) -> Result<Durable<Preparing>, LifecycleError> {
        self.log_next(&SessionEntry::Preparing, Preparing { _private: () }, log)
    }

    /// `Created → Preparing`.
    pub fn prepare(self, proof: Durable<Preparing>) -> Result<Session<Preparing>, Refused<Self>> {
        self.advance(proof)
    }
}

impl Session<Preparing> {
    /// Appends the launch-intent record: the launch binding and a start
    /// authorization verified for this session (and both its digests).
    pub fn log_start<L: TransitionLog + ?Sized>(
        &self,
        binding: LaunchBinding,
        start: VerifiedStart,
        log: &mut L,
    ) -> Result<Durable<Starting>, LifecycleError> {
        if start.session_id != self.id {
            return Err(StartAuthError::SessionMismatch.into());
        }
        if start.digests.plan_content_digest() != self.digests.plan_content_digest() {
            return Err(StartAuthError::PlanContentDigestMismatch.into());
        }
        if start.digests.controller_plan_digest() != self.digests.controller_plan_digest() {
            return Err(StartAuthError::ControllerDigestMismatch.into());
        }
        let entry = SessionEntry::Starting {
            binding,
            authorization: start.authorization,
            nonce: start.nonce,
            authorization_expires_at_ms: start.expires_at_ms,
        };
        let next = Starting {
            binding,
            authorization: start.authorization,
            nonce: start.nonce,
            authorization_expires_at_ms: start.expires_at_ms,
        };
        self.log_next(&entry, next, log)
    }

    /// `Preparing → Starting`.
    pub fn start(self, proof: Durable<Starting>) -> Result<Session<Starting>, Refused<Self>> {
        self.advance(proof)
    }
}

impl Session<Starting> {
    /// The launch binding recorded for this start.
    pub fn launch_binding(&self) -> LaunchBinding {
        self.stage.binding
    }

    /// Appends the running record with the launched process's identity.
    pub fn log_run<L: TransitionLog + ?Sized>(
        &self,
        identity: ProcessIdentity,
        log: &mut L,
    ) -> Result<Durable<Running>, LifecycleError> {
        let entry = SessionEntry::Running {
            identity: identity.clone(),
        };
        self.log_next(&entry, Running { identity }, log)
    }

    /// `Starting → Running`.
    pub fn run(self, proof: Durable<Running>) -> Result<Session<Running>, Refused<Self>> {
        self.advance(proof)
    }
}

impl Session<Running> {
    /// The recorded process identity.
    pub fn process_identity(&self) -> &ProcessIdentity {
        &self.stage.identity
    }

    /// Appends the stop-intent record.
    pub fn log_stop<L: TransitionLog + ?Sized>(
        &self,
        reason: StopReason,
        log: &mut L,
    ) -> Result<Durable<Stopping>, LifecycleError> {
        self.log_next(&SessionEntry::Stopping { reason }, Stopping { reason }, log)
    }

    /// `Running → Stopping`.
    pub fn stop(self, proof: Durable<Stopping>) -> Result<Session<Stopping>, Refused<Self>> {
        self.advance(proof)
    }
}

impl Session<Stopping> {
    /// Confirms with the receipt journal that `receipt` is this session's
    /// durable terminal receipt, then appends the exit record.
    pub fn log_exit<R: ReceiptLog + ?Sized, L: TransitionLog + ?Sized>(
        &self,
        receipt: TerminalReceiptRef,
        receipts: &R,
        log: &mut L,
    ) -> Result<Durable<Exited>, LifecycleError> {
        confirm_receipt(receipts, self.subject(), &receipt)?;
        self.log_next(&SessionEntry::Exited { receipt }, Exited { receipt }, log)
    }

    /// `Stopping → Exited` (terminal).
    pub fn exit(self, proof: Durable<Exited>) -> Result<Session<Exited>, Refused<Self>> {
        self.advance(proof)
    }
}

impl<S: Live> Session<S> {
    /// Confirms the durable terminal receipt, then appends a failure record
    /// with `code` and the current stage.
    pub fn log_fail<R: ReceiptLog + ?Sized, L: TransitionLog + ?Sized>(
        &self,
        code: ErrorCode,
        receipt: TerminalReceiptRef,
        receipts: &R,
        log: &mut L,
    ) -> Result<Durable<Failed>, LifecycleError> {
        confirm_receipt(receipts, self.subject(), &receipt)?;
        let entry = SessionEntry::Failed {
            code,
            failed_in: S::STAGE,
            receipt,
        };
        let next = Failed {
            code,
            failed_in: S::STAGE,
            receipt,
        };
        self.log_next(&entry, next, log)
    }

    /// `<any live stage> → Failed` (terminal).
    pub fn fail(self, proof: Durable<Failed>) -> Result<Session<Failed>, Refused<Self>> {
        if proof_failed_in(&proof) != S::STAGE {
            let e = LifecycleError::ProofStale {
                expected_seq: self.head_seq.saturating_add(1),
                found_seq: proof.seq(),
            };
            return Err(Refused::new(self, e));
        }
        self.advance(proof)
    }
}

fn proof_failed_in(p: &Durable<Failed>) -> SessionStage {
    p.entered().failed_in
}

impl Session<Exited> {
    /// The terminal receipt.
    pub fn receipt(&self) -> TerminalReceiptRef {
        self.stage.receipt
    }
}

impl Session<Failed> {
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
