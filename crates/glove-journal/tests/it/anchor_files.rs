//! Anchor files (`<journal>.anchor`): the decoder's properties, the
//! anchored session store, crash windows of compaction, and what happens
//! when an anchor cannot be written.

use crate::common::{anchor, body, key, memdir, no_spawn, tempdir, until_opened_twice, write_file};
use crate::sessions::{key as ikey, new_session, sid};
use glove_journal::anchor_file::{
    self, AnchorFile, AnchorRecord, ANCHOR_FILE_LEN, RECEIPT_ANCHOR_DOMAIN, STORE_ANCHOR_DOMAIN,
};
use glove_journal::receipt::{ReceiptConfig, ReceiptJournal, ReceiptKind};
use glove_journal::testing::StoreWriter;
use glove_journal::{replay_bytes, Anchor, SessionStore};
use glove_types::codes::journal as jc;
use glove_types::stage::SessionStage;
use proptest::prelude::*;
use std::path::Path;

fn any_anchor() -> impl Strategy<Value = Anchor> {
    (any::<u64>(), 80u64.., any::<[u8; 32]>()).prop_map(|(records, byte_len, head)| Anchor {
        records,
        byte_len,
        head,
    })
}

fn any_record() -> impl Strategy<Value = AnchorRecord> {
    (
        any::<[u8; 16]>(),
        any_anchor(),
        proptest::option::of(any_anchor()),
    )
        .prop_map(|(journal_id, current, next)| AnchorRecord {
            journal_id,
            current,
            next,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Encoding then decoding gives the record back; changing any one
    /// byte, or the domain, is refused.
    #[test]
    fn anchor_files_round_trip_and_refuse_any_change(
        rec in any_record(),
        at in 0..ANCHOR_FILE_LEN,
        flip in 1..=255u8,
    ) {
        let b = anchor_file::encode(&key(), RECEIPT_ANCHOR_DOMAIN, &rec);
        prop_assert_eq!(b.len(), ANCHOR_FILE_LEN);
        prop_assert_eq!(anchor_file::decode(&key(), RECEIPT_ANCHOR_DOMAIN, &b).unwrap(), rec);
        let mut changed = b.clone();
        changed[at] ^= flip;
        let e = anchor_file::decode(&key(), RECEIPT_ANCHOR_DOMAIN, &changed).unwrap_err();
        prop_assert_eq!(e.code(), jc::JOURNAL_ANCHOR_FILE_INVALID);
        prop_assert!(anchor_file::decode(&key(), STORE_ANCHOR_DOMAIN, &b).is_err());
    }

    /// Arbitrary bytes never panic the decoder and never decode.
    #[test]
    fn arbitrary_bytes_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        prop_assert!(anchor_file::decode(&key(), STORE_ANCHOR_DOMAIN, &bytes).is_err());
    }
}

fn anchored_store(
    p: &Path,
) -> Result<(SessionStore, glove_journal::OpenReport), glove_journal::JournalError> {
    SessionStore::open_anchored(p, AnchorFile::beside(p, key(), STORE_ANCHOR_DOMAIN)?)
}

#[test]
fn the_store_anchor_follows_every_transition() {
    let d = tempdir();
    let p = d.path().join("sessions");
    let file = AnchorFile::beside(&p, key(), STORE_ANCHOR_DOMAIN).unwrap();
    let mut st = SessionStore::create_anchored(&p, file).unwrap();
    let (a, ka) = (sid("a"), ikey("ka"));
    st.create_session(new_session(&a, &ka, br#"{"p":1}"#))
        .unwrap();
    let after_create = std::fs::read(&p).unwrap();
    st.transition(&a, SessionStage::Preparing, b"{}").unwrap();
    let after_prepare = std::fs::read(&p).unwrap();
    st.transition(&a, SessionStage::Failed, br#"{"c":"x"}"#)
        .unwrap();
    // The anchor on disk is the store's durable anchor after each append.
    let on_disk = AnchorFile::beside(&p, key(), STORE_ANCHOR_DOMAIN)
        .unwrap()
        .load()
        .unwrap()
        .unwrap();
    assert_eq!(on_disk.current, st.anchor());
    assert_eq!(on_disk.next, None);
    drop(st);
    let _g = no_spawn();
    let full = std::fs::read(&p).unwrap();
    for older in [&after_create, &after_prepare] {
        write_file(&p, older);
        let e = anchored_store(&p).unwrap_err();
        assert_eq!(e.code(), jc::JOURNAL_SHORTER_THAN_ANCHOR);
    }
    write_file(&p, &full);
    let (st, report) = anchored_store(&p).unwrap();
    assert!(!report.unanchored);
    assert_eq!(st.get(&a).unwrap().stage(), SessionStage::Failed);
    drop(st);
    // A store missing beside its anchor is not recreated.
    std::fs::remove_file(&p).unwrap();
    let file = AnchorFile::beside(&p, key(), STORE_ANCHOR_DOMAIN).unwrap();
    let e = SessionStore::create_anchored(&p, file).unwrap_err();
    assert_eq!(e.code(), jc::JOURNAL_MISSING_BUT_ANCHORED);
    // A store from before anchor files opens, reported, and is anchored
    // from then on.
    write_file(&p, &full);
    std::fs::remove_file(p.with_file_name("sessions.anchor")).unwrap();
    let (_st, report) = anchored_store(&p).unwrap();
    assert!(report.unanchored);
    assert!(p.with_file_name("sessions.anchor").exists());
}

#[test]
fn an_anchor_that_cannot_be_written_poisons_the_writer() {
    let d = tempdir();
    let p = d.path().join("sessions");
    let file = AnchorFile::beside(&p, key(), STORE_ANCHOR_DOMAIN).unwrap();
    let mut st = SessionStore::create_anchored(&p, file).unwrap();
    // A directory at the anchor's name: the rename over it fails.
    let at = p.with_file_name("sessions.anchor");
    std::fs::remove_file(&at).unwrap();
    std::fs::create_dir(&at).unwrap();
    let (a, ka) = (sid("a"), ikey("ka"));
    assert!(st
        .create_session(new_session(&a, &ka, br#"{"p":1}"#))
        .is_err());
    let e = st
        .transition(&a, SessionStage::Preparing, b"{}")
        .unwrap_err();
    assert_eq!(e.code(), jc::JOURNAL_POISONED);
    drop(st);
    std::fs::remove_dir(&at).unwrap();
    let _g = no_spawn();
    // The creation reached the disk; a reopen anchors it.
    let (st, _) = anchored_store(&p).unwrap();
    assert!(st.get(&a).is_some());

    let r = d.path().join("receipts");
    let mut j = ReceiptJournal::create(&r, key(), &anchor(), ReceiptConfig::default()).unwrap();
    let at = r.with_file_name("receipts.anchor");
    std::fs::remove_file(&at).unwrap();
    std::fs::create_dir(&at).unwrap();
    assert!(j.reserve(&sid("x")).is_err());
    let e = j.reserve(&sid("y")).unwrap_err();
    assert_eq!(e.code(), jc::JOURNAL_POISONED);
}

/// A crash during compaction, at either side of the rename, leaves a
/// journal that matches one of the two anchors the file names.
#[test]
fn compaction_crash_windows_open() {
    let d = tempdir();
    let p = d.path().join("receipts");
    let cfg = ReceiptConfig::default();
    let mut j = ReceiptJournal::create(&p, key(), &anchor(), cfg).unwrap();
    for i in 0..4 {
        let r = j.reserve(&sid(&format!("s{i}"))).unwrap();
        j.append_receipt(&r, ReceiptKind::ResourceV1, &body(i))
            .unwrap();
    }
    let older = std::fs::read(&p).unwrap();
    let r = j.reserve(&sid("s4")).unwrap();
    j.append_receipt(&r, ReceiptKind::ResourceV1, &body(4))
        .unwrap();
    let page = j.page(anchor().seq, 3, 1 << 20).unwrap();
    j.ack(&page.head).unwrap();
    let before = std::fs::read(&p).unwrap();
    let id = j.journal().journal_id();
    let old_anchor = j.journal().anchor();
    j.compact().unwrap();
    let after = std::fs::read(&p).unwrap();
    let new_anchor = j.journal().anchor();
    drop(j);
    let spec = cfg.spec();
    assert_eq!(
        replay_bytes(&after, &spec, None).unwrap().anchor(),
        new_anchor
    );
    let _g = no_spawn();
    let both = AnchorRecord {
        journal_id: id,
        current: old_anchor,
        next: Some(new_anchor),
    };
    let file = AnchorFile::beside(&p, key(), RECEIPT_ANCHOR_DOMAIN).unwrap();
    for (case, bytes) in [("before the rename", &before), ("after the rename", &after)] {
        file.store(&both).unwrap();
        write_file(&p, bytes);
        let (j, _) = ReceiptJournal::open(&p, key(), &anchor(), cfg)
            .unwrap_or_else(|e| panic!("{case}: {e:?}"));
        assert_eq!(j.head().seq, anchor().seq + 5, "{case}");
        drop(j);
        // The reopen left only the anchor of the file in place.
        let now = file.load().unwrap().unwrap();
        assert_eq!(now.next, None, "{case}");
    }
    // An older copy matches neither.
    file.store(&both).unwrap();
    write_file(&p, &older);
    let e = ReceiptJournal::open(&p, key(), &anchor(), cfg).unwrap_err();
    assert_eq!(e.code(), jc::JOURNAL_SHORTER_THAN_ANCHOR);
}

/// Review finding: the store's anchor was read before its lock, which open
/// may wait for; a holder that appended (moving the anchor on) during the
/// wait left the waiter checking a stale anchor, so a store cut back to it
/// was accepted and re-anchored. The anchor is read under the lock now.
#[test]
fn a_store_cut_back_while_an_open_waited_is_refused_against_the_fresh_anchor() {
    // In memory: the holder's syncs must end within the waiter's wait.
    let d = memdir();
    let p = d.path().join("sessions");
    let file = AnchorFile::beside(&p, key(), STORE_ANCHOR_DOMAIN).unwrap();
    let mut st = SessionStore::create_anchored(&p, file).unwrap();
    let (a, ka) = (sid("a"), ikey("ka"));
    st.create_session(new_session(&a, &ka, br#"{"p":1}"#))
        .unwrap();
    let before = std::fs::read(&p).unwrap();
    let q = p.clone();
    let waiter = std::thread::spawn(move || anchored_store(&q).map(|(s, _)| s.anchor()));
    until_opened_twice(&p);
    // The holder moves on (its anchor with it); the file is then cut back
    // to what the waiter could have read as the anchor before its wait.
    st.transition(&a, SessionStage::Preparing, b"{}").unwrap();
    // In place: the waiter holds this very file open.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(before.len() as u64)
        .unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), before);
    drop(st);
    let e = waiter.join().unwrap().unwrap_err();
    assert_eq!(e.code(), jc::JOURNAL_SHORTER_THAN_ANCHOR, "{e:?}");
}
