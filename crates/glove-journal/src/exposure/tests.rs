use super::*;
use crate::receipt::ReceiptKey;
use glove_types::codes::journal as jc;
use glove_types::exposure::lease::scope_digest;
use glove_types::exposure::ExposureMode;
use glove_types::ids::ExposureLabel;
use glove_types::policy::{Access, Materialization};
use glove_types::ErrorCode;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

fn dir() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let p = d.path().join("exposures.journal");
    (d, p)
}

fn anchor(p: &Path) -> AnchorFile {
    AnchorFile::beside(p, ReceiptKey::from_bytes([9; 32]), EXPOSURE_ANCHOR_DOMAIN).unwrap()
}

pub(super) fn rec(id: &str, generation: u64, rel: &str, ino: u64) -> CreatedRecord {
    let mut r = CreatedRecord {
        exposure_id: ExposureId::new(id).unwrap(),
        generation,
        scope_digest: glove_types::Sha256Digest::of(b""),
        scope_nonce: [generation as u8; 16],
        label: ExposureLabel::new("proj").unwrap(),
        modes: vec![ExposureMode::new(
            Access::ReadOnly,
            Materialization::Copy,
            4096,
        )],
        created_at_ms: 1_000,
        expires_at_ms: 100_000,
        runtimes: vec![],
        root_id: ExposureRootId::new("src").unwrap(),
        relative_path: rel.into(),
        dev: 1,
        ino,
    };
    r.scope_digest = scope_digest(&r.scope()).unwrap();
    r
}

fn code(e: JournalError) -> ErrorCode {
    e.code()
}

#[test]
fn grant_revoke_replace_and_reopen() {
    let (_d, p) = dir();
    let mut j = ExposureJournal::create(&p, Some(anchor(&p))).unwrap();
    j.grant(rec("a1", 1, "p", 10), false, 2_000).unwrap();
    // A second live exposure of the same project: by path, and by identity.
    assert_eq!(
        code(j.grant(rec("a2", 1, "p", 11), false, 2_000).unwrap_err()),
        EXPOSURE_LIVE_EXISTS
    );
    assert_eq!(
        code(j.grant(rec("a3", 1, "q", 10), false, 2_000).unwrap_err()),
        EXPOSURE_LIVE_EXISTS
    );
    // The same id must go on with the next generation.
    assert_eq!(
        code(j.grant(rec("a1", 3, "p", 10), true, 2_000).unwrap_err()),
        EXPOSURE_GENERATION_STALE
    );
    assert_eq!(
        j.leases()
            .next_for(&ExposureRootId::new("src").unwrap(), "p")
            .unwrap()
            .1,
        2
    );
    // Replace: one batch revokes generation 1 and grants generation 2.
    j.grant(rec("a1", 2, "p", 10), true, 3_000).unwrap();
    assert_eq!(j.record_count(), 3);
    assert_eq!(
        j.leases()
            .usable(&ExposureId::new("a1").unwrap(), 1, 3_000)
            .unwrap_err()
            .code(),
        EXPOSURE_GENERATION_STALE
    );
    assert!(j
        .leases()
        .usable(&ExposureId::new("a1").unwrap(), 2, 3_000)
        .is_ok());
    assert_eq!(
        j.leases()
            .usable(&ExposureId::new("a1").unwrap(), 2, 100_000)
            .unwrap_err()
            .code(),
        EXPOSURE_EXPIRED
    );
    let id = ExposureId::new("a1").unwrap();
    j.revoke(&id, 4_000).unwrap();
    assert_eq!(code(j.revoke(&id, 4_000).unwrap_err()), EXPOSURE_REVOKED);
    assert_eq!(
        j.leases().usable(&id, 2, 4_000).unwrap_err().code(),
        EXPOSURE_REVOKED
    );
    assert_eq!(
        code(j.revoke(&ExposureId::new("zz").unwrap(), 1).unwrap_err()),
        EXPOSURE_UNKNOWN
    );
    drop(j);
    let (j, report) = ExposureJournal::open(&p, Some(anchor(&p))).unwrap();
    assert!(!report.unanchored && report.torn.is_none());
    let gens = j.leases().generations(&id);
    assert_eq!(gens.len(), 2);
    assert!(gens.iter().all(|l| l.state(5_000) == LeaseState::Revoked));
    // Another writer is refused while this one holds the lock.
    assert_eq!(
        code(ExposureJournal::open(&p, Some(anchor(&p))).unwrap_err()),
        jc::JOURNAL_LOCKED
    );
}

