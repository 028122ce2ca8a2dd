//! Session transitions: write-ahead, proof binding, receipts, idempotency.

use crate::support::*;
use glove_lifecycle::memory::MemoryLog;
use glove_lifecycle::*;
use glove_types::codes::lifecycle as c;
use glove_types::stage::SessionStage;
use glove_types::Sha256Digest;

#[test]
fn full_lifecycle_records_one_record_per_transition() {
    let mut w = World::new();
    let id = sid("s-full");
    let r = w.with_receipt(&id, 1);
    let s = w.stopping(&id).enter(|s| {
        let p = s.log_exit(r, &w.receipts, &mut w.log).unwrap();
        s.exit(p).unwrap().park()
    });
    assert_eq!(s.stage(), SessionStage::Exited);
    assert_eq!(s.last_seq(), 5);
    assert_eq!(w.log.len(), 6);
    let stages: Vec<_> = s.history().iter().map(|(st, _)| *st).collect();
    assert_eq!(
        stages,
        [
            SessionStage::Created,
            SessionStage::Preparing,
            SessionStage::Starting,
            SessionStage::Running,
            SessionStage::Stopping,
            SessionStage::Exited
        ]
    );
    assert_eq!(s.receipt(), r);
}

#[test]
fn repeating_a_log_step_with_the_same_input_appends_nothing() {
    let mut w = World::new();
    w.created(&sid("s-idem")).enter(|s| {
        let p1 = s.log_prepare(&mut w.log).unwrap();
        let p2 = s.log_prepare(&mut w.log).unwrap();
        assert_eq!(w.log.len(), 2);
        assert_eq!(p1.record_digest(), p2.record_digest());
        assert_eq!(p1.seq(), p2.seq());
        let s = s.prepare(p1).unwrap();
        assert_eq!(s.stage(), SessionStage::Preparing);
        drop(p2);
    });

    // Creation too: same id and digests is the same record.
    with_brand(|b| {
        let again = Session::log_create(b, &sid("s-idem"), digests(), &mut w.log).unwrap();
        assert_eq!(again.seq(), 0);
    });
    assert_eq!(w.log.len(), 2);
}

#[test]
fn a_different_input_for_a_taken_transition_fails_closed() {
    let mut w = World::new();
    let id = sid("s-conflict");
    let s = w.running(&id);
    let n = w.log.len();
    s.enter(|s| {
        let _first = s.log_stop(StopReason::Requested, &mut w.log).unwrap();
        let e = s.log_stop(StopReason::AgentExited, &mut w.log).unwrap_err();
        assert_eq!(e.code(), c::LIFECYCLE_TRANSITION_CONFLICT);
    });
    assert_eq!(w.log.len(), n + 1);

    let e =
        with_brand(|b| Session::log_create(b, &id, digests_of("other plan"), &mut w.log).map(drop))
            .unwrap_err();
    assert_eq!(e.code(), c::LIFECYCLE_TRANSITION_CONFLICT);
}

// A proof of session A spent on session B does not compile (the brands
// differ): `tests/ui/proof_other_session.rs`. The runtime check behind it
// (`lifecycle_proof_subject_mismatch`) is tested in `src/session.rs`, the
// only place that can give two sessions one brand.

#[test]
fn a_parked_session_cannot_be_told_from_a_fresh_one_after_reentry() {
    // Parking drops the brand, not the history: a session taken into a new
    // scope continues exactly where it stopped.
    let mut w = World::new();
    let id = sid("s-park");
    let parked = w.created(&id).enter(|s| {
        let p = s.log_prepare(&mut w.log).unwrap();
        s.prepare(p).unwrap().park()
    });
    assert_eq!(parked.stage(), SessionStage::Preparing);
    assert_eq!(parked.last_seq(), 1);
    let v = w.verified(&id, &digests(), 3);
    let starting = with_brand(|b| {
        let s = parked.brand(b);
        let p = s.log_start(binding(1), v, &mut w.log).unwrap();
        s.start(p).unwrap().park()
    });
    assert_eq!(starting.last_seq(), 2);
    assert_eq!(starting.launch_binding(), binding(1));
}

#[test]
fn a_log_failure_leaves_the_stage_unchanged_and_records_nothing() {
    let mut w = World::new();
    w.created(&sid("s-logfail")).enter(|s| {
        w.log.fail_next_append();
        let e = s.log_prepare(&mut w.log).unwrap_err();
        assert_eq!(e.code(), c::LIFECYCLE_LOG_UNAVAILABLE);
        assert_eq!(w.log.len(), 1);
        assert_eq!(s.stage(), SessionStage::Created);
        let p = s.log_prepare(&mut w.log).unwrap();
        assert!(s.prepare(p).is_ok());
    });
}

/// A log that answers each append with the acknowledgement of the previous
/// one: what a buggy or hostile implementation might do.
struct StaleAckLog {
    inner: MemoryLog,
    kept: Option<AppendReceipt>,
}

