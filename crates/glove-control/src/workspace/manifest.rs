//! Taking a workspace manifest: a walk of the tree below a held directory
//! through descriptors only.
//!
//! Each entry is opened beneath its parent's descriptor
//! ([`glove_fs::beneath`]: `openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV`) as an
//! `O_PATH | O_NOFOLLOW` descriptor, and what it is comes from `fstat` of
//! that descriptor, never from the listing. Directories and regular files
//! are then reopened readable beneath the same parent (`O_NONBLOCK |
//! O_NOCTTY`, never following a link) and must be the same inode;
//! files are hashed in 64 KiB blocks and must give exactly their size;
//! links are read with `readlinkat`; attributes are listed
//! (`flistxattr`) on the readable descriptors. FIFOs, sockets and
//! devices are never opened for reading. A mount point below the root
//! (`EXDEV`), a name that is not UTF-8, or a tree past a bound fails the
//! walk with its code.
//!
//! The regular files of a directory (up to [`BATCH`] at a time) are opened
//! and checked in order, then hashed on two threads; every batch is
//! hashed before the walk goes on to a subdirectory or fails, and the
//! error reported is the first in walk order, so the manifest and the
//! error are those of a walk that hashed each file as it met it.
//! [`take_with`] can keep a baseline digest for a file whose stat is
//! unchanged ([`KnownFiles`], where the argument for it is).

use super::known::{FileStat, KnownFiles};
use super::{display, WorkspaceError};
use glove_fs::beneath::{self, open_beneath};
use glove_fs::{Errno, OFlags};
use glove_types::manifest::{
    Entry, EntryKind, Manifest, MAX_DEPTH, MAX_ENTRIES, MAX_PATH_BYTES, MAX_SIZE, SPARSE_GAP,
};
use glove_types::Sha256Digest;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{fstat, FileType, Stat};
use sha2::{Digest as _, Sha256};

/// The block size files are read and hashed in.
const BLOCK: usize = 256 * 1024;

/// Files opened and waiting to be hashed at most.
pub const BATCH: usize = 64;

/// A batch smaller than this is hashed on the walking thread alone.
const PARALLEL_BYTES: u64 = 1 << 20;

/// A file at least this large is read with `POSIX_FADV_SEQUENTIAL`.
const SEQUENTIAL_BYTES: u64 = 1 << 20;

/// The default bound on the bytes hashed in one walk.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 30;

/// How to take a manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TakeOptions {
    /// Leave out a top-level directory named `lost+found` (an ext4 stage
    /// has one that the agent did not make).
    pub skip_lost_found: bool,
    /// Bytes hashed at most, all files together (a sparse file counts at
    /// its full size, since its holes are read as zeros).
    pub max_bytes: u64,
}

