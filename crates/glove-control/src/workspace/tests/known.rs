//! Reusing baseline digests ([`super::super::known`]) and hashing on two
//! threads: the manifest is the one a full walk gives, a file the session
//! rewrote is read again, a file it left alone is not.

use super::{manifest, open, write};
use crate::workspace::known::{FileStat, KnownFiles, StatTable};
use crate::workspace::manifest::{take_with, TakeOptions, Taken, BATCH};
use glove_types::manifest::Manifest;
use glove_types::Sha256Digest;
use rustix::fd::AsFd;
use std::fs;
use std::path::Path;

fn coarse_now() -> (i64, i64) {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
    (t.tv_sec, t.tv_nsec)
}

/// Waits until the coarse clock has moved past `t` (the event the
/// reuse's fence is about; a tick is a few milliseconds).
fn after(t: (i64, i64)) {
    while coarse_now() <= t {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

fn taken(r: &Path, known: Option<&KnownFiles>) -> Taken {
    take_with(open(r).as_fd(), &TakeOptions::default(), known).expect("take")
}

/// A baseline of `r` as a stage takes it: the walk, then the fence read
/// after it, then the clock moved past the fence before anything changes.
fn baseline(r: &Path) -> (Manifest, StatTable) {
    after(coarse_now());
    let t = taken(r, None);
    let fence = coarse_now();
    let table = StatTable::new("boot", fence, t.stats);
    after(fence);
    (t.manifest, table)
}

fn tree(r: &Path) {
    for i in 0..(2 * BATCH + 5) {
        let body: Vec<u8> = (0..(9_000 + i * 37)).map(|j| (i * 7 + j) as u8).collect();
        write(r, &format!("d/f{i:03}"), &body, 0o644);
    }
    write(r, "big", &vec![3u8; 3 << 20], 0o644);
    write(r, "same.txt", b"aaaa", 0o644);
    write(r, "keep.txt", b"keep", 0o644);
    write(r, "grow.txt", b"g", 0o644);
    write(r, "gone.txt", b"x", 0o644);
    write(r, "mode.txt", b"m", 0o644);
}

#[test]
fn two_threads_give_the_digests_of_one() {
    let t = tempfile::tempdir().expect("tmp");
    let r = t.path();
    tree(r);
    let m = manifest(r);
    for i in [0, 1, BATCH - 1, BATCH, 2 * BATCH + 4] {
        let p = format!("d/f{i:03}");
        let body = fs::read(r.join(&p)).expect("read");
        assert_eq!(
            m.get(&p).and_then(|e| e.digest),
            Some(Sha256Digest::of(&body))
        );
    }
    let big = m.get("big").and_then(|e| e.digest);
    assert_eq!(big, Some(Sha256Digest::of(&vec![3u8; 3 << 20])));
}

#[test]
fn reuse_gives_the_manifest_of_a_full_walk_after_edits() {
    let t = tempfile::tempdir().expect("tmp");
    let r = t.path();
    tree(r);
    let (base, table) = baseline(r);
    let known = KnownFiles::join(&table, &base);
    assert!(known.len() > 2 * BATCH, "{} files known", known.len());
    // Same size, other bytes; larger; gone and made again; mode only;
    // one batch file rewritten in place through an open descriptor.
    fs::write(r.join("same.txt"), b"bbbb").expect("write");
    fs::write(r.join("grow.txt"), b"gg").expect("write");
    fs::remove_file(r.join("gone.txt")).expect("rm");
    fs::write(r.join("gone.txt"), b"y").expect("write");
    super::chmod(r, "mode.txt", 0o600);
    {
        use std::io::{Seek, Write};
        let mut f = fs::OpenOptions::new()
            .write(true)
            .open(r.join("d/f070"))
            .expect("open");
        f.seek(std::io::SeekFrom::Start(10)).expect("seek");
        f.write_all(b"Z").expect("write");
    }
    let with = taken(r, Some(&known));
    let full = manifest(r);
    assert_eq!(with.manifest, full);
    assert_eq!(
        with.manifest.digest().expect("d"),
        full.digest().expect("d")
    );
    assert_ne!(full.digest().expect("d"), base.digest().expect("d"));
    // Everything else kept its digest without being read.
    let changed = ["same.txt", "grow.txt", "gone.txt", "mode.txt", "d/f070"];
    let files = full.entries().iter().filter(|e| e.digest.is_some()).count();
    assert_eq!(with.reused, files - changed.len());
}

#[test]
fn a_file_left_alone_is_not_read_and_a_rewritten_one_is() {
    let t = tempfile::tempdir().expect("tmp");
    let r = t.path();
    tree(r);
    let (base, table) = baseline(r);
    // The baseline claims other bytes for both files: only a file that is
    // not read can keep the claim.
    let bogus = Sha256Digest::of(b"not the bytes");
    let entries = base
        .entries()
        .iter()
        .cloned()
        .map(|mut e| {
            if e.path == "keep.txt" || e.path == "same.txt" {
                e.digest = Some(bogus);
            }
            e
        })
        .collect();
    let claimed = Manifest::new(base.root_mode(), entries).expect("manifest");
    let known = KnownFiles::join(&table, &claimed);
    fs::write(r.join("same.txt"), b"aaaa").expect("write");
    let with = taken(r, Some(&known)).manifest;
    assert_eq!(with.get("keep.txt").and_then(|e| e.digest), Some(bogus));
    assert_eq!(
        with.get("same.txt").and_then(|e| e.digest),
        Some(Sha256Digest::of(b"aaaa"))
    );
}

#[test]
fn a_file_changed_in_the_fence_tick_is_never_known() {
    let st = |ctime| FileStat {
        ino: 1,
        size: 1,
        mtime: (5, 1),
        ctime,
    };
    let files = vec![
        ("a".to_owned(), st((9, 999))),
        ("at-fence".to_owned(), st((10, 0))),
        ("after".to_owned(), st((10, 5))),
        ("whole-second".to_owned(), st((9, 0))),
        ("bad-ns".to_owned(), st((9, -1))),
    ];
    let t = StatTable::new("boot", (10, 0), files);
    assert_eq!(t.len(), 1);
}

#[test]
fn the_stat_table_is_decoded_strictly() {
    let st = FileStat {
        ino: 7,
        size: 3,
        mtime: (1_700_000_000, 5),
        ctime: (1_700_000_000, 6),
    };
    let files = vec![("b".to_owned(), st), ("a".to_owned(), st)];
    let t = StatTable::new("0a1b", (1_800_000_000, 0), files);
    let bytes = t.encode();
    assert_eq!(StatTable::decode(&bytes), Some(t.clone()));
    for n in 0..bytes.len() {
        assert_eq!(StatTable::decode(&bytes[..n]), None, "cut at {n}");
    }
    let text = String::from_utf8(bytes).expect("utf-8");
    let bad = [
        text.replace("glove.baseline-stat-v1", "glove.baseline-stat-v2"),
        text.replace("[\"a\",", "[\"c\","),
        text.replace("[\"b\",", "[\"a\","),
        text.replace("\"0a1b\"", "\"\""),
        text.replace("[1800000000,0]", "[1700000000,6]"),
        text.replace("[1700000000,6]", "[1700000000,0]"),
        text.replace("[1700000000,5]", "[1700000000,1000000000]"),
        text.replace("\"format\"", "\"extra\":1,\"format\""),
        text.replace("[\"a\",", "[\"\","),
    ];
    for b in bad {
        assert_ne!(b, text);
        assert_eq!(StatTable::decode(b.as_bytes()), None, "{b}");
    }
}
