//! Network namespaces made ahead of time, for root launches.
//!
//! Making a network namespace is the largest single cost of a launch on
//! the development machines (0.8–1.1 ms, mostly the hypervisor backing the
//! new namespace's fresh pages). A pool moves that cost off the launch: a
//! launch *claims* a namespace that was made after an earlier session
//! ended, and the helper that removes that session's cgroup makes new ones
//! once its starter has exited ([`Claim::refill`]).
//!
//! An entry is a directory `net-<slot>` (slots 0 to [`MAX_ENTRIES`] − 1) in
//! the pool directory holding a file `ns` with the namespace bound onto it
//! (like `ip netns`). It is made under a temporary name (`unshare
//! (CLONE_NEWNET)`, a bind) and renamed into a free slot without replacing
//! anything (`RENAME_NOREPLACE`), so the pool never holds more than
//! [`MAX_ENTRIES`]; nothing ever runs in it before it is claimed. A claim
//! renames the entry to `used-…`: only one claimer's rename can succeed, so
//! every namespace serves exactly one sandbox. The claimed namespace is owned by
//! the host's user namespace, so nobody inside the sandbox holds any
//! capability over it (a namespace made inside the sandbox's user
//! namespace would give its root `CAP_NET_ADMIN` there). The used entry's
//! bind is taken down once the sandbox's init is in the namespace, while
//! the launch waits for the sandbox anyway ([`Claim::used`]; an unmount
//! waits for an RCU grace period, which is why the claim itself does not
//! unmount); that never affects the sandbox, whose processes hold the
//! namespace themselves.
//!
//! Only root can bind a namespace into the host's mount table, so the pool
//! is used only by root. The directory (`/run/glove/netns` by default) and
//! its parent must be root's and writable by nobody else, with the same
//! checks as the `/etc` snapshots. A small private tmpfs is mounted on it
//! once (only on an empty directory: never over anything), so that the
//! entries' binds do not propagate into other mount namespaces and cost no
//! journal writes; a directory holding anything but pool entries is not a
//! pool and is refused. A claim asks for up to [`TARGET`] ready entries,
//! and removes what a process that died left (half-made or used entries)
//! once it is a minute old.

use std::ffi::{CString, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};

/// Entries a claim asks to be made ready for the next launches.
pub const TARGET: usize = 2;
/// Ready entries at most (the number of slots).
pub const MAX_ENTRIES: usize = 8;
/// Half-made and used entries left by a process that died are removed once
/// they are this old.
const STALE_SECS: i64 = 60;
/// `statfs` type of the namespace file system.
const NSFS_MAGIC: u64 = 0x6e73_6673;
/// `statfs` type of tmpfs.
const TMPFS_MAGIC: u64 = 0x0102_1994;
const READY: &str = "net-";
const USED: &str = "used-";
const MAKING: &str = ".new-";
/// The file in an entry that the namespace is bound onto.
const NS_FILE: &str = "ns";

/// Why the pool cannot be used (the launch then makes its namespace).
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// Only root can keep namespaces bound in the host's mount table.
    #[error("only root keeps a network namespace pool")]
    NotRoot,
    /// The directory or one above it is unsafe.
    #[error(transparent)]
    Dir(#[from] crate::etc_snapshot::SnapshotError),
    /// The directory holds something else: it is not a pool.
    #[error("{dir} is not a network namespace pool: {why}")]
    NotAPool {
        /// The directory.
        dir: PathBuf,
        /// What was found.
        why: String,
    },
    /// A system call failed.
    #[error("{what}: {errno}")]
    Sys {
        /// The operation and path.
        what: String,
        /// The error.
        errno: rustix::io::Errno,
    },
}

fn sys(what: impl Into<String>) -> impl FnOnce(rustix::io::Errno) -> PoolError {
    let what = what.into();
    move |errno| PoolError::Sys { what, errno }
}

/// The default pool directory: `/run/glove/netns` for root, none otherwise.
pub fn default_dir() -> Option<PathBuf> {
    (crate::sys::process::effective_ids().0 == 0).then(|| PathBuf::from("/run/glove/netns"))
}

