//! The file-system half of an apply: the place the source lives (its
//! parent held open, every identity checked), the candidate copied beside
//! it from the frozen stage and synced, the whole-entry exchange, the
//! removal of what it replaced, and what recovery finds at either name.
//!
//! Nothing here follows a link: the parent is opened with
//! `RESOLVE_NO_SYMLINKS`, everything below it beneath its descriptor, and
//! the stage's files beneath the stage's root.

use crate::workspace::manifest::{take, TakeOptions};
use glove_fs::beneath::open_beneath;
use glove_fs::{Errno, OFlags};
use glove_lifecycle::apply::TreeFinding;
use glove_types::codes::apply::*;
use glove_types::manifest::{Entry, EntryKind, Manifest};
use glove_types::Rejection;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use sha2::{Digest, Sha256};
use std::ffi::OsStr;
use std::path::Path;

/// Free space kept beyond the candidate's size.
pub const RESERVE_BYTES: u64 = 64 << 20;

fn io(what: impl std::fmt::Display, e: impl std::fmt::Display) -> Rejection {
    Rejection::new(APPLY_FILE_IO, format!("{what}: {e}"))
}

/// The name a transaction's candidate is built under, beside the source.
pub fn staging_name(txn: &str) -> String {
    format!(".glove-apply-{txn}")
}

/// Where the source lives: its parent directory, held open.
#[derive(Debug)]
pub struct Place {
    parent: OwnedFd,
    name: String,
    /// The parent directory's device and inode.
    pub parent_identity: (u64, u64),
}

/// The device and inode of an open file.
pub fn identity(fd: BorrowedFd<'_>) -> Result<(u64, u64), Errno> {
    let st = rustix::fs::fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
}

impl Place {
    /// Opens the parent of `source` (absolute, no link anywhere).
    pub fn open(source: &Path) -> Result<Place, Rejection> {
        let (Some(parent), Some(name)) = (source.parent(), source.file_name()) else {
            return Err(Rejection::new(
                APPLY_SOURCE_INVALID,
                format!("{} has no parent directory", source.display()),
            ));
        };
        let name = name
            .to_str()
            .ok_or_else(|| Rejection::new(APPLY_SOURCE_INVALID, "the source's name is not UTF-8"))?
            .to_owned();
        let fd = glove_fs::unconfined::open_dir_no_links(parent).map_err(|e| {
            Rejection::new(
                APPLY_SOURCE_INVALID,
                format!("{}: {e} (reached without links?)", parent.display()),
            )
        })?;
        let parent_identity = identity(fd.as_fd()).map_err(|e| io("stat the parent", e))?;
        Ok(Place {
            parent: fd,
            name,
            parent_identity,
        })
    }

    /// The source's name in its parent.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The parent directory.
    pub fn parent(&self) -> BorrowedFd<'_> {
        self.parent.as_fd()
    }

    /// Opens `name` in the parent as a directory, without following a
    /// link; `None` when nothing is there.
    pub fn open_dir(&self, name: &str) -> Result<Option<OwnedFd>, Rejection> {
        match open_beneath(self.parent(), name, OFlags::RDONLY | OFlags::DIRECTORY) {
            Ok(fd) => Ok(Some(fd)),
            Err(Errno::NOENT) => Ok(None),
            Err(Errno::XDEV) => Err(Rejection::new(
                APPLY_SOURCE_INVALID,
                format!(
                    "{name} is a mount point: apply exchanges a directory within one file system"
                ),
            )),
            Err(Errno::LOOP) | Err(Errno::NOTDIR) => Err(Rejection::new(
                APPLY_SOURCE_INVALID,
                format!("{name} is not a directory (or is a symbolic link)"),
            )),
            Err(e) => Err(io(format!("open {name}"), e)),
        }
    }

    /// Whether `name` is there at all (any type).
    pub fn exists(&self, name: &str) -> Result<bool, Rejection> {
        match glove_fs::facts_in(self.parent(), OsStr::new(name)) {
            Ok(_) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(io(format!("stat {name}"), e)),
        }
    }
}

