//! A closure's listing, its digest and its copy.
//!
//! A closure is a set of source trees, each placed at a relative path of
//! the closure. Walking them never follows a symbolic link: a link is
//! recorded as a link (and refused if its target is absolute or climbs out
//! of the closure), and anything but a regular file, a directory or a link
//! is refused. Modes are normalised (directories 0755, files 0755 when any
//! execute bit is set, 0644 otherwise) and owners are not recorded: the copy
//! belongs to whoever stages it. Every walk is bounded by the constants
//! below, each with its own code.
//!
//! The digest is `sha256_domain("glove.stage.closure.v1", C)` over the
//! canonical JSON array `C` of the entries, sorted by relative path (see
//! `docs/digests.md`).

use glove_types::codes::stage::{
    STAGE_IO, STAGE_LINK_ESCAPES, STAGE_NAME_INVALID, STAGE_PATH_TOO_LONG, STAGE_SOURCE_CHANGED,
    STAGE_SOURCE_INVALID, STAGE_SPECIAL_FILE, STAGE_STORE_MISMATCH, STAGE_TOO_DEEP,
    STAGE_TOO_LARGE, STAGE_TOO_MANY_FILES,
};
use glove_types::{Rejection, Sha256Digest};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use super::Progress;

/// The domain of the closure digest.
pub const CLOSURE_DOMAIN: &str = "glove.stage.closure.v1";
/// Largest closure, all regular files together: 4 GiB. The largest
/// harness closure (copilot with its extracted cache) is under 0.5 GiB.
pub const MAX_CLOSURE_BYTES: u64 = 4 << 30;
/// Most entries (directories, files and links) in a closure. pi's closure
/// of a few hundred packages holds about ten thousand.
pub const MAX_CLOSURE_ENTRIES: usize = 200_000;
/// Most components in a closure path.
pub const MAX_CLOSURE_DEPTH: usize = 48;
/// Longest closure path, in bytes (the store prefix comes on top, so the
/// whole path stays well inside `PATH_MAX`).
pub const MAX_RELATIVE_PATH_BYTES: usize = 1024;

/// A source tree and where it goes in the closure.
pub(crate) struct Tree {
    /// The source: a directory, or one regular file.
    pub(crate) src: PathBuf,
    /// Its relative path in the closure (`/`-separated, no `.` or `..`).
    pub(crate) dest: String,
    /// Leave out the tree's own top-level `node_modules` (a package whose
    /// dependencies are staged as packages of their own).
    pub(crate) skip_node_modules: bool,
}

/// What one closure path is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    Dir,
    File {
        size: u64,
        sha256: [u8; 32],
        src: PathBuf,
    },
    Link {
        target: String,
    },
}

/// One closure path with its normalised mode (0 for a link).
#[derive(Clone, Debug)]
struct Entry {
    mode: u32,
    kind: Kind,
}

/// A walked and hashed closure.
pub(crate) struct Listing {
    entries: BTreeMap<String, Entry>,
    bytes: u64,
}

/// Whether a walk checks a copy already in the store: then each entry's
/// real mode must already be the normalised one and owned by this user.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Walk {
    Source,
    Store,
}

fn io(what: &str, p: &Path, e: &std::io::Error) -> Rejection {
    Rejection::new(STAGE_IO, format!("{what} {}: {e}", p.display()))
}

/// The normalised mode of a file with `raw` permission bits.
fn file_mode(raw: u32) -> u32 {
    if raw & 0o111 != 0 {
        0o755
    } else {
        0o644
    }
}

/// The target of a link at `path`, checked lexically against the closure
/// root: relative, and never above the root.
fn check_link(path: &str, target: &Path) -> Result<String, Rejection> {
    let shown = target.display();
    let t = target.to_str().ok_or_else(|| {
        Rejection::new(
            STAGE_NAME_INVALID,
            format!("the link {path} has a target that is not UTF-8"),
        )
    })?;
    let escape = || {
        Rejection::new(
            STAGE_LINK_ESCAPES,
            format!("the link {path} -> {shown} leaves the closure"),
        )
    };
    let mut at: Vec<&str> = path.split('/').collect();
    at.pop();
    for c in target.components() {
        match c {
            Component::Normal(n) => at.push(n.to_str().ok_or_else(escape)?),
            Component::CurDir => {}
            Component::ParentDir => {
                at.pop().ok_or_else(escape)?;
            }
            Component::RootDir | Component::Prefix(_) => return Err(escape()),
        }
    }
    Ok(t.to_owned())
}

