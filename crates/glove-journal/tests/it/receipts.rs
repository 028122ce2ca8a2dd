//! The receipt journal and the offline verifier.

use crate::common::{anchor, body, key, no_spawn, tempdir, write_file};
use crate::sessions::sid;
use glove_journal::error::{CorruptKind, JournalError};
use glove_journal::receipt::{
    verify_bytes, verify_file, verify_page, ReceiptConfig, ReceiptHead, ReceiptJournal, ReceiptKey,
    ReceiptKind, Reclaimable,
};
use glove_journal::replay_bytes;
use glove_types::codes::journal as jc;

fn corrupt(e: JournalError) -> CorruptKind {
    match e {
        JournalError::Corrupt { kind, .. } => kind,
        other => panic!("{other:?}"),
    }
}

fn filled(n: u64) -> (tempfile::TempDir, std::path::PathBuf, ReceiptJournal) {
    let d = tempdir();
    let p = d.path().join("receipts");
    let mut j = ReceiptJournal::create(&p, key(), &anchor(), ReceiptConfig::default()).unwrap();
    for i in 0..n {
        let s = sid(&format!("s{i}"));
        let r = j.reserve(&s).unwrap();
        j.append_receipt(&r, ReceiptKind::ResourceV1, &body(i))
            .unwrap();
    }
    (d, p, j)
}