fn three_records(p: &Path) -> Vec<u8> {
    let mut j = ExposureJournal::create(p, Some(anchor(p))).unwrap();
    j.grant(rec("a1", 1, "p", 10), false, 2_000).unwrap();
    j.grant(rec("b1", 1, "q", 11), false, 2_000).unwrap();
    j.revoke(&ExposureId::new("a1").unwrap(), 3_000).unwrap();
    drop(j);
    std::fs::read(p).unwrap()
}

fn frames(image: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut at = crate::format::HEADER_LEN;
    while at < image.len() {
        let len = u32::from_le_bytes(image[at..at + 4].try_into().unwrap()) as usize;
        let end = at + crate::format::record_len(len);
        out.push(at..end);
        at = end;
    }
    out
}

#[test]
fn a_tampered_record_is_refused() {
    let (_d, p) = dir();
    let mut image = three_records(&p);
    let r = frames(&image)[0].clone();
    // A byte of the first record's payload (its label), then the rest.
    let k = r.start + crate::format::FRAME_LEN + 5;
    image[k] ^= 1;
    std::fs::write(&p, &image).unwrap();
    assert_eq!(
        code(ExposureJournal::open(&p, Some(anchor(&p))).unwrap_err()),
        jc::JOURNAL_RECORD_DIGEST_MISMATCH
    );
}

#[test]
fn reordered_records_are_refused() {
    let (_d, p) = dir();
    let image = three_records(&p);
    let f = frames(&image);
    let mut out = image[..f[0].start].to_vec();
    out.extend_from_slice(&image[f[1].clone()]);
    out.extend_from_slice(&image[f[0].clone()]);
    out.extend_from_slice(&image[f[2].clone()]);
    std::fs::write(&p, &out).unwrap();
    let got = code(ExposureJournal::open(&p, Some(anchor(&p))).unwrap_err());
    assert_eq!(got, jc::JOURNAL_SEQUENCE_GAP, "{got}");
}

#[test]
fn a_journal_cut_at_a_record_boundary_is_refused_by_its_anchor() {
    let (_d, p) = dir();
    let image = three_records(&p);
    let f = frames(&image);
    // Cut off the revocation: a revoked lease would be live again.
    std::fs::write(&p, &image[..f[2].start]).unwrap();
    assert_eq!(
        code(ExposureJournal::open(&p, Some(anchor(&p))).unwrap_err()),
        jc::JOURNAL_SHORTER_THAN_ANCHOR
    );
    // An older copy of the same length is refused too.
    std::fs::write(&p, &image[..f[1].start]).unwrap();
    assert!(ExposureJournal::open(&p, Some(anchor(&p))).is_err());
}

#[test]
fn a_torn_tail_is_cut_once_and_reported() {
    let (_d, p) = dir();
    let image = three_records(&p);
    let f = frames(&image);
    // Without the anchor (it names the full file): torn mid-record.
    std::fs::write(&p, &image[..f[2].start + 7]).unwrap();
    let (j, report) = ExposureJournal::open(&p, None).unwrap();
    let torn = report.torn.expect("torn");
    assert_eq!(torn.offset, f[2].start as u64);
    assert_eq!(j.record_count(), 2);
    assert!(j
        .leases()
        .usable(&ExposureId::new("a1").unwrap(), 1, 2_500)
        .is_ok());
}

