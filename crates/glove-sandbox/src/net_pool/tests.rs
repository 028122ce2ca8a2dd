//! Tests for the network pool.

use super::*;

/// Root is needed to bind namespaces; without it the test says so
/// (and fails when the sandbox is required).
fn root_or_skip() -> bool {
    if crate::sys::process::effective_ids().0 == 0 {
        return true;
    }
    assert!(
        std::env::var("GLOVE_REQUIRE_SANDBOX").as_deref() != Ok("1"),
        "GLOVE_REQUIRE_SANDBOX=1 but the pool tests need root"
    );
    eprintln!("skipping: the network namespace pool needs root");
    false
}

/// A ready entry made the way the remover makes one, by `unshare -n`.
fn make_ready(dir: &Path, name: &str) {
    let making = dir.join(unique(MAKING));
    std::fs::create_dir(&making).expect("mkdir");
    std::fs::File::create(making.join(NS_FILE)).expect("ns file");
    let ok = std::process::Command::new("unshare")
        .args(["--net", "mount", "--bind", "/proc/self/ns/net"])
        .arg(making.join(NS_FILE))
        .status()
        .expect("unshare");
    assert!(ok.success());
    std::fs::rename(&making, dir.join(format!("{READY}{name}"))).expect("rename");
}

/// A pool directory in a temporary directory; dropping it releases
/// what is left and the directory's own bind.
struct TestPool {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
}

impl Drop for TestPool {
    fn drop(&mut self) {
        let _ = drain(&self.dir);
        let _ = rustix::mount::unmount(&self.dir, rustix::mount::UnmountFlags::DETACH);
    }
}

fn pool() -> TestPool {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("glove/netns");
    TestPool { _tmp: tmp, dir }
}

/// Mount points below `dir`.
fn bound_below(dir: &Path) -> usize {
    let prefix = format!("{}/", dir.display());
    std::fs::read_to_string("/proc/self/mountinfo")
        .expect("mountinfo")
        .lines()
        .filter(|l| l.split(' ').nth(4).is_some_and(|m| m.starts_with(&prefix)))
        .count()
}

fn inode(fd: &OwnedFd) -> u64 {
    rustix::fs::fstat(fd).expect("fstat").st_ino
}

#[test]
fn names_are_parsed_strictly() {
    let t = "01796046101216345308";
    assert_eq!(slot(b"net-0"), Some(0));
    assert_eq!(slot(b"net-7"), Some(7));
    for bad in [
        "net-8", "net-01", "net-", "net-+1", "net--1", "net-1x", "nett-1",
    ] {
        assert_eq!(slot(bad.as_bytes()), None, "{bad}");
    }
    assert!(stamp(format!("used-{t}-12-0").as_bytes(), USED).is_some());
    for bad in [
        format!("used-{t}-12"),
        format!("used-{t}-12-0-1"),
        format!("used-{t}x-12-0"),
        format!("used-+{}-12-0", &t[1..]),
        format!("used-{t}--0"),
        format!("used-{}-1-0", &t[1..]),
        format!(".new-{t}-1-0"),
    ] {
        assert_eq!(stamp(bad.as_bytes(), USED), None, "{bad}");
    }
    let u = unique(USED);
    assert!(stamp(u.as_bytes(), USED).is_some(), "{u}");
    assert_ne!(unique(MAKING), unique(MAKING));
}

proptest::proptest! {
    /// Any name: no panic, and what reads as a slot or a stamp is the
    /// name that would be written for it.
    #[test]
    fn any_name_is_read_without_panicking(name in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
        fuzz_entry_name(&name);
    }

    /// Names made here read back.
    #[test]
    fn made_names_read_back(n in 0..MAX_ENTRIES, t in 0u128..10u128.pow(20), pid in 0u32.., seq in 0u64..) {
        let ready = format!("{READY}{n}");
        proptest::prop_assert_eq!(slot(ready.as_bytes()), Some(n));
        let used = format!("{USED}{t:020}-{pid}-{seq}");
        proptest::prop_assert_eq!(stamp(used.as_bytes(), USED), Some(t));
        proptest::prop_assert_eq!(stamp(used.as_bytes(), MAKING), None);
        fuzz_entry_name(used.as_bytes());
    }
}

