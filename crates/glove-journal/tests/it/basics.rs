//! The generic journal: create, open, append, placement, locking, anchors,
//! group commit, and each corruption class on a crafted file.

use crate::common::{tempdir, until_opened_twice, write_file, SPEC};
use glove_journal::error::{CorruptKind, JournalError};
use glove_journal::format::{record_len, JournalKind, HEADER_LEN};
use glove_journal::{replay_bytes, Anchor, Journal, JournalSpec};
use glove_types::codes::{file as fc, journal as jc};
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

fn corrupt_kind(e: &JournalError) -> Option<CorruptKind> {
    match e {
        JournalError::Corrupt { kind, .. } => Some(*kind),
        _ => None,
    }
}

fn three_records() -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>) {
    let d = tempdir();
    let p = d.path().join("j");
    let j = Journal::create(&p, &SPEC).unwrap();
    for (i, payload) in [&b"alpha"[..], b"bravo-bravo", b"c"].iter().enumerate() {
        let a = j.append(1 + (i as u16 % 2), payload).unwrap();
        assert_eq!(a.seq, i as u64 + 1);
    }
    drop(j);
    let bytes = std::fs::read(&p).unwrap();
    (d, p, bytes)
}

/// Record byte ranges of a valid image.
fn ranges(bytes: &[u8], spec: &JournalSpec) -> Vec<std::ops::Range<usize>> {
    let r = replay_bytes(bytes, spec, None).unwrap();
    r.records
        .iter()
        .map(|m| m.offset as usize..m.payload.end + 32)
        .collect()
}

#[test]
fn create_append_reopen() {
    let (_d, p, bytes) = three_records();
    let o = Journal::open(&p, &SPEC, None).unwrap();
    let got: Vec<_> = o
        .records()
        .map(|r| (r.kind, r.seq, r.payload.to_vec()))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, 1, b"alpha".to_vec()),
            (2, 2, b"bravo-bravo".to_vec()),
            (1, 3, b"c".to_vec())
        ]
    );
    assert!(o.report.torn.is_none());
    assert_eq!(o.journal.len_bytes(), bytes.len() as u64);
    assert_eq!(
        bytes.len(),
        HEADER_LEN + record_len(5) + record_len(11) + record_len(1)
    );
    let a = o.journal.append(3, b"d").unwrap();
    assert_eq!(a.seq, 4);
    assert_eq!(
        Journal::create(&p, &SPEC).unwrap_err().code(),
        jc::JOURNAL_EXISTS
    );
}

#[test]
fn second_writer_is_locked_out() {
    let (_d, p, _) = three_records();
    let first = Journal::open(&p, &SPEC, None).unwrap();
    let e = Journal::open(&p, &SPEC, None).unwrap_err();
    assert_eq!(e.code(), jc::JOURNAL_LOCKED);
    drop(first);
    Journal::open(&p, &SPEC, None).unwrap();
}

