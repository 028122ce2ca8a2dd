//! Apply transaction: transitions, single use, cleanup, recovery table.

use crate::support::*;
use glove_lifecycle::apply::*;
use glove_lifecycle::memory::{MemoryCleanup, MemoryLog, MemoryReceipts};
use glove_lifecycle::{with_brand, Subject, SubjectKind};
use glove_types::codes::lifecycle as c;
use glove_types::stage::ApplyState;
use glove_types::Sha256Digest;

fn tid(s: &str) -> TransactionId {
    TransactionId::new(s).unwrap()
}

fn reservation(n: u8) -> Reservation {
    Reservation {
        grant_id: GrantId::new(format!("grant-{n}")).unwrap(),
        authorization_digest: Sha256Digest::of(&[n, 1]),
        manifest_digest: Sha256Digest::of(&[n, 2]),
        locator_digest: Sha256Digest::of(&[n, 3]),
    }
}

struct A {
    log: MemoryLog,
    receipts: MemoryReceipts,
    registry: SingleUseRegistry,
}

impl A {
    fn new() -> Self {
        Self {
            log: MemoryLog::new(),
            receipts: MemoryReceipts::new(),
            registry: SingleUseRegistry::new(16),
        }
    }
    fn reserved(&mut self, id: &str, n: u8) -> ParkedTxn<Reserved> {
        with_brand(|b| {
            let (registry, log) = (&mut self.registry, &mut self.log);
            let p = Txn::log_reserve(b, &tid(id), &reservation(n), registry, log).unwrap();
            Txn::reserve(p).unwrap().park()
        })
    }
    fn prepared(&mut self, id: &str, n: u8) -> ParkedTxn<Prepared> {
        self.reserved(id, n).enter(|t| {
            let p = t
                .log_prepare(Sha256Digest::of(b"candidate"), &mut self.log)
                .unwrap();
            t.prepare(p).unwrap().park()
        })
    }
    fn committed(&mut self, id: &str, n: u8) -> ParkedTxn<Committed> {
        self.prepared(id, n).enter(|t| {
            let p = t.log_commit(&mut self.log).unwrap();
            t.commit(p).unwrap().park()
        })
    }
    fn receipt_for(&mut self, id: &TransactionId, n: u64) -> glove_lifecycle::TerminalReceiptRef {
        let r = receipt(n);
        self.receipts.put(Subject::Apply(id), r);
        r
    }
}

#[test]
fn applied_needs_its_receipt_and_cleans_up_once() {
    let mut a = A::new();
    let t = a.committed("t-1", 1);
    let r = t.enter(|t| {
        let e = t
            .log_apply(receipt(7), &a.receipts, &mut a.log)
            .unwrap_err();
        assert_eq!(e.code(), c::LIFECYCLE_RECEIPT_MISSING);
        let r = a.receipt_for(t.id(), 7);
        let p = t.log_apply(r, &a.receipts, &mut a.log).unwrap();
        let t = t.apply(p).unwrap();
        assert_eq!(t.state(), ApplyState::Applied);
        t.park()
    });
    let mut t = r;

    let mut cleanup = MemoryCleanup {
        fail_next: true,
        ..MemoryCleanup::default()
    };
    assert_eq!(
        t.cleanup_baseline(&mut cleanup).unwrap_err().code(),
        c::APPLY_CLEANUP_FAILED
    );
    assert!(!t.state_data().baseline_cleaned());
    t.cleanup_baseline(&mut cleanup).unwrap();
    t.cleanup_baseline(&mut cleanup).unwrap();
    assert_eq!(cleanup.calls, 2);

    // After a restart the applied transaction is recovered and cleanup runs
    // again (the port treats "already gone" as success).
    let recs = a.log.records_of(Subject::Apply(&tid("t-1")));
    let findings = DescriptorFindings {
        locator: LocatorCheck::Unavailable,
        source: TreeFinding::Unrecognized,
        staging: TreeFinding::Unrecognized,
    };
    let any = replay_apply(&recs).unwrap();
    let RecoveredApply::Applied(mut t) = any.classify(&findings, &mut a.log).unwrap() else {
        panic!("applied stays applied");
    };
    t.cleanup_baseline(&mut cleanup).unwrap();
    assert_eq!(cleanup.calls, 3);
}

#[test]
fn failed_from_reserved_and_prepared() {
    let mut a = A::new();
    let t = a.reserved("t-r", 1);
    let r = a.receipt_for(t.id(), 1);
    t.enter(|t| {
        let p = t
            .log_fail(c::APPLY_AMBIGUOUS, r, &a.receipts, &mut a.log)
            .unwrap();
        let f = t.fail(p).unwrap();
        assert_eq!(f.state_data().failed_in(), ApplyState::Reserved);
    });

    let t = a.prepared("t-p", 2);
    let r = a.receipt_for(t.id(), 2);
    t.enter(|t| {
        let p = t
            .log_fail(c::APPLY_AMBIGUOUS, r, &a.receipts, &mut a.log)
            .unwrap();
        let f = t.fail(p).unwrap();
        assert_eq!(f.state_data().failed_in(), ApplyState::Prepared);
    });
}

