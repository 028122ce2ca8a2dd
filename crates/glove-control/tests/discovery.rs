//! The launch-time resolver of discovery templates, against real files:
//! what it accepts, the unsafe directories and files it refuses, and that
//! what it pins is the file it checked.

use glove_control::managed::discovery::resolve;
use glove_types::codes::control::{
    SESSION_EXECUTABLE_NOT_FOUND, SESSION_EXECUTABLE_UNSAFE, SESSION_SEARCH_PATH_UNSAFE,
};
use glove_types::policy::NativeRuntime;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

fn required() -> bool {
    std::env::var("GLOVE_REQUIRE_SANDBOX").is_ok_and(|v| v == "1")
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A directory tree whose every ancestor is safe: below the target
/// directory when it qualifies (not a checkout under /tmp, which is
/// world-writable), else `/var/lib/glove-tests` as root or
/// `~/.cache/glove-tests`.
fn base() -> tempfile::TempDir {
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let _ = std::fs::create_dir_all(&target);
    let root = if glove_control::harness::unsafe_reasons(&target).is_empty() {
        target
    } else {
        let f = if is_root() {
            PathBuf::from("/var/lib/glove-tests")
        } else {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/glove-tests")
        };
        std::fs::create_dir_all(&f).expect("mkdir");
        mode(&f, 0o755);
        f
    };
    let t = tempfile::tempdir_in(root).expect("tempdir");
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    t
}

fn mode(p: &Path, m: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod");
}

fn exe(p: &Path, body: &str) {
    std::fs::write(p, body).expect("write");
    mode(p, 0o755);
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn identity(p: &Path) -> String {
    let m = std::fs::metadata(p).expect("stat");
    glove_sandbox::identity::file_identity(
        m.dev(),
        m.ino(),
        i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
    )
}

/// `pkg/bin/codex` (the real file) and `bin/codex -> ../pkg/bin/codex`, as
/// npm lays out a `.bin` link.
fn npm_like(root: &Path) -> (PathBuf, PathBuf) {
    let pkg = root.join("pkg/bin");
    std::fs::create_dir_all(&pkg).expect("mkdir");
    let real = pkg.join("codex");
    exe(&real, "#!/bin/sh\necho codex\n");
    let bin = root.join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    std::os::unix::fs::symlink("../pkg/bin/codex", bin.join("codex")).expect("link");
    (bin, real)
}

#[test]
fn resolves_in_order_through_links_and_pins_the_real_file() {
    let t = base();
    let (bin, real) = npm_like(t.path());
    let empty = t.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let missing = t.path().join("missing");
    let r = resolve(NativeRuntime::Codex, &[s(&missing), s(&empty), s(&bin)]).expect("resolves");
    assert_eq!(r.path, s(&real.canonicalize().expect("canonical")));
    assert_eq!(r.identity, identity(&real));
    // The first directory holding the name wins.
    let first = t.path().join("first");
    std::fs::create_dir(&first).expect("mkdir");
    exe(&first.join("codex"), "#!/bin/sh\n");
    let r = resolve(NativeRuntime::Codex, &[s(&first), s(&bin)]).expect("resolves");
    assert_eq!(r.path, s(&first.join("codex")));
    // Nothing installed: fails closed.
    let e = resolve(NativeRuntime::Pi, &[s(&bin), s(&empty)]).expect_err("no pi");
    assert_eq!(e.code(), SESSION_EXECUTABLE_NOT_FOUND);
}

#[test]
fn a_swap_after_resolution_changes_the_identity() {
    // What the sandbox checks before binding (see the launcher test
    // `a_pinned_executable_runs_and_a_swapped_one_is_refused`): a link
    // re-pointed, or the file replaced, after detection or resolution.
    let t = base();
    let (bin, real) = npm_like(t.path());
    let before = resolve(NativeRuntime::Codex, &[s(&bin)]).expect("resolves");
    let other = t.path().join("pkg/bin/other");
    exe(&other, "#!/bin/sh\necho other\n");
    std::fs::remove_file(bin.join("codex")).expect("rm");
    std::os::unix::fs::symlink("../pkg/bin/other", bin.join("codex")).expect("relink");
    let after = resolve(NativeRuntime::Codex, &[s(&bin)]).expect("resolves");
    assert_ne!(after.path, before.path);
    assert_ne!(after.identity, before.identity);
    // Replaced by rename at the same path: same path, new identity.
    let fresh = t.path().join("fresh");
    exe(&fresh, "#!/bin/sh\n");
    std::fs::rename(&fresh, &real).expect("rename");
    assert_ne!(identity(&real), before.identity);
}

#[test]
fn unsafe_search_paths_and_files_are_refused() {
    let t = base();
    let (bin, real) = npm_like(t.path());
    // The search directory group-writable.
    mode(&bin, 0o775);
    let e = resolve(NativeRuntime::Codex, &[s(&bin)]).expect_err("group-writable");
    assert_eq!(e.code(), SESSION_SEARCH_PATH_UNSAFE, "{e:?}");
    assert!(e.message().contains("group-writable"), "{}", e.message());
    mode(&bin, 0o755);
    // An ancestor writable by others.
    mode(t.path(), 0o757);
    let e = resolve(NativeRuntime::Codex, &[s(&bin)]).expect_err("ancestor");
    assert_eq!(e.code(), SESSION_SEARCH_PATH_UNSAFE, "{e:?}");
    mode(t.path(), 0o755);
    // An unsafe directory is not skipped for a later, safe one.
    let safe = t.path().join("safe");
    std::fs::create_dir(&safe).expect("mkdir");
    exe(&safe.join("codex"), "#!/bin/sh\n");
    mode(&bin, 0o777);
    let e = resolve(NativeRuntime::Codex, &[s(&bin), s(&safe)]).expect_err("not skipped");
    assert_eq!(e.code(), SESSION_SEARCH_PATH_UNSAFE);
    mode(&bin, 0o755);
    // The real file's directory (reached through the link) group-writable.
    mode(real.parent().expect("parent"), 0o775);
    let e = resolve(NativeRuntime::Codex, &[s(&bin)]).expect_err("real dir");
    assert_eq!(e.code(), SESSION_EXECUTABLE_UNSAFE, "{e:?}");
    mode(real.parent().expect("parent"), 0o755);
    // The file itself writable by the group, or not executable.
    mode(&real, 0o775);
    let e = resolve(NativeRuntime::Codex, &[s(&bin)]).expect_err("file mode");
    assert_eq!(e.code(), SESSION_EXECUTABLE_UNSAFE);
    mode(&real, 0o644);
    let e = resolve(NativeRuntime::Codex, &[s(&bin)]).expect_err("not executable");
    assert_eq!(e.code(), SESSION_EXECUTABLE_UNSAFE);
    mode(&real, 0o755);
    // A symbolic link as a search directory component.
    let alias = t.path().join("alias");
    std::os::unix::fs::symlink(&bin, &alias).expect("link");
    let e = resolve(NativeRuntime::Codex, &[s(&alias)]).expect_err("link dir");
    assert_eq!(e.code(), SESSION_SEARCH_PATH_UNSAFE);
    // A link out to a directory through a link component.
    let tricky = t.path().join("tricky");
    std::fs::create_dir(&tricky).expect("mkdir");
    std::os::unix::fs::symlink("../alias/codex", tricky.join("codex")).expect("link");
    let e = resolve(NativeRuntime::Codex, &[s(&tricky)]).expect_err("link component");
    assert_eq!(e.code(), SESSION_EXECUTABLE_UNSAFE);
    // Not a regular file.
    let odd = t.path().join("odd");
    std::fs::create_dir_all(odd.join("codex")).expect("mkdir");
    let e = resolve(NativeRuntime::Codex, &[s(&odd)]).expect_err("directory");
    assert_eq!(e.code(), SESSION_EXECUTABLE_UNSAFE);
    // A link loop.
    let looped = t.path().join("loop");
    std::fs::create_dir(&looped).expect("mkdir");
    std::os::unix::fs::symlink("codex", looped.join("codex")).expect("loop");
    let e = resolve(NativeRuntime::Codex, &[s(&looped)]).expect_err("loop");
    assert_eq!(e.code(), SESSION_EXECUTABLE_UNSAFE);
    assert!(
        resolve(NativeRuntime::Codex, &[s(&bin)]).is_ok(),
        "restored"
    );
}

#[test]
fn owners_other_than_root_or_the_service_user_are_refused() {
    if !is_root() {
        assert!(
            !required(),
            "GLOVE_REQUIRE_SANDBOX=1 but not root (chown needs it)"
        );
        eprintln!("skipping: changing owners needs root");
        return;
    }
    let t = base();
    let (bin, real) = npm_like(t.path());
    std::os::unix::fs::chown(&bin, Some(4242), None).expect("chown");
    let e = resolve(NativeRuntime::Codex, &[s(&bin)]).expect_err("other owner");
    assert_eq!(e.code(), SESSION_SEARCH_PATH_UNSAFE);
    assert!(e.message().contains("uid 4242"), "{}", e.message());
    std::os::unix::fs::chown(&bin, Some(0), None).expect("chown");
    std::os::unix::fs::chown(&real, Some(4242), None).expect("chown");
    let e = resolve(NativeRuntime::Codex, &[s(&bin)]).expect_err("file owner");
    assert_eq!(e.code(), SESSION_EXECUTABLE_UNSAFE);
    // The overflow uid (an owner unmapped in a user namespace) is not root.
    let overflow: u32 = std::fs::read_to_string("/proc/sys/kernel/overflowuid")
        .expect("overflowuid")
        .trim()
        .parse()
        .expect("number");
    std::os::unix::fs::chown(&real, Some(overflow), None).expect("chown");
    let e = resolve(NativeRuntime::Codex, &[s(&bin)]).expect_err("overflow");
    assert_eq!(e.code(), SESSION_EXECUTABLE_UNSAFE);
    assert!(e.message().contains("overflow"), "{}", e.message());
}
