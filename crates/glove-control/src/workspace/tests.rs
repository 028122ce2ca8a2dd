//! Manifests of real trees (tempfile directories on the test machine's
//! file system), their comparison and renderings, and the patch checked by
//! the real `git apply`.

use super::diff::{compare, ChangeKind};
use super::manifest::{take, TakeOptions};
use glove_fs::unconfined::open_dir;
use glove_types::codes::workspace::*;
use glove_types::manifest::{BlockerReason, EntryKind, Manifest};
use rustix::fd::{AsFd, OwnedFd};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

mod known;
mod render;

pub(super) fn write(root: &Path, rel: &str, body: &[u8], mode: u32) {
    let p = root.join(rel);
    if let Some(parent) = p.parent() {
        fs::create_dir_all(parent).expect("mkdir");
    }
    fs::write(&p, body).expect("write");
    chmod(root, rel, mode);
}

pub(super) fn chmod(root: &Path, rel: &str, mode: u32) {
    fs::set_permissions(root.join(rel), fs::Permissions::from_mode(mode)).expect("chmod");
}

pub(super) fn open(p: &Path) -> OwnedFd {
    open_dir(p, false).expect("open dir")
}

pub(super) fn manifest(p: &Path) -> Manifest {
    take(open(p).as_fd(), &TakeOptions::default()).expect("take")
}

#[test]
fn a_tree_is_recorded_entry_by_entry() {
    let t = tempfile::tempdir().expect("tmp");
    let r = t.path();
    chmod(r, ".", 0o750);
    write(r, "a.txt", b"abc", 0o644);
    write(r, "bin/run", b"#!/bin/sh\n", 0o755);
    chmod(r, "bin", 0o755);
    std::os::unix::fs::symlink("../a.txt", r.join("bin/link")).expect("symlink");
    fs::create_dir(r.join("empty")).expect("mkdir");
    chmod(r, "empty", 0o700);
    let m = manifest(r);
    assert_eq!(m.root_mode(), 0o750);
    let got: Vec<(&str, EntryKind, u32, u64)> = m
        .entries()
        .iter()
        .map(|e| (e.path.as_str(), e.kind, e.mode, e.size))
        .collect();
    assert_eq!(
        got,
        [
            ("a.txt", EntryKind::File, 0o644, 3),
            ("bin", EntryKind::Dir, 0o755, 0),
            ("bin/link", EntryKind::Symlink, 0o777, 8),
            ("bin/run", EntryKind::File, 0o755, 10),
            ("empty", EntryKind::Dir, 0o700, 0),
        ]
    );
    let a = m.get("a.txt").expect("a");
    assert_eq!(a.digest, Some(glove_types::Sha256Digest::of(b"abc")));
    let l = m.get("bin/link").expect("link");
    assert_eq!(l.digest, Some(glove_types::Sha256Digest::of(b"../a.txt")));
    assert!(m.blockers().iter().all(|b| b.path == "bin/link"));
    // Taking it again gives the same manifest and digest.
    assert_eq!(manifest(r).digest().expect("d"), m.digest().expect("d"));
}

#[test]
fn lost_found_is_skipped_only_when_asked_and_only_at_the_top() {
    let t = tempfile::tempdir().expect("tmp");
    let r = t.path();
    write(r, "lost+found/x", b"x", 0o600);
    write(r, "sub/lost+found/y", b"y", 0o600);
    let all = manifest(r);
    assert!(all.get("lost+found/x").is_some());
    let opts = TakeOptions {
        skip_lost_found: true,
        ..TakeOptions::default()
    };
    let m = take(open(r).as_fd(), &opts).expect("take");
    assert!(m.get("lost+found").is_none() && m.get("lost+found/x").is_none());
    assert!(m.get("sub/lost+found/y").is_some());
}

#[test]
fn a_non_utf8_name_and_the_bounds_are_refused_with_codes() {
    use std::os::unix::ffi::OsStrExt;
    let t = tempfile::tempdir().expect("tmp");
    fs::write(t.path().join(std::ffi::OsStr::from_bytes(b"bad\xff")), b"").expect("write");
    let e = take(open(t.path()).as_fd(), &TakeOptions::default()).expect_err("non-UTF-8");
    assert_eq!(e.code(), WORKSPACE_NON_UTF8_NAME);

    let t = tempfile::tempdir().expect("tmp");
    write(t.path(), "big", &[7u8; 10_000], 0o644);
    let opts = TakeOptions {
        max_bytes: 9_999,
        ..TakeOptions::default()
    };
    let e = take(open(t.path()).as_fd(), &opts).expect_err("too large");
    assert_eq!(e.code(), WORKSPACE_TOO_LARGE);

    let t = tempfile::tempdir().expect("tmp");
    let deep = vec!["d"; 129].join("/");
    fs::create_dir_all(t.path().join(&deep)).expect("mkdir");
    let e = take(open(t.path()).as_fd(), &TakeOptions::default()).expect_err("deep");
    assert_eq!(e.code(), WORKSPACE_TOO_DEEP);
}