impl Listing {
    /// Walks `trees` (not following links) and hashes every file.
    pub(crate) fn of_trees(trees: &[Tree], progress: &dyn Progress) -> Result<Listing, Rejection> {
        let mut l = Listing {
            entries: BTreeMap::new(),
            bytes: 0,
        };
        for t in trees {
            l.add_tree(t, Walk::Source)?;
        }
        l.hash(progress, Walk::Source)?;
        Ok(l)
    }

    /// Walks and hashes a directory already in the store, requiring the
    /// normalised modes and this user's ownership.
    fn of_store(root: &Path, progress: &dyn Progress) -> Result<Listing, Rejection> {
        let mut l = Listing {
            entries: BTreeMap::new(),
            bytes: 0,
        };
        l.add_children(root, "", false, Walk::Store)?;
        l.hash(progress, Walk::Store)?;
        Ok(l)
    }

    /// The listing of `root`'s contents as a copy of it would be: the
    /// digest a closure of exactly this tree has.
    pub(crate) fn of_dir(root: &Path) -> Result<Listing, Rejection> {
        let mut l = Listing {
            entries: BTreeMap::new(),
            bytes: 0,
        };
        l.add_children(root, "", false, Walk::Source)?;
        l.hash(&super::NoProgress, Walk::Source)?;
        Ok(l)
    }

    /// Regular files.
    pub(crate) fn files(&self) -> usize {
        self.entries
            .values()
            .filter(|e| matches!(e.kind, Kind::File { .. }))
            .count()
    }

    /// Entries of every kind.
    pub(crate) fn entries(&self) -> usize {
        self.entries.len()
    }

    /// The regular files' bytes.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The canonical listing the digest is taken over.
    pub(crate) fn document(&self) -> Value {
        Value::Array(
            self.entries
                .iter()
                .map(|(path, e)| match &e.kind {
                    Kind::Dir => json!({"kind": "dir", "mode": e.mode, "path": path}),
                    Kind::File { size, sha256, .. } => json!({
                        "kind": "file",
                        "mode": e.mode,
                        "path": path,
                        "sha256": glove_types::digest::to_hex(sha256),
                        "size": size,
                    }),
                    Kind::Link { target } => {
                        json!({"kind": "link", "path": path, "target": target})
                    }
                })
                .collect(),
        )
    }

    /// The closure digest.
    pub(crate) fn digest(&self) -> Result<Sha256Digest, Rejection> {
        let bytes = glove_types::canon::to_canonical(&self.document())?;
        Ok(Sha256Digest::of_domain(CLOSURE_DOMAIN, &bytes))
    }

    fn insert(&mut self, path: String, e: Entry) -> Result<(), Rejection> {
        if path.len() > MAX_RELATIVE_PATH_BYTES {
            return Err(Rejection::new(
                STAGE_PATH_TOO_LONG,
                format!("{path} is longer than {MAX_RELATIVE_PATH_BYTES} bytes"),
            ));
        }
        if path.split('/').count() > MAX_CLOSURE_DEPTH {
            return Err(Rejection::new(
                STAGE_TOO_DEEP,
                format!("{path} has more than {MAX_CLOSURE_DEPTH} components"),
            ));
        }
        // Every ancestor is a directory of the closure.
        let mut end = 0;
        while let Some(i) = path[end..].find('/') {
            end += i;
            let parent = &path[..end];
            match self.entries.get(parent) {
                Some(Entry {
                    kind: Kind::Dir, ..
                }) => {}
                Some(_) => {
                    return Err(Rejection::new(
                        STAGE_SOURCE_INVALID,
                        format!("{parent} is both a directory and not one in the closure"),
                    ))
                }
                None => {
                    self.entries.insert(
                        parent.to_owned(),
                        Entry {
                            mode: 0o755,
                            kind: Kind::Dir,
                        },
                    );
                }
            }
            end += 1;
        }
        match self.entries.get(&path) {
            Some(old) if old.kind == Kind::Dir && e.kind == Kind::Dir => {}
            Some(_) => {
                return Err(Rejection::new(
                    STAGE_SOURCE_INVALID,
                    format!("{path} comes from two places of the closure"),
                ))
            }
            None => {
                if let Kind::File { size, .. } = e.kind {
                    self.bytes = self.bytes.saturating_add(size);
                    if self.bytes > MAX_CLOSURE_BYTES {
                        return Err(Rejection::new(
                            STAGE_TOO_LARGE,
                            format!("the closure is larger than {MAX_CLOSURE_BYTES} bytes"),
                        ));
                    }
                }
                self.entries.insert(path, e);
            }
        }
        if self.entries.len() > MAX_CLOSURE_ENTRIES {
            return Err(Rejection::new(
                STAGE_TOO_MANY_FILES,
                format!("the closure has more than {MAX_CLOSURE_ENTRIES} entries"),
            ));
        }
        Ok(())
    }

