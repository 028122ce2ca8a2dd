//! Apply receipts (`apply_v1`) in the receipt journal: one chain and one
//! sequence with session receipts, filed under the transaction id, checked
//! strictly on append, replay and offline verification, and answered by the
//! lifecycle's receipt log for exactly their own subject.

use crate::common::{anchor, key, tempdir};
use glove_journal::error::{CorruptKind, JournalError};
use glove_journal::lifecycle::{receipt_key, StoreReceipts};
use glove_journal::receipt::envelope::forge_envelope;
use glove_journal::receipt::records::encode_id;
use glove_journal::receipt::{
    verify_bytes, verify_file, verify_file_with, verify_page, EvidenceFiles, ReceiptConfig,
    ReceiptJournal, ReceiptKind,
};
use glove_journal::{replay_bytes, testing};
use glove_lifecycle::apply::TransactionId;
use glove_lifecycle::{ReceiptLog, Subject};
use glove_types::codes::journal as jc;
use glove_types::codes::lifecycle::LIFECYCLE_RECEIPT_MISMATCH;
use glove_types::ids::{ApplyGrantId, ApplyTargetId, ApplyTransactionId, SessionId};
use glove_types::receipt::{ApplyOutcome, ApplyReceiptV1, FailedIn};
use glove_types::Sha256Digest;
use std::path::{Path, PathBuf};

fn sid(s: &str) -> SessionId {
    SessionId::new(s).unwrap()
}

fn txn(s: &str) -> TransactionId {
    TransactionId::new(s).unwrap()
}

