//! Model-based tests (proptest-state-machine) of the session store and the
//! receipt journal against small in-memory references, with reopen and
//! crash steps. A crash step performs an operation, then cuts the file at a
//! random point inside the record it appended (the append was never
//! acknowledged) and reopens: the store must come back exactly as the
//! reference, which never saw the operation. The receipt journal's anchor
//! file is put back as it was before the operation (its rewrite follows the
//! append), and every reopen checks the journal against it.

use crate::common::{anchor, body, key, no_spawn, tempdir};
use crate::sessions::{key as ikey, new_session, sid};
use glove_journal::receipt::{ReceiptConfig, ReceiptHead, ReceiptJournal, ReceiptKind};
use glove_journal::session::Creation;
use glove_journal::testing::StoreWriter;
use glove_journal::{JournalError, SessionStore};
use glove_types::codes::journal as jc;
use glove_types::stage::SessionStage;
use proptest::prelude::*;
use proptest_state_machine::{prop_state_machine, ReferenceStateMachine, StateMachineTest};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn cut_inside_last_append(path: &Path, before: u64, cut: u16) {
    let after = std::fs::metadata(path).unwrap().len();
    if after > before {
        let at = before + u64::from(cut) % (after - before);
        let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        f.set_len(at).unwrap();
    }
}

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------- sessions

#[derive(Clone, Debug, Default)]
struct SessionModel {
    /// sid -> (key, plan, stage, evidence of the last transition)
    sessions: BTreeMap<u8, (u8, u8, SessionStage, Option<u8>)>,
    keys: BTreeMap<u8, u8>,
}