impl TransitionLog for StaleAckLog {
    fn append(&mut self, record: &PendingRecord<'_>) -> Result<AppendReceipt, PortError> {
        let ack = self.inner.append(record)?;
        Ok(match self.kept.replace(record.acknowledge()) {
            Some(previous) => previous,
            None => ack,
        })
    }

    fn lookup(&self, subject: Subject<'_>, seq: u64) -> Result<Option<StoredRecord>, PortError> {
        self.inner.lookup(subject, seq)
    }
}

#[test]
fn a_log_cannot_pass_off_an_acknowledgement_of_another_record() {
    let mut log = StaleAckLog {
        inner: MemoryLog::new(),
        kept: None,
    };
    with_brand(|b| {
        let p = Session::log_create(b, &sid("s-ack-a"), digests(), &mut log).unwrap();
        let _a = Session::create(p).unwrap();
    });
    // The log answers B's creation with A's acknowledgement.
    let e = with_brand(|b| Session::log_create(b, &sid("s-ack-b"), digests(), &mut log).map(drop))
        .unwrap_err();
    assert_eq!(e.code(), c::LIFECYCLE_APPEND_RECEIPT_MISMATCH);
}

#[test]
fn exit_and_fail_need_the_durable_terminal_receipt() {
    let mut w = World::new();
    let id = sid("s-receipt");
    w.stopping(&id).enter(|s| {
        let e = s.log_exit(receipt(9), &w.receipts, &mut w.log).unwrap_err();
        assert_eq!(e.code(), c::LIFECYCLE_RECEIPT_MISSING);
        w.with_receipt(&id, 8);
        let e = s.log_exit(receipt(9), &w.receipts, &mut w.log).unwrap_err();
        assert_eq!(e.code(), c::LIFECYCLE_RECEIPT_MISMATCH);
        let e = s
            .log_fail(
                c::LIFECYCLE_WRONG_STAGE,
                receipt(9),
                &w.receipts,
                &mut w.log,
            )
            .unwrap_err();
        assert_eq!(e.code(), c::LIFECYCLE_RECEIPT_MISMATCH);
        let p = s.log_exit(receipt(8), &w.receipts, &mut w.log).unwrap();
        assert!(s.exit(p).is_ok());
    });
}

