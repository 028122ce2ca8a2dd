//! A model-based test (proptest-state-machine) of the anchored session
//! store with compaction: random creations, transitions, compactions
//! (carrying random nonces at a moving clock) and reopens against a small
//! model. After every step the store's replay — every session's stage,
//! plan and transitions byte for byte, lookups by key, the carried
//! nonces — must equal the model; compaction forgets exactly the terminal
//! sessions (their ids and keys become free again).

use crate::common::{key, no_spawn, tempdir};
use crate::sessions::{key as ikey, new_session, sid};
use glove_journal::anchor_file::{AnchorFile, STORE_ANCHOR_DOMAIN};
use glove_journal::session::Creation;
use glove_journal::testing::StoreWriter;
use glove_journal::SessionStore;
use glove_types::stage::SessionStage;
use proptest::prelude::*;
use proptest_state_machine::{prop_state_machine, ReferenceStateMachine, StateMachineTest};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A session in the model: key, plan, transitions as (stage, evidence).
type ModelSession = (u8, u8, Vec<(SessionStage, u8)>);

#[derive(Clone, Debug, Default)]
struct Model {
    sessions: BTreeMap<u8, ModelSession>,
    keys: BTreeMap<u8, u8>,
    /// Carried nonces: nonce byte -> expiry.
    nonces: BTreeMap<u8, u64>,
    now: u64,
    generation: u64,
}

