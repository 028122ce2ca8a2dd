// This file is over 600 lines because one model-based test needs its reference model, operation strategy and system-under-test adapters side by side.
//! Model-based test of the session lifecycle on the real session store
//! (issue 4): `glove_lifecycle` sessions driven through
//! `glove_journal::lifecycle::StoreLog` (a `TransitionLog` over
//! `glove_journal::SessionStore`) and `StoreReceipts` (a `ReceiptLog` over
//! the receipt journal), against a small reference model.
//!
//! Record mapping (documented in full in `glove_journal::lifecycle`):
//!
//! * lifecycle record 0 (`created`, both plan digests) → the store's own
//!   creation record (session id, idempotency key `k-<i>`, the canonical
//!   plan staged with `StoreLog::stage_plan`, the controller digest); the
//!   store recomputes `plan_content_digest` from the plan and the adapter
//!   requires it to match. Lookups and recovery re-encode record 0 from it;
//! * lifecycle record `k` ≥ 1 → the session's `k`-th store transition:
//!   stage byte = the record's stage, evidence = the record's canonical
//!   bytes verbatim.
//!
//! Operations: create (two plan variants), every transition with two input
//! variants (a repeat with the same input is idempotent, with the other is
//! a conflict, from the wrong stage is illegal), a log failure before the
//! store is reached, a transition attempted directly on the store that the
//! stage graph forbids (refused, nothing appended), a clean close and
//! reopen, and a crash: perform a request, then drop everything without any
//! clean-up, and when the request appended a record cut the file at a random
//! point inside that record (the append was never acknowledged, so the model
//! never saw it). After every reopen the store is opened with the anchor
//! taken after the last acknowledged append, the torn tail must be repaired
//! exactly when one was made, `recover_all` over `StoreLog::records` must
//! give exactly the model's sessions, stages and recovery decisions, the
//! used-nonce set is rebuilt from it, and the store's own index must agree.
//!
//! Terminal receipts are real: an exit or a failure first gets (or finds)
//! the session's one receipt in the receipt journal; a receipt is unique
//! per session, so an exit's input variant is ignored and a failure's
//! variant only selects the failure code.
//!
//! Cases: 96 by default (well under 30 s in a debug build), `PROPTEST_CASES`
//! for more.