/// What a claim found.
#[derive(Debug, Default)]
pub struct Claim {
    /// The claimed namespace (`None`: the pool was empty).
    pub namespace: Option<OwnedFd>,
    /// The claimed entry, renamed: taken down when dropped, which the
    /// launch does once the sandbox is in the namespace (or has failed).
    pub used: Option<Used>,
    /// What to make for the next launches (by the helper that removes the
    /// session's cgroup).
    pub refill: Refill,
}

/// Entries to make for the next launches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Refill {
    /// At most [`TARGET`] minus what is left.
    pub entries: Vec<NewEntry>,
    /// Every slot's path: each entry made goes into the first free one, or
    /// is taken down again when none is.
    pub slots: Vec<PathBuf>,
}

/// A claimed entry; dropping it takes it down ([`release_used`]).
#[derive(Debug)]
pub struct Used(PathBuf);

impl Used {
    /// The entry's path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Used {
    fn drop(&mut self) {
        release_used(&self.0);
    }
}

/// Where to make one entry: under a temporary name, renamed into a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewEntry {
    /// The temporary directory.
    pub making: PathBuf,
    /// Its `ns` file.
    pub making_ns: PathBuf,
}

/// A name unique to this call: the time, the process and a counter (the
/// time tells a leftover's age).
fn unique(prefix: &str) -> String {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{prefix}{:020}-{}-{seq}", now_nanos(), std::process::id())
}

/// The time (nanoseconds since the epoch) in a [`unique`] name with
/// `prefix`, if the name is exactly one: 20 digits, `-`, digits, `-`,
/// digits.
fn stamp(name: &[u8], prefix: &str) -> Option<u128> {
    let rest = name.strip_prefix(prefix.as_bytes())?;
    let mut parts = rest.split(|b| *b == b'-');
    let (t, p, q) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |x: &[u8]| !x.is_empty() && x.iter().all(u8::is_ascii_digit);
    if parts.next().is_some() || t.len() != 20 || !digits(t) || !digits(p) || !digits(q) {
        return None;
    }
    std::str::from_utf8(t).ok()?.parse().ok()
}

/// For a used or half-made entry's name, whether it is old enough to be
/// a leftover of a process that died; `None` for any other name. A used
/// entry is as old as the claim its name records; a half-made one as old as
/// its directory (`created`, nanoseconds: its name was planned at a claim,
/// maybe long before the session ended and the entry was begun).
fn leftover_is_stale(name: &[u8], now: u128, created: impl FnOnce() -> u128) -> Option<bool> {
    let since = if let Some(t) = stamp(name, USED) {
        t
    } else if stamp(name, MAKING).is_some() {
        created()
    } else {
        return None;
    };
    Some(now.saturating_sub(since) >= STALE_SECS as u128 * 1_000_000_000)
}

fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// The slot of a ready entry's name.
fn slot(name: &[u8]) -> Option<usize> {
    let n: usize = std::str::from_utf8(name.strip_prefix(READY.as_bytes())?)
        .ok()?
        .parse()
        .ok()?;
    (n < MAX_ENTRIES && name.len() == READY.len() + n.to_string().len()).then_some(n)
}

