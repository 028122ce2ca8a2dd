//! The session store.

use crate::common::tempdir;
use glove_journal::error::{CorruptKind, JournalError};
use glove_journal::session::{record, Creation, NewSession};
use glove_journal::testing::StoreWriter;
use glove_journal::SessionStore;
use glove_types::codes::journal as jc;
use glove_types::ids::{IdempotencyKey, SessionId};
use glove_types::stage::SessionStage;
use glove_types::{Blake3Digest, Sha256Digest};

pub(crate) fn sid(s: &str) -> SessionId {
    SessionId::new(s).unwrap()
}
pub(crate) fn key(s: &str) -> IdempotencyKey {
    IdempotencyKey::new(s).unwrap()
}

pub(crate) fn new_session<'a>(
    s: &'a SessionId,
    k: &'a IdempotencyKey,
    plan: &'a [u8],
) -> NewSession<'a> {
    NewSession {
        session_id: s,
        idempotency_key: k,
        controller_plan_digest: Blake3Digest::of(plan),
        plan,
    }
}

#[test]
fn create_retry_conflict_lookup() {
    let d = tempdir();
    let p = d.path().join("sessions");
    let mut st = SessionStore::create(&p).unwrap();
    let (s1, k1) = (sid("s1"), key("k1"));
    let plan = br#"{"runtime":"codex"}"#;
    let c = st.create_session(new_session(&s1, &k1, plan)).unwrap();
    let Creation::Created(rec) = c else { panic!() };
    assert_eq!(rec.plan_content_digest(), &Sha256Digest::of(plan));
    assert_eq!(rec.stage(), SessionStage::Created);
    let len = st.journal().len_bytes();
    // A byte-identical retry returns the original and appends nothing.
    let again = st.create_session(new_session(&s1, &k1, plan)).unwrap();
    assert_eq!(again, Creation::Existing(rec.clone()));
    assert_eq!(st.journal().len_bytes(), len);
    // Same key, other content; same id, other key.
    let other = br#"{"runtime":"pi"}"#;
    for (s, k, p) in [
        (&s1, &k1, &other[..]),
        (&sid("s2"), &k1, &plan[..]),
        (&s1, &key("k2"), &plan[..]),
    ] {
        let e = st.create_session(new_session(s, k, p)).unwrap_err();
        assert_eq!(e.code(), jc::SESSION_CONFLICT);
    }
    let mut req = new_session(&s1, &k1, plan);
    req.controller_plan_digest = Blake3Digest::of(b"other");
    assert_eq!(
        st.create_session(req).unwrap_err().code(),
        jc::SESSION_CONFLICT
    );
    // Non-canonical plans are refused with the JSON code.
    let e = st
        .create_session(new_session(&sid("s3"), &key("k3"), b"{ }"))
        .unwrap_err();
    assert_eq!(e.code().as_str(), "json_noncanonical");
    assert_eq!(st.by_idempotency_key(&k1).unwrap(), &rec);
    assert_eq!(st.get(&s1).unwrap(), &rec);
    drop(st);
    let (st, report) = SessionStore::open(&p, None).unwrap();
    assert!(report.torn.is_none());
    assert_eq!(st.get(&s1).unwrap(), &rec);
    assert_eq!(st.by_idempotency_key(&k1).unwrap(), &rec);
    assert_eq!(st.index().len(), 1);
}

