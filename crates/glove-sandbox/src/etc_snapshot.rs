//! Read-only snapshots of the `/etc` the default profile shows, kept on the
//! host and bound into each sandbox as one mount.
//!
//! Writing the profile's `/etc` into every sandbox's fresh root costs a
//! file per entry (and new memory, which is dear on a virtual machine). A
//! snapshot is the same tree written once into a directory named after a
//! digest of everything it was made from: each host file's identity (device,
//! inode, size, modification and change times), the generated files'
//! contents, and the mount points left for bound directories. A launch whose
//! digest names an existing snapshot binds it read-only as `/etc`; any
//! change on the host gives a new digest and so a new snapshot. A snapshot
//! is never changed after it is renamed into place, which is the last step
//! of making it (after every file and the directory were synced), so a crash
//! leaves at most a temporary directory, removed later.
//!
//! The snapshot directory (by default `/run/glove/etc` for root and
//! `$XDG_RUNTIME_DIR/glove/etc` otherwise) and its parent must belong to
//! the caller and be writable by nobody else; otherwise no snapshot is used
//! and the files are copied into the sandbox as before. A process holds a
//! shared `flock` on every snapshot it uses until it exits; snapshots that
//! no process holds are removed, when a new one is made, once they are
//! older than ten minutes or beyond [`MAX_SNAPSHOTS`] (with abandoned
//! temporary directories).

use std::fs::{self, File, Metadata};
use std::hash::Hasher;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Snapshots kept in one directory.
pub const MAX_SNAPSHOTS: usize = 16;
/// Largest host file a snapshot copies.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// Largest total a snapshot holds.
pub const MAX_TOTAL_BYTES: u64 = 8 << 20;
/// A snapshot or temporary directory this old, and not the one in use, may
/// be removed.
const STALE_AFTER: Duration = Duration::from_secs(600);
/// Format of the digested description; changing what a snapshot holds or
/// how it is laid out changes this.
const FORMAT: &[u8] = b"glove-etc-snapshot 2\n";

/// One entry of a snapshot, named relative to `/etc` (`ssl/openssl.cnf`).
#[derive(Debug)]
pub enum Entry {
    /// A copy of a host file (links followed), expected to still have the
    /// identity `meta` when it is copied.
    Host {
        /// Name below `/etc`.
        name: String,
        /// Host path.
        source: PathBuf,
        /// What the host file was when the digest was taken.
        meta: Metadata,
    },
    /// A file with the given contents.
    Generated {
        /// Name below `/etc`.
        name: String,
        /// Contents.
        body: Vec<u8>,
    },
    /// An empty directory, where a host directory is bound afterwards.
    MountPoint {
        /// Name below `/etc`.
        name: String,
    },
}

impl Entry {
    fn name(&self) -> &str {
        match self {
            Entry::Host { name, .. }
            | Entry::Generated { name, .. }
            | Entry::MountPoint { name } => name,
        }
    }
}

/// Why no snapshot could be used (the caller then copies the files).
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The snapshot directory is not safe to use.
    #[error("snapshot directory {path}: {why}")]
    Unsafe {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// An entry's name is not a plain relative path.
    #[error("bad entry name {0:?}")]
    BadName(String),
    /// A host file is not what the digest described (it changed, or is too
    /// large, or is not a regular file).
    #[error("host file {path} changed or is unsuitable: {why}")]
    Source {
        /// The host path.
        path: PathBuf,
        /// What was found.
        why: String,
    },
    /// Reading or writing failed.
    #[error("{what}: {source}")]
    Io {
        /// The operation and path.
        what: String,
        /// The error.
        source: io::Error,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> SnapshotError {
    let what = what.into();
    move |source| SnapshotError::Io { what, source }
}

/// The default snapshot directory for this process, if there is one:
/// `/run/glove/etc` for root, `$XDG_RUNTIME_DIR/glove/etc` otherwise.
pub fn default_dir() -> Option<PathBuf> {
    if crate::sys::process::effective_ids().0 == 0 {
        return Some(PathBuf::from("/run/glove/etc"));
    }
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from)?;
    runtime.is_absolute().then(|| runtime.join("glove/etc"))
}

/// The snapshot of `entries` in `dir`, made now if it does not exist yet.
/// `dir` and its parent are created (mode 0700) if missing; both must be
/// owned by this process's user and writable by nobody else.
///
/// The snapshot is in use by this process until it exits: a shared `flock`
/// on it is held (and kept) before its path is returned, and a snapshot is
/// only ever removed under an exclusive one, so nothing this process binds
/// disappears under a sandbox, however long it runs.
pub fn ensure(dir: &Path, entries: &[Entry]) -> Result<PathBuf, SnapshotError> {
    let key = digest(entries)?;
    crate::sys::trace::mark("s:digest");
    check_dirs(dir)?;
    crate::sys::trace::mark("s:dirs checked");
    let snapshot = dir.join(format!("etc-{key}"));
    // Twice at most: a snapshot removed between finding and locking it is
    // made again.
    for _ in 0..2 {
        match fs::symlink_metadata(&snapshot) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(SnapshotError::Unsafe {
                    path: snapshot,
                    why: "is not a directory".into(),
                })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => make(dir, &snapshot, entries)?,
            Err(e) => return Err(io_err(format!("stat {}", snapshot.display()))(e)),
        }
        if hold(&snapshot)? {
            return Ok(snapshot);
        }
    }
    Err(SnapshotError::Unsafe {
        path: snapshot,
        why: "was removed while it was being taken".into(),
    })
}

