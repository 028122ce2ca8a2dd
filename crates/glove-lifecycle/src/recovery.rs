//! Session recovery: rebuild each session from its replayed records, and
//! never read "intent without outcome" as success.
//!
//! Replay is strict: record 0 must be the creation record; every later
//! record must name the same session, carry the next sequence number, chain
//! to the previous record's digest, and move along a legal edge of
//! [`SessionStage::can_transition`]; a failure record must name the stage it
//! left. Anything else fails closed with a code.
//!
//! Then the last durable record decides:
//!
//! | last record | outcome |
//! | --- | --- |
//! | created | [`Recovered::Created`]: nothing happened yet; safe to continue |
//! | preparing | [`RecoveryDecision::AbandonPreparation`] |
//! | starting | [`RecoveryDecision::ResolveLaunch`] |
//! | running | [`RecoveryDecision::ReconcileProcess`] |
//! | stopping | [`RecoveryDecision::FinishStop`] |
//! | exited / failed | [`Recovered::Exited`] / [`Recovered::Failed`] |
//!
//! A decision hands the typed session to the runtime together with a
//! recovery code; the runtime acts (verify the process identity without
//! signalling on mismatch, clean up materializations, look for a terminal
//! receipt) and then records `fail` with that code — or, for a stop whose
//! receipt is found durable, `exit`.
//!
//! A stored session whose records do not replay is not skipped either:
//! [`recover_stored`] returns it as [`Unreplayable`], and the runtime writes
//! its receipt and records `fail` with `lifecycle_recovery_replay_failed`
//! after the last stored record ([`Unreplayable::log_fail`]).

use crate::any::AnySession;
use crate::error::LifecycleError;
use crate::evidence::{LaunchBinding, ProcessIdentity, TerminalReceiptRef};
use crate::parked::ParkedSession;
use crate::ports::{confirm_receipt, ReceiptLog, RecordSource, StoredRecord, TransitionLog};
use crate::proof::{append_checked, record_digest, Subject, SubjectKind};
use crate::record::{SessionEntry, SessionRecord};
use crate::stage::{Created, Exited, Failed, Preparing, Running, Starting, Stopping};
use crate::start_auth::Nonce;
use glove_types::codes::lifecycle as c;
use glove_types::ids::SessionId;
use glove_types::stage::SessionStage;
use glove_types::{ErrorCode, Sha256Digest};
use std::collections::BTreeMap;

/// What the runtime must resolve for a session interrupted mid-transition.
#[derive(Debug)]
pub enum RecoveryDecision {
    /// Preparation had begun: remove partial materializations (after quota
    /// and descriptor checks), then fail the session.
    AbandonPreparation(ParkedSession<Preparing>),
    /// Launch intent without outcome: the process may or may not exist. Find
    /// and stop anything in the bound cgroup, then fail the session.
    ResolveLaunch(ParkedSession<Starting>),
    /// The session was running: compare the recorded process identity (boot
    /// id, pid, start time, cgroup); signal only on an exact match; then fail
    /// the session.
    ReconcileProcess(ParkedSession<Running>),
    /// Stop intent without outcome: if the receipt journal holds the terminal
    /// receipt, record `exit`; otherwise fail the session.
    FinishStop(ParkedSession<Stopping>),
}

impl RecoveryDecision {
    /// The recovery code to record when failing the session.
    pub fn code(&self) -> ErrorCode {
        match self {
            RecoveryDecision::AbandonPreparation(_) => c::LIFECYCLE_RECOVERY_PREPARING_INTERRUPTED,
            RecoveryDecision::ResolveLaunch(_) => c::LIFECYCLE_RECOVERY_STARTING_INTERRUPTED,
            RecoveryDecision::ReconcileProcess(_) => c::LIFECYCLE_RECOVERY_RUNNING_INTERRUPTED,
            RecoveryDecision::FinishStop(_) => c::LIFECYCLE_RECOVERY_STOPPING_INTERRUPTED,
        }
    }