impl Default for TakeOptions {
    fn default() -> Self {
        TakeOptions {
            skip_lost_found: false,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// The attribute assigned by the host's security policy rather than
/// carried by the file; its presence alone is not a blocker.
const IGNORED_XATTR: &[u8] = b"security.selinux";

struct Walk<'k> {
    opts: TakeOptions,
    known: Option<&'k KnownFiles>,
    entries: Vec<Entry>,
    stats: Vec<(String, FileStat)>,
    reused: usize,
    bytes: u64,
    /// Regular files opened, checked and recorded (digest still `None`),
    /// in walk order.
    pending: Vec<Pending>,
    bufs: [Vec<u8>; 2],
}

/// A file waiting in a batch: its entry, its readable descriptor, the size
/// it must give.
struct Pending {
    index: usize,
    path: String,
    fd: OwnedFd,
    size: u64,
}

/// A manifest taken by [`take_with`].
#[derive(Debug)]
pub struct Taken {
    /// The manifest.
    pub manifest: Manifest,
    /// Each regular file's path and stat (of the descriptor it was read
    /// from, taken before reading it), in walk order.
    pub stats: Vec<(String, FileStat)>,
    /// How many files kept a known digest instead of being read.
    pub reused: usize,
}

/// Takes the manifest of the tree below the directory `root` (any
/// descriptor of it, `O_PATH` included).
pub fn take(root: BorrowedFd<'_>, opts: &TakeOptions) -> Result<Manifest, WorkspaceError> {
    take_with(root, opts, None).map(|t| t.manifest)
}

/// Takes the manifest of the tree below `root` as [`take`] does, and the
/// stat of every regular file; with `known`, a regular file whose path and
/// [`FileStat`] are known keeps the known digest and is not read. The
/// manifest is the one [`take`] gives whenever `known` holds only digests
/// of unchanged files (see [`KnownFiles`] for when that is so).
pub fn take_with(
    root: BorrowedFd<'_>,
    opts: &TakeOptions,
    known: Option<&KnownFiles>,
) -> Result<Taken, WorkspaceError> {
    let st = fstat(root).map_err(WorkspaceError::io("", "fstat"))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return Err(WorkspaceError::io("", "open")(Errno::NOTDIR));
    }
    let dir = open_beneath(root, ".", OFlags::RDONLY | OFlags::DIRECTORY)
        .map_err(WorkspaceError::io("", "open"))?;
    let mut walk = Walk {
        opts: opts.clone(),
        known,
        entries: Vec::new(),
        stats: Vec::new(),
        reused: 0,
        bytes: 0,
        pending: Vec::new(),
        bufs: [vec![0u8; BLOCK], vec![0u8; BLOCK]],
    };
    if let Err(e) = walk.dir(dir.as_fd(), "", 0) {
        // The files met before the failure come first, as in a walk that
        // hashed each as it met it.
        walk.flush()?;
        return Err(e);
    }
    walk.flush()?;
    let manifest =
        Manifest::new(st.st_mode & 0o7777, walk.entries).map_err(WorkspaceError::Manifest)?;
    Ok(Taken {
        manifest,
        stats: walk.stats,
        reused: walk.reused,
    })
}

fn same_inode(a: &Stat, b: &Stat) -> bool {
    a.st_dev == b.st_dev && a.st_ino == b.st_ino
}

impl Walk<'_> {
    /// Records the entries of the open, readable directory `dir` at `rel`
    /// (`depth` components deep), and below.
    fn dir(&mut self, dir: BorrowedFd<'_>, rel: &str, depth: usize) -> Result<(), WorkspaceError> {
        let names = beneath::list_dir(dir).map_err(WorkspaceError::io(rel, "list"))?;
        for name in names {
            let Some(name) = name.to_str() else {
                return Err(WorkspaceError::NonUtf8Name {
                    parent: display(rel).to_owned(),
                });
            };
            if depth + 1 > MAX_DEPTH {
                return Err(WorkspaceError::TooDeep {
                    parent: display(rel).to_owned(),
                });
            }
            let path = if rel.is_empty() {
                name.to_owned()
            } else {
                format!("{rel}/{name}")
            };
            if path.len() > MAX_PATH_BYTES {
                return Err(WorkspaceError::PathTooLong {
                    parent: display(rel).to_owned(),
                });
            }
            self.entry(dir, name, path, depth)?;
        }
        Ok(())
    }

