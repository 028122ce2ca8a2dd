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
//! The source tree belongs to someone else and may change under us. Each
//! tree's root directory is opened once and held; everything below it is
//! reached from that descriptor one component at a time with
//! `O_NOFOLLOW` (a directory swapped for a link is `ELOOP`, never
//! followed), and each file's device, inode, size and modification time
//! are recorded at the listing and compared whenever it is reopened to be
//! hashed or copied (`stage_source_changed`). The store is world-readable
//! and bound into sandboxes, so a source file others may not read, or a
//! directory others may not search, is refused
//! (`stage_source_not_readable`) rather than widened.
//!
//! The digest is `sha256_domain("glove.stage.closure.v1", C)` over the
//! canonical JSON array `C` of the entries, sorted by relative path (see
//! `docs/digests.md`).

use glove_types::codes::stage::{
    STAGE_IO, STAGE_LINK_ESCAPES, STAGE_NAME_INVALID, STAGE_PATH_TOO_LONG, STAGE_SOURCE_CHANGED,
    STAGE_SOURCE_INVALID, STAGE_SOURCE_NOT_READABLE, STAGE_SPECIAL_FILE, STAGE_STORE_MISMATCH,
    STAGE_TOO_DEEP, STAGE_TOO_LARGE, STAGE_TOO_MANY_FILES,
};
use glove_types::{Rejection, Sha256Digest};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
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

/// What a source file was when it was listed: a reopened file that is not
/// this one is `stage_source_changed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
}

impl Identity {
    fn of(st: &Stat) -> Identity {
        Identity {
            dev: st.st_dev,
            ino: st.st_ino,
            size: u64::try_from(st.st_size).unwrap_or(u64::MAX),
            mtime: (st.st_mtime, i64::try_from(st.st_mtime_nsec).unwrap_or(0)),
        }
    }
}

/// Where a listed file is read from: `rel` beneath the held directory
/// `roots[root]` of its listing, as it was when listed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Origin {
    root: usize,
    rel: String,
    /// For messages only; never opened.
    shown: PathBuf,
    id: Identity,
}