    /// The stage the session was in.
    pub fn stage(&self) -> SessionStage {
        match self {
            RecoveryDecision::AbandonPreparation(s) => s.stage(),
            RecoveryDecision::ResolveLaunch(s) => s.stage(),
            RecoveryDecision::ReconcileProcess(s) => s.stage(),
            RecoveryDecision::FinishStop(s) => s.stage(),
        }
    }

    /// The session id.
    pub fn session_id(&self) -> &SessionId {
        match self {
            RecoveryDecision::AbandonPreparation(s) => s.id(),
            RecoveryDecision::ResolveLaunch(s) => s.id(),
            RecoveryDecision::ReconcileProcess(s) => s.id(),
            RecoveryDecision::FinishStop(s) => s.id(),
        }
    }

    /// The recorded process identity, for a session that was running or
    /// stopping (`None` when it never ran).
    pub fn process_identity(&self) -> Option<&ProcessIdentity> {
        match self {
            RecoveryDecision::AbandonPreparation(_) | RecoveryDecision::ResolveLaunch(_) => None,
            RecoveryDecision::ReconcileProcess(s) => Some(s.process_identity()),
            RecoveryDecision::FinishStop(s) => Some(s.process_identity()),
        }
    }

    /// The recorded launch binding, for a session that reached starting
    /// (`None` when it was still preparing).
    pub fn launch_binding(&self) -> Option<LaunchBinding> {
        match self {
            RecoveryDecision::AbandonPreparation(_) => None,
            RecoveryDecision::ResolveLaunch(s) => Some(s.launch_binding()),
            RecoveryDecision::ReconcileProcess(s) => Some(s.launch_binding()),
            RecoveryDecision::FinishStop(s) => Some(s.launch_binding()),
        }
    }

    /// The typed session as a dynamic one.
    pub fn into_any(self) -> AnySession {
        match self {
            RecoveryDecision::AbandonPreparation(s) => s.into(),
            RecoveryDecision::ResolveLaunch(s) => s.into(),
            RecoveryDecision::ReconcileProcess(s) => s.into(),
            RecoveryDecision::FinishStop(s) => s.into(),
        }
    }
}

/// A session after recovery.
#[derive(Debug)]
pub enum Recovered {
    /// Only the creation record is durable; nothing to resolve.
    Created(ParkedSession<Created>),
    /// Interrupted mid-transition: the runtime must decide.
    Interrupted(RecoveryDecision),
    /// Terminal: exited.
    Exited(ParkedSession<Exited>),
    /// Terminal: failed.
    Failed(ParkedSession<Failed>),
}

impl Recovered {
    /// The stage of the last durable record.
    pub fn stage(&self) -> SessionStage {
        match self {
            Recovered::Created(s) => s.stage(),
            Recovered::Interrupted(d) => d.stage(),
            Recovered::Exited(s) => s.stage(),
            Recovered::Failed(s) => s.stage(),
        }
    }

    /// The session as a dynamic one (a decision is dropped: call this only
    /// once the decision has been acted on, or for display).
    pub fn into_any(self) -> AnySession {
        match self {
            Recovered::Created(s) => s.into(),
            Recovered::Interrupted(d) => d.into_any(),
            Recovered::Exited(s) => s.into(),
            Recovered::Failed(s) => s.into(),
        }
    }
}

/// Rebuilds session `id` from the records `source` holds for it, in
/// order, strictly. A session the source does not hold fails with
/// `lifecycle_record_missing_creation`.
pub fn replay_session<S: RecordSource + ?Sized>(
    source: &S,
    id: &SessionId,
) -> Result<AnySession, LifecycleError> {
    let records = stored_bytes(source.session_records(id))?;
    replay_bytes(&records)
}

/// Rebuilds session `id` from `source` and classifies it (see the module
/// docs).
pub fn recover_session<S: RecordSource + ?Sized>(
    source: &S,
    id: &SessionId,
) -> Result<Recovered, LifecycleError> {
    replay_session(source, id).map(classify)
}