/// Shared locks on the snapshots this process uses, kept until it exits.
static HELD: std::sync::Mutex<Vec<(PathBuf, File)>> = std::sync::Mutex::new(Vec::new());

/// Takes (and keeps) a shared lock on `snapshot`; false when the directory
/// at that path changed meanwhile (it was removed).
fn hold(snapshot: &Path) -> Result<bool, SnapshotError> {
    let mut held = HELD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if held.iter().any(|(p, _)| p == snapshot) {
        return Ok(true);
    }
    let what = || format!("lock {}", snapshot.display());
    let f = match File::open(snapshot) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_err(what())(e)),
    };
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockShared)
        .map_err(|e| io_err(what())(e.into()))?;
    let locked = f.metadata().map_err(io_err(what()))?;
    match fs::symlink_metadata(snapshot) {
        Ok(now) if now.ino() == locked.ino() && now.dev() == locked.dev() => {
            held.push((snapshot.to_owned(), f));
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Makes the snapshot: written into a temporary directory, synced, renamed
/// into place (a concurrent launch that made it first wins); then removes
/// snapshots nobody uses that are stale or too many.
fn make(dir: &Path, snapshot: &Path, entries: &[Entry]) -> Result<(), SnapshotError> {
    let tmp = dir.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&tmp)
        .map_err(io_err(format!("mkdir {}", tmp.display())))?;
    if let Err(e) = fill(&tmp, entries) {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    match fs::rename(&tmp, snapshot) {
        Ok(()) => {}
        // Another launch made the same snapshot meanwhile.
        Err(_) if fs::symlink_metadata(snapshot).is_ok_and(|m| m.is_dir()) => {
            let _ = fs::remove_dir_all(&tmp);
            return Ok(());
        }
        Err(e) => {
            let _ = fs::remove_dir_all(&tmp);
            return Err(io_err(format!("rename into {}", snapshot.display()))(e));
        }
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(format!("sync {}", dir.display())))?;
    remove_old(dir, snapshot);
    Ok(())
}

/// A 128-bit hex key of the snapshot's description: two SipHash-1-3
/// (`std`'s hasher) of it, told apart by a first byte. A cache key, not a
/// proof: what it describes is chosen by the host's administrator (host
/// file identities) and by Glove (generated files), so only accidental
/// collisions matter (1 in 2^64 for any two descriptions at worst). Unlike
/// SHA-256 here it needs no CPU feature detection, whose `cpuid`
/// instructions each trap to the hypervisor on a virtual machine (≈ 6 µs
/// apiece on the development VM). `std` may change the hash between Rust
/// releases; a build with another one just makes new snapshots.
fn digest(entries: &[Entry]) -> Result<String, SnapshotError> {
    let mut halves = [
        std::hash::DefaultHasher::new(),
        std::hash::DefaultHasher::new(),
    ];
    halves[0].write_u8(0);
    halves[1].write_u8(1);
    let mut field = |bytes: &[u8]| {
        for h in &mut halves {
            h.write_u64(bytes.len() as u64);
            h.write(bytes);
        }
    };
    field(FORMAT);
    for e in entries {
        check_name(e.name())?;
        match e {
            Entry::Host { name, meta, .. } => {
                field(b"host");
                field(name.as_bytes());
                for n in identity(meta) {
                    field(&n.to_le_bytes());
                }
            }
            Entry::Generated { name, body } => {
                field(b"generated");
                field(name.as_bytes());
                field(body);
            }
            Entry::MountPoint { name } => {
                field(b"mount point");
                field(name.as_bytes());
            }
        }
    }
    Ok(format!(
        "{:016x}{:016x}",
        halves[0].finish(),
        halves[1].finish()
    ))
}

/// What identifies a host file's contents without reading them.
fn identity(m: &Metadata) -> [i64; 8] {
    [
        m.dev() as i64,
        m.ino() as i64,
        m.size() as i64,
        m.mode() as i64,
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    ]
}

/// A name below `/etc`: relative, no `.`/`..`/empty components, no NUL.
fn check_name(name: &str) -> Result<(), SnapshotError> {
    let ok = !name.is_empty()
        && !name.contains('\0')
        && name
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..");
    if ok {
        Ok(())
    } else {
        Err(SnapshotError::BadName(name.to_owned()))
    }
}

/// Creates `dir` and its parent when missing and checks both: real
/// directories (not links), owned by this user, writable by nobody else;
/// and that nobody else can replace them.
pub(crate) fn check_dirs(dir: &Path) -> Result<(), SnapshotError> {
    let me = crate::sys::process::effective_ids().0;
    let parent = dir.parent().ok_or_else(|| SnapshotError::Unsafe {
        path: dir.to_owned(),
        why: "has no parent".into(),
    })?;
    // Nobody else may replace either of them: every directory above
    // belongs to root or this user and is writable by nobody else, unless
    // sticky (like /tmp).
    for d in parent.ancestors().skip(1) {
        let m = fs::symlink_metadata(d).map_err(io_err(format!("stat {}", d.display())))?;
        if m.file_type().is_symlink() {
            // Its target's own ancestors would go unchecked, and the bind
            // resolves the path again later.
            return Err(SnapshotError::Unsafe {
                path: d.to_owned(),
                why: "is a symbolic link".into(),
            });
        }
        let sticky = m.mode() & 0o1000 != 0;
        if (m.uid() != 0 && m.uid() != me) || (m.mode() & 0o022 != 0 && !sticky) {
            return Err(SnapshotError::Unsafe {
                path: d.to_owned(),
                why: format!(
                    "belongs to uid {} with mode {:o}: others could replace what is below",
                    m.uid(),
                    m.mode() & 0o7777
                ),
            });
        }
    }
    for d in [parent, dir] {
        match fs::DirBuilder::new().mode(0o700).create(d) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err(format!("mkdir {}", d.display()))(e)),
        }
        let m = fs::symlink_metadata(d).map_err(io_err(format!("stat {}", d.display())))?;
        let why = if !m.is_dir() {
            Some("is not a directory".to_owned())
        } else if m.uid() != me {
            Some(format!("belongs to uid {}, not {me}", m.uid()))
        } else if m.mode() & 0o022 != 0 {
            Some(format!("mode {:o} lets others write", m.mode() & 0o7777))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(SnapshotError::Unsafe {
                path: d.to_owned(),
                why,
            });
        }
    }
    Ok(())
}