#[derive(Clone, Debug)]
enum SessionOp {
    Create { s: u8, k: u8, plan: u8 },
    Transition { s: u8, stage: SessionStage, ev: u8 },
    Reopen,
    Crash(Box<SessionOp>, u16),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SessionOutcome {
    Created,
    Existing,
    Applied,
    NoOp,
    Refused(&'static str),
}

impl SessionModel {
    fn step(&mut self, op: &SessionOp) -> Option<SessionOutcome> {
        use SessionOutcome::*;
        Some(match op {
            SessionOp::Create { s, k, plan } => {
                if let Some(owner) = self.keys.get(k) {
                    let (_, p, _, _) = self.sessions[owner];
                    if owner == s && p == *plan {
                        Existing
                    } else {
                        Refused("session_conflict")
                    }
                } else if self.sessions.contains_key(s) {
                    Refused("session_conflict")
                } else {
                    self.keys.insert(*k, *s);
                    self.sessions
                        .insert(*s, (*k, *plan, SessionStage::Created, None));
                    Created
                }
            }
            SessionOp::Transition { s, stage, ev } => match self.sessions.get_mut(s) {
                None => Refused("store_session_not_found"),
                Some(e) if e.2 == *stage && e.3.is_some() => {
                    if e.3 == Some(*ev) {
                        NoOp
                    } else {
                        Refused("store_transition_conflict")
                    }
                }
                Some(e) if e.2.can_transition(*stage) => {
                    e.2 = *stage;
                    e.3 = Some(*ev);
                    Applied
                }
                Some(_) => Refused("store_illegal_transition"),
            },
            SessionOp::Reopen => return None,
            SessionOp::Crash(..) => return None,
        })
    }
}

fn plan_bytes(p: u8) -> Vec<u8> {
    format!(r#"{{"plan":{p}}}"#).into_bytes()
}
fn evidence(e: u8) -> Vec<u8> {
    format!(r#"{{"ev":{e}}}"#).into_bytes()
}

fn session_op() -> impl Strategy<Value = SessionOp> {
    prop_oneof![
        4 => (0..4u8, 0..4u8, 0..2u8).prop_map(|(s, k, plan)| SessionOp::Create { s, k, plan }),
        6 => (0..4u8, 0..7usize, 0..2u8).prop_map(|(s, i, ev)| SessionOp::Transition {
            s,
            stage: SessionStage::ALL[i],
            ev
        }),
    ]
}

impl ReferenceStateMachine for SessionModel {
    type State = SessionModel;
    type Transition = SessionOp;

    fn init_state() -> BoxedStrategy<Self::State> {
        Just(SessionModel::default()).boxed()
    }

    fn transitions(_: &Self::State) -> BoxedStrategy<Self::Transition> {
        prop_oneof![
            8 => session_op(),
            1 => Just(SessionOp::Reopen),
            1 => (session_op(), any::<u16>()).prop_map(|(op, cut)| SessionOp::Crash(Box::new(op), cut)),
        ]
        .boxed()
    }

    fn apply(mut state: Self::State, op: &Self::Transition) -> Self::State {
        state.step(op);
        state
    }
}

struct SessionSut {
    _dir: tempfile::TempDir,
    path: PathBuf,
    store: SessionStore,
    model: SessionModel,
}

fn outcome_code<T>(r: &Result<T, JournalError>) -> Option<&'static str> {
    r.as_ref().err().map(|e| e.code().as_str())
}

impl SessionSut {
    fn run(&mut self, op: &SessionOp) -> Option<SessionOutcome> {
        match op {
            SessionOp::Create { s, k, plan } => {
                let (s, k, p) = (
                    sid(&format!("s{s}")),
                    ikey(&format!("k{k}")),
                    plan_bytes(*plan),
                );
                let r = self.store.create_session(new_session(&s, &k, &p));
                Some(match r {
                    Ok(Creation::Created(_)) => SessionOutcome::Created,
                    Ok(Creation::Existing(_)) => SessionOutcome::Existing,
                    Err(e) => SessionOutcome::Refused(e.code().as_str()),
                })
            }
            SessionOp::Transition { s, stage, ev } => {
                let r = self
                    .store
                    .transition(&sid(&format!("s{s}")), *stage, &evidence(*ev));
                Some(match (&r, outcome_code(&r)) {
                    (Ok(t), _) if t.appended => SessionOutcome::Applied,
                    (Ok(_), _) => SessionOutcome::NoOp,
                    (Err(_), Some(c)) => SessionOutcome::Refused(c),
                    (Err(_), None) => unreachable!(),
                })
            }
            SessionOp::Reopen => {
                self.reopen();
                None
            }
            SessionOp::Crash(inner, cut) => {
                let before = self.store.journal().len_bytes();
                let _ = self.run(inner);
                self.reopen_after(|p| cut_inside_last_append(p, before, *cut));
                None
            }
        }
    }

    fn reopen(&mut self) {
        self.reopen_after(|_| {});
    }

    fn reopen_after(&mut self, f: impl FnOnce(&Path)) {
        let placeholder = tempdir();
        let tmp = SessionStore::create(&placeholder.path().join("x")).unwrap();
        let _no_spawn = no_spawn();
        drop(std::mem::replace(&mut self.store, tmp));
        f(&self.path);
        self.store = SessionStore::open(&self.path, None).unwrap().0;
    }
}

impl StateMachineTest for SessionSut {
    type SystemUnderTest = SessionSut;
    type Reference = SessionModel;

    fn init_test(_: &SessionModel) -> SessionSut {
        let dir = tempdir();
        let path = dir.path().join("sessions");
        let store = SessionStore::create(&path).unwrap();
        SessionSut {
            _dir: dir,
            path,
            store,
            model: SessionModel::default(),
        }
    }

    fn apply(mut sut: SessionSut, after: &SessionModel, op: SessionOp) -> SessionSut {
        let want = sut.model.step(&op);
        let got = sut.run(&op);
        assert_eq!(got, want, "{op:?}");
        sut.model = after.clone();
        sut
    }

    fn check_invariants(sut: &SessionSut, model: &SessionModel) {
        assert_eq!(sut.store.index().len(), model.sessions.len());
        for (s, (k, plan, stage, ev)) in &model.sessions {
            let r = sut.store.get(&sid(&format!("s{s}"))).expect("session");
            assert_eq!(r.stage(), *stage);
            assert_eq!(r.plan(), plan_bytes(*plan));
            assert_eq!(r.idempotency_key().as_str(), format!("k{k}"));
            assert_eq!(
                r.evidence(),
                ev.map(evidence).unwrap_or_default().as_slice()
            );
            let by_key = sut.store.by_idempotency_key(&ikey(&format!("k{k}")));
            assert_eq!(by_key, Some(r));
        }
    }
}

// ---------------------------------------------------------------- receipts

#[derive(Clone, Debug)]
struct ReceiptModel {
    /// Body ids of every receipt ever appended; seq = anchor + index + 1.
    bodies: Vec<u8>,
    outstanding: BTreeSet<u8>,
    base: u64,
    acked: u64,
    delivered: Option<u64>,
}

#[derive(Clone, Debug)]
enum ReceiptOp {
    Reserve(u8),
    Spend(u8, u8),
    Release(u8),
    Page { skip: u8, max: u8 },
    Ack,
    AckWrong,
    Compact,
    Reopen,
    Crash(Box<ReceiptOp>, u16),
}

impl ReceiptModel {
    fn head(&self) -> u64 {
        anchor().seq + self.bodies.len() as u64
    }

    fn page_range(&self, skip: u8, max: u8) -> (u64, u64) {
        let after = self.base + u64::from(skip) % (self.head() - self.base + 1);
        let end = (after + u64::from(max)).min(self.head());
        (after, end)
    }

    /// Returns the expected error code (None = success).
    fn step(&mut self, op: &ReceiptOp) -> Option<&'static str> {
        match op {
            ReceiptOp::Reserve(s) => {
                if !self.outstanding.insert(*s) {
                    return Some("receipt_reservation_exists");
                }
            }
            ReceiptOp::Spend(s, b) => {
                if !self.outstanding.remove(s) {
                    return Some("receipt_reservation_unknown");
                }
                self.bodies.push(*b);
            }
            ReceiptOp::Release(s) => {
                if !self.outstanding.remove(s) {
                    return Some("receipt_reservation_unknown");
                }
            }
            ReceiptOp::Page { skip, max } => {
                self.delivered = Some(self.page_range(*skip, *max).1);
            }
            ReceiptOp::Ack => match self.delivered {
                Some(d) if d >= self.acked => self.acked = d,
                _ => return Some("receipt_ack_mismatch"),
            },
            ReceiptOp::AckWrong => return Some("receipt_ack_mismatch"),
            ReceiptOp::Compact => self.base = self.acked,
            ReceiptOp::Reopen | ReceiptOp::Crash(..) => self.delivered = None,
        }
        None
    }
}

fn receipt_op() -> impl Strategy<Value = ReceiptOp> {
    prop_oneof![
        3 => (0..4u8).prop_map(ReceiptOp::Reserve),
        3 => (0..4u8, any::<u8>()).prop_map(|(s, b)| ReceiptOp::Spend(s, b)),
        1 => (0..4u8).prop_map(ReceiptOp::Release),
    ]
}

impl ReferenceStateMachine for ReceiptModel {
    type State = ReceiptModel;
    type Transition = ReceiptOp;

    fn init_state() -> BoxedStrategy<Self::State> {
        Just(ReceiptModel {
            bodies: Vec::new(),
            outstanding: BTreeSet::new(),
            base: anchor().seq,
            acked: anchor().seq,
            delivered: None,
        })
        .boxed()
    }

    fn transitions(state: &Self::State) -> BoxedStrategy<Self::Transition> {
        // Mostly spend reservations that are held, so receipts accumulate.
        let held: Vec<u8> = state.outstanding.iter().copied().collect();
        let spend_held = if held.is_empty() {
            (0..4u8, any::<u8>())
                .prop_map(|(s, b)| ReceiptOp::Spend(s, b))
                .boxed()
        } else {
            (proptest::sample::select(held), any::<u8>())
                .prop_map(|(s, b)| ReceiptOp::Spend(s, b))
                .boxed()
        };
        prop_oneof![
            7 => receipt_op(),
            5 => spend_held,
            2 => (any::<u8>(), 1..5u8).prop_map(|(skip, max)| ReceiptOp::Page { skip, max }),
            2 => Just(ReceiptOp::Ack),
            1 => Just(ReceiptOp::AckWrong),
            1 => Just(ReceiptOp::Compact),
            1 => Just(ReceiptOp::Reopen),
            1 => (receipt_op(), any::<u16>()).prop_map(|(op, cut)| ReceiptOp::Crash(Box::new(op), cut)),
        ]
        .boxed()
    }

    fn apply(mut state: Self::State, op: &Self::Transition) -> Self::State {
        state.step(op);
        state
    }
}

struct ReceiptSut {
    _dir: tempfile::TempDir,
    path: PathBuf,
    journal: ReceiptJournal,
    last_page: Option<ReceiptHead>,
    model: ReceiptModel,
}

impl ReceiptSut {
    fn run(&mut self, op: &ReceiptOp) -> Option<&'static str> {
        let code = |r: Result<(), JournalError>| r.err().map(|e| e.code().as_str());
        let s = |n: &u8| sid(&format!("s{n}"));
        match op {
            ReceiptOp::Reserve(n) => code(self.journal.reserve(&s(n)).map(|_| ())),
            ReceiptOp::Spend(n, b) => match self.journal.held_reservation(&s(n)) {
                None => Some(jc::RECEIPT_RESERVATION_UNKNOWN.as_str()),
                Some(r) => code(
                    self.journal
                        .append_receipt(&r, ReceiptKind::ResourceV1, &body(u64::from(*b)))
                        .map(|_| ()),
                ),
            },
            ReceiptOp::Release(n) => match self.journal.held_reservation(&s(n)) {
                None => Some(jc::RECEIPT_RESERVATION_UNKNOWN.as_str()),
                Some(r) => code(self.journal.release(r)),
            },
            ReceiptOp::Page { skip, max } => {
                let (after, end) = self.model.page_range(*skip, *max);
                let page = self
                    .journal
                    .page(after, usize::from(*max), 1 << 20)
                    .unwrap();
                assert_eq!(page.head.seq, end);
                assert_eq!(
                    page.receipts.iter().map(|r| r.seq).collect::<Vec<_>>(),
                    (after + 1..=end).collect::<Vec<_>>()
                );
                self.last_page = Some(page.head);
                None
            }
            ReceiptOp::Ack => match self.last_page {
                Some(h) => code(self.journal.ack(&h)),
                None => {
                    let h = self.journal.head();
                    code(self.journal.ack(&h))
                }
            },
            ReceiptOp::AckWrong => {
                let mut h = self.last_page.unwrap_or(self.journal.head());
                h.chain[0] ^= 0x80;
                code(self.journal.ack(&h))
            }
            ReceiptOp::Compact => code(self.journal.compact().map(|_| ())),
            ReceiptOp::Reopen => {
                self.reopen_after(|_| {});
                None
            }
            ReceiptOp::Crash(inner, cut) => {
                // The anchor file is rewritten only after the append is
                // durable, so a crash inside the append finds the anchor
                // from before it.
                let before = self.journal.journal().len_bytes();
                let anchor_file = self.path.with_file_name("receipts.anchor");
                let anchor_before = std::fs::read(&anchor_file).unwrap();
                let _ = self.run(inner);
                self.reopen_after(|p| {
                    cut_inside_last_append(p, before, *cut);
                    std::fs::write(&anchor_file, &anchor_before).unwrap();
                });
                None
            }
        }
    }

    fn reopen_after(&mut self, f: impl FnOnce(&Path)) {
        let placeholder = tempdir();
        let tmp = ReceiptJournal::create(
            &placeholder.path().join("x"),
            key(),
            &anchor(),
            ReceiptConfig::default(),
        )
        .unwrap();
        let _no_spawn = no_spawn();
        drop(std::mem::replace(&mut self.journal, tmp));
        f(&self.path);
        self.journal = ReceiptJournal::open(&self.path, key(), &anchor(), ReceiptConfig::default())
            .unwrap()
            .0;
        self.last_page = None;
    }
}

impl StateMachineTest for ReceiptSut {
    type SystemUnderTest = ReceiptSut;
    type Reference = ReceiptModel;