/// Takes one namespace from the pool in `dir` (made, with its parent, if
/// missing) and says which entries to make for the next launches.
pub fn claim(dir: &Path) -> Result<Claim, PoolError> {
    if crate::sys::process::effective_ids().0 != 0 {
        return Err(PoolError::NotRoot);
    }
    crate::etc_snapshot::check_dirs(dir)?;
    let dirfd = make_private_mount(dir)?;

    // Every name is looked at before anything is touched: a directory
    // holding anything else is not a pool, and is left as it is.
    let mut ready: Vec<(usize, OsString)> = Vec::new();
    let mut stale: Vec<OsString> = Vec::new();
    let now = now_nanos();
    for name in list(dir)? {
        let b = name.as_bytes();
        if let Some(n) = slot(b) {
            ready.push((n, name));
        } else if let Some(old) = leftover_is_stale(b, now, || {
            rustix::fs::statat(&dirfd, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
                .map(|st| u128::try_from(st.st_ctime).unwrap_or(0) * 1_000_000_000)
                .unwrap_or(now)
        }) {
            if old {
                stale.push(name);
            }
        } else {
            return Err(PoolError::NotAPool {
                dir: dir.to_owned(),
                why: format!("it holds {}", name.to_string_lossy()),
            });
        }
    }
    for name in stale {
        release_used(&dir.join(name));
    }
    ready.sort();
    let mut claim = Claim::default();
    let mut left = ready.len();
    for (_, name) in ready {
        left -= 1;
        let used = OsString::from(unique(USED));
        // The claim: one rename succeeds; a missing entry was taken by
        // someone else.
        if rustix::fs::renameat(&dirfd, name.as_os_str(), &dirfd, used.as_os_str()).is_err() {
            continue;
        }
        let used = Used(dir.join(used));
        if let Some(fd) = open_namespace(&used.0.join(NS_FILE)) {
            claim.namespace = Some(fd);
            claim.used = Some(used);
            break;
        }
    }
    claim.refill.entries = (0..TARGET.saturating_sub(left))
        .map(|_| {
            let making = dir.join(unique(MAKING));
            NewEntry {
                making_ns: making.join(NS_FILE),
                making,
            }
        })
        .collect();
    claim.refill.slots = (0..MAX_ENTRIES)
        .map(|n| dir.join(format!("{READY}{n}")))
        .collect();
    Ok(claim)
}

/// For the fuzz target: reads a directory entry's name as a claim does
/// (slot, claim stamp, leftover age). Never panics on any input; a name
/// read as a slot or a stamp is asserted to be the name that would be
/// written for it.
#[doc(hidden)]
pub fn fuzz_entry_name(name: &[u8]) {
    if let Some(n) = slot(name) {
        assert!(n < MAX_ENTRIES);
        assert_eq!(name, format!("{READY}{n}").as_bytes());
    }
    for prefix in [USED, MAKING] {
        if let Some(t) = stamp(name, prefix) {
            let head = format!("{prefix}{t:020}-");
            assert!(name.starts_with(head.as_bytes()));
        }
    }
    let _ = leftover_is_stale(name, now_nanos(), || 0);
}

/// The names in `dir` (entries that cannot be read are skipped).
fn list(dir: &Path) -> Result<Vec<OsString>, PoolError> {
    let entries = std::fs::read_dir(dir).map_err(|e| PoolError::Sys {
        what: format!("list {}", dir.display()),
        errno: rustix::io::Errno::from_io_error(&e).unwrap_or(rustix::io::Errno::IO),
    })?;
    Ok(entries.flatten().map(|e| e.file_name()).collect())
}

/// The namespace bound on `path`, if it is one.
fn open_namespace(path: &Path) -> Option<OwnedFd> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    )
    .ok()?;
    let fs = rustix::fs::fstatfs(&fd).ok()?;
    (fs.f_type as u64 == NSFS_MAGIC).then_some(fd)
}

/// Takes down an entry (used, half-made or ready): unbinds its namespace
/// and removes its file and directory. Errors are ignored (what is left is
/// removed by a later claim).
pub fn release_used(entry: &Path) {
    let ns = entry.join(NS_FILE);
    let _ = rustix::mount::unmount(&ns, rustix::mount::UnmountFlags::DETACH);
    let _ = rustix::fs::unlink(&ns);
    let _ = rustix::fs::rmdir(entry);
}

/// The same paths as C strings, for the helper that works after the
/// session ([`crate::sys::process::Remover`]).
pub(crate) fn c_path(p: &Path) -> Option<CString> {
    CString::new(p.as_os_str().as_bytes()).ok()
}

/// Removes every entry of the pool in `dir` (for an operator, and tests);
/// returns how many entries there were.
pub fn drain(dir: &Path) -> Result<usize, PoolError> {
    let mut n = 0;
    for name in list(dir)? {
        let b = name.as_bytes();
        if slot(b).is_some() || stamp(b, USED).is_some() || stamp(b, MAKING).is_some() {
            release_used(&dir.join(&name));
            n += 1;
        }
    }
    Ok(n)
}

