use super::*;
use crate::receipt::ReceiptKey;
use glove_lifecycle::apply::{GrantId, ParkedTxn, Reservation, Reserved, Txn};
use glove_lifecycle::with_brand;
use glove_types::codes::apply as ac;
use glove_types::codes::lifecycle as lc;
use glove_types::{ErrorCode, Sha256Digest};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

fn dir() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let p = d.path().join("apply.journal");
    (d, p)
}

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

fn reserve(
    j: &mut ApplyJournal,
    id: &str,
    r: &Reservation,
) -> Result<ParkedTxn<Reserved>, ErrorCode> {
    with_brand(|b| {
        let (registry, log) = j.registry_and_log();
        let p = Txn::log_reserve(b, &tid(id), r, registry, log).map_err(|e| e.code())?;
        Ok(Txn::reserve(p).map_err(|e| e.code())?.park())
    })
}

fn prepare(j: &mut ApplyJournal, t: ParkedTxn<Reserved>) {
    t.enter(|t| {
        let p = t
            .log_prepare(Sha256Digest::of(b"candidate"), j.log_mut())
            .unwrap();
        t.prepare(p).unwrap().park()
    });
}

#[test]
fn reopen_keeps_every_value_single_use() {
    let (_d, p) = dir();
    let mut j = ApplyJournal::create(&p, None).unwrap();
    let t = reserve(&mut j, "t-1", &reservation(1)).unwrap();
    prepare(&mut j, t);
    reserve(&mut j, "t-2", &reservation(2)).unwrap();
    drop(j);

    let (mut j, report) = ApplyJournal::open(&p, None).unwrap();
    assert!(report.torn.is_none());
    assert_eq!(j.registry().len(), 2);
    let states: Vec<ApplyState> = j
        .transactions()
        .unwrap()
        .iter()
        .map(|t| t.state())
        .collect();
    assert_eq!(states, [ApplyState::Prepared, ApplyState::Reserved]);
    let base = reservation(1);
    let fresh = reservation(9);
    let mut grant = fresh.clone();
    grant.grant_id = base.grant_id.clone();
    let mut auth = fresh.clone();
    auth.authorization_digest = base.authorization_digest;
    let mut manifest = fresh.clone();
    manifest.manifest_digest = base.manifest_digest;
    assert_eq!(
        reserve(&mut j, "t-3", &grant).unwrap_err(),
        lc::APPLY_GRANT_REUSED
    );
    assert_eq!(
        reserve(&mut j, "t-3", &auth).unwrap_err(),
        lc::APPLY_AUTHORIZATION_REUSED
    );
    assert_eq!(
        reserve(&mut j, "t-3", &manifest).unwrap_err(),
        lc::APPLY_MANIFEST_REUSED
    );
    // A repeat of a durable reservation is idempotent, not a reuse.
    assert!(reserve(&mut j, "t-2", &reservation(2)).is_ok());
    // Another transaction id with all-fresh values goes through.
    reserve(&mut j, "t-3", &fresh).unwrap();
    drop(j);
    let (j, _) = ApplyJournal::open(&p, None).unwrap();
    assert_eq!(j.transaction_count(), 3);
    assert_eq!(j.log().record_count(), 4);
}

#[test]
fn the_log_checks_records_itself() {
    let (_d, p) = dir();
    let mut j = ApplyJournal::create(&p, None).unwrap();
    reserve(&mut j, "t-1", &reservation(1)).unwrap();
    // The file's own check: a second registry that never saw the values
    // still cannot get them past the log.
    let mut other = SingleUseRegistry::new(8);
    let e = with_brand(|b| {
        Txn::log_reserve(b, &tid("t-2"), &reservation(1), &mut other, j.log_mut())
            .map(drop)
            .unwrap_err()
            .code()
    });
    assert_eq!(e, lc::APPLY_GRANT_REUSED);
    // Sessions are not this log's subjects.
    let sid = glove_types::ids::SessionId::new("s-1").unwrap();
    let e = j
        .log()
        .lookup(Subject::Session(&sid), 0)
        .unwrap_err()
        .code();
    assert_eq!(e, JOURNAL_RECORD_KIND_REFUSED);
}