fn stored_bytes(records: Vec<StoredRecord>) -> Result<Vec<Vec<u8>>, LifecycleError> {
    records.into_iter().map(StoredRecord::into_bytes).collect()
}

fn replay_bytes(records: &[Vec<u8>]) -> Result<AnySession, LifecycleError> {
    let decoded = records
        .iter()
        .map(|b| decode_with_digest(b))
        .collect::<Result<Vec<_>, _>>()?;
    replay_decoded(decoded)
}

fn classify(s: AnySession) -> Recovered {
    match s {
        AnySession::Created(s) => Recovered::Created(s),
        AnySession::Preparing(s) => Recovered::Interrupted(RecoveryDecision::AbandonPreparation(s)),
        AnySession::Starting(s) => Recovered::Interrupted(RecoveryDecision::ResolveLaunch(s)),
        AnySession::Running(s) => Recovered::Interrupted(RecoveryDecision::ReconcileProcess(s)),
        AnySession::Stopping(s) => Recovered::Interrupted(RecoveryDecision::FinishStop(s)),
        AnySession::Exited(s) => Recovered::Exited(s),
        AnySession::Failed(s) => Recovered::Failed(s),
    }
}

/// A session whose records do not replay (an undecodable record, a broken
/// chain, an illegal edge). It is never skipped: the runtime writes its
/// terminal receipt and records `fail` with
/// [`LIFECYCLE_RECOVERY_REPLAY_FAILED`](c::LIFECYCLE_RECOVERY_REPLAY_FAILED)
/// through [`Unreplayable::log_fail`], the one door that appends past
/// records that cannot be replayed. The failure record names the stage the
/// store holds and chains to the last stored record, so the store ends
/// terminal; a later replay still fails, and finds the session terminal
/// with its receipt.
#[derive(Debug)]
pub struct Unreplayable {
    id: SessionId,
    error: LifecycleError,
    stored_stage: SessionStage,
    next_seq: u64,
    prev: Option<Sha256Digest>,
    identity: Option<ProcessIdentity>,
    binding: Option<LaunchBinding>,
}

impl Unreplayable {
    /// The session id.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// Why replay failed.
    pub fn error(&self) -> &LifecycleError {
        &self.error
    }

    /// The stage the store holds for the session.
    pub fn stored_stage(&self) -> SessionStage {
        self.stored_stage
    }

    /// The code recorded when failing the session.
    pub fn code(&self) -> ErrorCode {
        c::LIFECYCLE_RECOVERY_REPLAY_FAILED
    }

    /// The process identity of the first running record that still
    /// decodes on its own, if any: what the runtime reconciles.
    pub fn process_identity(&self) -> Option<&ProcessIdentity> {
        self.identity.as_ref()
    }

    /// The launch binding of the first starting record that still decodes
    /// on its own, if any: what the receipt names.
    pub fn launch_binding(&self) -> Option<LaunchBinding> {
        self.binding
    }

    /// Confirms the durable terminal receipt, then appends the failure
    /// record after the last stored record. Refused when the store holds the
    /// session terminal already, or holds no record of it at all.
    pub fn log_fail<R: ReceiptLog + ?Sized, L: TransitionLog + ?Sized>(
        self,
        receipt: TerminalReceiptRef,
        receipts: &R,
        log: &mut L,
    ) -> Result<(), LifecycleError> {
        let from = self.stored_stage;
        if !from.can_transition(SessionStage::Failed) {
            return Err(LifecycleError::IllegalTransition {
                from,
                to: SessionStage::Failed,
            });
        }
        let Some(prev) = self.prev else {
            return Err(LifecycleError::MissingCreation {
                kind: SubjectKind::Session,
            });
        };
        let subject = Subject::Session(&self.id);
        // The plan is not known here: either kind the log holds will do.
        confirm_receipt(receipts, subject, &receipt, None)?;
        let entry = SessionEntry::Failed {
            code: c::LIFECYCLE_RECOVERY_REPLAY_FAILED,
            failed_in: from,
            receipt,
        };
        let bytes = crate::record::encode(&self.id, self.next_seq, Some(prev), &entry)?;
        append_checked(log, subject, self.next_seq, &bytes).map(|_| ())
    }
}