#[test]
fn placement_rules() {
    let (d, p, _) = three_records();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(
        Journal::open(&p, &SPEC, None).unwrap_err().code(),
        fc::FILE_BAD_MODE
    );
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    let link = d.path().join("link");
    std::os::unix::fs::symlink(&p, &link).unwrap();
    assert_eq!(
        Journal::open(&link, &SPEC, None).unwrap_err().code(),
        fc::FILE_SYMLINK
    );
    let hard = d.path().join("hard");
    std::fs::hard_link(&p, &hard).unwrap();
    assert_eq!(
        Journal::open(&p, &SPEC, None).unwrap_err().code(),
        fc::FILE_LINK_COUNT
    );
    std::fs::remove_file(&hard).unwrap();
    if rustix::process::geteuid().is_root() {
        std::os::unix::fs::chown(&p, Some(4242), None).unwrap();
        assert_eq!(
            Journal::open(&p, &SPEC, None).unwrap_err().code(),
            fc::FILE_WRONG_OWNER
        );
        std::os::unix::fs::chown(&p, Some(0), None).unwrap();
    }
    Journal::open(&p, &SPEC, None).unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(
        Journal::open(&p, &SPEC, None).unwrap_err().code(),
        jc::JOURNAL_DIR_BAD_MODE
    );
    assert_eq!(
        Journal::create(&d.path().join("other"), &SPEC)
            .unwrap_err()
            .code(),
        jc::JOURNAL_DIR_BAD_MODE
    );
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(
        Journal::open(&d.path().join("missing"), &SPEC, None)
            .unwrap_err()
            .code(),
        jc::JOURNAL_NOT_FOUND
    );
    // Creation leaves no temporary siblings behind.
    let names: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn anchors_catch_a_cut_at_a_record_boundary() {
    let (_d, p, bytes) = three_records();
    let o = Journal::open(&p, &SPEC, None).unwrap();
    let anchor = o.journal.anchor();
    assert_eq!(anchor.records, 3);
    assert_eq!(anchor.byte_len, bytes.len() as u64);
    drop(o);
    Journal::open(&p, &SPEC, Some(&anchor)).unwrap();
    let r = ranges(&bytes, &SPEC);
    write_file(&p, &bytes[..r[2].start]);
    // Without the anchor the cut is invisible…
    assert_eq!(Journal::open(&p, &SPEC, None).unwrap().record_count(), 2);
    // …with it, it is corrupt.
    let e = Journal::open(&p, &SPEC, Some(&anchor)).unwrap_err();
    assert_eq!(e.code(), jc::JOURNAL_SHORTER_THAN_ANCHOR);
    // An earlier anchor still matches the shorter file.
    let early = Anchor {
        records: 2,
        byte_len: r[2].start as u64,
        head: replay_bytes(&bytes, &SPEC, None).unwrap().records[1].digest,
    };
    Journal::open(&p, &SPEC, Some(&early)).unwrap();
    // A wrong head at the right length is an anchor mismatch.
    let wrong = Anchor {
        head: [0; 32],
        ..early
    };
    let e = Journal::open(&p, &SPEC, Some(&wrong)).unwrap_err();
    assert_eq!(corrupt_kind(&e), Some(CorruptKind::AnchorMismatch));
    // A torn tail inside the anchored prefix is not repaired.
    write_file(&p, &bytes[..bytes.len() - 1]);
    let e = Journal::open(&p, &SPEC, Some(&anchor)).unwrap_err();
    assert_eq!(e.code(), jc::JOURNAL_SHORTER_THAN_ANCHOR);
}

#[test]
fn torn_tail_is_saved_aside_and_cut_once() {
    let (d, p, bytes) = three_records();
    let r = ranges(&bytes, &SPEC);
    let cut = r[2].start + 7;
    write_file(&p, &bytes[..cut]);
    let o = Journal::open(&p, &SPEC, None).unwrap();
    let torn = o.report.torn.clone().expect("torn");
    assert_eq!(torn.offset, r[2].start as u64);
    assert_eq!(torn.len, 7);
    assert_eq!(
        std::fs::read(&torn.saved_as).unwrap(),
        &bytes[r[2].start..cut]
    );
    assert!(torn.saved_as.starts_with(d.path()));
    assert_eq!(o.record_count(), 2);
    drop(o);
    assert_eq!(std::fs::metadata(&p).unwrap().len(), r[2].start as u64);
    let again = Journal::open(&p, &SPEC, None).unwrap();
    assert!(again.report.torn.is_none());
    // The journal continues at seq 3.
    assert_eq!(again.journal.append(1, b"again").unwrap().seq, 3);
}

#[test]
fn zero_filled_extension_is_torn() {
    let (_d, p, mut bytes) = three_records();
    bytes.extend_from_slice(&[0u8; 100]);
    write_file(&p, &bytes);
    let o = Journal::open(&p, &SPEC, None).unwrap();
    assert_eq!(o.record_count(), 3);
    assert_eq!(o.report.torn.as_ref().map(|t| t.len), Some(100));
}

#[test]
fn crafted_corruptions_have_their_own_codes() {
    let (_d, _p, bytes) = three_records();
    let r = ranges(&bytes, &SPEC);
    let rec = |i: usize| &bytes[r[i].clone()];
    let head = &bytes[..HEADER_LEN];
    let cat = |parts: &[&[u8]]| parts.concat();
    let check = |img: Vec<u8>, spec: &JournalSpec, want: CorruptKind, at: u64| {
        let e = replay_bytes(&img, spec, None).unwrap_err();
        assert!(!e.to_string().is_empty(), "error has a message");
        match e {
            JournalError::Corrupt { kind, offset } => {
                assert_eq!((kind, offset), (want, at), "{want:?}")
            }
            other => panic!("{other:?}"),
        }
    };
    let at = |i: usize| r[i].start as u64;
    // Gap: record 3 where 2 belongs.
    check(
        cat(&[head, rec(0), rec(2)]),
        &SPEC,
        CorruptKind::SequenceGap,
        at(1),
    );
    // Duplicate: record 2 twice.
    check(
        cat(&[head, rec(0), rec(1), rec(1)]),
        &SPEC,
        CorruptKind::SequenceDuplicate,
        at(2),
    );
    // Reordered: record 1 after record 3.
    check(
        cat(&[head, rec(0), rec(1), rec(2), rec(0)]),
        &SPEC,
        CorruptKind::SequenceReordered,
        bytes.len() as u64,
    );
    // Unknown kind: a spec without kind 2.
    let no2 = JournalSpec {
        record_kinds: &[1, 3],
        ..SPEC
    };
    check(bytes.clone(), &no2, CorruptKind::UnknownKind, at(1));
    // Length past the record bound.
    let small = JournalSpec {
        max_payload: 8,
        ..SPEC
    };
    check(bytes.clone(), &small, CorruptKind::RecordTooLong, at(1));
    // More records than the bound.
    let two = JournalSpec {
        max_records: 2,
        ..SPEC
    };
    check(bytes.clone(), &two, CorruptKind::BoundExceeded, at(2));
    // File past the byte bound.
    let tiny = JournalSpec {
        max_bytes: 100,
        ..SPEC
    };
    check(bytes.clone(), &tiny, CorruptKind::BoundExceeded, 100);
    // Another journal kind.
    let other = JournalSpec {
        kind: JournalKind::RECEIPTS,
        ..SPEC
    };
    check(bytes.clone(), &other, CorruptKind::HeaderMismatch, 0);
    // Digest wrong with bytes after it.
    let mut flipped = bytes.clone();
    flipped[r[1].start + 25] ^= 0x40;
    check(flipped, &SPEC, CorruptKind::DigestMismatch, at(1));
    // Frame check fails.
    let mut flipped = bytes.clone();
    flipped[r[1].start + 1] ^= 0x01;
    check(flipped, &SPEC, CorruptKind::FrameCorrupt, at(1));
    // Header digest fails; header truncated.
    let mut flipped = bytes.clone();
    flipped[20] ^= 0x01;
    check(flipped, &SPEC, CorruptKind::HeaderCorrupt, 0);
    check(bytes[..40].to_vec(), &SPEC, CorruptKind::HeaderCorrupt, 0);
    // A length field pointing past the end of a complete file is caught by
    // the frame check, not mistaken for a torn tail.
    let mut long = bytes.clone();
    long[r[0].start + 2] ^= 0x01;
    check(long, &SPEC, CorruptKind::FrameCorrupt, at(0));
}

#[test]
fn bounds_and_refusals_on_append() {
    let d = tempdir();
    let p = d.path().join("j");
    let spec = JournalSpec {
        max_records: 2,
        ..SPEC
    };
    let j = Journal::create(&p, &spec).unwrap();
    assert_eq!(
        j.append(9, b"x").unwrap_err().code(),
        jc::JOURNAL_RECORD_KIND_REFUSED
    );
    assert_eq!(
        j.append(1, &vec![0; 4097]).unwrap_err().code(),
        jc::JOURNAL_RECORD_TOO_LARGE
    );
    let _ = j.append(1, b"a").unwrap();
    let _ = j.append(1, b"b").unwrap();
    assert_eq!(j.append(1, b"c").unwrap_err().code(), jc::JOURNAL_FULL);
    assert!(!j.is_poisoned());
    let bytes_spec = JournalSpec {
        max_bytes: (HEADER_LEN + record_len(10)) as u64,
        ..SPEC
    };
    let p2 = d.path().join("k");
    let k = Journal::create(&p2, &bytes_spec).unwrap();
    assert!(k.has_room(&[10]));
    assert!(!k.has_room(&[11]));
    assert_eq!(k.append(1, &[1; 11]).unwrap_err().code(), jc::JOURNAL_FULL);
    let _ = k.append(1, &[1; 10]).unwrap();
}

#[test]
fn group_commit_acknowledges_every_record_once() {
    // 8 threads form full batches, 64 exercise leader hand-off, gathering
    // that runs out of time and the two-group pipeline.
    for (threads, each) in [(8u8, 100u8), (64, 20)] {
        let d = tempdir();
        let p = d.path().join("j");
        let spec = JournalSpec {
            max_records: 10_000,
            ..SPEC
        };
        let j = Arc::new(Journal::create(&p, &spec).unwrap());
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let j = Arc::clone(&j);
                std::thread::spawn(move || {
                    (0..each)
                        .map(|i| (j.append(1, &[t, i]).unwrap().seq, [t, i]))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut acked: Vec<(u64, [u8; 2])> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        acked.sort();
        let n = u64::from(threads) * u64::from(each);
        assert_eq!(
            acked.iter().map(|a| a.0).collect::<Vec<_>>(),
            (1..=n).collect::<Vec<_>>()
        );
        let stats = j.commit_stats();
        assert_eq!(stats.records, n, "every record acknowledged by one sync");
        assert!(stats.syncs >= 1 && stats.max_batch <= u64::from(threads));
        drop(j);
        let o = Journal::open(&p, &spec, None).unwrap();
        for (rec, (seq, payload)) in o.records().zip(&acked) {
            assert_eq!((rec.seq, rec.payload), (*seq, &payload[..]));
        }
    }
}

#[test]
fn rewrite_keeps_the_id_and_the_lock() {
    let (_d, p, _) = three_records();
    let o = Journal::open(&p, &SPEC, None).unwrap();
    let id = o.journal.journal_id();
    let new = o
        .journal
        .rewrite([(1u16, &b"x"[..]), (2, &b"y"[..])])
        .unwrap();
    // The old handle's file is no longer the journal: it takes nothing.
    assert!(o.journal.is_poisoned());
    assert_eq!(
        o.journal.append(1, b"lost").unwrap_err().code(),
        jc::JOURNAL_POISONED
    );
    drop(o);
    assert_eq!(new.journal_id(), id);
    assert_eq!(
        Journal::open(&p, &SPEC, None).unwrap_err().code(),
        jc::JOURNAL_LOCKED
    );
    assert_eq!(new.append(3, b"z").unwrap().seq, 3);
    drop(new);
    let o = Journal::open(&p, &SPEC, None).unwrap();
    let got: Vec<_> = o.records().map(|r| r.payload.to_vec()).collect();
    assert_eq!(got, vec![b"x".to_vec(), b"y".to_vec(), b"z".to_vec()]);
}

/// Review finding: open waits for a held lock; what the holder did
/// meanwhile must be seen. Appends made while a second open waited are
/// replayed (the size is read once the lock is held), never cut or
/// overwritten.
#[test]
fn an_open_that_waited_for_the_lock_sees_the_appends_made_meanwhile() {
    let (_d, p, _) = three_records();
    let first = Journal::open(&p, &SPEC, None).unwrap();
    let q = p.clone();
    let waiter = std::thread::spawn(move || Journal::open(&q, &SPEC, None));
    until_opened_twice(&p);
    assert_eq!(first.journal.append(1, b"delta").unwrap().seq, 4);
    assert_eq!(first.journal.append(2, b"echo").unwrap().seq, 5);
    drop(first);
    let o = waiter.join().unwrap().expect("opens once the lock is free");
    assert_eq!(o.record_count(), 5);
    assert!(o.report.torn.is_none());
    assert_eq!(o.journal.append(1, b"foxtrot").unwrap().seq, 6);
}

/// Review finding: a writer that compacts while a second open waits
/// renames a new file over the name; the waiter, on the old file, must not
/// become a second writer of a journal nobody reads.
#[test]
fn an_open_that_waited_while_the_journal_was_compacted_is_locked_out() {
    let (_d, p, _) = three_records();
    let first = Journal::open(&p, &SPEC, None).unwrap();
    let q = p.clone();
    let waiter =
        std::thread::spawn(move || Journal::open(&q, &SPEC, None).map(|o| o.record_count()));
    until_opened_twice(&p);
    let new = first.journal.rewrite([(1u16, &b"x"[..])]).unwrap();
    drop(first);
    let e = waiter.join().unwrap().unwrap_err();
    assert_eq!(e.code(), jc::JOURNAL_LOCKED);
    drop(new);
    assert_eq!(Journal::open(&p, &SPEC, None).unwrap().record_count(), 1);
}

/// Review finding: an open against an anchor must not wait for the lock.
/// Its caller read the anchor before the lock; a holder that appended
/// during a wait would leave the anchor stale, and a journal cut back to
/// it would then be accepted (and re-anchored). Held, it is refused, even
/// by a holder that lets go soon after.
#[test]
fn an_open_against_an_anchor_does_not_wait_for_the_lock() {
    let (_d, p, _) = three_records();
    let first = Journal::open(&p, &SPEC, None).unwrap();
    let anchor = first.journal.anchor();
    let (go, went) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        went.recv().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(500));
        drop(first);
    });
    go.send(()).unwrap();
    let e = Journal::open(&p, &SPEC, Some(&anchor)).unwrap_err();
    assert_eq!(e.code(), jc::JOURNAL_LOCKED);
    holder.join().unwrap();
    assert_eq!(
        Journal::open(&p, &SPEC, Some(&anchor))
            .unwrap()
            .record_count(),
        3
    );
}