#[derive(Clone, Debug)]
enum Op {
    Create { s: u8, k: u8, plan: u8 },
    Transition { s: u8, stage: SessionStage, ev: u8 },
    Compact { carry: Vec<(u8, u8)>, advance: u8 },
    Reopen,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Created,
    Existing,
    Applied,
    NoOp,
    Refused(&'static str),
    Compacted { kept: u64, dropped: u64 },
    Reopened,
}

fn stage_of(t: &[(SessionStage, u8)]) -> SessionStage {
    t.last().map_or(SessionStage::Created, |(s, _)| *s)
}

impl Model {
    fn step(&mut self, op: &Op) -> Outcome {
        use Outcome::*;
        match op {
            Op::Create { s, k, plan } => {
                if let Some(owner) = self.keys.get(k) {
                    let (_, p, _) = &self.sessions[owner];
                    if owner == s && p == plan {
                        Existing
                    } else {
                        Refused("session_conflict")
                    }
                } else if self.sessions.contains_key(s) {
                    Refused("session_conflict")
                } else {
                    self.keys.insert(*k, *s);
                    self.sessions.insert(*s, (*k, *plan, Vec::new()));
                    Created
                }
            }
            Op::Transition { s, stage, ev } => match self.sessions.get_mut(s) {
                None => Refused("store_session_not_found"),
                Some((_, _, t)) => {
                    let cur = stage_of(t);
                    if !t.is_empty() && cur == *stage {
                        if t.last().map(|(_, e)| e) == Some(ev) {
                            NoOp
                        } else {
                            Refused("store_transition_conflict")
                        }
                    } else if cur.can_transition(*stage) {
                        t.push((*stage, *ev));
                        Applied
                    } else {
                        Refused("store_illegal_transition")
                    }
                }
            },
            Op::Compact { carry, advance } => {
                self.now += u64::from(*advance);
                let now = self.now;
                for (n, e) in carry {
                    let e = u64::from(*e);
                    let cur = self.nonces.entry(*n).or_insert(e);
                    *cur = (*cur).max(e);
                }
                self.nonces.retain(|_, e| *e > now);
                let dead: Vec<u8> = self
                    .sessions
                    .iter()
                    .filter(|(_, (_, _, t))| stage_of(t).is_terminal())
                    .map(|(s, _)| *s)
                    .collect();
                for s in &dead {
                    if let Some((k, _, _)) = self.sessions.remove(s) {
                        self.keys.remove(&k);
                    }
                }
                self.generation += 1;
                Compacted {
                    kept: self.sessions.len() as u64,
                    dropped: dead.len() as u64,
                }
            }
            Op::Reopen => Reopened,
        }
    }
}

fn plan_bytes(p: u8) -> Vec<u8> {
    format!(r#"{{"plan":{p}}}"#).into_bytes()
}
fn evidence(e: u8) -> Vec<u8> {
    format!(r#"{{"ev":{e}}}"#).into_bytes()
}
fn nonce(n: u8) -> [u8; 16] {
    [n; 16]
}

impl ReferenceStateMachine for Model {
    type State = Model;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<Self::State> {
        Just(Model::default()).boxed()
    }

    fn transitions(_: &Self::State) -> BoxedStrategy<Self::Transition> {
        prop_oneof![
            4 => (0..6u8, 0..6u8, 0..2u8).prop_map(|(s, k, plan)| Op::Create { s, k, plan }),
            7 => (0..6u8, 0..7usize, 0..2u8).prop_map(|(s, i, ev)| Op::Transition {
                s,
                stage: SessionStage::ALL[i],
                ev
            }),
            2 => (proptest::collection::vec((0..8u8, any::<u8>()), 0..4), any::<u8>())
                .prop_map(|(carry, advance)| Op::Compact { carry, advance: advance % 64 }),
            1 => Just(Op::Reopen),
        ]
        .boxed()
    }

    fn apply(mut state: Self::State, op: &Self::Transition) -> Self::State {
        state.step(op);
        state
    }
}

struct Sut {
    _dir: tempfile::TempDir,
    path: PathBuf,
    store: SessionStore,
    model: Model,
}

fn anchored(p: &Path) -> SessionStore {
    let file = AnchorFile::beside(p, key(), STORE_ANCHOR_DOMAIN).unwrap();
    SessionStore::open_anchored(p, file).unwrap().0
}

impl Sut {
    fn run(&mut self, op: &Op) -> Outcome {
        let code = |e: glove_journal::JournalError| Outcome::Refused(e.code().as_str());
        match op {
            Op::Create { s, k, plan } => {
                let (s, k, p) = (
                    sid(&format!("s{s}")),
                    ikey(&format!("k{k}")),
                    plan_bytes(*plan),
                );
                match self.store.create_session(new_session(&s, &k, &p)) {
                    Ok(Creation::Created(_)) => Outcome::Created,
                    Ok(Creation::Existing(_)) => Outcome::Existing,
                    Err(e) => code(e),
                }
            }
            Op::Transition { s, stage, ev } => {
                match self
                    .store
                    .transition(&sid(&format!("s{s}")), *stage, &evidence(*ev))
                {
                    Ok(t) if t.appended => Outcome::Applied,
                    Ok(_) => Outcome::NoOp,
                    Err(e) => code(e),
                }
            }
            Op::Compact { carry, .. } => {
                // `apply` stepped the model first: its clock has advanced.
                let now = self.model.now;
                let carry: Vec<([u8; 16], u64)> = carry
                    .iter()
                    .map(|(n, e)| (nonce(*n), u64::from(*e)))
                    .collect();
                let r = self.store.compact(&carry, now).unwrap();
                Outcome::Compacted {
                    kept: r.sessions_kept,
                    dropped: r.sessions_dropped,
                }
            }
            Op::Reopen => {
                let placeholder = tempdir();
                let tmp = SessionStore::create(&placeholder.path().join("x")).unwrap();
                let _g = no_spawn();
                drop(std::mem::replace(&mut self.store, tmp));
                self.store = anchored(&self.path);
                Outcome::Reopened
            }
        }
    }
}

impl StateMachineTest for Sut {
    type SystemUnderTest = Sut;
    type Reference = Model;

    fn init_test(_: &Model) -> Sut {
        let dir = tempdir();
        let path = dir.path().join("sessions");
        let file = AnchorFile::beside(&path, key(), STORE_ANCHOR_DOMAIN).unwrap();
        let store = SessionStore::create_anchored(&path, file).unwrap();
        Sut {
            _dir: dir,
            path,
            store,
            model: Model::default(),
        }
    }

    fn apply(mut sut: Sut, after: &Model, op: Op) -> Sut {
        let want = sut.model.step(&op);
        let got = sut.run(&op);
        assert_eq!(got, want, "{op:?}");
        sut.model = after.clone();
        sut
    }

    fn check_invariants(sut: &Sut, model: &Model) {
        let st = &sut.store;
        assert_eq!(st.index().len(), model.sessions.len());
        assert_eq!(st.generation(), model.generation);
        for (s, (k, plan, t)) in &model.sessions {
            let id = sid(&format!("s{s}"));
            let r = st.get(&id).expect("session");
            assert_eq!(r.plan(), plan_bytes(*plan));
            assert_eq!(r.stage(), stage_of(t));
            assert_eq!(r.idempotency_key().as_str(), format!("k{k}"));
            assert_eq!(st.by_idempotency_key(&ikey(&format!("k{k}"))), Some(r));
            let got: Vec<(SessionStage, Vec<u8>)> = st
                .transitions(&id)
                .unwrap()
                .iter()
                .map(|t| (t.stage(), t.evidence().to_vec()))
                .collect();
            let want: Vec<(SessionStage, Vec<u8>)> =
                t.iter().map(|(s, e)| (*s, evidence(*e))).collect();
            assert_eq!(got, want);
        }
        let nonces: Vec<([u8; 16], u64)> = st
            .carried_nonces()
            .iter()
            .map(|c| (c.nonce, c.expires_at_ms))
            .collect();
        let want: Vec<([u8; 16], u64)> =
            model.nonces.iter().map(|(n, e)| (nonce(*n), *e)).collect();
        assert_eq!(nonces, want);
        // The accounting agrees with a count of what the model holds.
        let live: u64 = model
            .sessions
            .values()
            .filter(|(_, _, t)| !stage_of(t).is_terminal())
            .map(|(_, _, t)| 1 + t.len() as u64)
            .sum();
        assert_eq!(st.index().live().records, live);
        assert_eq!(
            st.used().records,
            live + st.reclaimable().records + u64::from(model.generation > 0)
        );
    }
}

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(32);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

prop_state_machine! {
    #![proptest_config(config())]

    #[test]
    fn session_store_with_compaction_matches_the_model(sequential 1..40 => Sut);
}
