//! The closure's listing and copy on real trees: links kept or refused,
//! modes normalised, special files and overlong paths refused, a tree
//! swapped under the walk seen as a change.

use super::*;

#[test]
fn links_inside_are_kept_and_links_out_are_refused() {
    assert_eq!(
        check_link("a/b/l", Path::new("../c")).map_err(|e| e.code()),
        Ok("../c".to_owned())
    );
    assert_eq!(
        check_link("a/l", Path::new("./x/../y")).map_err(|e| e.code()),
        Ok("./x/../y".to_owned())
    );
    for bad in ["../../x", "/etc/passwd", "../a/../../b"] {
        assert_eq!(
            check_link("a/l", Path::new(bad)).map_err(|e| e.code()),
            Err(STAGE_LINK_ESCAPES),
            "{bad}"
        );
    }
}

#[test]
fn modes_are_normalised() {
    assert_eq!(file_mode(0o600), 0o644);
    assert_eq!(file_mode(0o4777), 0o755);
    assert_eq!(file_mode(0o100), 0o755);
    assert_eq!(file_mode(0o666), 0o644);
}

#[test]
fn a_socket_is_refused_and_intermediate_directories_are_listed() {
    let t = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(t.path().join("d")).expect("mkdir");
    std::fs::write(t.path().join("d/f"), b"x").expect("write");
    let l = Listing::of_trees(
        &[Tree {
            src: t.path().join("d/f"),
            dest: "x/y/f".into(),
            skip_node_modules: false,
        }],
        &super::super::NoProgress,
    )
    .expect("listing");
    let paths: Vec<&String> = l.entries.keys().collect();
    assert_eq!(paths, ["x", "x/y", "x/y/f"]);
    assert_eq!((l.files(), l.bytes()), (1, 1));
    let _sock = std::os::unix::net::UnixListener::bind(t.path().join("d/s")).expect("bind");
    let err = Listing::of_dir(t.path()).err().map(|e| e.code());
    assert_eq!(err, Some(STAGE_SPECIAL_FILE));
}

#[test]
fn a_path_too_long_or_too_deep_is_refused() {
    let mut l = Listing::empty();
    let dir = || Entry {
        mode: 0o755,
        kind: Kind::Dir,
    };
    let long = "a".repeat(MAX_RELATIVE_PATH_BYTES + 1);
    assert_eq!(
        l.insert(long, dir()).err().map(|e| e.code()),
        Some(STAGE_PATH_TOO_LONG)
    );
    let deep = vec!["d"; MAX_CLOSURE_DEPTH + 1].join("/");
    assert_eq!(
        l.insert(deep, dir()).err().map(|e| e.code()),
        Some(STAGE_TOO_DEEP)
    );
    let big = Entry {
        mode: 0o644,
        kind: Kind::File {
            size: MAX_CLOSURE_BYTES + 1,
            sha256: [0; 32],
            src: Origin {
                root: 0,
                rel: "big".into(),
                shown: PathBuf::new(),
                id: Identity {
                    dev: 0,
                    ino: 0,
                    size: MAX_CLOSURE_BYTES + 1,
                    mtime: (0, 0),
                },
            },
        },
    };
    assert_eq!(
        l.insert("big".into(), big).err().map(|e| e.code()),
        Some(STAGE_TOO_LARGE)
    );
}