/// The read-only reader refuses what is not a regular file at once: a
/// FIFO (never waited on for a writer) and a symbolic link.
#[test]
fn read_bounded_refuses_a_fifo_and_a_symlink_and_a_file_over_the_bound() {
    let (d, p, bytes) = three_records();
    assert_eq!(glove_journal::read_bounded(&p, 1 << 20).unwrap(), bytes);
    let over = glove_journal::read_bounded(&p, bytes.len() as u64 - 1).unwrap_err();
    assert!(
        matches!(
            over,
            JournalError::Corrupt {
                kind: CorruptKind::BoundExceeded,
                ..
            }
        ),
        "{over:?}"
    );
    let fifo = d.path().join("fifo");
    // Made without spawning a process (see `common::SPAWN`).
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let e = glove_journal::read_bounded(&fifo, 1 << 20).unwrap_err();
    assert_eq!(e.code(), fc::FILE_NOT_REGULAR, "{e:?}");
    let link = d.path().join("link");
    std::os::unix::fs::symlink(&p, &link).unwrap();
    let e = glove_journal::read_bounded(&link, 1 << 20).unwrap_err();
    assert_eq!(e.code(), fc::FILE_SYMLINK, "{e:?}");
}

/// Issue 27 (doors): the generic journal will neither create nor open a
/// session store or a receipt journal, so no code in the process gets a
/// raw, appendable handle on either (records past the lifecycle or the
/// receipt MAC). The stores themselves still open their files.
#[test]
fn the_generic_journal_refuses_the_guarded_kinds() {
    use glove_journal::receipt::ReceiptConfig;
    use glove_journal::session::SESSION_STORE_SPEC;
    use glove_journal::SessionStore;
    let d = tempdir();
    let receipts = ReceiptConfig::default().spec();
    for spec in [&SESSION_STORE_SPEC, &receipts] {
        let p = d.path().join(format!("raw-{}", spec.kind.0));
        let e = Journal::create(&p, spec).expect_err("created raw");
        assert_eq!(e.code(), jc::JOURNAL_KIND_GUARDED, "{e}");
        assert!(!p.exists(), "nothing was created");
    }
    // A store made the proper way cannot be reopened raw either.
    let p = d.path().join("sessions");
    drop(SessionStore::create(&p).expect("store"));
    let e = Journal::open(&p, &SESSION_STORE_SPEC, None).expect_err("opened raw");
    assert_eq!(e.code(), jc::JOURNAL_KIND_GUARDED, "{e}");
    SessionStore::open(&p, None).expect("the store opens its own file");
}
