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

#[test]
fn beneath_refuses_links_and_escapes_and_reads_what_it_opens() {
    use beneath::{list_dir, open_beneath, read_link, xattr_names};
    let (t, dir) = private_tempdir();
    std::fs::create_dir(t.path().join("d")).expect("mkdir");
    std::fs::write(t.path().join("d/f"), b"x").expect("write");
    std::os::unix::fs::symlink("d", t.path().join("l")).expect("symlink");
    let dir = dir.as_fd();
    assert!(open_beneath(dir, "d/f", OFlags::RDONLY).is_ok());
    // A link in any component, or the last one when not O_PATH: ELOOP.
    assert_eq!(
        open_beneath(dir, "l/f", OFlags::RDONLY).err(),
        Some(Errno::LOOP)
    );
    assert_eq!(
        open_beneath(dir, "l", OFlags::RDONLY).err(),
        Some(Errno::LOOP)
    );
    // With O_PATH the link itself opens, and its target reads back.
    let l = open_beneath(dir, "l", OFlags::PATH).expect("O_PATH link");
    assert_eq!(read_link(l.as_fd()).expect("readlink"), b"d");
    // `..` out of the directory: EXDEV.
    assert_eq!(
        open_beneath(dir, "d/../..", OFlags::PATH).err(),
        Some(Errno::XDEV)
    );
    let mut names = list_dir(dir).expect("list");
    names.sort();
    assert_eq!(names, [OsStr::new("d"), OsStr::new("l")]);
    let f = open_beneath(dir, "d/f", OFlags::RDONLY).expect("open");
    assert!(xattr_names(f.as_fd()).expect("xattrs").is_empty());
}