/// What one closure path is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    Dir,
    File {
        size: u64,
        sha256: [u8; 32],
        src: Origin,
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
    /// The held directory of each source tree (for a tree that is one
    /// file, its parent): every file is reopened beneath one of these.
    roots: Vec<OwnedFd>,
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

fn changed(p: &Path, how: &str) -> Rejection {
    Rejection::new(
        STAGE_SOURCE_CHANGED,
        format!("{} {how} since it was listed", p.display()),
    )
}

/// Opens the directory `name` in `dir` without following a link.
fn open_dir_at(dir: BorrowedFd<'_>, name: &str) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Opens `rel` (`/`-separated names, none `.`, `..` or empty) beneath
/// `root` one component at a time, following no link on the way or at the
/// end: whatever is reached was beneath `root` all along. The last
/// component is opened with `last` (plus `O_NOFOLLOW | O_CLOEXEC`).
pub(crate) fn open_beneath(
    root: BorrowedFd<'_>,
    rel: &str,
    last: OFlags,
) -> rustix::io::Result<OwnedFd> {
    let mut names = rel.split('/').peekable();
    let mut dir: Option<OwnedFd> = None;
    while let Some(name) = names.next() {
        if name.is_empty() || name == "." || name == ".." {
            return Err(rustix::io::Errno::INVAL);
        }
        let at = dir.as_ref().map_or(root, AsFd::as_fd);
        if names.peek().is_none() {
            return rustix::fs::openat(
                at,
                name,
                last | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            );
        }
        dir = Some(open_dir_at(at, name)?);
    }
    Err(rustix::io::Errno::INVAL)
}

/// A source entry others may not read (or, a directory, search) is not
/// staged: the store is world-readable.
fn check_readable(raw: u32, dir: bool, shown: &Path) -> Result<(), Rejection> {
    let need = if dir { 0o005 } else { 0o004 };
    if raw & need == need {
        return Ok(());
    }
    Err(Rejection::new(
        STAGE_SOURCE_NOT_READABLE,
        format!(
            "{} has mode {raw:o}: {} not {} by others, and the store is world-readable; \
             make it so (chmod o+{}) if it is meant to be staged",
            shown.display(),
            if dir { "a directory" } else { "a file" },
            if dir { "searchable" } else { "readable" },
            if dir { "rx" } else { "r" },
        ),
    ))
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
        let mut l = Listing::empty();
        for t in trees {
            l.add_tree(t, Walk::Source)?;
        }
        l.hash(progress, Walk::Source)?;
        Ok(l)
    }

    fn empty() -> Listing {
        Listing {
            entries: BTreeMap::new(),
            bytes: 0,
            roots: Vec::new(),
        }
    }

    /// Holds the directory `root` (opened by path, not followed if it is
    /// a link) and walks its contents as closure paths under `dest`.
    fn add_root_dir(&mut self, root: &Path, dest: &str, walk: Walk) -> Result<(), Rejection> {
        let fd = rustix::fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io("cannot open", root, &e.into()))?;
        self.roots.push(fd);
        self.add_children(self.roots.len() - 1, "", root, dest, false, walk)
    }

    /// Walks and hashes a directory already in the store, requiring the
    /// normalised modes and this user's ownership.
    fn of_store(root: &Path, progress: &dyn Progress) -> Result<Listing, Rejection> {
        let mut l = Listing::empty();
        l.add_root_dir(root, "", Walk::Store)?;
        l.hash(progress, Walk::Store)?;
        Ok(l)
    }

    /// The listing of `root`'s contents as a copy of it would be: the
    /// digest a closure of exactly this tree has.
    pub(crate) fn of_dir(root: &Path) -> Result<Listing, Rejection> {
        Listing::of_dir_at(root, "", &super::NoProgress)
    }

    /// The listing of `root`'s contents placed at `dest` of a closure.
    pub(crate) fn of_dir_at(
        root: &Path,
        dest: &str,
        progress: &dyn Progress,
    ) -> Result<Listing, Rejection> {
        let mut l = Listing::empty();
        l.add_root_dir(root, dest, Walk::Source)?;
        l.hash(progress, Walk::Source)?;
        Ok(l)
    }

    /// Adds every entry of `other` (already hashed) to this listing, with
    /// the same checks and bounds as a walk.
    pub(crate) fn merge(&mut self, other: Listing) -> Result<(), Rejection> {
        let base = self.roots.len();
        self.roots.extend(other.roots);
        for (path, mut e) in other.entries {
            if let Kind::File { src, .. } = &mut e.kind {
                src.root += base;
            }
            self.insert(path, e)?;
        }
        Ok(())
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
}

impl Listing {
    fn hash(&mut self, progress: &dyn Progress, walk: Walk) -> Result<(), Rejection> {
        progress.phase(
            match walk {
                Walk::Source => "hashing",
                Walk::Store => "verifying",
            },
            self.bytes,
        );
        let roots = &self.roots;
        for e in self.entries.values_mut() {
            if let Kind::File { size, sha256, src } = &mut e.kind {
                let mut f = reopen(roots, src, walk)?;
                *sha256 = copy_hashing(&mut f, None, *size, &src.shown, progress)?;
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
                    let mut from = reopen(&self.roots, src, Walk::Source)?;
                    let mut out = OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(&to)
                        .map_err(|er| io("cannot create", &to, &er))?;
                    let got = copy_hashing(&mut from, Some(&mut out), *size, &src.shown, progress)?;
                    if got != *sha256 {
                        return Err(Rejection::new(
                            STAGE_SOURCE_CHANGED,
                            format!("{} changed while it was staged", src.shown.display()),
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

mod files;
mod walk;

use files::{copy_hashing, opened_error, reopen};
pub(crate) use files::{set_mode, sync_dir};

#[cfg(test)]
mod tests;