    fn entry(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &str,
        path: String,
        depth: usize,
    ) -> Result<(), WorkspaceError> {
        let at = open_beneath(dir, name, OFlags::PATH).map_err(|e| opened(&path, e))?;
        let st = fstat(&at).map_err(WorkspaceError::io(&path, "fstat"))?;
        let kind = FileType::from_raw_mode(st.st_mode);
        if depth == 0
            && self.opts.skip_lost_found
            && name == "lost+found"
            && kind == FileType::Directory
        {
            return Ok(());
        }
        if self.entries.len() >= MAX_ENTRIES {
            return Err(WorkspaceError::TooManyEntries { max: MAX_ENTRIES });
        }
        #[expect(
            clippy::useless_conversion,
            reason = "st_nlink is u32 on some targets and u64 on others"
        )]
        let nlink = u64::from(st.st_nlink);
        let mut e = Entry {
            path,
            kind: EntryKind::Other,
            mode: st.st_mode & 0o7777,
            size: 0,
            digest: None,
            hardlink: nlink > 1,
            sparse: false,
            xattr: false,
        };
        match kind {
            FileType::Directory => {
                let (sub, _) = self.reopen(dir, name, &e.path, &st, OFlags::DIRECTORY)?;
                e.kind = EntryKind::Dir;
                e.hardlink = false;
                e.xattr = has_xattr(sub.as_fd(), &e.path)?;
                let path = e.path.clone();
                self.entries.push(e);
                self.flush()?;
                return self.dir(sub.as_fd(), &path, depth + 1);
            }
            FileType::RegularFile => {
                let size = u64::try_from(st.st_size).unwrap_or(u64::MAX);
                if size > MAX_SIZE || self.bytes.saturating_add(size) > self.opts.max_bytes {
                    return Err(WorkspaceError::TooLarge { path: e.path });
                }
                self.bytes += size;
                let (f, again) = self.reopen(dir, name, &e.path, &st, OFlags::empty())?;
                let stat = FileStat::of(&again);
                e.kind = EntryKind::File;
                e.size = size;
                let xattr = has_xattr(f.as_fd(), &e.path);
                e.xattr = xattr.as_ref().is_ok_and(|x| *x);
                let blocks = u64::try_from(st.st_blocks).unwrap_or(0);
                e.sparse = size >= SPARSE_GAP
                    && blocks.saturating_mul(512).saturating_add(SPARSE_GAP) <= size;
                e.digest = self.known.and_then(|k| k.digest(&e.path, &stat));
                self.stats.push((e.path.clone(), stat));
                if e.digest.is_some() {
                    self.reused += 1;
                } else {
                    self.pending.push(Pending {
                        index: self.entries.len(),
                        path: e.path.clone(),
                        fd: f,
                        size,
                    });
                }
                self.entries.push(e);
                // Failing after the file is pending: its hash comes first,
                // as it would have been read before its attributes.
                xattr?;
                if self.pending.len() >= BATCH {
                    self.flush()?;
                }
                return Ok(());
            }
            FileType::Symlink => {
                let target = beneath::read_link(at.as_fd())
                    .map_err(WorkspaceError::io(&e.path, "readlink"))?;
                e.kind = EntryKind::Symlink;
                e.size = target.len() as u64;
                e.digest = Some(Sha256Digest::of(&target));
            }
            FileType::Fifo
            | FileType::Socket
            | FileType::CharacterDevice
            | FileType::BlockDevice
            | FileType::Unknown => {}
        }
        self.entries.push(e);
        Ok(())
    }

    /// Reopens `name` (whose `O_PATH` descriptor's `fstat` was `st`)
    /// readable beneath `dir`; it must still be the same inode.
    fn reopen(
        &self,
        dir: BorrowedFd<'_>,
        name: &str,
        path: &str,
        st: &Stat,
        extra: OFlags,
    ) -> Result<(OwnedFd, Stat), WorkspaceError> {
        let fd = open_beneath(dir, name, OFlags::RDONLY | OFlags::NONBLOCK | extra)
            .map_err(|e| opened(path, e))?;
        let again = fstat(&fd).map_err(WorkspaceError::io(path, "fstat"))?;
        if !same_inode(st, &again) || (again.st_mode ^ st.st_mode) & 0o170000 != 0 {
            return Err(WorkspaceError::Changed {
                path: path.to_owned(),
            });
        }
        Ok((fd, again))
    }

    /// Hashes the pending files (two threads for a large enough batch)
    /// and records their digests; the error is the first in walk order.
    fn flush(&mut self) -> Result<(), WorkspaceError> {
        let batch = std::mem::take(&mut self.pending);
        let [buf0, buf1] = &mut self.bufs;
        let total: u64 = batch.iter().map(|p| p.size).sum();
        let digests = if batch.len() < 2 || total < PARALLEL_BYTES {
            batch.iter().map(|p| p.hash(buf0)).collect()
        } else {
            hash_on_two(&batch, buf0, buf1)
        };
        for (p, d) in batch.iter().zip(digests) {
            let d = d?;
            if let Some(e) = self.entries.get_mut(p.index) {
                e.digest = Some(d);
            }
        }
        Ok(())
    }
}