#[test]
fn reserve_append_page_ack_reopen_verify() {
    let (_d, p, mut j) = filled(5);
    assert_eq!(j.head().seq, anchor().seq + 5);
    let page = j.page(anchor().seq, 3, 1 << 20).unwrap();
    assert_eq!(
        page.receipts.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![101, 102, 103]
    );
    let head = verify_page(
        page.receipts.iter().map(|r| &r.envelope[..]),
        &key(),
        &anchor(),
    )
    .unwrap();
    assert_eq!(head, page.head);
    j.ack(&page.head).unwrap();
    let rest = j.page(page.head.seq, 10, 1 << 20).unwrap();
    assert_eq!(rest.receipts.len(), 2);
    assert_eq!(rest.head, j.head());
    // An envelope is canonical JSON carrying the kind and sequence.
    let env = std::str::from_utf8(&rest.receipts[0].envelope).unwrap();
    assert!(
        env.starts_with(r#"{"body":{"cpu_ms":3,"receipt_kind":"resource_v1""#),
        "{env}"
    );
    assert!(env.contains(r#""seq":104"#));
    drop(j);
    let (j, report) = ReceiptJournal::open(&p, key(), &anchor(), ReceiptConfig::default()).unwrap();
    assert!(report.torn.is_none());
    assert_eq!(j.acked(), Some(page.head));
    assert_eq!(j.receipts().len(), 5);
    let v = verify_file(&p, &key(), &anchor()).unwrap();
    assert_eq!((v.receipts, v.head, v.base), (5, j.head(), anchor()));
    assert_eq!(v.receipts_after_anchor, 5);
    // Any head on the chain is a usable anchor.
    assert_eq!(
        verify_file(&p, &key(), &page.head)
            .unwrap()
            .receipts_after_anchor,
        2
    );
}

#[test]
fn ack_must_name_the_exact_delivered_head() {
    let (_d, _p, mut j) = filled(3);
    let h = j.head();
    assert_eq!(j.ack(&h).unwrap_err().code(), jc::RECEIPT_ACK_MISMATCH);
    let page = j.page(anchor().seq, 2, 1 << 20).unwrap();
    assert_eq!(j.ack(&h).unwrap_err().code(), jc::RECEIPT_ACK_MISMATCH);
    let mut wrong = page.head;
    wrong.chain[31] ^= 1;
    assert_eq!(j.ack(&wrong).unwrap_err().code(), jc::RECEIPT_ACK_MISMATCH);
    j.ack(&page.head).unwrap();
    j.ack(&page.head).unwrap();
    // Re-delivering an earlier page does not allow acknowledging backwards.
    let early = j.page(anchor().seq, 1, 1 << 20).unwrap();
    assert_eq!(
        j.ack(&early.head).unwrap_err().code(),
        jc::RECEIPT_ACK_MISMATCH
    );
}

#[test]
fn page_bounds() {
    let (_d, _p, mut j) = filled(3);
    let e = j.page(anchor().seq - 1, 1, 1 << 20).unwrap_err();
    assert_eq!(e.code(), jc::RECEIPT_PAGE_COMPACTED);
    let e = j.page(anchor().seq + 4, 1, 1 << 20).unwrap_err();
    assert_eq!(e.code(), jc::RECEIPT_PAGE_OUT_OF_RANGE);
    let e = j.page(anchor().seq, 1, 10).unwrap_err();
    assert_eq!(e.code(), jc::RECEIPT_PAGE_TOO_SMALL);
    let one = j.receipts()[0].envelope.len() as u64;
    let p = j.page(anchor().seq, 10, one * 2 + 1).unwrap();
    assert_eq!(p.receipts.len(), 2);
    let empty = j.page(j.head().seq, 10, 1 << 20).unwrap();
    assert!(empty.receipts.is_empty());
    assert_eq!(empty.head, j.head());
}

#[test]
fn reservations_guarantee_room_for_their_receipt() {
    let d = tempdir();
    let p = d.path().join("receipts");
    let config = ReceiptConfig {
        max_bytes: 4096,
        max_records: 1000,
        max_body_bytes: 512,
    };
    let mut j = ReceiptJournal::create(&p, key(), &anchor(), config).unwrap();
    let mut held = Vec::new();
    let mut i = 0;
    loop {
        match j.reserve(&sid(&format!("s{i}"))) {
            Ok(r) => held.push(r),
            Err(e) => {
                assert_eq!(e.code(), jc::RECEIPT_RESERVATION_REFUSED);
                break;
            }
        }
        i += 1;
    }
    assert!(held.len() >= 2, "{}", held.len());
    assert_eq!(
        j.reserve(&sid("s0")).unwrap_err().code(),
        jc::RECEIPT_RESERVATION_EXISTS
    );
    // Every held reservation can be spent with a receipt of the largest
    // size, although the journal refuses new reservations.
    let big = format!(
        r#"{{"pad":"{}","receipt_kind":"resource_v1"}}"#,
        "x".repeat(512 - 39)
    );
    assert_eq!(big.len(), 512);
    let last = held.pop().unwrap();
    for r in &held {
        j.append_receipt(r, ReceiptKind::ResourceV1, big.as_bytes())
            .unwrap();
        assert_eq!(
            j.append_receipt(r, ReceiptKind::ResourceV1, big.as_bytes())
                .unwrap_err()
                .code(),
            jc::RECEIPT_RESERVATION_UNKNOWN
        );
    }
    // A refused body keeps the reservation; release gives it back.
    let too_big = format!(
        r#"{{"pad":"{}","receipt_kind":"resource_v1"}}"#,
        "x".repeat(600)
    );
    assert_eq!(
        j.append_receipt(&last, ReceiptKind::ResourceV1, too_big.as_bytes())
            .unwrap_err()
            .code(),
        jc::RECEIPT_TOO_LARGE
    );
    assert_eq!(
        j.append_receipt(&last, ReceiptKind::RefinementV1, big.as_bytes())
            .unwrap_err()
            .code(),
        jc::RECEIPT_KIND_MISMATCH
    );
    let s = last.session().clone();
    j.release(last).unwrap();
    assert!(j.held_reservation(&s).is_none());
    drop(j);
    let (j, _) = ReceiptJournal::open(&p, key(), &anchor(), config).unwrap();
    assert_eq!(j.outstanding().count(), 0);
}

#[test]
fn reservations_survive_reopen() {
    let (_d, p, mut j) = filled(1);
    let _r = j.reserve(&sid("live")).unwrap();
    drop(j);
    let (mut j, _) = ReceiptJournal::open(&p, key(), &anchor(), ReceiptConfig::default()).unwrap();
    let r = j.held_reservation(&sid("live")).expect("held");
    j.append_receipt(&r, ReceiptKind::ResourceV1, &body(9))
        .unwrap();
}

#[test]
fn compaction_keeps_the_chain_verifiable_from_the_acked_head() {
    let (_d, p, mut j) = filled(6);
    let _held = j.reserve(&sid("live")).unwrap();
    let page = j.page(anchor().seq, 4, 1 << 20).unwrap();
    j.ack(&page.head).unwrap();
    let before: Vec<_> = j.receipts()[4..].to_vec();
    let report = j.compact().unwrap();
    assert_eq!((report.removed, report.kept), (4, 2));
    assert_eq!(j.base(), page.head);
    assert_eq!(j.receipts(), &before[..]);
    let e = j.page(anchor().seq, 1, 1 << 20).unwrap_err();
    assert_eq!(e.code(), jc::RECEIPT_PAGE_COMPACTED);
    let r = j.held_reservation(&sid("live")).unwrap();
    j.append_receipt(&r, ReceiptKind::ResourceV1, &body(7))
        .unwrap();
    drop(j);
    let (j, _) = ReceiptJournal::open(&p, key(), &anchor(), ReceiptConfig::default()).unwrap();
    assert_eq!(j.receipts().len(), 3);
    assert_eq!(j.head().seq, anchor().seq + 7);
    let e = verify_file(&p, &key(), &anchor()).unwrap_err();
    assert_eq!(corrupt(e), CorruptKind::ReceiptAnchorMismatch);
    let v = verify_file(&p, &key(), &page.head).unwrap();
    assert_eq!((v.base, v.receipts), (page.head, 3));
    drop(j);
    // Without the acknowledged-head file the compaction is unexplained.
    std::fs::remove_file(p.with_file_name("receipts.ack")).unwrap();
    let e = ReceiptJournal::open(&p, key(), &anchor(), ReceiptConfig::default()).unwrap_err();
    assert_eq!(e.code(), jc::RECEIPT_ACK_MISSING);
}

/// The compaction policy's numbers are exactly what compaction drops, stay
/// right across reopen, and the policy fires on a fraction of the budget.
#[test]
fn reclaimable_is_what_compaction_drops() {
    let d = tempdir();
    let p = d.path().join("receipts");
    // A budget small enough that a handful of receipts is a quarter of it.
    let cfg = ReceiptConfig {
        max_records: 36,
        ..ReceiptConfig::default()
    };
    let mut j = ReceiptJournal::create(&p, key(), &anchor(), cfg).unwrap();
    assert_eq!(j.reclaimable(), Reclaimable::default());
    for i in 0..4 {
        let r = j.reserve(&sid(&format!("s{i}"))).unwrap();
        j.append_receipt(&r, ReceiptKind::ResourceV1, &body(i))
            .unwrap();
    }
    let released = j.reserve(&sid("gone")).unwrap();
    j.release(released).unwrap();
    let _held = j.reserve(&sid("live")).unwrap();
    assert!(!j.needs_compaction(), "nothing acknowledged");
    let page = j.page(anchor().seq, 2, 1 << 20).unwrap();
    j.ack(&page.head).unwrap();
    let r = j.reclaimable();
    assert_eq!(r.receipts, 2);
    // 2 receipts, 4 spent reservations, a reservation and its release.
    assert_eq!(r.records, 8);
    assert!(!j.needs_compaction(), "8 of 36 records is under a quarter");
    let page = j.page(page.head.seq, 1, 1 << 20).unwrap();
    j.ack(&page.head).unwrap();
    let r = j.reclaimable();
    assert_eq!((r.receipts, r.records), (3, 9));
    assert!(j.needs_compaction(), "9 of 36 records is a quarter");
    drop(j);
    let _g = no_spawn();
    let (mut j, _) = ReceiptJournal::open(&p, key(), &anchor(), cfg).unwrap();
    assert_eq!(j.reclaimable(), r, "the same after reopen");
    let (len, records) = (j.journal().len_bytes(), j.journal().record_count());
    let report = j.compact().unwrap();
    assert_eq!((report.removed, report.kept), (3, 1));
    assert_eq!(j.journal().len_bytes(), len - r.bytes);
    assert_eq!(j.journal().record_count(), records - r.records);
    assert_eq!(j.reclaimable(), Reclaimable::default());
    assert!(!j.needs_compaction());
}

#[test]
fn a_journal_shorter_than_its_acked_head_is_corrupt() {
    let (_d, p, mut j) = filled(4);
    let page = j.page(anchor().seq, 10, 1 << 20).unwrap();
    j.ack(&page.head).unwrap();
    drop(j);
    let bytes = std::fs::read(&p).unwrap();
    let spec = ReceiptConfig::default().spec();
    let r = replay_bytes(&bytes, &spec, None).unwrap();
    // Cut the last receipt exactly at its record boundary.
    let last = r.records.last().unwrap().offset as usize;
    write_file(&p, &bytes[..last]);
    let e = ReceiptJournal::open(&p, key(), &anchor(), ReceiptConfig::default()).unwrap_err();
    assert_eq!(e.code(), jc::JOURNAL_SHORTER_THAN_ANCHOR);
    // The anchor file deleted beside an acknowledged journal: refused as a
    // deletion (review: otherwise the open would accept the cut and write a
    // fresh anchor for it).
    std::fs::remove_file(p.with_file_name("receipts.anchor")).unwrap();
    let e = ReceiptJournal::open(&p, key(), &anchor(), ReceiptConfig::default()).unwrap_err();
    assert_eq!(e.code(), jc::JOURNAL_ANCHOR_FILE_MISSING);
    // Without either (a journal from before anchor and ack files), it opens.
    std::fs::remove_file(p.with_file_name("receipts.ack")).unwrap();
    ReceiptJournal::open(&p, key(), &anchor(), ReceiptConfig::default())
        .expect("an unanchored, unacknowledged journal opens");
    // The verifier alone cannot see the cut, but a head it trusts can.
    let e = verify_bytes(&bytes[..last], &key(), &page.head).unwrap_err();
    assert_eq!(corrupt(e), CorruptKind::ReceiptAnchorMismatch);
}

#[test]
fn tampering_is_detected() {
    let (_d, p, mut j) = filled(2);
    let page = j.page(anchor().seq, 10, 1 << 20).unwrap();
    j.ack(&page.head).unwrap();
    drop(j);
    let cfg = ReceiptConfig::default();
    let other = ReceiptKey::from_bytes([1; 32]);
    // Wrong key: the anchor file fails its MAC (checked first), the first
    // receipt too (and the ack file).
    let e = ReceiptJournal::open(&p, other.clone(), &anchor(), cfg).unwrap_err();
    assert_eq!(e.code(), jc::JOURNAL_ANCHOR_FILE_INVALID);
    assert_eq!(
        corrupt(verify_file(&p, &other, &anchor()).unwrap_err()),
        CorruptKind::ReceiptMacMismatch
    );
    // Wrong anchor.
    let wrong = ReceiptHead {
        seq: anchor().seq,
        chain: [0x22; 32],
    };
    let e = ReceiptJournal::open(&p, key(), &wrong, cfg).unwrap_err();
    assert_eq!(e.code(), jc::RECEIPT_ANCHOR_MISMATCH);
    // A tampered acknowledged-head file.
    let ack = p.with_file_name("receipts.ack");
    let mut a = std::fs::read(&ack).unwrap();
    a[30] ^= 1;
    write_file(&ack, &a);
    let e = ReceiptJournal::open(&p, key(), &anchor(), cfg).unwrap_err();
    assert_eq!(e.code(), jc::RECEIPT_ACK_FILE_INVALID);
    // A page with a forged envelope.
    let mut env = page.receipts[1].envelope.to_vec();
    let pos = env.windows(6).position(|w| w == b"cpu_ms").unwrap() + 8;
    env[pos] = b'9';
    let e = verify_page(
        [&page.receipts[0].envelope[..], &env[..]],
        &key(),
        &anchor(),
    )
    .unwrap_err();
    assert_eq!(corrupt(e), CorruptKind::ReceiptMacMismatch);
    // Reordered pages fail on sequence.
    let e = verify_page(
        [
            &page.receipts[1].envelope[..],
            &page.receipts[0].envelope[..],
        ],
        &key(),
        &anchor(),
    )
    .unwrap_err();
    assert_eq!(corrupt(e), CorruptKind::ReceiptSequenceInvalid);
}

/// Issue 14, finding 3: the receipt journal is anchored like the store.
/// Each case below opened cleanly before the anchor existed.
mod issue_14_receipt_anchor {
    use super::*;

    fn open(p: &std::path::Path) -> Result<ReceiptJournal, JournalError> {
        ReceiptJournal::open(p, key(), &anchor(), ReceiptConfig::default()).map(|(j, _)| j)
    }

    fn record_offsets(bytes: &[u8]) -> Vec<usize> {
        let spec = ReceiptConfig::default().spec();
        let r = replay_bytes(bytes, &spec, None).unwrap();
        r.records.iter().map(|m| m.offset as usize).collect()
    }

    #[test]
    fn a_corrupted_last_receipt_is_not_cut_as_a_torn_tail() {
        let (_d, p, j) = filled(3);
        drop(j);
        let _g = crate::common::no_spawn();
        let mut bytes = std::fs::read(&p).unwrap();
        let n = bytes.len();
        bytes[n - 40] ^= 0x01;
        write_file(&p, &bytes);
        let e = open(&p).unwrap_err();
        assert_eq!(e.code(), jc::JOURNAL_ANCHOR_MISMATCH, "{e:?}");
        // Nothing was repaired: the file is as it was left.
        assert_eq!(std::fs::read(&p).unwrap(), bytes);
    }

    #[test]
    fn a_cut_at_a_record_boundary_is_refused() {
        let (_d, p, j) = filled(3);
        drop(j);
        let _g = crate::common::no_spawn();
        let bytes = std::fs::read(&p).unwrap();
        let last = *record_offsets(&bytes).last().unwrap();
        write_file(&p, &bytes[..last]);
        let e = open(&p).unwrap_err();
        assert_eq!(e.code(), jc::JOURNAL_SHORTER_THAN_ANCHOR, "{e:?}");
    }

    #[test]
    fn a_rollback_to_an_older_copy_is_refused() {
        let (_d, p, mut j) = filled(2);
        let older = std::fs::read(&p).unwrap();
        let r = j.reserve(&sid("later")).unwrap();
        j.append_receipt(&r, ReceiptKind::ResourceV1, &body(7))
            .unwrap();
        drop(j);
        let _g = crate::common::no_spawn();
        write_file(&p, &older);
        let e = open(&p).unwrap_err();
        assert_eq!(e.code(), jc::JOURNAL_SHORTER_THAN_ANCHOR, "{e:?}");
    }

    #[test]
    fn a_deleted_journal_is_not_recreated_and_its_evidence_is_kept() {
        let (_d, p, mut j) = filled(2);
        let page = j.page(anchor().seq, 10, 1 << 20).unwrap();
        j.ack(&page.head).unwrap();
        drop(j);
        let _g = crate::common::no_spawn();
        let ack = p.with_file_name("receipts.ack");
        let ack_bytes = std::fs::read(&ack).unwrap();
        std::fs::remove_file(&p).unwrap();
        let e = ReceiptJournal::create(&p, key(), &anchor(), ReceiptConfig::default()).unwrap_err();
        assert_eq!(e.code(), jc::JOURNAL_MISSING_BUT_ANCHORED, "{e:?}");
        assert_eq!(std::fs::read(&ack).unwrap(), ack_bytes, "the ack is kept");
        assert!(!p.exists(), "no journal was created");
    }

    #[test]
    fn a_crash_after_the_append_before_the_anchor_opens() {
        // The anchor lags the journal by the records of one append at most:
        // a journal longer than its anchor is fine.
        let (_d, p, j) = filled(2);
        let anchor_file = p.with_file_name("receipts.anchor");
        let stale = std::fs::read(&anchor_file).unwrap();
        let mut j = j;
        let r = j.reserve(&sid("more")).unwrap();
        j.append_receipt(&r, ReceiptKind::ResourceV1, &body(5))
            .unwrap();
        drop(j);
        let _g = crate::common::no_spawn();
        std::fs::write(&anchor_file, &stale).unwrap();
        let j = open(&p).unwrap();
        assert_eq!(j.receipts().len(), 3);
    }
}

/// A receipt body naming session `s<n>`.
fn session_body(n: u64) -> Vec<u8> {
    format!(r#"{{"receipt_kind":"resource_v1","session_id":"s{n}"}}"#).into_bytes()
}

#[test]
fn a_kept_receipt_is_found_for_its_session_after_compaction_and_reopen() {
    let d = tempdir();
    let p = d.path().join("receipts");
    let mut j = ReceiptJournal::create(&p, key(), &anchor(), ReceiptConfig::default()).unwrap();
    for i in 0..6 {
        let s = sid(&format!("s{i}"));
        let r = j.reserve(&s).unwrap();
        j.append_receipt(&r, ReceiptKind::ResourceV1, &session_body(i))
            .unwrap();
    }
    // Acknowledge five, compact them away: s5's receipt is kept.
    let page = j.page(anchor().seq, 5, 1 << 20).unwrap();
    j.ack(&page.head).unwrap();
    j.compact().unwrap();
    let found = |j: &ReceiptJournal, n: u64| -> Vec<u64> {
        j.receipts_of(&sid(&format!("s{n}")))
            .iter()
            .map(|r| r.seq)
            .collect()
    };
    assert_eq!(found(&j, 5), vec![anchor().seq + 6]);
    assert!(found(&j, 0).is_empty(), "compacted away");
    drop(j);
    // The compacted file keeps the receipt without its record's session;
    // the index finds it by the body's.
    let (j, _) = ReceiptJournal::open(&p, key(), &anchor(), ReceiptConfig::default()).unwrap();
    assert_eq!(found(&j, 5), vec![anchor().seq + 6]);
    assert!(found(&j, 0).is_empty());
}
