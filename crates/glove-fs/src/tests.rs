//! The discipline on real files: links are never followed, checks run on
//! the open descriptor, an entry that appeared meanwhile is never opened.

use super::*;
use std::os::unix::fs::PermissionsExt;

fn private_tempdir() -> (tempfile::TempDir, OwnedFd) {
    let t = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let fd = unconfined::open_dir(t.path(), false).expect("open");
    (t, fd)
}

#[test]
fn a_private_directory_and_file_pass_and_each_fault_is_named() {
    let (t, dir) = private_tempdir();
    assert_eq!(
        facts(dir.as_fd()).expect("facts").private_dir(0o700),
        Ok(())
    );
    let f = create_in(dir.as_fd(), OsStr::new("f"), OFlags::WRONLY, 0o600).expect("create");
    chmod(f.as_fd(), 0o600).expect("chmod");
    assert_eq!(facts(f.as_fd()).expect("facts").private_file(0o600), Ok(()));
    chmod(f.as_fd(), 0o644).expect("chmod");
    assert_eq!(
        facts(f.as_fd()).expect("facts").private_file(0o600),
        Err(Fault::BadMode { mode: 0o644 })
    );
    chmod(f.as_fd(), 0o600).expect("chmod");
    std::fs::hard_link(t.path().join("f"), t.path().join("g")).expect("link");
    assert_eq!(
        facts(f.as_fd()).expect("facts").private_file(0o600),
        Err(Fault::LinkCount { links: 2 })
    );
    assert_eq!(
        facts(dir.as_fd()).expect("facts").private_file(0o600),
        Err(Fault::NotRegular)
    );
    assert_eq!(
        facts(f.as_fd()).expect("facts").private_dir(0o700),
        Err(Fault::NotDirectory)
    );
}

#[test]
fn a_link_in_the_last_component_is_never_followed() {
    let (t, dir) = private_tempdir();
    std::fs::write(t.path().join("target"), b"x").expect("write");
    std::os::unix::fs::symlink(t.path().join("target"), t.path().join("link")).expect("symlink");
    assert_eq!(
        open_in(dir.as_fd(), OsStr::new("link"), OFlags::RDONLY).err(),
        Some(Errno::LOOP)
    );
    // Creating over a link (dangling or not) is refused, never followed.
    std::os::unix::fs::symlink(t.path().join("nowhere"), t.path().join("dangling"))
        .expect("symlink");
    assert_eq!(
        create_in(dir.as_fd(), OsStr::new("dangling"), OFlags::WRONLY, 0o600).err(),
        Some(Errno::EXIST)
    );
    assert!(!t.path().join("nowhere").exists());
    assert_eq!(
        facts_in(dir.as_fd(), OsStr::new("link"))
            .expect("facts")
            .kind,
        FileType::Symlink
    );
    let linked_dir = t.path().join("dirlink");
    std::os::unix::fs::symlink(t.path(), &linked_dir).expect("symlink");
    assert!(unconfined::open_dir(&linked_dir, false).is_err());
    assert!(unconfined::open_dir(&linked_dir, true).is_ok());
}

#[test]
fn rename_unlink_and_sync_stay_inside_the_directory() {
    let (t, dir) = private_tempdir();
    drop(create_in(dir.as_fd(), OsStr::new("a"), OFlags::WRONLY, 0o600).expect("a"));
    drop(create_in(dir.as_fd(), OsStr::new("b"), OFlags::WRONLY, 0o600).expect("b"));
    assert_eq!(
        rename_in(dir.as_fd(), OsStr::new("a"), OsStr::new("b"), true).err(),
        Some(Errno::EXIST)
    );
    rename_in(dir.as_fd(), OsStr::new("a"), OsStr::new("b"), false).expect("replace");
    assert!(!t.path().join("a").exists());
    unlink_in(dir.as_fd(), OsStr::new("b")).expect("unlink");
    unlink_in(dir.as_fd(), OsStr::new("b")).expect("a missing file is fine");
    sync_dir(dir.as_fd()).expect("sync");
    mkdir_in(dir.as_fd(), OsStr::new("d"), 0o700).expect("mkdir");
    assert_eq!(
        mkdir_in(dir.as_fd(), OsStr::new("d"), 0o700).err(),
        Some(Errno::EXIST)
    );
}

#[test]
fn a_protected_read_refuses_loose_linked_large_or_missing_files() {
    let (t, _dir) = private_tempdir();
    let p = t.path().join("secret");
    std::fs::write(&p, b"hello").expect("write");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    assert_eq!(
        unconfined::read_protected(&p, 0o600, 16).expect("read"),
        b"hello"
    );
    assert_eq!(
        unconfined::read_protected(&p, 0o600, 4),
        Err(unconfined::ReadFault::TooLarge { size: 5 })
    );
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    assert_eq!(
        unconfined::read_protected(&p, 0o600, 16),
        Err(unconfined::ReadFault::Placement(Fault::BadMode {
            mode: 0o640
        }))
    );
    let link = t.path().join("link");
    std::os::unix::fs::symlink(&p, &link).expect("symlink");
    assert_eq!(
        unconfined::read_protected(&link, 0o640, 16),
        Err(unconfined::ReadFault::Open(Errno::LOOP))
    );
    assert_eq!(
        unconfined::read_protected(&t.path().join("none"), 0o600, 16),
        Err(unconfined::ReadFault::Open(Errno::NOENT))
    );
}