/// A toy `resource_v1` body naming `session` (the journal checks only its
/// kind and canonical form).
fn resource(session: &str) -> Vec<u8> {
    format!(r#"{{"receipt_kind":"resource_v1","session_id":"{session}"}}"#).into_bytes()
}

fn apply(t: &str, session: &str, outcome: ApplyOutcome) -> ApplyReceiptV1 {
    ApplyReceiptV1 {
        transaction_id: ApplyTransactionId::new(t).unwrap(),
        session_id: sid(session),
        target: ApplyTargetId::new("src").unwrap(),
        grant_id: ApplyGrantId::new(format!("g-{t}")).unwrap(),
        authorization_digest: Sha256Digest::from_bytes([1; 32]),
        baseline_digest: Sha256Digest::from_bytes([2; 32]),
        manifest_digest: Sha256Digest::from_bytes([3; 32]),
        outcome,
        recovered: false,
    }
}

fn failed() -> ApplyOutcome {
    ApplyOutcome::Failed {
        code: "apply_source_changed".into(),
        failed_in: FailedIn::Reserved,
    }
}

fn seq_of(log: &impl ReceiptLog, s: Subject<'_>) -> Option<u64> {
    log.terminal_receipt(s).unwrap().map(|e| e.receipt_seq())
}

fn corrupt(e: JournalError) -> CorruptKind {
    match e {
        JournalError::Corrupt { kind, .. } => kind,
        other => panic!("{other:?}"),
    }
}

fn mismatch<T: std::fmt::Debug>(r: Result<T, glove_lifecycle::PortError>) {
    assert_eq!(r.unwrap_err().code(), LIFECYCLE_RECEIPT_MISMATCH);
}

/// A journal with a resource receipt (`s-1`, seq 101), an applied receipt
/// (`t-1`, seq 102, through the receipt log) and a failed one (`t-2`, seq
/// 103, through the raw reserve/append API under the transaction's key).
fn three() -> (tempfile::TempDir, PathBuf) {
    let d = tempdir();
    let p = d.path().join("receipts");
    let mut j = ReceiptJournal::create(&p, key(), &anchor(), ReceiptConfig::default()).unwrap();
    let mut log = StoreReceipts::new(&mut j);
    let r1 = log.get_or_append(&sid("s-1"), &resource("s-1")).unwrap();
    let body = apply("t-1", "s-1", ApplyOutcome::Applied).encode().unwrap();
    let r2 = log.get_or_append_apply(&txn("t-1"), &body).unwrap();
    // Idempotent: the durable one is returned, nothing appended.
    assert_eq!(log.get_or_append_apply(&txn("t-1"), &body).unwrap(), r2);
    assert_eq!((r1.receipt_seq(), r2.receipt_seq()), (101, 102));
    let k = receipt_key(Subject::Apply(&txn("t-2"))).unwrap();
    assert_eq!(k, sid("t-2"));
    let res = j.reserve(&k).unwrap();
    let body = apply("t-2", "s-1", failed()).encode().unwrap();
    let stored = j.append_receipt(&res, ReceiptKind::ApplyV1, &body).unwrap();
    assert_eq!((stored.seq, stored.kind), (103, ReceiptKind::ApplyV1));
    (d, p)
}

fn open(p: &Path) -> ReceiptJournal {
    ReceiptJournal::open(p, key(), &anchor(), ReceiptConfig::default())
        .unwrap()
        .0
}

#[test]
fn apply_and_session_receipts_share_one_chain_and_verify_offline() {
    let (_d, p) = three();
    let j = open(&p);
    assert_eq!(j.head().seq, 103);
    let kinds: Vec<_> = j.receipts().iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        [
            ReceiptKind::ResourceV1,
            ReceiptKind::ApplyV1,
            ReceiptKind::ApplyV1
        ]
    );
    let env = std::str::from_utf8(&j.receipts()[1].envelope).unwrap();
    assert!(
        env.contains(r#""receipt_kind":"apply_v1","seq":102}"#),
        "{env}"
    );
    // The whole file offline: chain, both MACs per receipt, strict bodies,
    // with and without the anchor file.
    let r = verify_file(&p, &key(), &anchor()).unwrap();
    assert_eq!((r.receipts, r.head), (3, j.head()));
    let anchor_file = p.with_file_name("receipts.anchor");
    let files = EvidenceFiles {
        anchor_file: Some(&anchor_file),
        ack_file: None,
    };
    assert!(
        verify_file_with(&p, &key(), &anchor(), &files)
            .unwrap()
            .anchor_checked
    );
    let envs: Vec<&[u8]> = j.receipts().iter().map(|r| &r.envelope[..]).collect();
    assert_eq!(
        verify_page(envs.iter().copied(), &key(), &anchor()).unwrap(),
        j.head()
    );
    // The receipt log answers each subject with its own receipt.
    let log = StoreReceipts::new(j);
    let seq = |s: Subject<'_>| seq_of(&log, s);
    assert_eq!(seq(Subject::Session(&sid("s-1"))), Some(101));
    assert_eq!(seq(Subject::Apply(&txn("t-1"))), Some(102));
    assert_eq!(seq(Subject::Apply(&txn("t-2"))), Some(103));
    assert_eq!(seq(Subject::Apply(&txn("t-3"))), None);
    assert_eq!(seq(Subject::Session(&sid("s-2"))), None);
    // Never the other subject's receipt under the same key.
    mismatch(log.terminal_receipt(Subject::Session(&sid("t-1"))));
    mismatch(log.terminal_receipt(Subject::Apply(&txn("s-1"))));
}

#[test]
fn a_session_and_a_transaction_with_one_id_fail_closed() {
    let d = tempdir();
    let p = d.path().join("receipts");
    let mut j = ReceiptJournal::create(&p, key(), &anchor(), ReceiptConfig::default()).unwrap();
    let mut log = StoreReceipts::new(&mut j);
    log.get_or_append(&sid("x"), &resource("x")).unwrap();
    // The receipt log refuses before writing.
    let body = apply("x", "s-1", ApplyOutcome::Applied).encode().unwrap();
    mismatch(log.get_or_append_apply(&txn("x"), &body));
    assert_eq!(log.journal().head().seq, 101);
    // Through the raw API the key takes a second receipt; then neither
    // subject is confirmed.
    let res = j.reserve(&sid("x")).unwrap();
    j.append_receipt(&res, ReceiptKind::ApplyV1, &body).unwrap();
    drop(j);
    let log = StoreReceipts::new(open(&p));
    mismatch(log.terminal_receipt(Subject::Session(&sid("x"))));
    mismatch(log.terminal_receipt(Subject::Apply(&txn("x"))));
    // The file itself is sound.
    verify_file(&p, &key(), &anchor()).unwrap();
}

#[test]
fn append_refuses_apply_bodies_that_are_not_strict_or_name_another_transaction() {
    let d = tempdir();
    let p = d.path().join("receipts");
    let mut j = ReceiptJournal::create(&p, key(), &anchor(), ReceiptConfig::default()).unwrap();
    let res = j.reserve(&sid("t-1")).unwrap();
    let other = apply("t-2", "s-1", ApplyOutcome::Applied).encode().unwrap();
    let good = apply("t-1", "s-1", failed()).encode().unwrap();
    // Canonical JSON, but `code` must be absent (not null) when applied.
    let with_null = String::from_utf8(apply("t-1", "s-1", ApplyOutcome::Applied).encode().unwrap())
        .unwrap()
        .replacen(r#""grant_id""#, r#""code":null,"grant_id""#, 1);
    let cases: [(&[u8], _); 4] = [
        (&other, jc::RECEIPT_BODY_INVALID),
        (with_null.as_bytes(), jc::RECEIPT_BODY_INVALID),
        (&resource("t-1"), jc::RECEIPT_KIND_MISMATCH),
        (&good, jc::RECEIPT_KIND_MISMATCH),
    ];
    for (i, (body, code)) in cases.into_iter().enumerate() {
        let kind = if i == 3 {
            ReceiptKind::ResourceV1
        } else {
            ReceiptKind::ApplyV1
        };
        let e = j.append_receipt(&res, kind, body).unwrap_err();
        assert_eq!(e.code(), code, "case {i}");
    }
    // The reservation is still held and nothing was written.
    assert_eq!(j.head().seq, 100);
    j.append_receipt(&res, ReceiptKind::ApplyV1, &good).unwrap();
}

/// Rebuilds the file from its records with `edit` applied to the payload
/// of the receipt record at `seq` (journal digests recomputed: only the
/// receipt MACs and body rules stand between the edit and acceptance).
fn rebuild(p: &Path, seq: u64, edit: impl Fn(&SessionId, &[u8]) -> Vec<u8>) -> Vec<u8> {
    let bytes = std::fs::read(p).unwrap();
    let spec = ReceiptConfig::default().spec();
    let replayed = replay_bytes(&bytes, &spec, None).unwrap();
    let mut receipt_no = anchor().seq;
    let records: Vec<(u16, Vec<u8>)> = replayed
        .records
        .iter()
        .map(|m| {
            let payload = bytes[m.payload.clone()].to_vec();
            if m.kind != 4 {
                return (m.kind, payload);
            }
            receipt_no += 1;
            if receipt_no != seq {
                return (m.kind, payload);
            }
            let len = usize::from(payload[0]);
            let id = sid(std::str::from_utf8(&payload[1..=len]).unwrap());
            (m.kind, edit(&id, &payload[1 + len..]))
        })
        .collect();
    let out = p.with_file_name("rebuilt");
    let _ = std::fs::remove_file(&out);
    drop(testing::create_raw(&out, &spec, records.iter().map(|(k, v)| (*k, &v[..]))).unwrap());
    std::fs::read(&out).unwrap()
}

#[test]
fn a_tampered_or_forged_apply_body_fails_verification() {
    let (_d, p) = three();
    // Unchanged, the rebuilt image verifies.
    let same = rebuild(&p, 102, |id, env| encode_id(Some(id), env));
    verify_bytes(&same, &key(), &anchor()).unwrap();
    // One byte of the applied receipt's body changed: its MAC fails.
    let tampered = rebuild(&p, 102, |id, env| {
        let s = std::str::from_utf8(env).unwrap();
        encode_id(Some(id), s.replacen(r#""src""#, r#""srd""#, 1).as_bytes())
    });
    let e = verify_bytes(&tampered, &key(), &anchor()).unwrap_err();
    assert_eq!(corrupt(e), CorruptKind::ReceiptMacMismatch);
    // Forged with the key around a body that is not strictly an apply
    // body (a field the schema does not have, in canonical order), or that
    // names another transaction than the key it is filed under: the MACs
    // verify and the envelope is canonical; the body rules refuse.
    let j = open(&p);
    let prev = j.receipts()[0].head();
    drop(j);
    let good = apply("t-1", "s-1", ApplyOutcome::Applied).encode().unwrap();
    let extra = String::from_utf8(good)
        .unwrap()
        .replacen(r#""grant_id""#, r#""extra":1,"grant_id""#, 1)
        .into_bytes();
    let other = apply("t-9", "s-1", ApplyOutcome::Applied).encode().unwrap();
    for body in [extra, other] {
        let env = forge_envelope(&key(), &prev, &body, b"apply_v1", b"102");
        let forged = rebuild(&p, 102, |id, _| encode_id(Some(id), &env));
        let e = verify_bytes(&forged, &key(), &anchor()).unwrap_err();
        assert_eq!(corrupt(e), CorruptKind::ReceiptRecordInvalid);
    }
    // A delivered page is held to the body rules too.
    let extra_env = forge_envelope(
        &key(),
        &prev,
        br#"{"receipt_kind":"apply_v1"}"#,
        b"apply_v1",
        b"102",
    );
    let j = open(&p);
    let e = verify_page(
        [&j.receipts()[0].envelope[..], &extra_env[..]],
        &key(),
        &anchor(),
    )
    .unwrap_err();
    assert_eq!(corrupt(e), CorruptKind::ReceiptRecordInvalid);
}

#[test]
fn compaction_keeps_apply_receipts_under_their_transaction() {
    let (_d, p) = three();
    let mut j = open(&p);
    // Acknowledge and compact away the resource receipt only.
    let page = j.page(anchor().seq, 1, 1 << 20).unwrap();
    j.ack(&page.head).unwrap();
    assert_eq!(j.compact().unwrap().removed, 1);
    drop(j);
    let log = StoreReceipts::new(open(&p));
    let seq = |s: Subject<'_>| seq_of(&log, s);
    // The kept apply receipts lost their record keys: they are filed by the
    // body's transaction id, not its session id.
    assert_eq!(seq(Subject::Apply(&txn("t-1"))), Some(102));
    assert_eq!(seq(Subject::Apply(&txn("t-2"))), Some(103));
    assert_eq!(seq(Subject::Session(&sid("s-1"))), None);
    verify_file(&p, &key(), &page.head).unwrap();
}