/// Recovers one stored session from the records `source` holds for it;
/// `stored_stage` is the stage the store holds for it. A session that does
/// not replay comes back as [`Unreplayable`], to be failed, never skipped.
pub fn recover_stored<S: RecordSource + ?Sized>(
    source: &S,
    id: &SessionId,
    stored_stage: SessionStage,
) -> Result<Recovered, Box<Unreplayable>> {
    // A record 0 that cannot be re-encoded leaves nothing to replay (the
    // session is then unreplayable with no record to chain to).
    let records = stored_bytes(source.session_records(id)).unwrap_or_default();
    let replayed = replay_bytes(&records).and_then(|s| {
        if s.id() == id {
            Ok(s)
        } else {
            Err(LifecycleError::RecordForeign {
                expected: id.as_str().to_owned(),
                found: s.id().as_str().to_owned(),
            })
        }
    });
    replayed.map(classify).map_err(|error| {
        let mut identity = None;
        let mut binding = None;
        for r in records
            .iter()
            .skip(1)
            .filter_map(|b| SessionRecord::decode(b).ok())
        {
            match r.entry {
                SessionEntry::Running { identity: i } if identity.is_none() => identity = Some(i),
                SessionEntry::Starting { binding: b, .. } if binding.is_none() => binding = Some(b),
                _ => {}
            }
        }
        Box::new(Unreplayable {
            id: id.clone(),
            error,
            stored_stage,
            next_seq: records.len() as u64,
            prev: records
                .last()
                .map(|b| record_digest(SubjectKind::Session, b.as_ref())),
            identity,
            binding,
        })
    })
}

/// The result of recovering a whole session store.
#[derive(Debug, Default)]
pub struct RecoveryReport {
    /// Each session, by id, recovered or refused with a code.
    pub sessions: BTreeMap<SessionId, Result<Recovered, LifecycleError>>,
    /// Records that could not be decoded at all (position in the input and
    /// the reason). Their session is unknown; the store should be treated as
    /// corrupt.
    pub undecodable: Vec<(usize, LifecycleError)>,
    /// Every start-authorization nonce found in a starting record, with its
    /// expiry: re-insert them with
    /// [`UsedNonces::insert_recovered`](crate::UsedNonces::insert_recovered).
    pub used_nonces: Vec<(Nonce, u64)>,
}

/// Recovers every session `source` holds, from all its records in store
/// order (records of different sessions may interleave).
pub fn recover_all<S: RecordSource + ?Sized>(source: &S) -> RecoveryReport {
    let mut report = RecoveryReport::default();
    let mut groups: BTreeMap<SessionId, Vec<(SessionRecord, Sha256Digest)>> = BTreeMap::new();
    for (i, stored) in source.all_session_records().into_iter().enumerate() {
        match stored
            .into_bytes()
            .and_then(|bytes| decode_with_digest(&bytes))
        {
            Ok((rec, digest)) => {
                if let SessionEntry::Starting {
                    nonce,
                    authorization_expires_at_ms,
                    ..
                } = &rec.entry
                {
                    report
                        .used_nonces
                        .push((*nonce, *authorization_expires_at_ms));
                }
                groups
                    .entry(rec.session_id.clone())
                    .or_default()
                    .push((rec, digest));
            }
            Err(e) => report.undecodable.push((i, e)),
        }
    }
    for (id, group) in groups {
        report
            .sessions
            .insert(id, replay_decoded(group).map(classify));
    }
    report
}

fn decode_with_digest(bytes: &[u8]) -> Result<(SessionRecord, Sha256Digest), LifecycleError> {
    let rec = SessionRecord::decode(bytes)?;
    Ok((rec, record_digest(SubjectKind::Session, bytes)))
}

