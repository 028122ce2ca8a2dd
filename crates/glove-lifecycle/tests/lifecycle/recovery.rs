//! Session recovery: decisions for interrupted sessions, strict replay.

use crate::support::*;
use glove_lifecycle::memory::RawRecords;
use glove_lifecycle::*;
use glove_types::codes::lifecycle as c;
use glove_types::stage::SessionStage;
use glove_types::{ErrorCode, Sha256Digest};

#[test]
fn every_stage_at_a_crash_recovers_to_the_right_outcome() {
    let mut w = World::new();
    drop(w.created(&sid("r-created")));
    drop(w.preparing(&sid("r-preparing")));
    drop(w.starting(&sid("r-starting")));
    drop(w.running(&sid("r-running")));
    drop(w.stopping(&sid("r-stopping")));
    let s = w.stopping(&sid("r-exited"));
    let r = w.with_receipt(s.id(), 1);
    s.enter(|s| {
        let p = s.log_exit(r, &w.receipts, &mut w.log).unwrap();
        drop(s.exit(p).unwrap());
    });
    let s = w.running(&sid("r-failed"));
    let r = w.with_receipt(s.id(), 2);
    s.enter(|s| {
        let p = s
            .log_fail(c::LIFECYCLE_WRONG_STAGE, r, &w.receipts, &mut w.log)
            .unwrap();
        drop(s.fail(p).unwrap());
    });

    let report = recover_all(&w.log);
    assert!(report.undecodable.is_empty());
    assert_eq!(report.sessions.len(), 7);
    let table: [(&str, SessionStage, Option<ErrorCode>); 7] = [
        ("r-created", SessionStage::Created, None),
        (
            "r-preparing",
            SessionStage::Preparing,
            Some(c::LIFECYCLE_RECOVERY_PREPARING_INTERRUPTED),
        ),
        (
            "r-starting",
            SessionStage::Starting,
            Some(c::LIFECYCLE_RECOVERY_STARTING_INTERRUPTED),
        ),
        (
            "r-running",
            SessionStage::Running,
            Some(c::LIFECYCLE_RECOVERY_RUNNING_INTERRUPTED),
        ),
        (
            "r-stopping",
            SessionStage::Stopping,
            Some(c::LIFECYCLE_RECOVERY_STOPPING_INTERRUPTED),
        ),
        ("r-exited", SessionStage::Exited, None),
        ("r-failed", SessionStage::Failed, None),
    ];
    for (name, stage, decision) in table {
        let got = report.sessions.get(&sid(name)).unwrap().as_ref().unwrap();
        assert_eq!(got.stage(), stage, "{name}");
        match got {
            Recovered::Interrupted(d) => assert_eq!(Some(d.code()), decision, "{name}"),
            Recovered::Created(_) | Recovered::Exited(_) | Recovered::Failed(_) => {
                assert_eq!(decision, None, "{name}")
            }
        }
    }
    // Every starting record's nonce comes back for the used-nonce set.
    assert_eq!(report.used_nonces.len(), 5);
}

#[test]
fn the_runtime_resolves_a_decision_by_failing_with_its_code() {
    let mut w = World::new();
    let id = sid("r-resolve");
    drop(w.running(&id));
    let Recovered::Interrupted(RecoveryDecision::ReconcileProcess(s)) =
        recover_session(&w.log, &id).unwrap()
    else {
        panic!("a running session must come back as a decision");
    };
    assert_eq!(s.process_identity(), &identity(4242));
    let r = w.with_receipt(&id, 5);
    let code = c::LIFECYCLE_RECOVERY_RUNNING_INTERRUPTED;
    // The recovered session is parked: a fresh brand lets it record the
    // decision.
    s.enter(|s| {
        let p = s.log_fail(code, r, &w.receipts, &mut w.log).unwrap();
        let f = s.fail(p).unwrap();
        assert_eq!(f.failed_in(), SessionStage::Running);
    });
    assert!(matches!(
        recover_session(&w.log, &id).unwrap(),
        Recovered::Failed(_)
    ));
}

