//! The workspace manifest: what a retained workspace's tree holds, as plain
//! data (`docs/digests.md`, "Workspace manifest").
//!
//! A [`Manifest`] is the root directory's mode and a list of [`Entry`]s,
//! sorted bytewise by path and unique. Each entry records its path
//! (relative, `/`-separated UTF-8), its [`EntryKind`], its twelve
//! permission bits, its size, a SHA-256 of its content (files and links)
//! and the flags of what apply cannot carry (`hardlink`, `sparse`,
//! `xattr`). A manifest exists only if every rule held: it is made by
//! [`Manifest::new`] or decoded by [`Manifest::decode`], both of which
//! check every entry. [`Manifest::blockers`] names what apply refuses.
//!
//! Taking a manifest from a real tree is I/O and lives in `glove-control`
//! (`workspace::manifest::take`).

use crate::canon::{self, Form};
use crate::codes::workspace::WORKSPACE_MANIFEST_INVALID;
use crate::digest::Sha256Digest;
use crate::error::Rejection;
use serde::{Deserialize, Serialize};

mod blockers;

pub use blockers::{Blocker, BlockerReason};

/// The manifest's format name, also the digest's domain.
pub const FORMAT: &str = "glove.workspace-manifest-v1";

/// Entries a manifest holds at most.
pub const MAX_ENTRIES: usize = 1 << 20;

/// Longest path, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;

/// Most components in a path.
pub const MAX_DEPTH: usize = 128;

/// Largest encoded manifest [`Manifest::decode`] reads.
pub const MAX_ENCODED_BYTES: usize = 512 << 20;

/// Largest size an entry records (2^53 − 1: canonical JSON's integers).
pub const MAX_SIZE: u64 = canon::MAX_SAFE_INTEGER;

/// A regular file of at least this size whose allocated blocks fall short
/// of its size by at least this much is `sparse`.
pub const SPARSE_GAP: u64 = 4096;

/// What an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
    /// Anything else: a FIFO, a socket, a character or block device.
    Other,
}

impl EntryKind {
    /// The snake_case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            EntryKind::Dir => "dir",
            EntryKind::File => "file",
            EntryKind::Symlink => "symlink",
            EntryKind::Other => "other",
        }
    }

    /// Whether entries of this kind carry a content digest.
    pub const fn has_digest(self) -> bool {
        matches!(self, EntryKind::File | EntryKind::Symlink)
    }
}

/// One entry of a manifest. Plain data: [`Manifest::new`] checks it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Entry {
    /// Relative to the root: `/`-separated UTF-8, no empty, `.` or `..`
    /// component, no leading or trailing slash, no NUL.
    pub path: String,
    /// What it is.
    pub kind: EntryKind,
    /// The twelve permission bits (setuid, setgid and sticky included).
    pub mode: u32,
    /// Files: bytes; symbolic links: the target's length; otherwise 0.
    pub size: u64,
    /// Files: SHA-256 of the bytes; links: SHA-256 of the target's bytes;
    /// otherwise none.
    pub digest: Option<Sha256Digest>,
    /// More than one hard link (never set for a directory).
    pub hardlink: bool,
    /// A regular file of at least [`SPARSE_GAP`] bytes whose allocated
    /// blocks (`st_blocks` × 512) are at least [`SPARSE_GAP`] short of its
    /// size (never set for anything else).
    pub sparse: bool,
    /// Any extended attribute other than `security.selinux`, POSIX ACLs
    /// included (looked at for files and directories only).
    pub xattr: bool,
}

impl Entry {
    /// Whether the setuid, setgid or sticky bit is set.
    pub const fn special_bits(&self) -> bool {
        self.mode & 0o7000 != 0
    }

    /// The path's components.
    pub fn depth(&self) -> usize {
        self.path.split('/').count()
    }

    fn check(&self) -> Result<(), Rejection> {
        check_path(&self.path)?;
        let bad = |what: &str| {
            Rejection::new(WORKSPACE_MANIFEST_INVALID, what.to_string()).at(&self.path)
        };
        if self.mode > 0o7777 {
            return Err(bad("a mode has only the twelve permission bits"));
        }
        if self.size > MAX_SIZE {
            return Err(bad("a size is at most 2^53 - 1"));
        }
        if self.kind.has_digest() != self.digest.is_some() {
            return Err(bad("files and links have a digest, nothing else does"));
        }
        if matches!(self.kind, EntryKind::Dir | EntryKind::Other) && self.size != 0 {
            return Err(bad("a directory or special file has size 0"));
        }
        if self.kind == EntryKind::Dir && self.hardlink {
            return Err(bad("a directory is never a hard link"));
        }
        if self.sparse && (self.kind != EntryKind::File || self.size < SPARSE_GAP) {
            return Err(bad(
                "only a regular file of at least 4096 bytes can be sparse",
            ));
        }
        Ok(())
    }
}

/// Checks one relative path against the definition.
pub fn check_path(path: &str) -> Result<(), Rejection> {
    let bad = |what: &str| Rejection::new(WORKSPACE_MANIFEST_INVALID, what.to_string());
    if path.len() > MAX_PATH_BYTES {
        return Err(bad("a path is at most 4096 bytes"));
    }
    if path.contains('\0') {
        return Err(bad("a path holds no NUL byte"));
    }
    let mut depth = 0usize;
    for c in path.split('/') {
        if c.is_empty() || c == "." || c == ".." {
            return Err(bad("a path is relative, with no empty, '.' or '..' component").at(path));
        }
        depth += 1;
    }
    if depth > MAX_DEPTH {
        return Err(bad("a path has at most 128 components").at(path));
    }
    Ok(())
}