#[test]
fn single_use_values_fail_closed_on_reuse() {
    let mut a = A::new();
    drop(a.reserved("t-1", 1));
    // Byte-identical repeat of the same reservation: idempotent.
    with_brand(|b| {
        let again =
            Txn::log_reserve(b, &tid("t-1"), &reservation(1), &mut a.registry, &mut a.log).unwrap();
        assert_eq!(again.seq(), 0);
    });
    assert_eq!(a.registry.len(), 1);

    let mut reuse = |r: Reservation| {
        with_brand(|b| Txn::log_reserve(b, &tid("t-2"), &r, &mut a.registry, &mut a.log).map(drop))
            .unwrap_err()
            .code()
    };
    let mut r = reservation(2);
    r.grant_id = reservation(1).grant_id;
    assert_eq!(reuse(r), c::APPLY_GRANT_REUSED);
    let mut r = reservation(2);
    r.authorization_digest = reservation(1).authorization_digest;
    assert_eq!(reuse(r), c::APPLY_AUTHORIZATION_REUSED);
    let mut r = reservation(2);
    r.manifest_digest = reservation(1).manifest_digest;
    assert_eq!(reuse(r), c::APPLY_MANIFEST_REUSED);
    // All-or-nothing: the refused attempts consumed nothing.
    assert_eq!(a.registry.len(), 1);
    assert!(!a.registry.contains_grant(&reservation(2).grant_id));
    assert_eq!(a.log.len(), 1);

    let mut small = SingleUseRegistry::new(1);
    small.consume(&reservation(1)).unwrap();
    assert_eq!(
        small.consume(&reservation(2)).unwrap_err().code(),
        c::APPLY_REGISTRY_FULL
    );
    // History is never refused for size, but a duplicate in history is.
    small.insert_recovered(&reservation(3)).unwrap();
    assert_eq!(
        small.insert_recovered(&reservation(3)).unwrap_err().code(),
        c::APPLY_GRANT_REUSED
    );
}

#[test]
fn ambiguous_from_every_undecided_state_and_nothing_leaves_it() {
    let mut a = A::new();
    a.reserved("t-a1", 1).enter(|t| {
        let p = t.log_ambiguous(c::APPLY_AMBIGUOUS, &mut a.log).unwrap();
        assert_eq!(t.mark_ambiguous(p).unwrap().state(), ApplyState::Ambiguous);
    });
    a.prepared("t-a2", 2).enter(|t| {
        let p = t.log_ambiguous(c::APPLY_AMBIGUOUS, &mut a.log).unwrap();
        assert_eq!(t.mark_ambiguous(p).unwrap().state(), ApplyState::Ambiguous);
    });
    let t = a.committed("t-a3", 3).enter(|t| {
        let p = t.log_ambiguous(c::APPLY_AMBIGUOUS, &mut a.log).unwrap();
        t.mark_ambiguous(p).unwrap().park()
    });
    assert_eq!(
        t.reason(),
        AmbiguityReason::Recorded {
            code: c::APPLY_AMBIGUOUS
        }
    );
}

#[test]
fn classification_table() {
    use ApplyState as J;
    use Classification as K;
    use TreeFinding as T;
    let ok = LocatorCheck::Verified;
    let amb = |j, s, st| {
        K::Ambiguous(AmbiguityReason::EvidenceConflict {
            journal: j,
            source: s,
            staging: st,
        })
    };
    let rows: Vec<(J, LocatorCheck, T, T, K)> = vec![
        (J::Reserved, ok, T::Baseline, T::Absent, K::Reserved),
        (J::Reserved, ok, T::Baseline, T::Incomplete, K::Reserved),
        (J::Reserved, ok, T::Baseline, T::Candidate, K::Reserved),
        (
            J::Reserved,
            ok,
            T::Candidate,
            T::Baseline,
            amb(J::Reserved, T::Candidate, T::Baseline),
        ),
        (
            J::Reserved,
            ok,
            T::Absent,
            T::Absent,
            amb(J::Reserved, T::Absent, T::Absent),
        ),
        (J::Prepared, ok, T::Baseline, T::Candidate, K::Prepared),
        (
            J::Prepared,
            ok,
            T::Baseline,
            T::Absent,
            amb(J::Prepared, T::Baseline, T::Absent),
        ),
        (
            J::Prepared,
            ok,
            T::Baseline,
            T::Incomplete,
            amb(J::Prepared, T::Baseline, T::Incomplete),
        ),
        (
            J::Prepared,
            ok,
            T::Candidate,
            T::Baseline,
            amb(J::Prepared, T::Candidate, T::Baseline),
        ),
        (J::Committed, ok, T::Candidate, T::Baseline, K::Committed),
        (
            J::Committed,
            ok,
            T::Candidate,
            T::Absent,
            amb(J::Committed, T::Candidate, T::Absent),
        ),
        (
            J::Committed,
            ok,
            T::Baseline,
            T::Candidate,
            amb(J::Committed, T::Baseline, T::Candidate),
        ),
        (
            J::Committed,
            ok,
            T::Unrecognized,
            T::Baseline,
            amb(J::Committed, T::Unrecognized, T::Baseline),
        ),
        (
            J::Prepared,
            LocatorCheck::Mismatch,
            T::Baseline,
            T::Candidate,
            K::Ambiguous(AmbiguityReason::LocatorUnverified),
        ),
        (
            J::Committed,
            LocatorCheck::Unavailable,
            T::Candidate,
            T::Baseline,
            K::Ambiguous(AmbiguityReason::LocatorUnverified),
        ),
    ];
    for (journal, locator, source, staging, want) in rows {
        let f = DescriptorFindings {
            locator,
            source,
            staging,
        };
        assert_eq!(classify(journal, &f), want, "{journal:?} {f:?}");
    }
}

