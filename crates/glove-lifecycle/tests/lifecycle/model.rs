//! Model-based test: random sequences of transitions, repeats, conflicting
//! repeats, log failures, crashes and recoveries, checked against a small
//! reference model.
//!
//! The system under test drives sessions the way a protocol layer would: it
//! holds `AnySession` values, asks [`AnySession::check_repeat`] whether a
//! request repeats, conflicts with, or extends the durable history, and only
//! for a new transition converts to the typed stage (`try_into_*`) and calls
//! `log_*` then the transition. A crash drops every session and the
//! used-nonce set and keeps only the in-memory log and receipt journal;
//! recovery rebuilds everything from the log.

use crate::support::{binding, digests_of, identity, key, receipt, sid, NOW};
use glove_lifecycle::memory::{ManualClock, MemoryLog, MemoryReceipts};
use glove_lifecycle::*;
use glove_types::codes::lifecycle as c;
use glove_types::ids::SessionId;
use glove_types::stage::SessionStage;
use glove_types::ErrorCode;
use proptest::prelude::*;
use proptest_state_machine::{prop_state_machine, ReferenceStateMachine, StateMachineTest};
use std::collections::{BTreeMap, BTreeSet};

const SESSIONS: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Create,
    Prepare,
    Start,
    Run,
    Stop,
    Exit,
    Fail,
}