#[test]
fn a_refinement_plan_ends_only_with_a_refinement_receipt() {
    let mut w = World::new();
    let seq_digest = |n: u64| Sha256Digest::of(&n.to_be_bytes());
    // A refinement plan's session: a resource receipt is refused, from
    // the running stage as from the failure path.
    let id = sid("s-eval");
    let s = with_brand(|b| {
        let p = Session::log_create(b, &id, digests().refinement(), &mut w.log).unwrap();
        Session::create(p).unwrap().park()
    });
    assert_eq!(s.digests().terminal_kind(), TerminalKind::Refinement);
    let resource = w.receipts.append(Subject::Session(&id), 4, seq_digest(4));
    s.enter(|s| {
        let e = s
            .log_fail(c::LIFECYCLE_WRONG_STAGE, resource, &w.receipts, &mut w.log)
            .unwrap_err();
        assert_eq!(e.code(), c::LIFECYCLE_RECEIPT_KIND_MISMATCH, "{e}");
    });
    // The creation record says so and replays to the same kind.
    let recs = w.session_records();
    let text = String::from_utf8(recs[0].clone()).unwrap();
    assert!(text.contains(r#""receipt_kind":"refinement_v1""#), "{text}");
    let decoded = SessionRecord::decode(&recs[0]).unwrap();
    let SessionEntry::Created { digests: d } = decoded.entry else {
        panic!("record 0 is the creation");
    };
    assert_eq!(d.terminal_kind(), TerminalKind::Refinement);
    let refined = w.receipts.append_of_kind(
        Subject::Session(&id),
        5,
        seq_digest(5),
        TerminalKind::Refinement,
    );
    let s = with_brand(|b| {
        let p = Session::log_create(b, &id, digests().refinement(), &mut w.log).unwrap();
        Session::create(p).unwrap().park()
    });
    s.enter(|s| {
        let p = s
            .log_fail(c::LIFECYCLE_WRONG_STAGE, refined, &w.receipts, &mut w.log)
            .unwrap();
        assert!(s.fail(p).is_ok());
    });
    // And an ordinary plan's session refuses a refinement receipt.
    let other = sid("s-plain");
    let r = w.receipts.append_of_kind(
        Subject::Session(&other),
        6,
        seq_digest(6),
        TerminalKind::Refinement,
    );
    w.stopping(&other).enter(|s| {
        let e = s.log_exit(r, &w.receipts, &mut w.log).unwrap_err();
        assert_eq!(e.code(), c::LIFECYCLE_RECEIPT_KIND_MISMATCH);
    });
    // Ordinary creation records keep their bytes: no receipt_kind member.
    let plain: Vec<String> = w
        .session_records()
        .into_iter()
        .map(|r| String::from_utf8(r).unwrap())
        .filter(|r| r.contains("s-plain") && r.contains(r#""stage":"created""#))
        .collect();
    assert_eq!(plain.len(), 1);
    assert!(!plain[0].contains("receipt_kind"), "{}", plain[0]);
}

#[test]
fn fail_from_every_live_stage_records_code_and_stage() {
    fn check<S: Live>(w: &mut World, s: ParkedSession<S>) {
        let id = s.id().clone();
        let r = w.with_receipt(&id, 3);
        let code = c::LIFECYCLE_RECOVERY_RUNNING_INTERRUPTED;
        s.enter(|s| {
            let p = s.log_fail(code, r, &w.receipts, &mut w.log).unwrap();
            let before = s.stage();
            let f = s.fail(p).unwrap();
            assert_eq!(f.failure_code(), code);
            assert_eq!(f.failed_in(), before);
            assert_eq!(f.receipt(), r);
        });
    }
    let mut w = World::new();
    let s = w.created(&sid("f-1"));
    check(&mut w, s);
    let s = w.preparing(&sid("f-2"));
    check(&mut w, s);
    let s = w.starting(&sid("f-3"));
    check(&mut w, s);
    let s = w.running(&sid("f-4"));
    check(&mut w, s);
    let s = w.stopping(&sid("f-5"));
    check(&mut w, s);
}

#[test]
fn a_verified_start_of_another_session_is_refused() {
    let mut w = World::new();
    let a = w.preparing(&sid("s-va"));
    let b = w.preparing(&sid("s-vb"));
    let for_a = w.verified(a.id(), a.digests(), 1);
    let e = b
        .enter(|b| b.log_start(binding(1), for_a, &mut w.log).map(|_| ()))
        .unwrap_err();
    assert_eq!(
        e.code(),
        glove_types::codes::lifecycle::START_AUTH_SESSION_MISMATCH
    );
}

#[test]
fn any_session_conversions_are_checked() {
    let mut w = World::new();
    let any: AnySession = w.created(&sid("s-any")).into();
    let refused = any.try_into_running().unwrap_err();
    assert_eq!(refused.code(), c::LIFECYCLE_WRONG_STAGE);
    let (any, _) = refused.into_parts();
    assert_eq!(any.stage(), SessionStage::Created);
    assert!(any.try_into_created().is_ok());
}

#[test]
fn check_repeat_tells_repeat_new_conflict_and_illegal_apart() {
    let mut w = World::new();
    let id = sid("s-repeat");
    let s = w.running(&id);
    let any = AnySession::from(s);
    let same = SessionEntry::Running {
        identity: identity(4242),
    };
    let other = SessionEntry::Running {
        identity: identity(4243),
    };
    assert_eq!(
        any.check_repeat(&same).unwrap(),
        Repeat::AlreadyRecorded { seq: 3 }
    );
    assert_eq!(
        any.check_repeat(&other).unwrap_err().code(),
        c::LIFECYCLE_TRANSITION_CONFLICT
    );
    assert_eq!(
        any.check_repeat(&SessionEntry::Stopping {
            reason: StopReason::Requested
        })
        .unwrap(),
        Repeat::New
    );
    assert_eq!(
        any.check_repeat(&SessionEntry::Exited {
            receipt: receipt(1)
        })
        .unwrap_err()
        .code(),
        c::LIFECYCLE_ILLEGAL_TRANSITION
    );
    assert_eq!(
        any.check_repeat(&SessionEntry::Preparing).unwrap(),
        Repeat::AlreadyRecorded { seq: 1 }
    );
}

#[test]
fn records_decode_strictly() {
    let mut w = World::new();
    let _ = w.running(&sid("s-rec"));
    for bytes in w.session_records() {
        let r = SessionRecord::decode(&bytes).unwrap();
        assert_eq!(r.encode().unwrap(), bytes);
    }
    let good = String::from_utf8(w.session_records()[0].clone()).unwrap();
    let cases = [
        good.replacen('{', "{ ", 1),                              // not canonical
        good.replacen("{\"entry\"", "{\"extra\":1,\"entry\"", 1), // out of order + unknown
        good.replacen("\"seq\":0", "\"seq\":1", 1),               // prev must be set
        good.replacen("glove.lifecycle.session-record.v1", "v0", 1), // unknown format
        good.replacen("\"stage\":\"created\"", "\"stage\":\"creating\"", 1),
    ];
    for bad in cases {
        let e = SessionRecord::decode(bad.as_bytes()).unwrap_err();
        assert_eq!(e.code(), c::LIFECYCLE_RECORD_INVALID, "{bad}");
    }
}