/// The tree below `dir` as a manifest (every entry, `lost+found` too).
pub fn manifest_of(dir: BorrowedFd<'_>) -> Result<Manifest, Rejection> {
    take(dir, &TakeOptions::default()).map_err(|e| e.to_rejection())
}

/// Whether two manifests describe the same content: the same paths,
/// kinds, modes, sizes and digests (the root's mode and the flags apply
/// refuses anyway are not compared: a copy has its own links and blocks).
pub fn same_content(a: &Manifest, b: &Manifest) -> bool {
    let key = |e: &Entry| (e.path.clone(), e.kind, e.mode, e.size, e.digest);
    a.entries().len() == b.entries().len()
        && a.entries().iter().map(key).eq(b.entries().iter().map(key))
}

/// Bytes the candidate needs: every file rounded up to 4 KiB, 4 KiB per
/// directory.
pub fn needed_bytes(m: &Manifest) -> u64 {
    m.entries()
        .iter()
        .map(|e| match e.kind {
            EntryKind::File => e.size.div_ceil(4096).saturating_mul(4096),
            _ => 4096,
        })
        .fold(0u64, u64::saturating_add)
}

/// Refuses when the candidate plus [`RESERVE_BYTES`] does not fit in the
/// free space of the source's file system.
pub fn check_space(place: &Place, m: &Manifest) -> Result<(), Rejection> {
    let s = rustix::fs::fstatvfs(place.parent()).map_err(|e| io("statvfs", e))?;
    let free = s.f_bavail.saturating_mul(s.f_frsize);
    let need = needed_bytes(m).saturating_add(RESERVE_BYTES);
    if need > free {
        return Err(Rejection::new(
            APPLY_NO_SPACE,
            format!(
                "the stage needs {need} bytes (its files and 64 MiB kept free); the source's file system has {free}"
            ),
        ));
    }
    Ok(())
}

fn parent_path(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (".", path),
    }
}

/// Copies the frozen stage below `stage` into a new directory `name`
/// beside the source (its identity handed to `made` first), entry by entry as `last` lists them: each file read
/// beneath the stage's root, its bytes hashed as they are copied and
/// checked against the manifest (a stage that differs from its frozen
/// manifest fails with `apply_stage_changed`), its mode set; then each
/// directory's mode, the root's `root_mode`. Nothing is synced here (see
/// [`sync_tree`]).
pub fn copy_candidate(
    place: &Place,
    name: &str,
    stage: BorrowedFd<'_>,
    last: &Manifest,
    root_mode: u32,
    made: impl FnOnce((u64, u64)) -> Result<(), Rejection>,
) -> Result<(), Rejection> {
    glove_fs::mkdir_in(place.parent(), OsStr::new(name), 0o700)
        .map_err(|e| io(format!("make {name}"), e))?;
    let root = place
        .open_dir(name)?
        .ok_or_else(|| io(format!("open {name}"), "gone"))?;
    // Its identity is recorded before anything goes into it: only a tree
    // of that identity is ever removed under this name.
    made(identity(root.as_fd()).map_err(|e| io("stat", e))?)?;
    let mut buf = vec![0u8; 256 * 1024];
    for e in last.entries() {
        let (dir, leaf) = parent_path(&e.path);
        let parent = open_beneath(root.as_fd(), dir, OFlags::RDONLY | OFlags::DIRECTORY)
            .map_err(|x| io(format!("open {dir}"), x))?;
        match e.kind {
            EntryKind::Dir => glove_fs::mkdir_in(parent.as_fd(), OsStr::new(leaf), 0o700)
                .map_err(|x| io(format!("make {}", e.path), x))?,
            EntryKind::File => copy_file(stage, e, parent.as_fd(), leaf, &mut buf)?,
            EntryKind::Symlink | EntryKind::Other => {
                return Err(Rejection::new(
                    APPLY_BLOCKED,
                    format!("{} is not a regular file or directory", e.path),
                ))
            }
        }
    }
    for e in last
        .entries()
        .iter()
        .rev()
        .filter(|e| e.kind == EntryKind::Dir)
    {
        chmod_at(root.as_fd(), &e.path, e.mode)?;
    }
    chmod_at(root.as_fd(), ".", root_mode)
}