/// Writes every entry below `tmp` and syncs it.
fn fill(tmp: &Path, entries: &[Entry]) -> Result<(), SnapshotError> {
    let mut total = 0u64;
    let mut dirs: Vec<PathBuf> = vec![tmp.to_owned()];
    let mut mkdirs = |p: &Path| -> Result<(), SnapshotError> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(p)
            .map_err(io_err(format!("mkdir {}", p.display())))?;
        let mut d = p;
        while d != tmp && !dirs.iter().any(|x| x == d) {
            dirs.push(d.to_owned());
            d = d.parent().unwrap_or(tmp);
        }
        Ok(())
    };
    for e in entries {
        let path = tmp.join(e.name());
        match e {
            Entry::MountPoint { .. } => mkdirs(&path)?,
            Entry::Generated { body, .. } => {
                mkdirs(path.parent().unwrap_or(tmp))?;
                total = total.saturating_add(body.len() as u64);
                if total > MAX_TOTAL_BYTES {
                    return Err(SnapshotError::Source {
                        path: path.clone(),
                        why: "the snapshot would exceed its size bound".into(),
                    });
                }
                write_file(&path, body)?;
            }
            Entry::Host { source, meta, .. } => {
                mkdirs(path.parent().unwrap_or(tmp))?;
                let body = read_host(source, meta)?;
                total = total.saturating_add(body.len() as u64);
                if total > MAX_TOTAL_BYTES {
                    return Err(SnapshotError::Source {
                        path: source.clone(),
                        why: "the snapshot would exceed its size bound".into(),
                    });
                }
                write_file(&path, &body)?;
            }
        }
    }
    for d in &dirs {
        fs::set_permissions(d, fs::Permissions::from_mode(0o755))
            .map_err(io_err(format!("chmod {}", d.display())))?;
        File::open(d)
            .and_then(|f| f.sync_all())
            .map_err(io_err(format!("sync {}", d.display())))?;
    }
    Ok(())
}