/// Ready entries in `dir` whose namespace is bound (for tests and checks).
pub fn ready_namespaces(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if slot(e.file_name().as_bytes()).is_none() {
            continue;
        }
        let ns = e.path().join(NS_FILE);
        if let Some(fd) = open_namespace(&ns) {
            if let Ok(st) = rustix::fs::fstat(&fd) {
                out.push((e.path(), st.st_ino));
            }
        }
    }
    out.sort();
    out
}

/// Mounts a small private tmpfs on `dir`, once: the entries bound below it
/// stay in this mount namespace, and making and taking them costs no
/// journal writes (`/run` is not always a tmpfs). Only on an empty
/// directory: a non-empty one that is not a mount is not a pool (mounting
/// would hide what it holds), nor is a mount of anything but a tmpfs.
///
/// Returns the pool directory (the tmpfs's root), opened.
fn make_private_mount(dir: &Path) -> Result<OwnedFd, PoolError> {
    let not_a_pool = |why: &str| PoolError::NotAPool {
        dir: dir.to_owned(),
        why: why.to_owned(),
    };
    let is_tmpfs =
        |fd: &OwnedFd| rustix::fs::fstatfs(fd).is_ok_and(|fs| fs.f_type as u64 == TMPFS_MAGIC);
    let is_root = |fd: &OwnedFd| -> Result<bool, PoolError> {
        let st = rustix::fs::statx(
            fd,
            c"",
            AtFlags::EMPTY_PATH,
            rustix::fs::StatxFlags::BASIC_STATS,
        )
        .map_err(sys(format!("statx {}", dir.display())))?;
        let flag = rustix::fs::StatxAttributes::MOUNT_ROOT;
        if !st.stx_attributes_mask.contains(flag) {
            return Err(PoolError::Sys {
                what: "statx: the kernel does not report mount roots".into(),
                errno: rustix::io::Errno::NOSYS,
            });
        }
        Ok(st.stx_attributes.contains(flag))
    };
    let dirfd = open_dir(dir)?;
    if is_root(&dirfd)? {
        return if is_tmpfs(&dirfd) {
            Ok(dirfd)
        } else {
            Err(not_a_pool("it is a mount point of another file system"))
        };
    }
    // Two first launches at once would stack two mounts: one does it.
    rustix::fs::flock(&dirfd, rustix::fs::FlockOperation::LockExclusive)
        .map_err(sys(format!("lock {}", dir.display())))?;
    let now = open_dir(dir)?;
    if is_root(&now)? {
        if !is_tmpfs(&now) {
            return Err(not_a_pool("it is a mount point of another file system"));
        }
    } else {
        use rustix::mount::MountFlags;
        let empty = std::fs::read_dir(dir)
            .map(|mut d| d.next().is_none())
            .unwrap_or(false);
        if !empty {
            return Err(not_a_pool("it is not empty"));
        }
        rustix::mount::mount(
            "glove-netns",
            dir,
            "tmpfs",
            MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
            c"mode=0700,size=64k,nr_inodes=256",
        )
        .map_err(sys(format!("mount a tmpfs on {}", dir.display())))?;
        if let Err(e) =
            rustix::mount::mount_change(dir, rustix::mount::MountPropagationFlags::PRIVATE)
        {
            let _ = rustix::mount::unmount(dir, rustix::mount::UnmountFlags::DETACH);
            return Err(sys(format!("make {} private", dir.display()))(e));
        }
    }
    let _ = rustix::fs::flock(&dirfd, rustix::fs::FlockOperation::Unlock);
    // Opened again: `dirfd` is the directory under the tmpfs just mounted.
    open_dir(dir)
}

fn open_dir(dir: &Path) -> Result<OwnedFd, PoolError> {
    rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(sys(format!("open {}", dir.display())))
}

#[cfg(test)]
mod tests;