impl Step {
    fn target(self) -> SessionStage {
        match self {
            Step::Create => SessionStage::Created,
            Step::Prepare => SessionStage::Preparing,
            Step::Start => SessionStage::Starting,
            Step::Run => SessionStage::Running,
            Step::Stop => SessionStage::Stopping,
            Step::Exit => SessionStage::Exited,
            Step::Fail => SessionStage::Failed,
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// Request `step` for session `i` with input variant `v`.
    Request { i: usize, step: Step, v: u8 },
    /// The next append fails.
    BreakLog,
    /// Drop everything but the log and the receipt journal.
    Crash,
    /// Rebuild from the log.
    Recover,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Recorded,
    Repeat,
    Conflict,
    Illegal,
    Absent,
    LogFailed,
    Replayed,
    Down,
}

#[derive(Clone, Debug, Default)]
struct ModelSession {
    /// `(stage, input variant)` per durable record.
    history: Vec<(SessionStage, u8)>,
}

impl ModelSession {
    fn stage(&self) -> SessionStage {
        self.history.last().map_or(SessionStage::Created, |h| h.0)
    }
}

#[derive(Clone, Debug, Default)]
struct Model {
    sessions: BTreeMap<usize, ModelSession>,
    records: usize,
    fail_next: bool,
    crashed: bool,
    /// Nonces consumed in memory (lost at a crash unless durable).
    used_nonces: BTreeSet<(usize, u8)>,
    last: Option<Outcome>,
}

/// For a `Fail` the recorded input is the code variant; `failed_in` follows
/// from the stage, so a repeated fail compares only the code.
fn request(m: &mut Model, i: usize, step: Step, v: u8) -> Outcome {
    // Preparing takes no input: every prepare request is the same.
    let v = if step == Step::Prepare { 0 } else { v };
    if m.crashed {
        return Outcome::Down;
    }
    let Some(s) = m.sessions.get(&i) else {
        if step != Step::Create {
            return Outcome::Absent;
        }
        if std::mem::take(&mut m.fail_next) {
            return Outcome::LogFailed;
        }
        m.sessions.insert(
            i,
            ModelSession {
                history: vec![(SessionStage::Created, v)],
            },
        );
        m.records += 1;
        return Outcome::Recorded;
    };
    let target = step.target();
    if let Some((_, old)) = s.history.iter().find(|(st, _)| *st == target) {
        return if *old == v {
            Outcome::Repeat
        } else {
            Outcome::Conflict
        };
    }
    if !s.stage().can_transition(target) {
        return Outcome::Illegal;
    }
    if step == Step::Start {
        if m.used_nonces.contains(&(i, v)) {
            return Outcome::Replayed;
        }
        m.used_nonces.insert((i, v));
    }
    if std::mem::take(&mut m.fail_next) {
        return Outcome::LogFailed;
    }
    if let Some(s) = m.sessions.get_mut(&i) {
        s.history.push((target, v));
    }
    m.records += 1;
    Outcome::Recorded
}

struct Reference;

impl ReferenceStateMachine for Reference {
    type State = Model;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<Model> {
        Just(Model::default()).boxed()
    }

    fn transitions(m: &Model) -> BoxedStrategy<Op> {
        // Bias towards each session's natural next step so that long paths
        // (up to exited) are common, while random requests probe repeats,
        // conflicts and illegal edges.
        let next: Vec<(usize, Step)> = (0..SESSIONS)
            .map(|i| {
                let step = match m.sessions.get(&i).map(ModelSession::stage) {
                    None => Step::Create,
                    Some(SessionStage::Created) => Step::Prepare,
                    Some(SessionStage::Preparing) => Step::Start,
                    Some(SessionStage::Starting) => Step::Run,
                    Some(SessionStage::Running) => Step::Stop,
                    Some(SessionStage::Stopping) => Step::Exit,
                    Some(SessionStage::Exited | SessionStage::Failed) => Step::Fail,
                };
                (i, step)
            })
            .collect();
        let natural = (proptest::sample::select(next), 0u8..2)
            .prop_map(|((i, step), v)| Op::Request { i, step, v });
        let step = prop_oneof![
            Just(Step::Create),
            Just(Step::Prepare),
            Just(Step::Start),
            Just(Step::Run),
            Just(Step::Stop),
            Just(Step::Exit),
            Just(Step::Fail),
        ];
        prop_oneof![
            10 => natural,
            6 => (0..SESSIONS, step, 0u8..2).prop_map(|(i, step, v)| Op::Request { i, step, v }),
            1 => Just(Op::BreakLog),
            1 => Just(Op::Crash),
            2 => Just(Op::Recover),
        ]
        .boxed()
    }

    fn apply(mut m: Model, op: &Op) -> Model {
        m.last = None;
        match op {
            Op::Request { i, step, v } => m.last = Some(request(&mut m, *i, *step, *v)),
            Op::BreakLog => m.fail_next = true,
            Op::Crash => {
                m.crashed = true;
                m.used_nonces.clear();
            }
            Op::Recover => {
                m.crashed = false;
                // Only nonces of durable starting records come back.
                let durable: BTreeSet<(usize, u8)> = m
                    .sessions
                    .iter()
                    .flat_map(|(i, s)| {
                        s.history
                            .iter()
                            .filter(|(st, _)| *st == SessionStage::Starting)
                            .map(move |(_, v)| (*i, *v))
                    })
                    .collect();
                m.used_nonces = durable;
            }
        }
        m
    }
}

struct Sut {
    log: MemoryLog,
    receipts: MemoryReceipts,
    clock: ManualClock,
    sessions: BTreeMap<usize, AnySession>,
    nonces: UsedNonces,
    crashed: bool,
}

fn id_of(i: usize) -> SessionId {
    sid(&format!("m-{i}"))
}

fn code_for(v: u8) -> ErrorCode {
    if v == 0 {
        c::LIFECYCLE_RECOVERY_RUNNING_INTERRUPTED
    } else {
        c::LIFECYCLE_WRONG_STAGE
    }
}

fn auth_for(i: usize, v: u8, digests: PlanDigests) -> StartAuthorization {
    let id = id_of(i);
    let mut nonce = [0u8; 16];
    nonce[0] = i as u8;
    nonce[1] = v;
    StartAuthorization::issue(
        &key(),
        StartAuthFields {
            session_id: id,
            digests,
            nonce: Nonce::from_bytes(nonce),
            issued_at_ms: NOW,
            expires_at_ms: NOW + 30_000,
        },
    )
    .unwrap()
}

fn reason_for(v: u8) -> StopReason {
    if v == 0 {
        StopReason::Requested
    } else {
        StopReason::AgentExited
    }
}

/// The record a request would append, for the repeat check.
fn entry_for(any: &AnySession, i: usize, step: Step, v: u8) -> SessionEntry {
    match step {
        Step::Create => SessionEntry::Created {
            digests: digests_of(if v == 0 { "m-plan" } else { "m-other" }),
        },
        Step::Prepare => SessionEntry::Preparing,
        Step::Start => {
            let a = auth_for(i, v, *any.digests());
            SessionEntry::Starting {
                binding: binding(v),
                authorization: a.digest().unwrap(),
                nonce: a.fields().nonce,
                authorization_expires_at_ms: a.fields().expires_at_ms,
            }
        }
        Step::Run => SessionEntry::Running {
            identity: identity(1000 + u32::from(v)),
        },
        Step::Stop => SessionEntry::Stopping {
            reason: reason_for(v),
        },
        Step::Exit => SessionEntry::Exited {
            receipt: receipt(u64::from(v)),
        },
        Step::Fail => {
            // A repeat of a recorded failure names the stage it left.
            let failed_in = match any {
                AnySession::Failed(s) => s.failed_in(),
                AnySession::Created(_)
                | AnySession::Preparing(_)
                | AnySession::Starting(_)
                | AnySession::Running(_)
                | AnySession::Stopping(_)
                | AnySession::Exited(_) => any.stage(),
            };
            SessionEntry::Failed {
                code: code_for(v),
                failed_in,
                receipt: receipt(10 + u64::from(v)),
            }
        }
    }
}

fn outcome_of(e: &LifecycleError) -> Outcome {
    let code = e.code();
    if code == c::LIFECYCLE_LOG_UNAVAILABLE {
        Outcome::LogFailed
    } else if code == c::START_AUTH_REPLAYED {
        Outcome::Replayed
    } else {
        panic!("unexpected error {e}")
    }
}

/// Fails any live session; `Err` hands the session back for terminal ones.
fn fail_any(sut: &mut Sut, any: AnySession, v: u8) -> (AnySession, Outcome) {
    let id = any.id().clone();
    let r = receipt(10 + u64::from(v));
    sut.receipts.put(Subject::Session(&id), r);
    macro_rules! go {
        ($s:expr) => {{
            $s.enter(
                |s| match s.log_fail(code_for(v), r, &sut.receipts, &mut sut.log) {
                    Ok(p) => (AnySession::from(s.fail(p).unwrap()), Outcome::Recorded),
                    Err(e) => (AnySession::from(s), outcome_of(&e)),
                },
            )
        }};
    }
    match any {
        AnySession::Created(s) => go!(s),
        AnySession::Preparing(s) => go!(s),
        AnySession::Starting(s) => go!(s),
        AnySession::Running(s) => go!(s),
        AnySession::Stopping(s) => go!(s),
        AnySession::Exited(s) => (s.into(), Outcome::Illegal),
        AnySession::Failed(s) => (s.into(), Outcome::Illegal),
    }
}

fn perform(sut: &mut Sut, any: AnySession, i: usize, step: Step, v: u8) -> (AnySession, Outcome) {
    macro_rules! typed {
        ($conv:ident, |$s:ident| $log:expr, $move:ident) => {{
            any.$conv().unwrap().enter(|$s| match $log {
                Ok(p) => (AnySession::from($s.$move(p).unwrap()), Outcome::Recorded),
                Err(e) => (AnySession::from($s), outcome_of(&e)),
            })
        }};
    }
    match step {
        Step::Create => unreachable!("create of an existing session is a repeat or conflict"),
        Step::Prepare => typed!(try_into_created, |s| s.log_prepare(&mut sut.log), prepare),
        Step::Start => {
            let s = any.try_into_preparing().unwrap();
            let verified = auth_for(i, v, *s.digests()).verify(
                &key(),
                s.id(),
                s.digests(),
                StartAuthPolicy::default(),
                &sut.clock,
                &mut sut.nonces,
            );
            let verified = match verified {
                Ok(x) => x,
                Err(e) => return (s.into(), outcome_of(&e.into())),
            };
            s.enter(|s| match s.log_start(binding(v), verified, &mut sut.log) {
                Ok(p) => (AnySession::from(s.start(p).unwrap()), Outcome::Recorded),
                Err(e) => (AnySession::from(s), outcome_of(&e)),
            })
        }
        Step::Run => typed!(
            try_into_starting,
            |s| s.log_run(identity(1000 + u32::from(v)), &mut sut.log),
            run
        ),
        Step::Stop => typed!(
            try_into_running,
            |s| s.log_stop(reason_for(v), &mut sut.log),
            stop
        ),
        Step::Exit => {
            let r = receipt(u64::from(v));
            sut.receipts.put(Subject::Session(any.id()), r);
            typed!(
                try_into_stopping,
                |s| s.log_exit(r, &sut.receipts, &mut sut.log),
                exit
            )
        }
        Step::Fail => fail_any(sut, any, v),
    }
}

fn sut_request(sut: &mut Sut, i: usize, step: Step, v: u8) -> Outcome {
    if sut.crashed {
        return Outcome::Down;
    }
    let Some(any) = sut.sessions.remove(&i) else {
        if step != Step::Create {
            return Outcome::Absent;
        }
        let d = digests_of(if v == 0 { "m-plan" } else { "m-other" });
        return with_brand(
            |b| match Session::log_create(b, &id_of(i), d, &mut sut.log) {
                Ok(p) => {
                    sut.sessions.insert(i, Session::create(p).unwrap().into());
                    Outcome::Recorded
                }
                Err(e) => outcome_of(&e),
            },
        );
    };
    let entry = entry_for(&any, i, step, v);
    let (any, outcome) = match any.check_repeat(&entry) {
        Ok(Repeat::AlreadyRecorded { .. }) => (any, Outcome::Repeat),
        Ok(Repeat::New) => perform(sut, any, i, step, v),
        Err(e) if e.code() == c::LIFECYCLE_TRANSITION_CONFLICT => (any, Outcome::Conflict),
        Err(e) if e.code() == c::LIFECYCLE_ILLEGAL_TRANSITION => (any, Outcome::Illegal),
        Err(e) => panic!("unexpected repeat check error {e}"),
    };
    sut.sessions.insert(i, any);
    outcome
}

fn expected_recovery(stage: SessionStage) -> Option<ErrorCode> {
    match stage {
        SessionStage::Preparing => Some(c::LIFECYCLE_RECOVERY_PREPARING_INTERRUPTED),
        SessionStage::Starting => Some(c::LIFECYCLE_RECOVERY_STARTING_INTERRUPTED),
        SessionStage::Running => Some(c::LIFECYCLE_RECOVERY_RUNNING_INTERRUPTED),
        SessionStage::Stopping => Some(c::LIFECYCLE_RECOVERY_STOPPING_INTERRUPTED),
        SessionStage::Created | SessionStage::Exited | SessionStage::Failed => None,
    }
}

struct LifecycleModel;

impl StateMachineTest for LifecycleModel {
    type SystemUnderTest = Sut;
    type Reference = Reference;

    fn init_test(_: &Model) -> Sut {
        Sut {
            log: MemoryLog::new(),
            receipts: MemoryReceipts::new(),
            clock: ManualClock::at(NOW),
            sessions: BTreeMap::new(),
            nonces: UsedNonces::new(64),
            crashed: false,
        }
    }

    fn apply(mut sut: Sut, m: &Model, op: Op) -> Sut {
        match op {
            Op::Request { i, step, v } => {
                let got = sut_request(&mut sut, i, step, v);
                assert_eq!(Some(got), m.last, "{op:?}");
            }
            Op::BreakLog => sut.log.fail_next_append(),
            Op::Crash => {
                sut.sessions.clear();
                sut.nonces = UsedNonces::new(64);
                sut.crashed = true;
            }
            Op::Recover => {
                let report = recover_all(&sut.log);
                assert!(report.undecodable.is_empty());
                assert_eq!(report.sessions.len(), m.sessions.len());
                sut.sessions.clear();
                for i in m.sessions.keys() {
                    let recovered = report
                        .sessions
                        .get(&id_of(*i))
                        .and_then(|r| r.as_ref().ok())
                        .is_some();
                    assert!(recovered, "session {i} must recover");
                }
                for (id, rec) in report.sessions {
                    let rec = rec.unwrap();
                    let i: usize = id.as_str()[2..].parse().unwrap();
                    let stage = m.sessions[&i].stage();
                    assert_eq!(rec.stage(), stage);
                    // Interrupted sessions are decisions, never silent successes.
                    match &rec {
                        Recovered::Interrupted(d) => {
                            assert_eq!(Some(d.code()), expected_recovery(stage))
                        }
                        Recovered::Created(_) | Recovered::Exited(_) | Recovered::Failed(_) => {
                            assert_eq!(None, expected_recovery(stage))
                        }
                    }
                    sut.sessions.insert(i, rec.into_any());
                }
                sut.nonces = UsedNonces::new(64);
                for (n, exp) in report.used_nonces {
                    sut.nonces.insert_recovered(n, exp);
                }
                sut.crashed = false;
            }
        }
        sut
    }

    fn check_invariants(sut: &Sut, m: &Model) {
        assert_eq!(
            sut.log.len(),
            m.records,
            "one record per recorded transition"
        );
        if m.crashed {
            assert!(sut.sessions.is_empty());
            return;
        }
        assert_eq!(sut.sessions.len(), m.sessions.len());
        for (i, ms) in &m.sessions {
            let s = &sut.sessions[i];
            assert_eq!(s.stage(), ms.stage(), "session {i}");
            assert_eq!(s.last_seq() as usize + 1, ms.history.len(), "session {i}");
        }
    }
}

prop_state_machine! {
    #![proptest_config(ProptestConfig {
        cases: 96,
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    #[test]
    fn lifecycle_matches_the_model(sequential 1..60 => LifecycleModel);
}