/// A package `p` with `a/f` and `z/secret`, and elsewhere a private
/// `vault/secret` of the same size.
fn swappable() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let t = tempfile::tempdir().expect("tempdir");
    let p = t.path().join("p");
    std::fs::create_dir_all(p.join("a")).expect("mkdir");
    std::fs::create_dir_all(p.join("z")).expect("mkdir");
    std::fs::write(p.join("a/f"), b"f").expect("write");
    std::fs::write(p.join("z/secret"), b"decoy!").expect("write");
    let vault = t.path().join("vault");
    std::fs::create_dir(&vault).expect("mkdir");
    std::fs::write(vault.join("secret"), b"SECRET").expect("write");
    std::fs::set_permissions(&vault, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    std::fs::set_permissions(p.join("a"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    (t, p, vault)
}

fn swap_for_link(dir: &Path, to: &Path) {
    std::fs::rename(dir, dir.with_file_name("z-old")).expect("move");
    std::os::unix::fs::symlink(to, dir).expect("link");
}

fn tree(p: &Path) -> Tree {
    Tree {
        src: p.to_path_buf(),
        dest: "p".into(),
        skip_node_modules: false,
    }
}

fn contains(root: &Path, body: &[u8]) -> bool {
    std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            let p = e.path();
            match std::fs::symlink_metadata(&p) {
                Ok(m) if m.is_dir() => contains(&p, body),
                Ok(m) if m.is_file() => std::fs::read(&p).is_ok_and(|b| b == body),
                _ => false,
            }
        })
}

/// Review 2, H2, deterministic: a directory of the listing replaced by
/// a link to a private directory between the listing and the copy.
#[test]
fn a_directory_swapped_for_a_link_after_the_listing_is_a_change() {
    let (t, p, vault) = swappable();
    let l = Listing::of_trees(&[tree(&p)], &super::super::NoProgress).expect("listing");
    swap_for_link(&p.join("z"), &vault);
    let out = t.path().join("out");
    std::fs::create_dir(&out).expect("mkdir");
    let err = l.write_into(&out, &super::super::NoProgress).err();
    assert_eq!(err.map(|e| e.code()), Some(STAGE_SOURCE_CHANGED));
    assert!(!contains(&out, b"SECRET"), "the private file was copied");
}

/// The same between the walk and the hashing.
#[test]
fn a_directory_swapped_for_a_link_before_the_hashing_is_a_change() {
    let (_t, p, vault) = swappable();
    let mut l = Listing::empty();
    l.add_tree(&tree(&p), Walk::Source).expect("walk");
    swap_for_link(&p.join("z"), &vault);
    let err = l.hash(&super::super::NoProgress, Walk::Source).err();
    assert_eq!(err.map(|e| e.code()), Some(STAGE_SOURCE_CHANGED));
}

/// A file replaced by another of the same size and content (a new
/// inode), or a directory above it renamed away, is a change too.
#[test]
fn a_file_replaced_after_the_listing_is_a_change() {
    let (t, p, _vault) = swappable();
    let l = Listing::of_trees(&[tree(&p)], &super::super::NoProgress).expect("listing");
    std::fs::remove_file(p.join("a/f")).expect("rm");
    std::fs::write(p.join("a/f"), b"f").expect("write");
    let out = t.path().join("out");
    std::fs::create_dir(&out).expect("mkdir");
    let err = l.write_into(&out, &super::super::NoProgress).err();
    assert_eq!(err.map(|e| e.code()), Some(STAGE_SOURCE_CHANGED));
}

/// Not readable by others: refused when listed, and when made so
/// after the listing.
#[test]
fn a_source_others_cannot_read_is_refused() {
    let (t, p, _vault) = swappable();
    let f = p.join("a/f");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let err = Listing::of_trees(&[tree(&p)], &super::super::NoProgress).err();
    assert_eq!(err.map(|e| e.code()), Some(STAGE_SOURCE_NOT_READABLE));
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    std::fs::set_permissions(p.join("a"), std::fs::Permissions::from_mode(0o711)).expect("chmod");
    let err = Listing::of_trees(&[tree(&p)], &super::super::NoProgress).err();
    assert_eq!(err.map(|e| e.code()), Some(STAGE_SOURCE_NOT_READABLE));
    std::fs::set_permissions(p.join("a"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let l = Listing::of_trees(&[tree(&p)], &super::super::NoProgress).expect("listing");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let out = t.path().join("out");
    std::fs::create_dir(&out).expect("mkdir");
    let err = l.write_into(&out, &super::super::NoProgress).err();
    assert_eq!(err.map(|e| e.code()), Some(STAGE_SOURCE_NOT_READABLE));
}