#[test]
fn leftovers_are_judged_by_claim_time_or_by_creation() {
    let now = now_nanos();
    let min = 60_000_000_000u128;
    let at = |prefix: &str, t: u128| format!("{prefix}{t:020}-1-0");
    let never = || -> u128 { panic!("a used entry's age is in its name") };
    assert_eq!(
        leftover_is_stale(at(USED, now - 2 * min).as_bytes(), now, never),
        Some(true)
    );
    assert_eq!(
        leftover_is_stale(at(USED, now - min / 2).as_bytes(), now, never),
        Some(false)
    );
    // Half-made: the directory's creation counts, not the planned name.
    let old_name = at(MAKING, now - 60 * min);
    assert_eq!(
        leftover_is_stale(old_name.as_bytes(), now, || now),
        Some(false)
    );
    assert_eq!(
        leftover_is_stale(old_name.as_bytes(), now, || now - 2 * min),
        Some(true)
    );
    assert_eq!(leftover_is_stale(b"net-0", now, || now), None);
    assert_eq!(leftover_is_stale(b"notes", now, || now), None);
}

#[test]
fn an_ordinary_user_gets_no_pool() {
    if crate::sys::process::effective_ids().0 == 0 {
        assert!(default_dir().is_some());
        return;
    }
    assert!(default_dir().is_none());
    assert!(matches!(
        claim(Path::new("/tmp/glove-no-pool")),
        Err(PoolError::NotRoot)
    ));
}

#[test]
fn every_namespace_is_claimed_once_even_by_concurrent_claimers() {
    if !root_or_skip() {
        return;
    }
    let p = pool();
    let dir = &p.dir;
    // The first claim makes the directory and finds nothing.
    let first = claim(dir).expect("claim");
    assert!(first.namespace.is_none() && first.used.is_none());
    assert_eq!(first.refill.entries.len(), TARGET);
    assert_eq!(first.refill.slots.len(), MAX_ENTRIES);
    for e in &first.refill.entries {
        assert!(e
            .making
            .file_name()
            .unwrap()
            .as_bytes()
            .starts_with(b".new-"));
        assert_eq!(e.making_ns, e.making.join("ns"));
        assert!(!e.making.exists());
    }
    assert_ne!(first.refill.entries[0], first.refill.entries[1]);
    for i in 0..5 {
        make_ready(dir, &i.to_string());
    }
    assert_eq!(ready_namespaces(dir).len(), 5);
    let claims: Vec<Claim> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8).map(|_| s.spawn(|| claim(dir))).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread").expect("claim"))
            .collect()
    });
    let mut got: Vec<u64> = claims
        .iter()
        .filter_map(|c| c.namespace.as_ref().map(inode))
        .collect();
    assert_eq!(got.len(), 5, "five entries, five namespaces");
    got.sort();
    got.dedup();
    assert_eq!(got.len(), 5, "no namespace was handed out twice");
    let host = rustix::fs::stat("/proc/self/ns/net").expect("stat").st_ino;
    assert!(!got.contains(&host));
    for c in claims {
        if let Some(used) = c.used {
            let path = used.path().to_owned();
            assert!(path.join("ns").exists());
            drop(used);
            assert!(!path.exists(), "dropping the claim's entry takes it down");
        }
    }
    assert!(ready_namespaces(dir).is_empty());
    assert_eq!(std::fs::read_dir(dir).expect("list").count(), 0);
    assert_eq!(bound_below(dir), 0);
}