fn replay_decoded(
    records: Vec<(SessionRecord, Sha256Digest)>,
) -> Result<AnySession, LifecycleError> {
    let mut iter = records.into_iter();
    let Some((first, first_digest)) = iter.next() else {
        return Err(LifecycleError::MissingCreation {
            kind: SubjectKind::Session,
        });
    };
    let digests = match (&first.entry, first.seq) {
        (SessionEntry::Created { digests }, 0) => *digests,
        _ => {
            return Err(LifecycleError::MissingCreation {
                kind: SubjectKind::Session,
            })
        }
    };
    let id = first.session_id;
    let mut history = vec![(SessionStage::Created, first_digest)];
    let mut head_seq = 0u64;
    let mut head_digest = first_digest;
    let mut last = first.entry;
    // Evidence accumulates: a running session keeps its binding, a stopping
    // one its binding and identity.
    let mut binding: Option<LaunchBinding> = None;
    let mut identity: Option<ProcessIdentity> = None;
    for (rec, digest) in iter {
        if rec.session_id != id {
            return Err(LifecycleError::RecordForeign {
                expected: id.as_str().to_owned(),
                found: rec.session_id.as_str().to_owned(),
            });
        }
        let expected_seq = head_seq.saturating_add(1);
        if rec.seq != expected_seq || rec.prev != Some(head_digest) {
            return Err(LifecycleError::RecordSequence {
                expected_seq,
                found_seq: rec.seq,
            });
        }
        let from = last.stage();
        let to = rec.entry.stage();
        let failed_elsewhere =
            matches!(&rec.entry, SessionEntry::Failed { failed_in, .. } if *failed_in != from);
        if !from.can_transition(to) || failed_elsewhere {
            return Err(LifecycleError::IllegalTransition { from, to });
        }
        history.push((to, digest));
        head_seq = rec.seq;
        head_digest = digest;
        match &rec.entry {
            SessionEntry::Starting { binding: b, .. } => binding = Some(*b),
            SessionEntry::Running { identity: i } => identity = Some(i.clone()),
            _ => {}
        }
        last = rec.entry;
    }
    // Running and stopping are reached only through starting (and running),
    // whose records set these; the graph check above guarantees it.
    let evidence_missing = || LifecycleError::MissingCreation {
        kind: SubjectKind::Session,
    };
    let h = (history, head_seq, head_digest);
    Ok(match last {
        SessionEntry::Created { digests: d } => {
            AnySession::Created(build(&id, digests, h, Created { digests: d }))
        }
        SessionEntry::Preparing => {
            AnySession::Preparing(build(&id, digests, h, Preparing { _private: () }))
        }
        SessionEntry::Starting {
            binding,
            authorization,
            nonce,
            authorization_expires_at_ms,
        } => AnySession::Starting(build(
            &id,
            digests,
            h,
            Starting {
                binding,
                authorization,
                nonce,
                authorization_expires_at_ms,
            },
        )),
        SessionEntry::Running { identity } => AnySession::Running(build(
            &id,
            digests,
            h,
            Running {
                binding: binding.ok_or_else(evidence_missing)?,
                identity,
            },
        )),
        SessionEntry::Stopping { reason } => AnySession::Stopping(build(
            &id,
            digests,
            h,
            Stopping {
                binding: binding.ok_or_else(evidence_missing)?,
                identity: identity.ok_or_else(evidence_missing)?,
                reason,
            },
        )),
        SessionEntry::Exited { receipt } => {
            AnySession::Exited(build(&id, digests, h, Exited { receipt }))
        }
        SessionEntry::Failed {
            code,
            failed_in,
            receipt,
        } => AnySession::Failed(build(
            &id,
            digests,
            h,
            Failed {
                code,
                failed_in,
                receipt,
            },
        )),
    })
}

type Head = (Vec<(SessionStage, Sha256Digest)>, u64, Sha256Digest);

fn build<S: crate::stage::Stage>(
    id: &SessionId,
    digests: crate::evidence::PlanDigests,
    (history, head_seq, head_digest): Head,
    stage: S,
) -> ParkedSession<S> {
    ParkedSession::from_parts(id.clone(), digests, history, head_seq, head_digest, stage)
}