    fn add_tree(&mut self, t: &Tree, walk: Walk) -> Result<(), Rejection> {
        self.add(&t.src, t.dest.clone(), walk)?;
        if std::fs::symlink_metadata(&t.src).is_ok_and(|m| m.is_dir()) {
            self.add_children(&t.src, &t.dest, t.skip_node_modules, walk)?;
        }
        Ok(())
    }

    /// Records `src` (not followed) as `dest`; a directory's children are
    /// walked by the caller.
    fn add(&mut self, src: &Path, dest: String, walk: Walk) -> Result<(), Rejection> {
        let m = std::fs::symlink_metadata(src).map_err(|e| io("cannot inspect", src, &e))?;
        let raw = m.mode() & 0o7777;
        let ft = m.file_type();
        let (mode, kind) = if ft.is_symlink() {
            let target = std::fs::read_link(src).map_err(|e| io("cannot read", src, &e))?;
            (
                0,
                Kind::Link {
                    target: check_link(&dest, &target)?,
                },
            )
        } else if ft.is_dir() {
            (0o755, Kind::Dir)
        } else if ft.is_file() {
            (
                file_mode(raw),
                Kind::File {
                    size: m.len(),
                    sha256: [0; 32],
                    src: src.to_path_buf(),
                },
            )
        } else {
            return Err(Rejection::new(
                STAGE_SPECIAL_FILE,
                format!(
                    "{} is not a regular file, a directory or a link",
                    src.display()
                ),
            ));
        };
        if walk == Walk::Store && !ft.is_symlink() {
            let me = rustix::process::geteuid().as_raw();
            if raw != mode || m.uid() != me {
                return Err(Rejection::new(
                    STAGE_STORE_MISMATCH,
                    format!(
                        "{} has mode {raw:o} and owner {} (want {mode:o} and {me})",
                        src.display(),
                        m.uid()
                    ),
                ));
            }
        }
        self.insert(dest, Entry { mode, kind })
    }

    fn add_children(
        &mut self,
        dir: &Path,
        dest: &str,
        skip_node_modules: bool,
        walk: Walk,
    ) -> Result<(), Rejection> {
        let mut names = Vec::new();
        for e in std::fs::read_dir(dir).map_err(|e| io("cannot list", dir, &e))? {
            let e = e.map_err(|e| io("cannot list", dir, &e))?;
            let name = e.file_name();
            let name = name
                .to_str()
                .filter(|n| !n.chars().any(char::is_control))
                .ok_or_else(|| {
                    Rejection::new(
                        STAGE_NAME_INVALID,
                        format!(
                            "{} holds a name that is not UTF-8 or has a control character",
                            dir.display()
                        ),
                    )
                })?
                .to_owned();
            if skip_node_modules && name == "node_modules" {
                continue;
            }
            names.push(name);
            if names.len() > MAX_CLOSURE_ENTRIES {
                return Err(Rejection::new(
                    STAGE_TOO_MANY_FILES,
                    format!(
                        "{} has more than {MAX_CLOSURE_ENTRIES} entries",
                        dir.display()
                    ),
                ));
            }
        }
        names.sort();
        for name in names {
            let src = dir.join(&name);
            let d = if dest.is_empty() {
                name
            } else {
                format!("{dest}/{name}")
            };
            self.add(&src, d.clone(), walk)?;
            if std::fs::symlink_metadata(&src).is_ok_and(|m| m.is_dir()) {
                self.add_children(&src, &d, false, walk)?;
            }
        }
        Ok(())
    }

    fn hash(&mut self, progress: &dyn Progress, walk: Walk) -> Result<(), Rejection> {
        progress.phase(
            match walk {
                Walk::Source => "hashing",
                Walk::Store => "verifying",
            },
            self.bytes,
        );
        for e in self.entries.values_mut() {
            if let Kind::File { size, sha256, src } = &mut e.kind {
                let mut f = open_nofollow(src)?;
                *sha256 = copy_hashing(&mut f, None, *size, src, progress)?;
            }
        }
        Ok(())
    }

