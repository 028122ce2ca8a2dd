//! Refinement receipts (`refinement_v1`) in the receipt journal: one chain
//! and one sequence with resource receipts, strict bodies on append and
//! replay, paging and exact-head acknowledgement, torn-tail recovery, and
//! a receipt log that reports each receipt's kind.

use crate::common::{anchor, key, tempdir};
use glove_journal::lifecycle::StoreReceipts;
use glove_journal::receipt::{
    verify_file, verify_page, ReceiptConfig, ReceiptJournal, ReceiptKind,
};
use glove_lifecycle::{ReceiptLog, Subject, TerminalKind};
use glove_types::codes::journal as jc;
use glove_types::ids::SessionId;
use std::io::Write;
use std::path::{Path, PathBuf};

fn sid(s: &str) -> SessionId {
    SessionId::new(s).unwrap()
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The example refinement receipt (a fuzz seed kept equal to it by
/// glove-types' tests): session `eval-0001-base`.
fn refinement() -> Vec<u8> {
    std::fs::read(repo().join("fuzz/seeds/receipt_refinement/passed")).unwrap()
}

fn resource(session: &str) -> Vec<u8> {
    format!(r#"{{"receipt_kind":"resource_v1","session_id":"{session}"}}"#).into_bytes()
}

#[test]
fn refinement_and_resource_receipts_share_the_chain_page_ack_and_recover() {
    let d = tempdir();
    let p = d.path().join("receipts");
    let mut j = ReceiptJournal::create(&p, key(), &anchor(), ReceiptConfig::default()).unwrap();
    let eval = sid("eval-0001-base");
    // Strict bodies: a refinement body filed under another session, or a
    // body that is not a refinement receipt, is refused before writing.
    let res = j.reserve(&sid("someone-else")).unwrap();
    let e = j
        .append_receipt(&res, ReceiptKind::RefinementV1, &refinement())
        .unwrap_err();
    assert_eq!(e.code(), jc::RECEIPT_BODY_INVALID, "{e}");
    j.release(res).unwrap();
    let res = j.reserve(&eval).unwrap();
    let loose = br#"{"receipt_kind":"refinement_v1","session_id":"eval-0001-base"}"#;
    let e = j
        .append_receipt(&res, ReceiptKind::RefinementV1, loose)
        .unwrap_err();
    assert_eq!(
        e.code(),
        glove_types::codes::json::JSON_MISSING_FIELD,
        "{e}"
    );
    let stored = j
        .append_receipt(&res, ReceiptKind::RefinementV1, &refinement())
        .unwrap();
    assert_eq!(stored.kind, ReceiptKind::RefinementV1);
    let res = j.reserve(&sid("s-1")).unwrap();
    let before = std::fs::metadata(&p).unwrap().len() as usize;
    j.append_receipt(&res, ReceiptKind::ResourceV1, &resource("s-1"))
        .unwrap();
    let after = std::fs::metadata(&p).unwrap().len() as usize;
    // One page holds both kinds; its head is acknowledged exactly.
    let page = j.page(j.base().seq, 10, 1 << 20).unwrap();
    let kinds: Vec<_> = page.receipts.iter().map(|r| r.kind).collect();
    assert_eq!(kinds, [ReceiptKind::RefinementV1, ReceiptKind::ResourceV1]);
    // Replayed or reordered, the refinement envelope does not verify.
    let (e0, e1) = (
        &page.receipts[0].envelope[..],
        &page.receipts[1].envelope[..],
    );
    assert_eq!(verify_page([e0, e1], &key(), &anchor()).unwrap(), page.head);
    assert!(verify_page([e0, e0], &key(), &anchor()).is_err());
    assert!(verify_page([e1, e0], &key(), &anchor()).is_err());
    j.ack(&page.head).unwrap();
    assert_eq!(j.acked(), Some(page.head));
    let head = j.head();
    drop(j);
    // A torn tail (the start of a record whose write never completed) is
    // cut on open; both receipts survive.
    let bytes = std::fs::read(&p).unwrap();
    assert!(after > before + 7 && bytes.len() >= after);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&p)
        .unwrap()
        .write_all(&bytes[before..before + 7])
        .unwrap();
    let (j, report) = ReceiptJournal::open(&p, key(), &anchor(), ReceiptConfig::default()).unwrap();
    assert!(report.torn.is_some(), "the torn tail was found and cut");
    assert_eq!(j.head(), head);
    let r = verify_file(&p, &key(), &anchor()).unwrap();
    assert_eq!(
        r.by_kind,
        [(ReceiptKind::ResourceV1, 1), (ReceiptKind::RefinementV1, 1)]
    );
    // The receipt log reports each session's receipt with its kind.
    let log = StoreReceipts::new(j);
    let kind = |s: &SessionId| {
        log.terminal_receipt(Subject::Session(s))
            .unwrap()
            .map(|e| e.kind())
    };
    assert_eq!(kind(&eval), Some(TerminalKind::Refinement));
    assert_eq!(kind(&sid("s-1")), Some(TerminalKind::Resource));
}