fn chmod_at(root: BorrowedFd<'_>, path: &str, mode: u32) -> Result<(), Rejection> {
    rustix::fs::chmodat(
        root,
        path,
        rustix::fs::Mode::from_raw_mode(mode),
        rustix::fs::AtFlags::empty(),
    )
    .map_err(|x| io(format!("chmod {path}"), x))
}

fn copy_file(
    stage: BorrowedFd<'_>,
    e: &Entry,
    parent: BorrowedFd<'_>,
    leaf: &str,
    buf: &mut [u8],
) -> Result<(), Rejection> {
    let changed = |why: &str| {
        Rejection::new(
            APPLY_STAGE_CHANGED,
            format!("{}: {why} since the stage was frozen", e.path),
        )
    };
    let src = open_beneath(stage, e.path.as_str(), OFlags::RDONLY | OFlags::NONBLOCK)
        .map_err(|x| io(format!("open the staged {}", e.path), x))?;
    let st = rustix::fs::fstat(&src).map_err(|x| io("stat", x))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile
        || st.st_size as u64 != e.size
    {
        return Err(changed("its type or size changed"));
    }
    let out = glove_fs::create_in(parent, OsStr::new(leaf), OFlags::WRONLY, 0o600)
        .map_err(|x| io(format!("create {}", e.path), x))?;
    let mut h = Sha256::new();
    let mut total = 0u64;
    loop {
        let n = glove_fs::beneath::read(src.as_fd(), buf).map_err(|x| io("read", x))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        total += n as u64;
        let mut rest = &buf[..n];
        while !rest.is_empty() {
            let w = rustix::io::write(&out, rest).map_err(|x| io("write", x))?;
            rest = &rest[w..];
        }
    }
    let digest = glove_types::Sha256Digest::from_bytes(h.finalize().into());
    if total != e.size || Some(digest) != e.digest {
        return Err(changed("its content changed"));
    }
    glove_fs::chmod(out.as_fd(), e.mode).map_err(|x| io("chmod", x))
}

/// Makes everything below `name` durable, then `name` itself and the
/// parent: one `syncfs` of the source's file system (which writes back and
/// waits for every dirty page and inode of the candidate, as a recursive
/// `fsync` of each file and directory would, in one journal commit instead
/// of one per file), then `fsync` of the candidate's root and the parent.
pub fn sync_tree(place: &Place, name: &str) -> Result<(), Rejection> {
    let root = place
        .open_dir(name)?
        .ok_or_else(|| io(format!("open {name}"), "gone"))?;
    rustix::fs::syncfs(&root).map_err(|e| io("syncfs", e))?;
    rustix::fs::fsync(&root).map_err(|e| io("sync", e))?;
    glove_fs::sync_dir(place.parent()).map_err(|e| io("sync the parent", e))
}

/// What sits at `name` now: its identity, `None` when nothing is there.
fn identity_at(place: &Place, name: &str) -> Result<Option<(u64, u64)>, Rejection> {
    match place.open_dir(name)? {
        Some(fd) => Ok(Some(identity(fd.as_fd()).map_err(|e| io("stat", e))?)),
        None => Ok(None),
    }
}

/// Swaps the source and the candidate (`renameat2(RENAME_EXCHANGE)`), then
/// syncs the parent. Right before, the source name must still hold the
/// source (`source_identity`) and the staging name the candidate
/// (`candidate`); right after, the other way round. An error before the
/// call leaves both where they were (`false`); after it (a failed sync, or
/// another tree found at either name), either may be where the other was
/// (`true`): the caller records that as ambiguous.
pub fn exchange(
    place: &Place,
    staging: &str,
    source_identity: (u64, u64),
    candidate: (u64, u64),
) -> Result<(), (bool, Rejection)> {
    let changed = |what: &str| {
        Rejection::new(
            APPLY_SOURCE_INVALID,
            format!("{what} changed under the apply"),
        )
    };
    let before = (
        identity_at(place, place.name()).map_err(|e| (false, e))?,
        identity_at(place, staging).map_err(|e| (false, e))?,
    );
    if before.0 != Some(source_identity) {
        return Err((false, changed("the source")));
    }
    if before.1 != Some(candidate) {
        return Err((false, changed("the candidate")));
    }
    rustix::fs::renameat_with(
        place.parent(),
        staging,
        place.parent(),
        place.name(),
        rustix::fs::RenameFlags::EXCHANGE,
    )
    .map_err(|e| (false, io("exchange", e)))?;
    glove_fs::sync_dir(place.parent()).map_err(|e| (true, io("sync the parent", e)))?;
    let after = (
        identity_at(place, place.name()).map_err(|e| (true, e))?,
        identity_at(place, staging).map_err(|e| (true, e))?,
    );
    if after != (Some(candidate), Some(source_identity)) {
        return Err((true, changed("a tree beside the source")));
    }
    Ok(())
}