#[test]
fn blockers_name_each_entry_apply_cannot_carry() {
    let t = tempfile::tempdir().expect("tmp");
    let r = t.path();
    write(r, "plain.txt", b"ok\n", 0o644);
    std::os::unix::fs::symlink("plain.txt", r.join("link")).expect("symlink");
    rustix::fs::mknodat(
        open(r).as_fd(),
        "fifo",
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .expect("mkfifo");
    write(r, "hard1", b"h", 0o644);
    fs::hard_link(r.join("hard1"), r.join("hard2")).expect("link");
    write(r, "suid", b"#!/bin/sh\n", 0o4755);
    let f = fs::File::create(r.join("sparse")).expect("create");
    f.set_len(1 << 20).expect("ftruncate");
    drop(f);
    write(r, "attr", b"a", 0o644);
    let attr_fd = fs::File::open(r.join("attr")).expect("open");
    let xattr =
        match rustix::fs::fsetxattr(&attr_fd, "user.x", b"1", rustix::fs::XattrFlags::empty()) {
            Ok(()) => true,
            Err(e) => {
                println!("skipping the xattr case: the file system refuses user xattrs ({e})");
                false
            }
        };
    let m = manifest(r);
    let mut got: Vec<(String, BlockerReason)> = m
        .blockers()
        .into_iter()
        .map(|b| (b.path, b.reason))
        .collect();
    got.sort();
    let mut want = vec![
        ("fifo".to_string(), BlockerReason::SpecialFile),
        ("hard1".into(), BlockerReason::HardLink),
        ("hard2".into(), BlockerReason::HardLink),
        ("link".into(), BlockerReason::Symlink),
        ("sparse".into(), BlockerReason::Sparse),
        ("suid".into(), BlockerReason::SpecialModeBits),
    ];
    if xattr {
        want.push(("attr".into(), BlockerReason::ExtendedAttribute));
    }
    want.sort();
    assert_eq!(got, want);
    let sparse = m.get("sparse").expect("sparse");
    assert_eq!((sparse.size, sparse.sparse), (1 << 20, true));
    assert_eq!(
        sparse.digest,
        Some(glove_types::Sha256Digest::of(&vec![0u8; 1 << 20]))
    );
    assert_eq!(m.get("fifo").map(|e| e.kind), Some(EntryKind::Other));
}

#[test]
fn compare_sorts_every_kind_of_change() {
    let (a, b) = (
        tempfile::tempdir().expect("a"),
        tempfile::tempdir().expect("b"),
    );
    for r in [a.path(), b.path()] {
        write(r, "same", b"s", 0o644);
        write(r, "content", b"1", 0o644);
        write(r, "gone", b"g", 0o644);
        write(r, "moded", b"m", 0o644);
        write(r, "retyped", b"r", 0o644);
    }
    let r = b.path();
    write(r, "content", b"2", 0o644);
    fs::remove_file(r.join("gone")).expect("rm");
    chmod(r, "moded", 0o755);
    fs::remove_file(r.join("retyped")).expect("rm");
    fs::create_dir(r.join("retyped")).expect("mkdir");
    chmod(r, "retyped", 0o755);
    write(r, "new", b"n", 0o644);
    let c = compare(&manifest(a.path()), &manifest(r));
    let got: Vec<(&str, ChangeKind, bool, bool)> = c
        .changes
        .iter()
        .map(|c| {
            (
                c.path.as_str(),
                c.kind(),
                c.content_changed(),
                c.mode_changed(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("content", ChangeKind::Modified, true, false),
            ("gone", ChangeKind::Removed, true, false),
            ("moded", ChangeKind::Modified, false, true),
            ("new", ChangeKind::Added, true, false),
            ("retyped", ChangeKind::TypeChanged, true, false),
        ]
    );
    assert!(compare(&manifest(a.path()), &manifest(a.path())).is_empty());
}

/// Not a test: `cargo test -p glove-control --lib workspace::tests::take_speed
/// -- --ignored --nocapture` takes the manifest of 10,000 files (200 MiB)
/// and reports its time against a baseline in the same process: reading
/// and hashing the same files by path (`std::fs::read` and SHA-256).
#[test]
#[ignore = "a measurement, run by hand"]
fn take_speed() {
    use sha2::{Digest, Sha256};
    let t = tempfile::tempdir().expect("tmp");
    let r = t.path();
    let body: Vec<u8> = (0..20_971u32).flat_map(|i| i.to_le_bytes()).collect();
    let mut paths = Vec::new();
    for d in 0..100 {
        for f in 0..100 {
            let rel = format!("d{d}/f{f}");
            write(r, &rel, &body[..20_971], 0o644);
            paths.push(r.join(rel));
        }
    }
    let start = std::time::Instant::now();
    let mut h = Sha256::new();
    for p in &paths {
        h.update(Sha256::digest(fs::read(p).expect("read")));
    }
    let baseline = start.elapsed();
    let start = std::time::Instant::now();
    let m = manifest(r);
    let took = start.elapsed();
    assert_eq!(m.entries().len(), 10_100);
    println!(
        "take: {took:?} for 10,000 files of 20,971 bytes; baseline read+hash by path: {baseline:?}; ratio {:.2}",
        took.as_secs_f64() / baseline.as_secs_f64()
    );
}

/// Unmounts on drop, so a failed assertion leaves no mount behind.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn a_mount_point_below_the_root_is_refused() {
    let t = tempfile::tempdir().expect("tmp");
    let mnt = t.path().join("sub/mnt");
    fs::create_dir_all(&mnt).expect("mkdir");
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "glove-test"])
        .arg(&mnt)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        assert!(
            std::env::var("GLOVE_REQUIRE_SANDBOX").as_deref() != Ok("1"),
            "GLOVE_REQUIRE_SANDBOX=1 but mounting a tmpfs failed (needs root)"
        );
        println!("skipping: mounting a tmpfs needs root (CAP_SYS_ADMIN)");
        return;
    }
    let _guard = Mounted(mnt.clone());
    let e = take(open(t.path()).as_fd(), &TakeOptions::default()).expect_err("mount point");
    assert_eq!(e.code(), WORKSPACE_MOUNT_POINT);
    assert!(e.to_string().contains("sub/mnt"), "{e}");
}