use glove_journal::lifecycle::{StoreLog, StoreReceipts};
use glove_journal::receipt::{ReceiptConfig, ReceiptHead, ReceiptJournal, ReceiptKey};
use glove_journal::testing::{StoreLogWriter, StoreWriter};
use glove_journal::{Anchor, SessionStore};
use glove_lifecycle::memory::ManualClock;
use glove_lifecycle::*;
use glove_types::codes::journal as jc;
use glove_types::codes::lifecycle as c;
use glove_types::ids::{IdempotencyKey, SessionId};
use glove_types::stage::SessionStage;
use glove_types::{Blake3Digest, ErrorCode, Sha256Digest};
use proptest::prelude::*;
use proptest_state_machine::{prop_state_machine, ReferenceStateMachine, StateMachineTest};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const SESSIONS: usize = 3;
const NOW: u64 = 1_700_000_000_000;

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

    /// Input variants that change the record (prepare takes no input; an
    /// exit's receipt is the session's one receipt).
    fn normalize(self, v: u8) -> u8 {
        match self {
            Step::Prepare | Step::Exit => 0,
            Step::Create | Step::Start | Step::Run | Step::Stop | Step::Fail => v,
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// Request `step` for session `i` with input variant `v`.
    Request { i: usize, step: Step, v: u8 },
    /// The next append fails before it reaches the store.
    BreakLog,
    /// Ask the store directly for a transition to `to` of session `i`
    /// (skipped when the graph allows it).
    StoreDirect { i: usize, to: SessionStage },
    /// Close everything cleanly and reopen.
    Reopen,
    /// Perform the request, then crash; cut inside its record (if it
    /// appended one) at `cut`.
    CrashDuring {
        i: usize,
        step: Step,
        v: u8,
        cut: u16,
    },
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
    Refused(ErrorCode),
    Skipped,
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
    records: u64,
    fail_next: bool,
    used_nonces: BTreeSet<(usize, u8)>,
    last: Option<Outcome>,
    /// Whether the last reopen must find a torn tail.
    torn: bool,
}

impl Model {
    fn durable_nonces(&self) -> BTreeSet<(usize, u8)> {
        self.sessions
            .iter()
            .flat_map(|(i, s)| {
                s.history
                    .iter()
                    .filter(|(st, _)| *st == SessionStage::Starting)
                    .map(move |(_, v)| (*i, *v))
            })
            .collect()
    }
}

fn request(m: &mut Model, i: usize, step: Step, v: u8) -> Outcome {
    let v = step.normalize(v);
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

fn store_direct(m: &Model, i: usize, to: SessionStage) -> Outcome {
    let Some(s) = m.sessions.get(&i) else {
        return Outcome::Refused(jc::STORE_SESSION_NOT_FOUND);
    };
    let from = s.stage();
    if from == to && from != SessionStage::Created {
        Outcome::Refused(jc::STORE_TRANSITION_CONFLICT)
    } else if !from.can_transition(to) {
        Outcome::Refused(jc::STORE_ILLEGAL_TRANSITION)
    } else {
        Outcome::Skipped
    }
}

fn step_strategy() -> impl Strategy<Value = Step> {
    prop_oneof![
        Just(Step::Create),
        Just(Step::Prepare),
        Just(Step::Start),
        Just(Step::Run),
        Just(Step::Stop),
        Just(Step::Exit),
        Just(Step::Fail),
    ]
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
        // are common; random requests probe repeats, conflicts and illegal
        // edges.
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
        let natural = (proptest::sample::select(next.clone()), 0u8..2)
            .prop_map(|((i, step), v)| Op::Request { i, step, v });
        let crash = (proptest::sample::select(next), 0u8..2, any::<u16>())
            .prop_map(|((i, step), v, cut)| Op::CrashDuring { i, step, v, cut });
        let stage = proptest::sample::select(SessionStage::ALL.to_vec());
        prop_oneof![
            10 => natural,
            6 => (0..SESSIONS, step_strategy(), 0u8..2)
                .prop_map(|(i, step, v)| Op::Request { i, step, v }),
            1 => Just(Op::BreakLog),
            1 => (0..SESSIONS, stage).prop_map(|(i, to)| Op::StoreDirect { i, to }),
            2 => Just(Op::Reopen),
            2 => crash,
        ]
        .boxed()
    }

    fn apply(mut m: Model, op: &Op) -> Model {
        m.last = None;
        m.torn = false;
        match op {
            Op::Request { i, step, v } => m.last = Some(request(&mut m, *i, *step, *v)),
            Op::BreakLog => m.fail_next = true,
            Op::StoreDirect { i, to } => m.last = Some(store_direct(&m, *i, *to)),
            Op::Reopen => {
                // A failure armed before the restart dies with the process.
                m.fail_next = false;
                m.used_nonces = m.durable_nonces();
            }
            Op::CrashDuring { i, step, v, .. } => {
                // The request runs on a copy: what it appended is cut off.
                let mut shadow = m.clone();
                let outcome = request(&mut shadow, *i, *step, *v);
                m.last = Some(outcome);
                m.torn = outcome == Outcome::Recorded;
                m.fail_next = false;
                m.used_nonces = m.durable_nonces();
            }
        }
        m
    }
}

// ------------------------------------------------------------------ inputs

fn id_of(i: usize) -> SessionId {
    SessionId::new(format!("m-{i}")).expect("valid id")
}

fn plan_of(v: u8) -> Vec<u8> {
    format!(r#"{{"plan":{v}}}"#).into_bytes()
}

fn digests_of(v: u8) -> PlanDigests {
    let plan = plan_of(v);
    PlanDigests::new(Sha256Digest::of(&plan), Blake3Digest::of(&plan))
}

fn service_key() -> ServiceKey {
    ServiceKey::new(&[0x5a; 32]).expect("32-byte key")
}

fn nonce_of(i: usize, v: u8) -> Nonce {
    let mut nonce = [0u8; 16];
    nonce[0] = i as u8;
    nonce[1] = v;
    Nonce::from_bytes(nonce)
}

fn auth_for(i: usize, v: u8, digests: PlanDigests) -> StartAuthorization {
    StartAuthorization::issue(
        &service_key(),
        StartAuthFields {
            session_id: id_of(i),
            digests,
            nonce: nonce_of(i, v),
            issued_at_ms: NOW,
            expires_at_ms: NOW + 30_000,
        },
    )
    .expect("issue")
}

fn binding(v: u8) -> LaunchBinding {
    LaunchBinding::of_launch_spec(format!(r#"{{"launch":{v}}}"#).as_bytes()).expect("canonical")
}

fn identity(v: u8) -> ProcessIdentity {
    glove_lifecycle::memory::forge_identity(
        "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
        1000 + u32::from(v),
        99,
        7,
    )
    .expect("valid identity")
}

fn reason_for(v: u8) -> StopReason {
    if v == 0 {
        StopReason::Requested
    } else {
        StopReason::AgentExited
    }
}

fn code_for(v: u8) -> ErrorCode {
    if v == 0 {
        c::LIFECYCLE_RECOVERY_RUNNING_INTERRUPTED
    } else {
        c::LIFECYCLE_WRONG_STAGE
    }
}

fn receipt_body(id: &SessionId) -> Vec<u8> {
    format!(
        r#"{{"cpu_ms":1,"receipt_kind":"resource_v1","session_id":"{}"}}"#,
        id.as_str()
    )
    .into_bytes()
}

/// Stands in for an unreachable log: fails the next append before the store
/// sees it.
struct Flaky {
    inner: StoreLog,
    fail_next: bool,
}

impl TransitionLog for Flaky {
    fn append(&mut self, record: &PendingRecord<'_>) -> Result<AppendReceipt, PortError> {
        if std::mem::take(&mut self.fail_next) {
            return Err(PortError::new(c::LIFECYCLE_LOG_UNAVAILABLE));
        }
        self.inner.append(record)
    }

    fn lookup(&self, subject: Subject<'_>, seq: u64) -> Result<Option<StoredRecord>, PortError> {
        self.inner.lookup(subject, seq)
    }
}

// -------------------------------------------------------- system under test

struct Sut {
    dir: tempfile::TempDir,
    log: Flaky,
    receipts: StoreReceipts,
    clock: ManualClock,
    sessions: BTreeMap<usize, AnySession>,
    nonces: UsedNonces,
    /// Taken after every acknowledged append: the trusted anchor.
    anchor: Anchor,
}

fn receipt_key() -> ReceiptKey {
    ReceiptKey::from_bytes([0x42; 32])
}

const RECEIPT_BASE: ReceiptHead = ReceiptHead {
    seq: 0,
    chain: [0; 32],
};

impl Sut {
    fn store_path(dir: &Path) -> PathBuf {
        dir.join("sessions")
    }

    fn receipts_path(dir: &Path) -> PathBuf {
        dir.join("receipts")
    }
}

/// The receipt the lifecycle record of `step` names, for the repeat check:
/// the session's durable receipt, or a placeholder when it has none yet
/// (then no terminal record exists to compare with).
fn terminal_ref(sut: &Sut, id: &SessionId) -> TerminalReceiptRef {
    TerminalReceiptRef::durable(&sut.receipts, Subject::Session(id))
        .expect("receipt lookup")
        .unwrap_or_else(|| glove_lifecycle::memory::forge_receipt(0, Sha256Digest::of(b"none")))
}

fn entry_for(sut: &Sut, any: &AnySession, i: usize, step: Step, v: u8) -> SessionEntry {
    match step {
        Step::Create => SessionEntry::Created {
            digests: digests_of(v),
        },
        Step::Prepare => SessionEntry::Preparing,
        Step::Start => {
            let a = auth_for(i, v, *any.digests());
            SessionEntry::Starting {
                binding: binding(v),
                authorization: a.digest().expect("digest"),
                nonce: a.fields().nonce,
                authorization_expires_at_ms: a.fields().expires_at_ms,
            }
        }
        Step::Run => SessionEntry::Running {
            identity: identity(v),
        },
        Step::Stop => SessionEntry::Stopping {
            reason: reason_for(v),
        },
        Step::Exit => SessionEntry::Exited {
            receipt: terminal_ref(sut, any.id()),
        },
        Step::Fail => {
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
                receipt: terminal_ref(sut, any.id()),
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

/// Gets (or appends) the session's one terminal receipt.
fn terminal_receipt(sut: &mut Sut, id: &SessionId) -> TerminalReceiptRef {
    sut.receipts
        .get_or_append(id, &receipt_body(id))
        .expect("terminal receipt")
}

fn fail_any(sut: &mut Sut, any: AnySession, v: u8) -> (AnySession, Outcome) {
    let id = any.id().clone();
    let r = terminal_receipt(sut, &id);
    macro_rules! go {
        ($s:expr) => {{
            $s.enter(
                |s| match s.log_fail(code_for(v), r, &sut.receipts, &mut sut.log) {
                    Ok(p) => (
                        AnySession::from(s.fail(p).expect("fail")),
                        Outcome::Recorded,
                    ),
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
            any.$conv().expect("stage").enter(|$s| match $log {
                Ok(p) => (
                    AnySession::from($s.$move(p).expect("transition")),
                    Outcome::Recorded,
                ),
                Err(e) => (AnySession::from($s), outcome_of(&e)),
            })
        }};
    }
    match step {
        Step::Create => unreachable!("create of an existing session is a repeat or conflict"),
        Step::Prepare => typed!(try_into_created, |s| s.log_prepare(&mut sut.log), prepare),
        Step::Start => {
            let s = any.try_into_preparing().expect("preparing");
            let verified = auth_for(i, v, *s.digests()).verify(
                &service_key(),
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
                Ok(p) => (
                    AnySession::from(s.start(p).expect("start")),
                    Outcome::Recorded,
                ),
                Err(e) => (AnySession::from(s), outcome_of(&e)),
            })
        }
        Step::Run => typed!(
            try_into_starting,
            |s| s.log_run(identity(v), &mut sut.log),
            run
        ),
        Step::Stop => typed!(
            try_into_running,
            |s| s.log_stop(reason_for(v), &mut sut.log),
            stop
        ),
        Step::Exit => {
            let r = terminal_receipt(sut, any.id());
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
    let v = step.normalize(v);
    let Some(any) = sut.sessions.remove(&i) else {
        if step != Step::Create {
            return Outcome::Absent;
        }
        let id = id_of(i);
        let key = IdempotencyKey::new(format!("k-{i}")).expect("key");
        sut.log.inner.stage_plan(&id, key, plan_of(v));
        return with_brand(
            |b| match Session::log_create(b, &id, digests_of(v), &mut sut.log) {
                Ok(p) => {
                    sut.sessions
                        .insert(i, Session::create(p).expect("create").into());
                    Outcome::Recorded
                }
                Err(e) => outcome_of(&e),
            },
        );
    };
    let entry = entry_for(sut, &any, i, step, v);
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

fn sut_store_direct(sut: &mut Sut, m: &Model, i: usize, to: SessionStage) -> Outcome {
    if store_direct(m, i, to) == Outcome::Skipped {
        // A legal edge would take the store where the lifecycle is not.
        return Outcome::Skipped;
    }
    let before = sut.log.inner.store().journal().record_count();
    let got = sut
        .log
        .inner
        .store_mut()
        .transition(&id_of(i), to, br#"{"forged":true}"#);
    assert_eq!(sut.log.inner.store().journal().record_count(), before);
    match got {
        Ok(t) => panic!("the store accepted a forbidden transition: {t:?}"),
        Err(e) => Outcome::Refused(e.code()),
    }
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

/// Drops every handle (sessions, nonces, store, receipts), cuts the session
/// store inside its last record when `cut` says so, reopens both files and
/// recovers, checking everything against the model.
fn reopen(sut: Sut, m: &Model, cut: Option<(u64, u16)>) -> Sut {
    let Sut {
        dir,
        log,
        receipts,
        clock,
        sessions,
        nonces,
        anchor,
    } = sut;
    // No clean-up of any kind: the handles just go away (and release their
    // locks), as when the process dies.
    drop((sessions, nonces, log, receipts));
    let path = Sut::store_path(dir.path());
    if let Some((before, cut)) = cut {
        let after = std::fs::metadata(&path).expect("stat").len();
        assert!(after > before, "the crashed request appended a record");
        // Strictly inside the record: at least one byte, never all of it.
        let at = before + 1 + u64::from(cut) % (after - before - 1);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open for cut");
        f.set_len(at).expect("cut");
    }
    let (store, report) = SessionStore::open(&path, Some(&anchor)).expect("reopen store");
    assert_eq!(report.torn.is_some(), m.torn, "torn tail repaired");
    let (receipts, _) = ReceiptJournal::open(
        &Sut::receipts_path(dir.path()),
        receipt_key(),
        &RECEIPT_BASE,
        ReceiptConfig::default(),
    )
    .expect("reopen receipts");
    let log = StoreLog::new(store);
    let report = recover_all(&log);
    assert!(report.undecodable.is_empty(), "{:?}", report.undecodable);
    assert_eq!(report.sessions.len(), m.sessions.len());
    let mut sessions = BTreeMap::new();
    for (id, rec) in report.sessions {
        let rec = rec.expect("every stored session recovers");
        let i: usize = id.as_str()[2..].parse().expect("index");
        let ms = &m.sessions[&i];
        assert_eq!(rec.stage(), ms.stage(), "session {i}");
        // Interrupted sessions are decisions, never silent successes.
        match &rec {
            Recovered::Interrupted(d) => {
                assert_eq!(Some(d.code()), expected_recovery(ms.stage()));
                assert_eq!(d.session_id(), &id);
            }
            Recovered::Created(_) | Recovered::Exited(_) | Recovered::Failed(_) => {
                assert_eq!(None, expected_recovery(ms.stage()))
            }
        }
        // The store's own view agrees.
        let stored = log.store().get(&id).expect("stored session");
        assert_eq!(stored.stage(), ms.stage());
        assert_eq!(
            log.store().transitions(&id).expect("transitions").len() + 1,
            ms.history.len()
        );
        sessions.insert(i, rec.into_any());
    }
    let mut nonces = UsedNonces::new(64);
    let mut recovered_nonces = BTreeSet::new();
    for (n, exp) in report.used_nonces {
        nonces.insert_recovered(n, exp);
        recovered_nonces.insert(n.to_hex());
    }
    let expected_nonces: BTreeSet<String> = m
        .durable_nonces()
        .into_iter()
        .map(|(i, v)| nonce_of(i, v).to_hex())
        .collect();
    assert_eq!(recovered_nonces, expected_nonces);
    let anchor = log.store().anchor();
    Sut {
        dir,
        log: Flaky {
            inner: log,
            fail_next: false,
        },
        receipts: StoreReceipts::new(receipts),
        clock,
        sessions,
        nonces,
        anchor,
    }
}

struct LifecycleOnStore;

impl StateMachineTest for LifecycleOnStore {
    type SystemUnderTest = Sut;
    type Reference = Reference;

    fn init_test(_: &Model) -> Sut {
        let dir = tempfile::tempdir().expect("tempdir");
        // The journals demand a private (0700) directory.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        let store = SessionStore::create(&Sut::store_path(dir.path())).expect("create store");
        let anchor = store.anchor();
        let receipts = ReceiptJournal::create(
            &Sut::receipts_path(dir.path()),
            receipt_key(),
            &RECEIPT_BASE,
            ReceiptConfig::default(),
        )
        .expect("create receipts");
        Sut {
            dir,
            log: Flaky {
                inner: StoreLog::new(store),
                fail_next: false,
            },
            receipts: StoreReceipts::new(receipts),
            clock: ManualClock::at(NOW),
            sessions: BTreeMap::new(),
            nonces: UsedNonces::new(64),
            anchor,
        }
    }

    fn apply(mut sut: Sut, m: &Model, op: Op) -> Sut {
        match op {
            Op::Request { i, step, v } => {
                let got = sut_request(&mut sut, i, step, v);
                assert_eq!(Some(got), m.last, "{op:?}");
                sut.anchor = sut.log.inner.store().anchor();
                sut
            }
            Op::BreakLog => {
                sut.log.fail_next = true;
                sut
            }
            Op::StoreDirect { i, to } => {
                let got = sut_store_direct(&mut sut, m, i, to);
                assert_eq!(Some(got), m.last, "{op:?}");
                sut
            }
            Op::Reopen => reopen(sut, m, None),
            Op::CrashDuring { i, step, v, cut } => {
                let before = sut.log.inner.store().journal().len_bytes();
                let got = sut_request(&mut sut, i, step, v);
                assert_eq!(Some(got), m.last, "{op:?}");
                // The anchor stays where the last acknowledged append left it.
                let cut = (got == Outcome::Recorded).then_some((before, cut));
                reopen(sut, m, cut)
            }
        }
    }

    fn check_invariants(sut: &Sut, m: &Model) {
        assert_eq!(
            sut.log.inner.store().journal().record_count(),
            m.records,
            "one store record per recorded transition"
        );
        assert_eq!(sut.sessions.len(), m.sessions.len());
        for (i, ms) in &m.sessions {
            let s = &sut.sessions[i];
            assert_eq!(s.stage(), ms.stage(), "session {i}");
            assert_eq!(s.last_seq() as usize + 1, ms.history.len(), "session {i}");
        }
    }
}

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(96);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

prop_state_machine! {
    #![proptest_config(config())]

    #[test]
    fn lifecycle_on_the_session_store_matches_the_model(sequential 1..64 => LifecycleOnStore);
}

/// A fresh directory (mode 0700) with an empty session store and receipt
/// journal.
fn fresh() -> (tempfile::TempDir, StoreLog, StoreReceipts) {
    let sut = LifecycleOnStore::init_test(&Model::default());
    (sut.dir, sut.log.inner, sut.receipts)
}

#[test]
fn a_creation_needs_its_plan_staged_with_matching_digests() {
    let (_dir, mut log, _) = fresh();
    let id = id_of(0);
    let create = |log: &mut StoreLog| {
        with_brand(|b| Session::log_create(b, &id, digests_of(0), log).map(drop))
    };
    let err = create(&mut log).unwrap_err();
    assert_eq!(err.code(), c::LIFECYCLE_LOG_UNAVAILABLE);
    // A staged plan whose digest differs from the record's is refused too.
    log.stage_plan(&id, IdempotencyKey::new("k-0").unwrap(), plan_of(1));
    let err = create(&mut log).unwrap_err();
    assert_eq!(err.code(), c::LIFECYCLE_LOG_UNAVAILABLE);
    assert_eq!(log.store().journal().record_count(), 0);
    log.stage_plan(&id, IdempotencyKey::new("k-0").unwrap(), plan_of(0));
    let preparing = with_brand(|b| {
        let created =
            Session::create(Session::log_create(b, &id, digests_of(0), &mut log).unwrap());
        let created = created.unwrap();
        // The store holds the plan; the lifecycle record comes back verbatim.
        assert_eq!(log.store().get(&id).unwrap().plan(), &plan_of(0)[..]);
        let p = created.log_prepare(&mut log).unwrap();
        created.prepare(p).unwrap().park()
    });
    assert_eq!(log.all_session_records().len(), 2);
    let report = recover_all(&log);
    assert!(matches!(
        report.sessions.get(&id),
        Some(Ok(Recovered::Interrupted(
            RecoveryDecision::AbandonPreparation(_)
        )))
    ));
    assert_eq!(preparing.last_seq(), 1);
}

#[test]
fn a_receipt_naming_another_session_is_refused_before_it_is_written() {
    let (_dir, _, mut receipts) = fresh();
    let id = id_of(0);
    let first = receipts.get_or_append(&id, &receipt_body(&id)).unwrap();
    let first_entry = receipts
        .terminal_receipt(Subject::Session(&id))
        .unwrap()
        .unwrap();
    // Found again, not appended twice.
    assert_eq!(
        receipts.get_or_append(&id, &receipt_body(&id)).unwrap(),
        first
    );
    assert_eq!(receipts.journal().receipts().len(), 1);
    assert_eq!(
        receipts
            .terminal_receipt(Subject::Session(&id_of(1)))
            .unwrap(),
        None
    );
    // A second receipt whose body names the same session, spent through
    // another session's reservation, is refused before it is written: the
    // answer for the first session stays its one receipt.
    let other = id_of(1);
    let mut j = receipts;
    let err = j.get_or_append(&other, &receipt_body(&id)).unwrap_err();
    assert_eq!(err.code(), c::LIFECYCLE_RECEIPT_MISMATCH);
    assert_eq!(j.journal().receipts().len(), 1, "nothing was written");
    assert_eq!(
        j.terminal_receipt(Subject::Session(&id)).unwrap(),
        Some(first_entry)
    );
}