/// Removes `name` from the parent, without following links, only if it is
/// the tree Glove made or replaced there (`expected`, its identity); a
/// missing tree is already removed. Another tree under that name (put
/// there by whoever can rename in the parent) is left alone and refused.
pub fn remove_tree(place: &Place, name: &str, expected: (u64, u64)) -> Result<(), Rejection> {
    let Some(root) = place.open_dir(name)? else {
        return Ok(());
    };
    if identity(root.as_fd()).map_err(|e| io("stat", e))? != expected {
        return Err(Rejection::new(
            APPLY_CLEANUP_REFUSED,
            format!("{name} is not the tree the apply left there; it is left alone"),
        ));
    }
    empty_dir(root.as_fd(), 0)?;
    drop(root);
    match rustix::fs::unlinkat(place.parent(), name, rustix::fs::AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => {}
        Err(e) => return Err(io(format!("remove {name}"), e)),
    }
    glove_fs::sync_dir(place.parent()).map_err(|e| io("sync the parent", e))
}

fn empty_dir(dir: BorrowedFd<'_>, depth: usize) -> Result<(), Rejection> {
    if depth > 256 {
        return Err(io("remove", "too deep"));
    }
    for n in glove_fs::beneath::list_dir(dir).map_err(|e| io("list", e))? {
        let f = match glove_fs::facts_in(dir, &n) {
            Ok(f) => f,
            Err(Errno::NOENT) => continue,
            Err(e) => return Err(io("stat", e)),
        };
        if f.kind == glove_fs::FileType::Directory {
            let d = open_beneath(dir, &n, OFlags::RDONLY | OFlags::DIRECTORY)
                .map_err(|e| io("open", e))?;
            empty_dir(d.as_fd(), depth + 1)?;
            match rustix::fs::unlinkat(dir, &n, rustix::fs::AtFlags::REMOVEDIR) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(e) => return Err(io("remove", e)),
            }
        } else {
            match rustix::fs::unlinkat(dir, &n, rustix::fs::AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(e) => return Err(io("remove", e)),
            }
        }
        crate::apply::crash::reached("cleanup");
    }
    Ok(())
}

/// What sits at `name`, by descriptor: the baseline (the source's own
/// directory, `source_identity`, with the baseline's content), the
/// candidate (the final manifest's content), nothing, or (`at_staging`) an
/// incomplete candidate, else something unrecognised.
pub fn find(
    place: &Place,
    name: &str,
    source_identity: (u64, u64),
    baseline: &Manifest,
    last: &Manifest,
    at_staging: bool,
) -> TreeFinding {
    let fd = match place.open_dir(name) {
        Ok(Some(fd)) => fd,
        Ok(None) => {
            return match place.exists(name) {
                Ok(false) => TreeFinding::Absent,
                _ => TreeFinding::Unrecognized,
            }
        }
        Err(_) => return TreeFinding::Unrecognized,
    };
    let Ok(m) = manifest_of(fd.as_fd()) else {
        return if at_staging {
            TreeFinding::Incomplete
        } else {
            TreeFinding::Unrecognized
        };
    };
    let same_dir = identity(fd.as_fd()).ok() == Some(source_identity);
    if same_dir && same_content(&m, baseline) {
        TreeFinding::Baseline
    } else if !same_dir && same_content(&m, last) {
        TreeFinding::Candidate
    } else if at_staging && !same_dir {
        TreeFinding::Incomplete
    } else {
        TreeFinding::Unrecognized
    }
}