/// Reads a host file, refusing anything but the regular file `meta`
/// described (same identity before and after the read).
fn read_host(source: &Path, meta: &Metadata) -> Result<Vec<u8>, SnapshotError> {
    let bad = |why: &str| SnapshotError::Source {
        path: source.to_owned(),
        why: why.to_owned(),
    };
    if !meta.is_file() {
        return Err(bad("not a regular file"));
    }
    if meta.size() > MAX_FILE_BYTES {
        return Err(bad("larger than a snapshot copies"));
    }
    // Non-blocking and no controlling terminal, in case it is something
    // else than a regular file by now (checked right after).
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(source)
        .map_err(io_err(format!("open {}", source.display())))?;
    let before = f
        .metadata()
        .map_err(io_err(format!("stat {}", source.display())))?;
    if !before.is_file() || identity(&before) != identity(meta) {
        return Err(bad("changed since it was described"));
    }
    let mut body = Vec::with_capacity(meta.size() as usize);
    (&f).take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut body)
        .map_err(io_err(format!("read {}", source.display())))?;
    let after = f
        .metadata()
        .map_err(io_err(format!("stat {}", source.display())))?;
    if body.len() as u64 != meta.size() || identity(&after) != identity(meta) {
        return Err(bad("changed while it was read"));
    }
    Ok(body)
}

fn write_file(path: &Path, body: &[u8]) -> Result<(), SnapshotError> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(path)
        .map_err(io_err(format!("create {}", path.display())))?;
    // The mode asked for at creation is narrowed by the umask: set it.
    f.write_all(body)
        .and_then(|()| f.set_permissions(fs::Permissions::from_mode(0o444)))
        .and_then(|()| f.sync_data())
        .map_err(io_err(format!("write {}", path.display())))
}

/// Removes abandoned temporary directories and snapshots nobody uses
/// (never `keep`): those older than [`STALE_AFTER`], then the oldest beyond
/// [`MAX_SNAPSHOTS`]. A snapshot is removed only under an exclusive `flock`
/// (no process holds it: see [`ensure`]), and renamed out of the `etc-`
/// names first, so a half-removed one is never found. Failures are left for
/// the next time.
fn remove_old(dir: &Path, keep: &Path) {
    let Ok(list) = fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    let stale = |m: &Metadata| {
        let at = m.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        now.duration_since(at).unwrap_or_default() >= STALE_AFTER
    };
    let mut snapshots: Vec<(SystemTime, PathBuf, bool)> = Vec::new();
    for e in list.flatten() {
        let path = e.path();
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let Ok(m) = fs::symlink_metadata(&path) else {
            continue;
        };
        if path == keep || !m.is_dir() {
            continue;
        }
        if name.starts_with(".tmp-") || name.starts_with(".old-") {
            if stale(&m) {
                let _ = fs::remove_dir_all(&path);
            }
        } else if name.starts_with("etc-") {
            let at = m.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            snapshots.push((at, path, stale(&m)));
        }
    }
    // Oldest first; `keep` counts as one of those kept.
    snapshots.sort();
    let mut left = snapshots.len() + 1;
    for (_, path, stale) in snapshots {
        if !stale && left <= MAX_SNAPSHOTS {
            continue;
        }
        let Ok(f) = File::open(&path) else { continue };
        if rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            continue;
        }
        let Some(name) = path.file_name() else {
            continue;
        };
        let old = dir.join(format!(".old-{}", name.to_string_lossy()));
        if fs::rename(&path, &old).is_ok() {
            drop(f);
            let _ = fs::remove_dir_all(&old);
            left -= 1;
        }
    }
}

#[cfg(test)]
mod tests;