/// The parent of a relative path (`None` at the top level).
pub fn parent(path: &str) -> Option<&str> {
    path.rfind('/').map(|i| &path[..i])
}

/// A workspace manifest whose every rule held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    root_mode: u32,
    entries: Vec<Entry>,
}

#[derive(Serialize)]
struct Encoded<'a> {
    format: &'static str,
    root_mode: u32,
    entries: &'a [Entry],
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Decoded {
    format: String,
    root_mode: u32,
    entries: Vec<DecodedEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecodedEntry {
    path: String,
    kind: EntryKind,
    mode: u32,
    size: u64,
    digest: Option<String>,
    hardlink: bool,
    sparse: bool,
    xattr: bool,
}

impl DecodedEntry {
    fn into_entry(self) -> Result<Entry, Rejection> {
        let digest = match &self.digest {
            None => None,
            Some(d) => Some(Sha256Digest::parse(d).map_err(|r| r.at(&self.path))?),
        };
        Ok(Entry {
            path: self.path,
            kind: self.kind,
            mode: self.mode,
            size: self.size,
            digest,
            hardlink: self.hardlink,
            sparse: self.sparse,
            xattr: self.xattr,
        })
    }
}

impl Manifest {
    /// A manifest of `entries` (sorted here) below a root of `root_mode`;
    /// refused unless every entry keeps the definition, the paths are
    /// unique and every entry's parent is a directory entry.
    pub fn new(root_mode: u32, mut entries: Vec<Entry>) -> Result<Manifest, Rejection> {
        entries.sort_unstable_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
        Manifest::checked(root_mode, entries)
    }

    fn checked(root_mode: u32, entries: Vec<Entry>) -> Result<Manifest, Rejection> {
        if root_mode > 0o7777 {
            return Err(Rejection::new(
                WORKSPACE_MANIFEST_INVALID,
                "the root mode has only the twelve permission bits",
            ));
        }
        if entries.len() > MAX_ENTRIES {
            return Err(Rejection::new(
                WORKSPACE_MANIFEST_INVALID,
                format!("a manifest holds at most {MAX_ENTRIES} entries"),
            ));
        }
        for (i, e) in entries.iter().enumerate() {
            e.check()?;
            if let Some(prev) = i.checked_sub(1).and_then(|j| entries.get(j)) {
                if prev.path.as_bytes() >= e.path.as_bytes() {
                    return Err(Rejection::new(
                        WORKSPACE_MANIFEST_INVALID,
                        "entries are sorted bytewise by path and unique",
                    )
                    .at(&e.path));
                }
            }
            if let Some(p) = parent(&e.path) {
                let found = entries[..i]
                    .binary_search_by(|x| x.path.as_bytes().cmp(p.as_bytes()))
                    .ok()
                    .and_then(|j| entries.get(j));
                if found.map(|x| x.kind) != Some(EntryKind::Dir) {
                    return Err(Rejection::new(
                        WORKSPACE_MANIFEST_INVALID,
                        "an entry's parent is a directory entry of the manifest",
                    )
                    .at(&e.path));
                }
            }
        }
        Ok(Manifest { root_mode, entries })
    }

    /// The root directory's twelve permission bits.
    pub fn root_mode(&self) -> u32 {
        self.root_mode
    }

    /// The entries, sorted bytewise by path.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The entry at `path`.
    pub fn get(&self, path: &str) -> Option<&Entry> {
        self.entries
            .binary_search_by(|e| e.path.as_bytes().cmp(path.as_bytes()))
            .ok()
            .and_then(|i| self.entries.get(i))
    }

    /// The canonical JSON encoding.
    pub fn canonical_bytes(&self) -> Result<Vec<u8>, Rejection> {
        canon::encode(&Encoded {
            format: FORMAT,
            root_mode: self.root_mode,
            entries: &self.entries,
        })
    }

    /// `sha256_domain("glove.workspace-manifest-v1", canonical bytes)`.
    pub fn digest(&self) -> Result<Sha256Digest, Rejection> {
        Ok(Sha256Digest::of_domain(FORMAT, &self.canonical_bytes()?))
    }

    /// Decodes strict JSON (unknown fields, duplicate keys, floats refused)
    /// of at most [`MAX_ENCODED_BYTES`]; the entries must already be
    /// sorted and unique.
    pub fn decode(bytes: &[u8]) -> Result<Manifest, Rejection> {
        let d: Decoded = canon::decode(bytes, MAX_ENCODED_BYTES, Form::Strict)?;
        if d.format != FORMAT {
            return Err(Rejection::new(
                WORKSPACE_MANIFEST_INVALID,
                format!("the format is not {FORMAT}"),
            )
            .at("format"));
        }
        if d.entries.len() > MAX_ENTRIES {
            return Err(Rejection::new(
                WORKSPACE_MANIFEST_INVALID,
                format!("a manifest holds at most {MAX_ENTRIES} entries"),
            ));
        }
        let entries = d
            .entries
            .into_iter()
            .map(DecodedEntry::into_entry)
            .collect::<Result<Vec<_>, _>>()?;
        Manifest::checked(d.root_mode, entries)
    }

    /// What apply cannot carry, entry by entry: one [`Blocker`] per reason
    /// per entry, the root first (as `.`), then by path.
    pub fn blockers(&self) -> Vec<Blocker> {
        blockers::of(self)
    }
}

#[cfg(test)]
mod tests;