    fn init_test(model: &ReceiptModel) -> ReceiptSut {
        let dir = tempdir();
        let path = dir.path().join("receipts");
        let journal =
            ReceiptJournal::create(&path, key(), &anchor(), ReceiptConfig::default()).unwrap();
        ReceiptSut {
            _dir: dir,
            path,
            journal,
            last_page: None,
            model: model.clone(),
        }
    }

    fn apply(mut sut: ReceiptSut, after: &ReceiptModel, op: ReceiptOp) -> ReceiptSut {
        let want = sut.model.step(&op);
        let got = sut.run(&op);
        assert_eq!(got, want, "{op:?}");
        sut.model = after.clone();
        sut
    }

    fn check_invariants(sut: &ReceiptSut, model: &ReceiptModel) {
        let j = &sut.journal;
        assert_eq!(j.head().seq, model.head());
        assert_eq!(j.base().seq, model.base);
        assert_eq!(j.acked().map_or(anchor().seq, |h| h.seq), model.acked);
        let kept: Vec<_> = j.receipts().iter().map(|r| r.seq).collect();
        assert_eq!(kept, (model.base + 1..=model.head()).collect::<Vec<_>>());
        for r in j.receipts() {
            let idx = (r.seq - anchor().seq - 1) as usize;
            let b = body(u64::from(model.bodies[idx]));
            let env = std::str::from_utf8(&r.envelope).unwrap();
            assert!(env.contains(std::str::from_utf8(&b).unwrap()));
        }
        let held: BTreeSet<u8> = j
            .outstanding()
            .map(|s| s.as_str()[1..].parse().unwrap())
            .collect();
        assert_eq!(held, model.outstanding);
    }
}

prop_state_machine! {
    #![proptest_config(config())]

    #[test]
    fn session_store_matches_its_model(sequential 1..40 => SessionSut);

    #[test]
    fn receipt_journal_matches_its_model(sequential 1..60 => ReceiptSut);
}