#[test]
fn transitions_follow_the_stage_graph() {
    let d = tempdir();
    let p = d.path().join("sessions");
    let mut st = SessionStore::create(&p).unwrap();
    let (s1, k1) = (sid("s1"), key("k1"));
    st.create_session(new_session(&s1, &k1, b"{}")).unwrap();
    let e = st
        .transition(&s1, SessionStage::Running, b"{}")
        .unwrap_err();
    assert_eq!(e.code(), jc::STORE_ILLEGAL_TRANSITION);
    let e = st
        .transition(&s1, SessionStage::Created, b"{}")
        .unwrap_err();
    assert_eq!(e.code(), jc::STORE_ILLEGAL_TRANSITION);
    let t = st
        .transition(&s1, SessionStage::Preparing, br#"{"a":1}"#)
        .unwrap();
    assert!(t.appended);
    // Idempotent repeat; conflicting repeat.
    let t2 = st
        .transition(&s1, SessionStage::Preparing, br#"{"a":1}"#)
        .unwrap();
    assert!(!t2.appended);
    assert_eq!(t2.record, t.record);
    let e = st
        .transition(&s1, SessionStage::Preparing, br#"{"a":2}"#)
        .unwrap_err();
    assert_eq!(e.code(), jc::STORE_TRANSITION_CONFLICT);
    let e = st
        .transition(&s1, SessionStage::Starting, b"not json")
        .unwrap_err();
    assert_eq!(e.code().as_str(), "json_syntax");
    let e = st
        .transition(&sid("nope"), SessionStage::Failed, b"{}")
        .unwrap_err();
    assert_eq!(e.code(), jc::STORE_SESSION_NOT_FOUND);
    st.transition(&s1, SessionStage::Failed, br#"{"code":"x"}"#)
        .unwrap();
    let e = st.transition(&s1, SessionStage::Exited, b"{}").unwrap_err();
    assert_eq!(e.code(), jc::STORE_ILLEGAL_TRANSITION);
    let anchor = st.anchor();
    drop(st);
    let (st, _) = SessionStore::open(&p, Some(&anchor)).unwrap();
    let r = st.get(&s1).unwrap();
    assert_eq!(r.stage(), SessionStage::Failed);
    assert_eq!(r.evidence(), br#"{"code":"x"}"#);
}

/// Writes raw store records through the generic journal (bypassing the
/// store's checks) to plant impossible sequences.
fn plant(records: &[(u16, Vec<u8>)]) -> Result<SessionStore, JournalError> {
    let d = tempdir();
    let p = d.path().join("sessions");
    let j = glove_journal::testing::create_raw(&p, &glove_journal::session::SESSION_STORE_SPEC, [])
        .unwrap();
    for (k, payload) in records {
        let _ = j.append(*k, payload).unwrap();
    }
    drop(j);
    SessionStore::open(&p, None).map(|(s, _)| s)
}

fn create_payload(s: &str, k: &str) -> (u16, Vec<u8>) {
    let mut v = vec![s.len() as u8];
    v.extend_from_slice(s.as_bytes());
    v.push(k.len() as u8);
    v.extend_from_slice(k.as_bytes());
    v.extend_from_slice(&[0; 64]);
    v.extend_from_slice(b"{}");
    (record::KIND_CREATE, v)
}

fn transition_payload(s: &str, stage: u8) -> (u16, Vec<u8>) {
    let mut v = vec![s.len() as u8];
    v.extend_from_slice(s.as_bytes());
    v.push(stage);
    v.extend_from_slice(b"{}");
    (record::KIND_TRANSITION, v)
}

fn kind_of(r: Result<SessionStore, JournalError>) -> CorruptKind {
    match r {
        Err(JournalError::Corrupt { kind, .. }) => kind,
        other => panic!("{other:?}"),
    }
}

#[test]
fn replay_rejects_impossible_sequences() {
    assert!(plant(&[create_payload("a", "k"), transition_payload("a", 1)]).is_ok());
    assert_eq!(
        kind_of(plant(&[
            create_payload("a", "k"),
            transition_payload("a", 3)
        ])),
        CorruptKind::StoreImpossibleTransition
    );
    assert_eq!(
        kind_of(plant(&[
            create_payload("a", "k"),
            transition_payload("a", 6),
            transition_payload("a", 6)
        ])),
        CorruptKind::StoreImpossibleTransition
    );
    assert_eq!(
        kind_of(plant(&[transition_payload("a", 1)])),
        CorruptKind::StoreUnknownSession
    );
    assert_eq!(
        kind_of(plant(&[create_payload("a", "k"), create_payload("b", "k")])),
        CorruptKind::StoreDuplicateSession
    );
    assert_eq!(
        kind_of(plant(&[create_payload("a", "k"), create_payload("a", "j")])),
        CorruptKind::StoreDuplicateSession
    );
    assert_eq!(
        kind_of(plant(&[create_payload("A", "k")])),
        CorruptKind::StoreRecordInvalid
    );
    assert_eq!(
        kind_of(plant(&[
            create_payload("a", "k"),
            transition_payload("a", 9)
        ])),
        CorruptKind::StoreRecordInvalid
    );
}

#[test]
fn transitions_keep_every_evidence_in_order_across_reopen() {
    let d = tempdir();
    let p = d.path().join("sessions");
    let mut st = SessionStore::create(&p).unwrap();
    let (s1, s2) = (sid("s1"), sid("s2"));
    let plan = br#"{"runtime":"codex"}"#;
    let _ = st
        .create_session(new_session(&s1, &key("k1"), plan))
        .unwrap();
    let _ = st
        .create_session(new_session(&s2, &key("k2"), plan))
        .unwrap();
    assert_eq!(st.transitions(&s1), Some(&[][..]));
    assert_eq!(st.transitions(&sid("nobody")), None);
    let steps: [(SessionStage, &[u8]); 3] = [
        (SessionStage::Preparing, br#"{"a":1}"#),
        (SessionStage::Starting, br#"{"b":2}"#),
        (SessionStage::Failed, br#"{"c":3}"#),
    ];
    for (stage, ev) in steps {
        let _ = st.transition(&s1, stage, ev).unwrap();
        // A repeat appends nothing and keeps the history as it is.
        let again = st.transition(&s1, stage, ev).unwrap();
        assert!(!again.appended);
    }
    let _ = st
        .transition(&s2, SessionStage::Preparing, br#"{"z":0}"#)
        .unwrap();
    let seen = |st: &SessionStore| {
        st.transitions(&s1)
            .unwrap()
            .iter()
            .map(|t| (t.seq(), t.stage(), t.evidence().to_vec()))
            .collect::<Vec<_>>()
    };
    let before = seen(&st);
    assert_eq!(
        before,
        vec![
            (3, SessionStage::Preparing, br#"{"a":1}"#.to_vec()),
            (4, SessionStage::Starting, br#"{"b":2}"#.to_vec()),
            (5, SessionStage::Failed, br#"{"c":3}"#.to_vec()),
        ]
    );
    drop(st);
    let (st, _) = SessionStore::open(&p, None).unwrap();
    assert_eq!(seen(&st), before);
    assert_eq!(st.transitions(&s2).unwrap().len(), 1);
}