#[test]
fn a_claim_removes_leftovers_and_refills_only_what_is_missing() {
    if !root_or_skip() {
        return;
    }
    let p = pool();
    let dir = &p.dir;
    claim(dir).expect("make the directory");
    for i in 0..3 {
        make_ready(dir, &i.to_string());
    }
    // A used entry left by a process that died an hour ago; a
    // half-made one planned an hour ago but begun now (kept: it is
    // being made).
    let hour_ago = |prefix: &str| format!("{prefix}{:020}-1-0", now_nanos() - 3_600_000_000_000);
    let stale = [hour_ago(USED)];
    for name in &stale {
        std::fs::create_dir(dir.join(name)).expect("mkdir");
        std::fs::File::create(dir.join(name).join(NS_FILE)).expect("file");
    }
    let fresh = hour_ago(MAKING);
    std::fs::create_dir(dir.join(&fresh)).expect("mkdir");

    let c = claim(dir).expect("claim");
    let ns = c.namespace.as_ref().expect("a namespace");
    assert!(ready_namespaces(dir)
        .iter()
        .all(|(_, ino)| *ino != inode(ns)));
    assert_eq!(ready_namespaces(dir).len(), 2);
    assert!(c.refill.entries.is_empty(), "two are left: nothing to make");
    for name in &stale {
        assert!(!dir.join(name).exists(), "{name} left behind");
    }
    assert!(dir.join(&fresh).exists(), "an entry in the making stays");
    drop(c);
    let c = claim(dir).expect("claim");
    assert!(c.namespace.is_some());
    assert_eq!(c.refill.entries.len(), TARGET - 1);

    // Draining releases every entry (the last ready one and the one in
    // the making); nothing stays bound.
    drop(c);
    assert_eq!(drain(dir).expect("drain"), 2);
    assert!(ready_namespaces(dir).is_empty());
    assert_eq!(bound_below(dir), 0);
}

#[test]
fn directories_that_are_not_pools_are_refused_and_left_alone() {
    if !root_or_skip() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    // Writable by others.
    let p = pool();
    let dir = &p.dir;
    claim(dir).expect("make the directory");
    make_ready(dir, "0");
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    assert!(matches!(claim(dir), Err(PoolError::Dir(_))));
    assert_eq!(ready_namespaces(dir).len(), 1, "untouched");
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    // Holding something else: refused, nothing removed.
    std::fs::write(dir.join("notes"), "x").expect("write");
    assert!(matches!(claim(dir), Err(PoolError::NotAPool { .. })));
    assert_eq!(ready_namespaces(dir).len(), 1, "untouched");
    std::fs::remove_file(dir.join("notes")).expect("rm");
    assert_eq!(drain(dir).expect("drain"), 1);
    assert_eq!(bound_below(dir), 0);

    // A directory with contents is never mounted over.
    let tmp = tempfile::tempdir().expect("tempdir");
    let full = tmp.path().join("glove/netns");
    std::fs::create_dir_all(&full).expect("mkdir");
    std::fs::set_permissions(
        tmp.path().join("glove"),
        std::fs::Permissions::from_mode(0o700),
    )
    .expect("chmod");
    std::fs::set_permissions(&full, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    std::fs::write(full.join("keep"), "x").expect("write");
    assert!(matches!(claim(&full), Err(PoolError::NotAPool { .. })));
    assert!(full.join("keep").exists());
    assert_eq!(bound_below(tmp.path()), 0);
    // Nor is a mount point of another file system (ramfs) used.
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).expect("mkdir");
    rustix::mount::mount(
        "test",
        &other,
        "ramfs",
        rustix::mount::MountFlags::empty(),
        c"mode=0700",
    )
    .expect("mount ramfs");
    let refused = claim(&other);
    let _ = rustix::mount::unmount(&other, rustix::mount::UnmountFlags::DETACH);
    match refused {
        Err(PoolError::NotAPool { why, .. }) => assert!(why.contains("mount point"), "{why}"),
        other => panic!("{other:?}"),
    }
}