#[test]
fn every_evidence_combination_lands_in_exactly_one_class() {
    let trees = [
        TreeFinding::Absent,
        TreeFinding::Baseline,
        TreeFinding::Candidate,
        TreeFinding::Incomplete,
        TreeFinding::Unrecognized,
    ];
    let locs = [
        LocatorCheck::Verified,
        LocatorCheck::Mismatch,
        LocatorCheck::Unavailable,
    ];
    for journal in [
        ApplyState::Reserved,
        ApplyState::Prepared,
        ApplyState::Committed,
    ] {
        let mut proven = 0;
        for locator in locs {
            for source in trees {
                for staging in trees {
                    let k = classify(
                        journal,
                        &DescriptorFindings {
                            locator,
                            source,
                            staging,
                        },
                    );
                    match k {
                        Classification::Reserved => assert_eq!(journal, ApplyState::Reserved),
                        Classification::Prepared => assert_eq!(journal, ApplyState::Prepared),
                        Classification::Committed => assert_eq!(journal, ApplyState::Committed),
                        Classification::Ambiguous(_) => continue,
                    }
                    assert_eq!(locator, LocatorCheck::Verified);
                    proven += 1;
                }
            }
        }
        // Only the exact descriptor picture proves a state.
        let expected = if journal == ApplyState::Reserved {
            3
        } else {
            1
        };
        assert_eq!(proven, expected, "{journal:?}");
    }
}

#[test]
fn recovery_records_ambiguity_so_it_sticks() {
    let mut a = A::new();
    drop(a.prepared("t-s", 1));
    let id = tid("t-s");
    let conflicting = DescriptorFindings {
        locator: LocatorCheck::Verified,
        source: TreeFinding::Candidate,
        staging: TreeFinding::Baseline,
    };
    let any = replay_apply(&a.log.records_of(Subject::Apply(&id))).unwrap();
    assert_eq!(any.state(), ApplyState::Prepared);
    let RecoveredApply::Ambiguous(t) = any.classify(&conflicting, &mut a.log).unwrap() else {
        panic!("conflicting evidence is ambiguous");
    };
    assert!(matches!(
        t.reason(),
        AmbiguityReason::EvidenceConflict { .. }
    ));
    // Next startup: even a clean picture cannot un-ambiguate it.
    let clean = DescriptorFindings {
        locator: LocatorCheck::Verified,
        source: TreeFinding::Baseline,
        staging: TreeFinding::Candidate,
    };
    let any = replay_apply(&a.log.records_of(Subject::Apply(&id))).unwrap();
    assert_eq!(any.state(), ApplyState::Ambiguous);
    let got = any.classify(&clean, &mut a.log).unwrap();
    assert_eq!(got.state(), ApplyState::Ambiguous);

    // A proven state is handed back typed, and the registry can be rebuilt.
    drop(a.committed("t-c", 2));
    let any = replay_apply(&a.log.records_of(Subject::Apply(&tid("t-c")))).unwrap();
    let mut registry = SingleUseRegistry::new(4);
    registry.insert_recovered(any.reservation()).unwrap();
    let good = DescriptorFindings {
        locator: LocatorCheck::Verified,
        source: TreeFinding::Candidate,
        staging: TreeFinding::Baseline,
    };
    let RecoveredApply::Committed(t) = any.classify(&good, &mut a.log).unwrap() else {
        panic!("proven committed");
    };
    assert_eq!(
        t.state_data().candidate_digest(),
        Sha256Digest::of(b"candidate")
    );
    assert_eq!(a.log.records(SubjectKind::Apply).len(), 2 + 1 + 3);
}