    /// Writes the closure into the empty directory `root` (mode 0755,
    /// created by the caller), re-hashing every file as it is copied: a
    /// file that no longer matches the listing is `stage_source_changed`.
    /// Everything written is synced (one `syncfs`) before this returns.
    pub(crate) fn write_into(&self, root: &Path, progress: &dyn Progress) -> Result<(), Rejection> {
        progress.phase("copying", self.bytes);
        for (path, e) in &self.entries {
            let to = root.join(path);
            match &e.kind {
                Kind::Dir => {
                    std::fs::create_dir(&to).map_err(|er| io("cannot create", &to, &er))?;
                    set_mode(&to, 0o755)?;
                }
                Kind::File { size, sha256, src } => {
                    let mut from = open_nofollow(src)?;
                    let mut out = OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(&to)
                        .map_err(|er| io("cannot create", &to, &er))?;
                    let got = copy_hashing(&mut from, Some(&mut out), *size, src, progress)?;
                    if got != *sha256 {
                        return Err(Rejection::new(
                            STAGE_SOURCE_CHANGED,
                            format!("{} changed while it was staged", src.display()),
                        ));
                    }
                    out.set_permissions(std::fs::Permissions::from_mode(e.mode))
                        .map_err(|er| io("cannot chmod", &to, &er))?;
                }
                Kind::Link { target } => {
                    std::os::unix::fs::symlink(target, &to)
                        .map_err(|er| io("cannot link", &to, &er))?;
                }
            }
        }
        // One syncfs(2) of the store's filesystem instead of an fsync per
        // file and directory (pi's closure has about twenty thousand:
        // forty seconds of fsyncs here, under a second of syncfs).
        let dir = File::open(root).map_err(|e| io("cannot open", root, &e))?;
        rustix::fs::syncfs(&dir).map_err(|e| io("cannot sync", root, &e.into()))
    }

    /// Checks that `root`, already in the store, holds exactly this
    /// closure.
    pub(crate) fn verify(&self, root: &Path, progress: &dyn Progress) -> Result<(), Rejection> {
        let there = Listing::of_store(root, progress)?;
        if there.document() != self.document() {
            return Err(Rejection::new(
                STAGE_STORE_MISMATCH,
                format!(
                    "{} does not hold the closure its name says; remove it and stage again",
                    root.display()
                ),
            ));
        }
        Ok(())
    }
}

fn open_nofollow(p: &Path) -> Result<File, Rejection> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(p)
        .map_err(|e| io("cannot open", p, &e))?;
    let m = f.metadata().map_err(|e| io("cannot inspect", p, &e))?;
    if !m.is_file() {
        return Err(Rejection::new(
            STAGE_SOURCE_CHANGED,
            format!("{} is no longer a regular file", p.display()),
        ));
    }
    Ok(f)
}

/// Reads exactly `size` bytes of `from` (more or fewer is a change),
/// writing them to `to` when given; returns their SHA-256.
fn copy_hashing(
    from: &mut File,
    mut to: Option<&mut File>,
    size: u64,
    src: &Path,
    progress: &dyn Progress,
) -> Result<[u8; 32], Rejection> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut seen = 0u64;
    loop {
        let n = from
            .read(&mut buf)
            .map_err(|e| io("cannot read", src, &e))?;
        if n == 0 {
            break;
        }
        seen += n as u64;
        if seen > size {
            break;
        }
        h.update(&buf[..n]);
        if let Some(t) = to.as_deref_mut() {
            t.write_all(&buf[..n])
                .map_err(|e| io("cannot write a copy of", src, &e))?;
        }
        progress.advance(n as u64);
    }
    if seen != size {
        return Err(Rejection::new(
            STAGE_SOURCE_CHANGED,
            format!("{} changed size while it was staged", src.display()),
        ));
    }
    Ok(h.finalize().into())
}

pub(crate) fn set_mode(p: &Path, mode: u32) -> Result<(), Rejection> {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .map_err(|e| io("cannot chmod", p, &e))
}

pub(crate) fn sync_dir(p: &Path) -> Result<(), Rejection> {
    File::open(p)
        .and_then(|f| f.sync_all())
        .map_err(|e| io("cannot sync", p, &e))
}

#[cfg(test)]
mod tests {
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
        let mut l = Listing {
            entries: BTreeMap::new(),
            bytes: 0,
        };
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
                src: PathBuf::new(),
            },
        };
        assert_eq!(
            l.insert("big".into(), big).err().map(|e| e.code()),
            Some(STAGE_TOO_LARGE)
        );
    }
}
