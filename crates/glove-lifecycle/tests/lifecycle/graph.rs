//! The typestates agree with the transition tables in `glove_types::stage`:
//! every typed transition is a legal edge, and every legal edge has one.
//!
//! The edge sets below are collected by *calling* each typed transition
//! method (the only ones the crate exposes), reading the stage before and
//! after; the compile-fail tests show that no other transition compiles.

use crate::support::*;
use glove_lifecycle::apply::{GrantId, Reservation, SingleUseRegistry, TransactionId, Txn};
use glove_lifecycle::memory::{MemoryLog, MemoryReceipts};
use glove_lifecycle::*;
use glove_types::codes::lifecycle as c;
use glove_types::stage::{ApplyState, SessionStage};
use glove_types::Sha256Digest;
use std::collections::BTreeSet;

fn fail_edge<S: Live>(
    w: &mut World,
    s: ParkedSession<S>,
    edges: &mut BTreeSet<(SessionStage, SessionStage)>,
) {
    let r = w.with_receipt(&s.id().clone(), 1);
    s.enter(|s| {
        let from = s.stage();
        let p = s
            .log_fail(c::LIFECYCLE_WRONG_STAGE, r, &w.receipts, &mut w.log)
            .unwrap();
        edges.insert((from, s.fail(p).unwrap().stage()));
    });
}

#[test]
fn session_typestate_matches_the_table() {
    let mut w = World::new();
    let mut edges = BTreeSet::new();
    let id = sid("g-main");
    let v = w.verified(&id, &digests(), 9);
    let r = w.with_receipt(&id, 1);
    w.created(&id).enter(|s| {
        let p = s.log_prepare(&mut w.log).unwrap();
        let s = {
            let from = s.stage();
            let n = s.prepare(p).unwrap();
            edges.insert((from, n.stage()));
            n
        };
        let p = s.log_start(binding(1), v, &mut w.log).unwrap();
        let s = {
            let from = s.stage();
            let n = s.start(p).unwrap();
            edges.insert((from, n.stage()));
            n
        };
        let p = s.log_run(identity(7), &mut w.log).unwrap();
        let s = {
            let from = s.stage();
            let n = s.run(p).unwrap();
            edges.insert((from, n.stage()));
            n
        };
        let p = s.log_stop(StopReason::Requested, &mut w.log).unwrap();
        let s = {
            let from = s.stage();
            let n = s.stop(p).unwrap();
            edges.insert((from, n.stage()));
            n
        };
        let p = s.log_exit(r, &w.receipts, &mut w.log).unwrap();
        let from = s.stage();
        let n = s.exit(p).unwrap();
        edges.insert((from, n.stage()));
    });

    let s = w.created(&sid("g-f1"));
    fail_edge(&mut w, s, &mut edges);
    let s = w.preparing(&sid("g-f2"));
    fail_edge(&mut w, s, &mut edges);
    let s = w.starting(&sid("g-f3"));
    fail_edge(&mut w, s, &mut edges);
    let s = w.running(&sid("g-f4"));
    fail_edge(&mut w, s, &mut edges);
    let s = w.stopping(&sid("g-f5"));
    fail_edge(&mut w, s, &mut edges);

    let table: BTreeSet<_> = SessionStage::ALL
        .into_iter()
        .flat_map(|a| SessionStage::ALL.into_iter().map(move |b| (a, b)))
        .filter(|(a, b)| a.can_transition(*b))
        .collect();
    assert_eq!(edges, table);
}

#[test]
fn apply_typestate_matches_the_table() {
    let mut log = MemoryLog::new();
    let mut receipts = MemoryReceipts::new();
    let mut registry = SingleUseRegistry::new(16);
    let mut edges = BTreeSet::new();
    let mut n = 0u8;
    let mut reserve = |log: &mut MemoryLog| {
        n += 1;
        let id = TransactionId::new(format!("g-t{n}")).unwrap();
        let r = Reservation {
            grant_id: GrantId::new(format!("g-grant{n}")).unwrap(),
            authorization_digest: Sha256Digest::of(&[n, 1]),
            manifest_digest: Sha256Digest::of(&[n, 2]),
            locator_digest: Sha256Digest::of(&[n, 3]),
        };
        with_brand(|b| {
            let p = Txn::log_reserve(b, &id, &r, &mut registry, log).unwrap();
            Txn::reserve(p).unwrap().park()
        })
    };
    macro_rules! step {
        ($t:expr, $proof:expr, $m:ident) => {{
            let from = $t.state();
            let next = $t.$m($proof).unwrap();
            edges.insert((from, next.state()));
            next
        }};
    }
    let cand = Sha256Digest::of(b"c");

    // reserved -> prepared -> committed -> applied
    reserve(&mut log).enter(|t| {
        let p = t.log_prepare(cand, &mut log).unwrap();
        let t = step!(t, p, prepare);
        let p = t.log_commit(&mut log).unwrap();
        let t = step!(t, p, commit);
        receipts.put(Subject::Apply(t.id()), receipt(1));
        let p = t.log_apply(receipt(1), &receipts, &mut log).unwrap();
        step!(t, p, apply);
    });

    // reserved -> failed, reserved -> ambiguous
    reserve(&mut log).enter(|t| {
        receipts.put(Subject::Apply(t.id()), receipt(2));
        let p = t
            .log_fail(c::APPLY_AMBIGUOUS, receipt(2), &receipts, &mut log)
            .unwrap();
        step!(t, p, fail);
    });
    reserve(&mut log).enter(|t| {
        let p = t.log_ambiguous(c::APPLY_AMBIGUOUS, &mut log).unwrap();
        step!(t, p, mark_ambiguous);
    });

    // prepared -> failed, prepared -> ambiguous
    for ambiguous in [false, true] {
        reserve(&mut log).enter(|t| {
            let p = t.log_prepare(cand, &mut log).unwrap();
            let t = t.prepare(p).unwrap();
            if ambiguous {
                let p = t.log_ambiguous(c::APPLY_AMBIGUOUS, &mut log).unwrap();
                step!(t, p, mark_ambiguous);
            } else {
                receipts.put(Subject::Apply(t.id()), receipt(3));
                let p = t
                    .log_fail(c::APPLY_AMBIGUOUS, receipt(3), &receipts, &mut log)
                    .unwrap();
                step!(t, p, fail);
            }
        });
    }

    // committed -> ambiguous
    reserve(&mut log).enter(|t| {
        let p = t.log_prepare(cand, &mut log).unwrap();
        let t = t.prepare(p).unwrap();
        let p = t.log_commit(&mut log).unwrap();
        let t = t.commit(p).unwrap();
        let p = t.log_ambiguous(c::APPLY_AMBIGUOUS, &mut log).unwrap();
        step!(t, p, mark_ambiguous);
    });

    let table: BTreeSet<_> = ApplyState::ALL
        .into_iter()
        .flat_map(|a| ApplyState::ALL.into_iter().map(move |b| (a, b)))
        .filter(|(a, b)| a.can_transition(*b))
        .collect();
    assert_eq!(edges, table);
}