/// A raw journal of the exposure kind with `records`, for histories the
/// writer would never produce.
fn planted(p: &Path, records: &[(u16, Vec<u8>)]) {
    let it = records.iter().map(|(k, b)| (*k, b.as_slice()));
    drop(Journal::create_with_unguarded(p, &EXPOSURE_JOURNAL_SPEC, it).unwrap());
}

#[test]
fn impossible_histories_are_refused() {
    let revoked = |id: &str, g: u64| {
        RevokedRecord {
            exposure_id: ExposureId::new(id).unwrap(),
            generation: g,
            revoked_at_ms: 5,
        }
        .encode()
        .unwrap()
    };
    type Case = (Vec<(u16, Vec<u8>)>, ErrorCode);
    let cases: Vec<Case> = vec![
        (
            vec![(KIND_REVOKED, revoked("a1", 1))],
            EXPOSURE_JOURNAL_HISTORY_INVALID,
        ),
        (
            vec![(KIND_CREATED, rec("a1", 2, "p", 1).encode().unwrap())],
            EXPOSURE_JOURNAL_HISTORY_INVALID,
        ),
        (
            vec![
                (KIND_CREATED, rec("a1", 1, "p", 1).encode().unwrap()),
                (KIND_CREATED, rec("b1", 1, "p", 2).encode().unwrap()),
            ],
            EXPOSURE_JOURNAL_HISTORY_INVALID,
        ),
        (
            vec![
                (KIND_CREATED, rec("a1", 1, "p", 1).encode().unwrap()),
                (KIND_REVOKED, revoked("a1", 1)),
                (KIND_REVOKED, revoked("a1", 1)),
            ],
            EXPOSURE_JOURNAL_HISTORY_INVALID,
        ),
        (
            vec![(KIND_CREATED, b"{}".to_vec())],
            EXPOSURE_RECORD_INVALID,
        ),
        (
            vec![(KIND_REVOKED, rec("a1", 1, "p", 1).encode().unwrap())],
            EXPOSURE_RECORD_INVALID,
        ),
    ];
    for (i, (records, want)) in cases.into_iter().enumerate() {
        let (_d, p) = dir();
        planted(&p, &records);
        let got = code(ExposureJournal::open(&p, None).unwrap_err());
        assert_eq!(got, want, "case {i}");
    }
}

#[test]
fn a_missing_journal_beside_its_anchor_is_not_recreated() {
    let (_d, p) = dir();
    drop(ExposureJournal::create(&p, Some(anchor(&p))).unwrap());
    std::fs::remove_file(&p).unwrap();
    assert_eq!(
        code(ExposureJournal::create(&p, Some(anchor(&p))).unwrap_err()),
        jc::JOURNAL_MISSING_BUT_ANCHORED
    );
}

#[test]
fn a_revocation_proof_for_another_generation_gives_the_lease_back() {
    let live = LiveLease {
        rec: rec("a1", 2, "p", 1),
    };
    let back = live
        .revoke(Revoked {
            generation: 1,
            at_ms: 0,
        })
        .unwrap_err();
    assert_eq!(back.rec.generation, 2);
}

/// Two live exposures that a moved or swapped directory makes match one
/// replace (by place, and by identity): the replace is refused, nothing is
/// written, and the journal still replays. Both id orders.
#[test]
fn a_replace_matching_two_live_exposures_is_refused_and_the_journal_still_opens() {
    for (x, y) in [("ex", "ey"), ("ey", "ex")] {
        let (_d, p) = dir();
        let mut j = ExposureJournal::create(&p, Some(anchor(&p))).unwrap();
        j.grant(rec(x, 1, "a", 10), false, 2_000).unwrap();
        j.grant(rec(y, 1, "b", 20), false, 2_000).unwrap();
        let before = j.record_count();
        // `a` now names the directory `b` was (inode 20).
        assert_eq!(
            code(j.grant(rec(x, 2, "a", 20), true, 3_000).unwrap_err()),
            EXPOSURE_LIVE_EXISTS
        );
        assert_eq!(j.record_count(), before);
        drop(j);
        ExposureJournal::open(&p, Some(anchor(&p))).expect("the journal still replays");
    }
}