impl Pending {
    fn hash(&self, buf: &mut [u8]) -> Result<Sha256Digest, WorkspaceError> {
        hash(self.fd.as_fd(), &self.path, self.size, buf)
    }
}

/// Hashes `batch` on this thread and one more, each taking the next file
/// not yet taken; the digests in `batch`'s order. Without a second thread
/// (it could not be started), this thread hashes them all.
fn hash_on_two(
    batch: &[Pending],
    buf0: &mut [u8],
    buf1: &mut [u8],
) -> Vec<Result<Sha256Digest, WorkspaceError>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let work = |buf: &mut [u8]| {
        let mut out = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(p) = batch.get(i) else {
                return out;
            };
            out.push((i, p.hash(buf)));
        }
    };
    let (mine, theirs) = std::thread::scope(|s| {
        let other = std::thread::Builder::new()
            .name("glove-hash".into())
            .spawn_scoped(s, || work(buf1));
        let mine = work(buf0);
        let theirs = match other {
            Ok(h) => h.join().ok(),
            Err(_) => None,
        };
        (mine, theirs)
    });
    let mut slots: Vec<Option<Result<Sha256Digest, WorkspaceError>>> =
        batch.iter().map(|_| None).collect();
    for (i, d) in mine.into_iter().chain(theirs.into_iter().flatten()) {
        if let Some(slot) = slots.get_mut(i) {
            *slot = Some(d);
        }
    }
    // A file the other thread had taken but did not finish is hashed here.
    slots
        .into_iter()
        .zip(batch)
        .map(|(d, p)| d.unwrap_or_else(|| p.hash(buf0)))
        .collect()
}

/// SHA-256 of the open file `fd`, which must give exactly `size` bytes.
fn hash(
    fd: BorrowedFd<'_>,
    path: &str,
    size: u64,
    buf: &mut [u8],
) -> Result<Sha256Digest, WorkspaceError> {
    if size >= SEQUENTIAL_BYTES {
        // Advice only: a kernel that ignores it reads the same bytes.
        let _ = rustix::fs::fadvise(fd, 0, None, rustix::fs::Advice::Sequential);
    }
    let mut h = Sha256::new();
    let mut read = 0u64;
    loop {
        let n = beneath::read(fd, buf).map_err(WorkspaceError::io(path, "read"))?;
        if n == 0 {
            break;
        }
        read += n as u64;
        if read > size {
            break;
        }
        h.update(buf.get(..n).unwrap_or(&[]));
    }
    if read != size {
        return Err(WorkspaceError::Changed {
            path: path.to_owned(),
        });
    }
    Ok(Sha256Digest::from_bytes(h.finalize().into()))
}

/// An open beneath a parent failed: `EXDEV` is a mount point (no `..` or
/// link is ever asked for), `ENOENT` an entry gone since the listing.
fn opened(path: &str, e: Errno) -> WorkspaceError {
    match e {
        Errno::XDEV => WorkspaceError::MountPoint {
            path: path.to_owned(),
        },
        Errno::NOENT | Errno::LOOP | Errno::NOTDIR => WorkspaceError::Changed {
            path: path.to_owned(),
        },
        e => WorkspaceError::io(path, "open")(e),
    }
}

fn has_xattr(fd: BorrowedFd<'_>, path: &str) -> Result<bool, WorkspaceError> {
    let names = beneath::xattr_names(fd).map_err(WorkspaceError::io(path, "flistxattr"))?;
    Ok(names.iter().any(|n| n.as_slice() != IGNORED_XATTR))
}
