//! Tests for the /etc snapshot.

use super::*;

fn host(dir: &Path, name: &str, body: &str) -> Entry {
    let p = dir.join(name.replace('/', "_"));
    fs::write(&p, body).expect("write");
    Entry::Host {
        name: name.into(),
        meta: fs::metadata(&p).expect("stat"),
        source: p,
    }
}

fn private_tempdir() -> tempfile::TempDir {
    let t = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o700)).expect("chmod");
    t
}

#[test]
fn a_snapshot_holds_every_entry_and_is_reused_until_a_source_changes() {
    let src = tempfile::tempdir().expect("tempdir");
    let cache = private_tempdir();
    let dir = cache.path().join("glove/etc");
    let entries = vec![
        host(src.path(), "nsswitch.conf", "passwd: files\n"),
        host(src.path(), "ssl/openssl.cnf", "[x]\n"),
        Entry::Generated {
            name: "hostname".into(),
            body: b"glove\n".to_vec(),
        },
        Entry::MountPoint {
            name: "ssl/certs".into(),
        },
    ];
    let a = ensure(&dir, &entries).expect("snapshot");
    assert_eq!(
        fs::read_to_string(a.join("nsswitch.conf")).expect("read"),
        "passwd: files\n"
    );
    assert_eq!(
        fs::read_to_string(a.join("ssl/openssl.cnf")).expect("read"),
        "[x]\n"
    );
    assert_eq!(
        fs::read(a.join("hostname")).expect("read"),
        b"glove\n".to_vec()
    );
    assert!(a.join("ssl/certs").is_dir());
    let mode = |p: &Path| fs::symlink_metadata(p).expect("stat").mode() & 0o777;
    assert_eq!(mode(&a.join("hostname")), 0o444);
    assert_eq!(mode(&a), 0o755);
    assert_eq!(mode(&a.join("ssl")), 0o755);
    // Same description: the same snapshot, nothing rewritten.
    let again = ensure(&dir, &entries).expect("snapshot");
    assert_eq!(a, again);

    // A source edited in place (new size and times) gives a new one.
    std::thread::sleep(Duration::from_millis(5));
    let p = src.path().join("nsswitch.conf");
    fs::write(&p, "passwd: files systemd\n").expect("write");
    let mut changed = entries;
    changed[0] = Entry::Host {
        name: "nsswitch.conf".into(),
        meta: fs::metadata(&p).expect("stat"),
        source: p,
    };
    let b = ensure(&dir, &changed).expect("snapshot");
    assert_ne!(a, b);
    assert_eq!(
        fs::read_to_string(b.join("nsswitch.conf")).expect("read"),
        "passwd: files systemd\n"
    );
    // The old one stays (it may be in use), bounded by count and age.
    assert!(a.is_dir());
}

#[test]
fn a_source_that_changed_after_it_was_described_is_refused() {
    let src = tempfile::tempdir().expect("tempdir");
    let cache = private_tempdir();
    let dir = cache.path().join("glove/etc");
    let entry = host(src.path(), "hosts", "a\n");
    fs::write(src.path().join("hosts"), "longer now\n").expect("write");
    let e = ensure(&dir, &[entry]).expect_err("changed");
    assert!(matches!(e, SnapshotError::Source { .. }), "{e}");
    // Nothing was left behind.
    let left: Vec<_> = fs::read_dir(&dir).expect("list").collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn unsafe_directories_and_names_are_refused() {
    let cache = tempfile::tempdir().expect("tempdir");
    // Writable by others.
    let open = cache.path().join("open");
    fs::create_dir(&open).expect("mkdir");
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).expect("chmod");
    let e = ensure(&open.join("etc"), &[]).expect_err("unsafe");
    assert!(matches!(e, SnapshotError::Unsafe { .. }), "{e}");
    // Below a directory others may write to (and not sticky).
    fs::DirBuilder::new()
        .mode(0o700)
        .create(open.join("a"))
        .expect("mkdir");
    let e = ensure(&open.join("a/glove/etc"), &[]).expect_err("unsafe");
    assert!(matches!(e, SnapshotError::Unsafe { .. }), "{e}");
    // A link in place of the directory.
    let private = private_tempdir();
    let real = private.path().join("real");
    fs::create_dir(&real).expect("mkdir");
    std::os::unix::fs::symlink(&real, private.path().join("link")).expect("symlink");
    let e = ensure(&private.path().join("link/etc"), &[]).expect_err("link");
    assert!(matches!(e, SnapshotError::Unsafe { .. }), "{e}");
    // A link further up.
    let e = ensure(&private.path().join("link/glove/etc"), &[]).expect_err("link");
    assert!(matches!(e, SnapshotError::Unsafe { .. }), "{e}");
    for bad in ["", "/abs", "a/../b", "a//b", "./a", "a\0b"] {
        let e = ensure(
            &private.path().join("glove/etc"),
            &[Entry::MountPoint { name: bad.into() }],
        )
        .expect_err("bad name");
        assert!(matches!(e, SnapshotError::BadName(_)), "{bad:?}: {e}");
    }
}

#[test]
fn snapshots_beyond_the_bound_are_removed_oldest_first_unless_in_use() {
    let cache = private_tempdir();
    let dir = cache.path().join("glove/etc");
    check_dirs(&dir).expect("dirs");
    let entry = |i: usize| Entry::Generated {
        name: "n".into(),
        body: i.to_string().into_bytes(),
    };
    let path = |i: usize| dir.join(format!("etc-{}", digest(&[entry(i)]).expect("key")));
    // Made without being used by this process (as by other launches
    // that have ended).
    let mut made = Vec::new();
    for i in 0..MAX_SNAPSHOTS + 3 {
        make(&dir, &path(i), &[entry(i)]).expect("snapshot");
        made.push(path(i));
        if i == 0 {
            // The oldest is in use elsewhere: a shared lock on it.
            let f = File::open(&made[0]).expect("open");
            rustix::fs::flock(&f, rustix::fs::FlockOperation::LockShared).expect("lock");
            std::mem::forget(f);
        }
        // Distinct modification times.
        std::thread::sleep(Duration::from_millis(2));
    }
    let left: Vec<PathBuf> = fs::read_dir(&dir)
        .expect("list")
        .flatten()
        .map(|e| e.path())
        .collect();
    // The one in use, and the newest others up to the bound.
    assert!(left.contains(&made[0]), "the snapshot in use was removed");
    assert_eq!(left.len(), MAX_SNAPSHOTS, "{left:?}");
    for p in &made[made.len() - (MAX_SNAPSHOTS - 1)..] {
        assert!(left.contains(p), "{p:?} was removed");
    }
    // What `ensure` returns is held by this process until it exits.
    let kept = ensure(&dir, &[entry(1000)]).expect("snapshot");
    let f = File::open(&kept).expect("open");
    assert!(
        rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err(),
        "not held"
    );
}

#[test]
fn snapshot_files_are_readable_whatever_the_umask() {
    let cache = private_tempdir();
    let dir = cache.path().join("glove/etc");
    let old = crate::sys::process::set_umask(0o077);
    let made = ensure(
        &dir,
        &[Entry::Generated {
            name: "passwd".into(),
            body: b"x\n".to_vec(),
        }],
    );
    crate::sys::process::set_umask(old);
    let made = made.expect("snapshot");
    let mode = fs::metadata(made.join("passwd")).expect("stat").mode() & 0o777;
    assert_eq!(mode, 0o444);
}