#[test]
fn a_stop_whose_receipt_is_durable_can_still_exit() {
    let mut w = World::new();
    let id = sid("r-stop");
    drop(w.stopping(&id));
    let Recovered::Interrupted(d) = recover_session(&w.log, &id).unwrap() else {
        panic!("a stopping session must come back as a decision");
    };
    // Evidence accumulates: the stopping session keeps the identity and the
    // binding, and the decision hands them out without any record read.
    assert_eq!(d.process_identity(), Some(&identity(4242)));
    assert_eq!(d.launch_binding(), Some(binding(1)));
    let RecoveryDecision::FinishStop(s) = d else {
        panic!("a stopping session must come back as FinishStop");
    };
    assert_eq!(s.process_identity(), &identity(4242));
    assert_eq!(s.launch_binding(), binding(1));
    assert_eq!(s.stop_reason(), StopReason::Requested);
    let r = w.with_receipt(&id, 4);
    s.enter(|s| {
        let p = s.log_exit(r, &w.receipts, &mut w.log).unwrap();
        assert!(s.exit(p).is_ok());
    });
}

fn encode(id: &str, seq: u64, prev: Option<Sha256Digest>, entry: SessionEntry) -> Vec<u8> {
    SessionRecord {
        session_id: sid(id),
        seq,
        prev,
        entry,
    }
    .encode()
    .unwrap()
}

fn digest(b: &[u8]) -> Sha256Digest {
    Sha256Digest::of_domain(glove_lifecycle::proof::SESSION_RECORD_DOMAIN, b)
}

#[test]
fn replay_rejects_broken_histories() {
    let mut w = World::new();
    let id = sid("r-bad");
    drop(w.running(&id));
    let recs = w.log.records_of(Subject::Session(&id));
    let code = |r: &[Vec<u8>]| {
        replay_session(&RawRecords(r.to_vec()), &id)
            .unwrap_err()
            .code()
    };

    assert_eq!(code(&[]), c::LIFECYCLE_RECORD_MISSING_CREATION);
    assert_eq!(code(&recs[1..]), c::LIFECYCLE_RECORD_MISSING_CREATION);
    assert_eq!(
        code(&[recs[0].clone(), recs[2].clone()]),
        c::LIFECYCLE_RECORD_SEQUENCE
    );
    assert_eq!(
        code(&[recs[0].clone(), recs[1].clone(), recs[1].clone()]),
        c::LIFECYCLE_RECORD_SEQUENCE
    );
    let mut swapped = recs.clone();
    swapped.swap(1, 2);
    assert_eq!(code(&swapped), c::LIFECYCLE_RECORD_SEQUENCE);

    // A record of another session in this history.
    let other = encode(
        "r-other",
        1,
        Some(digest(&recs[0])),
        SessionEntry::Preparing,
    );
    assert_eq!(code(&[recs[0].clone(), other]), c::LIFECYCLE_RECORD_FOREIGN);

    // A well-chained record along an illegal edge: created -> running.
    let jump = encode(
        "r-bad",
        1,
        Some(digest(&recs[0])),
        SessionEntry::Running {
            identity: identity(1),
        },
    );
    assert_eq!(
        code(&[recs[0].clone(), jump]),
        c::LIFECYCLE_ILLEGAL_TRANSITION
    );

    // A failure record that names a stage other than the one it left.
    let lie = encode(
        "r-bad",
        1,
        Some(digest(&recs[0])),
        SessionEntry::Failed {
            code: c::LIFECYCLE_WRONG_STAGE,
            failed_in: SessionStage::Running,
            receipt: receipt(1),
        },
    );
    assert_eq!(
        code(&[recs[0].clone(), lie]),
        c::LIFECYCLE_ILLEGAL_TRANSITION
    );

    // A flipped byte.
    let mut flipped = recs.clone();
    if let Some(b) = flipped[1].iter_mut().find(|b| **b == b'p') {
        *b = b'q';
    }
    assert_eq!(code(&flipped), c::LIFECYCLE_RECORD_INVALID);

    // recover_all reports undecodable records and refuses the session.
    let mut all = recs.clone();
    all.push(b"{}".to_vec());
    let report = recover_all(&RawRecords(all));
    assert_eq!(report.undecodable.len(), 1);
    assert!(report.sessions.get(&id).unwrap().is_ok());
}