#[test]
fn torn_tail_is_cut_and_history_kept() {
    let (d, p) = dir();
    let mut j = ApplyJournal::create(&p, None).unwrap();
    let t = reserve(&mut j, "t-1", &reservation(1)).unwrap();
    let one = std::fs::read(&p).unwrap();
    prepare(&mut j, t);
    drop(j);
    let two = std::fs::read(&p).unwrap();
    // The file ends inside its last record (a crash mid-write).
    let cut = one.len() + (two.len() - one.len()) / 2;
    std::fs::write(&p, &two[..cut]).unwrap();
    let (mut j, report) = ApplyJournal::open(&p, None).unwrap();
    let repair = report.torn.expect("torn tail repaired");
    assert_eq!(repair.offset, one.len() as u64);
    assert!(repair.saved_as.starts_with(d.path()));
    assert_eq!(std::fs::read(&p).unwrap(), one);
    assert_eq!(j.transactions().unwrap()[0].state(), ApplyState::Reserved);
    assert_eq!(
        reserve(&mut j, "t-2", &reservation(1)).unwrap_err(),
        lc::APPLY_GRANT_REUSED
    );
    // The transaction goes on from its reservation.
    let t = j.transactions().unwrap().pop().unwrap();
    let glove_lifecycle::apply::AnyApply::Reserved(t) = t else {
        panic!("not reserved");
    };
    prepare(&mut j, t);
    drop(j);
    let (j, report) = ApplyJournal::open(&p, None).unwrap();
    assert!(report.torn.is_none());
    assert_eq!(j.transactions().unwrap()[0].state(), ApplyState::Prepared);
}

#[test]
fn a_value_reserved_twice_in_the_file_is_corrupt() {
    let (_d, p) = dir();
    let rec = |id: &str, n: u8| {
        ApplyRecord {
            txn_id: tid(id),
            seq: 0,
            prev: None,
            entry: ApplyEntry::Reserved {
                reservation: reservation(n),
            },
        }
        .encode()
        .unwrap()
    };
    let (a, b) = (rec("t-1", 1), rec("t-2", 1));
    let planted = [
        (KIND_APPLY_RECORD, a.as_slice()),
        (KIND_APPLY_RECORD, b.as_slice()),
    ];
    drop(Journal::create_with_unguarded(&p, &APPLY_JOURNAL_SPEC, planted).unwrap());
    let e = ApplyJournal::open(&p, None).unwrap_err();
    assert_eq!(e.code(), ac::APPLY_JOURNAL_RECORD_INVALID);
    // Garbage that the journal format carries is corrupt too.
    let (_d2, p2) = dir();
    drop(
        Journal::create_with_unguarded(&p2, &APPLY_JOURNAL_SPEC, [(KIND_APPLY_RECORD, &b"{}"[..])])
            .unwrap(),
    );
    assert_eq!(
        ApplyJournal::open(&p2, None).unwrap_err().code(),
        ac::APPLY_JOURNAL_RECORD_INVALID
    );
    // And no generic handle opens an apply journal.
    assert!(Journal::open(&p2, &APPLY_JOURNAL_SPEC, None).is_err());
}

#[test]
fn bound_keeps_room_for_live_transactions() {
    let (_d, p) = dir();
    let mut j = ApplyJournal::create(&p, None).unwrap();
    // Room for two transactions' worst case.
    j.log.max_records = 2 * RECORDS_PER_TRANSACTION;
    let t1 = reserve(&mut j, "t-1", &reservation(1)).unwrap();
    reserve(&mut j, "t-2", &reservation(2)).unwrap();
    assert!(!j.room_for_reservation());
    assert_eq!(
        reserve(&mut j, "t-3", &reservation(3)).unwrap_err(),
        ac::APPLY_JOURNAL_NO_ROOM
    );
    // Nothing was written; the lifecycle's registry consumed the values
    // before the append (fail closed) until the journal is reopened.
    assert_eq!(j.registry().len(), 3);
    assert_eq!(j.log().record_count(), 2);
    // The live transactions can still go on.
    prepare(&mut j, t1);
    assert_eq!(j.log().record_count(), 3);
}

#[test]
fn anchored_journal_refuses_a_cut_file() {
    let (_d, p) = dir();
    let anchor =
        || AnchorFile::beside(&p, ReceiptKey::from_bytes([7; 32]), APPLY_ANCHOR_DOMAIN).unwrap();
    let mut j = ApplyJournal::create(&p, Some(anchor())).unwrap();
    reserve(&mut j, "t-1", &reservation(1)).unwrap();
    drop(j);
    let (j, report) = ApplyJournal::open(&p, Some(anchor())).unwrap();
    assert!(!report.unanchored);
    drop(j);
    // Cut back to the header: the reservation would be forgotten.
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(crate::format::HEADER_LEN as u64).unwrap();
    drop(f);
    assert!(ApplyJournal::open(&p, Some(anchor())).is_err());
    // Creating anew beside the anchor is refused too.
    std::fs::remove_file(&p).unwrap();
    assert_eq!(
        ApplyJournal::create(&p, Some(anchor())).unwrap_err().code(),
        glove_types::codes::journal::JOURNAL_MISSING_BUT_ANCHORED
    );
}