#[test]
fn an_unknown_failure_code_is_refused() {
    let mut w = World::new();
    let id = sid("r-code");
    drop(w.created(&id));
    let recs = w.log.records_of(Subject::Session(&id));
    let good = encode(
        "r-code",
        1,
        Some(digest(&recs[0])),
        SessionEntry::Failed {
            code: c::LIFECYCLE_WRONG_STAGE,
            failed_in: SessionStage::Created,
            receipt: receipt(1),
        },
    );
    let text = String::from_utf8(good)
        .unwrap()
        .replace("lifecycle_wrong_stage", "no_such_code");
    let e = replay_session(&RawRecords(vec![recs[0].clone(), text.into_bytes()]), &id).unwrap_err();
    assert_eq!(e.code(), c::LIFECYCLE_FAILURE_CODE_UNKNOWN);
}

#[test]
fn issue_14_a_session_that_does_not_replay_is_failed_not_skipped() {
    let mut w = World::new();
    let id = sid("r-garbled");
    drop(w.running(&id));
    let subject = Subject::Session(&id);
    let n = w.log.records_of(subject).len() as u64;
    // The running record is garbled: canonical JSON, no lifecycle record.
    w.log
        .tamper(subject, n - 1, br#"{"not":"a record"}"#.to_vec());
    let Err(u) = recover_stored(&w.log, &id, SessionStage::Running) else {
        panic!("a garbled session must not replay");
    };
    // What still decodes is handed out for reconciliation and the receipt.
    assert_eq!(u.launch_binding(), Some(binding(1)));
    assert_eq!(u.process_identity(), None);
    assert_eq!(u.id(), &id);
    assert_eq!(u.code(), c::LIFECYCLE_RECOVERY_REPLAY_FAILED);
    assert_eq!(u.error().code(), c::LIFECYCLE_RECORD_INVALID);
    assert_eq!(u.stored_stage(), SessionStage::Running);
    // Without its durable receipt the failure is refused.
    let r = receipt(7);
    let Err(u2) = recover_stored(&w.log, &id, SessionStage::Running) else {
        unreachable!()
    };
    assert!((*u2).log_fail(r, &w.receipts, &mut w.log).is_err());
    assert_eq!(w.log.records_of(subject).len() as u64, n);
    let r = w.with_receipt(&id, 7);
    (*u).log_fail(r, &w.receipts, &mut w.log).expect("failed");
    let after = w.log.records_of(subject);
    assert_eq!(after.len() as u64, n + 1);
    let last = SessionRecord::decode(after.last().unwrap()).expect("decodes");
    assert_eq!(last.seq, n);
    assert_eq!(
        last.prev,
        Some(Sha256Digest::of_domain(
            "glove.lifecycle.session-record.v1",
            br#"{"not":"a record"}"#
        ))
    );
    match last.entry {
        SessionEntry::Failed {
            code, failed_in, ..
        } => {
            assert_eq!(code, c::LIFECYCLE_RECOVERY_REPLAY_FAILED);
            assert_eq!(failed_in, SessionStage::Running);
        }
        other => panic!("{other:?}"),
    }
    // Held terminal by the store, it is not failed twice.
    let Err(again) = recover_stored(&w.log, &id, SessionStage::Failed) else {
        panic!("still does not replay");
    };
    assert!((*again).log_fail(r, &w.receipts, &mut w.log).is_err());
}

#[test]
fn a_stored_session_that_replays_is_classified() {
    let mut w = World::new();
    let id = sid("r-fine");
    drop(w.running(&id));
    let recs = w.log.records_of(Subject::Session(&id));
    let got = recover_stored(&w.log, &id, SessionStage::Running).expect("replays");
    assert_eq!(got.stage(), SessionStage::Running);
    let Recovered::Interrupted(d) = got else {
        panic!("running is interrupted");
    };
    assert_eq!(d.process_identity(), Some(&identity(4242)));
    assert_eq!(d.launch_binding(), Some(binding(1)));
    // Records of another session under this id do not replay as it.
    assert!(recover_stored(&RawRecords(recs), &sid("r-other"), SessionStage::Running).is_err());
}
