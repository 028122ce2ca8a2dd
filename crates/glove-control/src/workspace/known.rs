//! Files known from the baseline: letting the final manifest keep a
//! baseline digest for a regular file the session did not touch, instead of
//! reading it again.
//!
//! When the baseline manifest is taken, the walk also gives each regular
//! file's [`FileStat`] (inode, size, mtime, ctime, from `fstat` of the
//! descriptor it then read). The stage keeps them in a side file
//! ([`StatTable`], beside the baseline manifest, outside the manifest and
//! its digest). When the final manifest is taken with [`KnownFiles`], a
//! regular file whose path, inode, size, mtime and ctime all equal the
//! baseline's keeps the baseline's digest; anything else is read and hashed.
//! A missing or malformed side file means: hash everything.
//!
//! # Why an unchanged stat means unchanged bytes
//!
//! This holds for a retained stage only, under these conditions, each of
//! which the stage code checks or which holds by construction:
//!
//! * **Only the kernel's ext4 writes the image while the session runs.**
//!   The image file is root-owned, mode 0600, in a 0700 directory of the
//!   service (root is trusted); the agent sees the mounted file system,
//!   never the image or the loop device.
//! * **The agent cannot change a file's bytes without the kernel setting
//!   its ctime to the current time.** Every path that changes the content
//!   of a regular file on ext4 (`write` and its vectored, positioned,
//!   direct and `splice`/`copy_file_range` forms, a write fault on a shared
//!   mapping, `truncate`, the `fallocate` modes that punch, zero, collapse
//!   or insert) updates mtime and ctime to the current time. The agent has
//!   no capabilities (no `CAP_SYS_TIME`, no `CAP_FOWNER` tricks: `utimensat`
//!   sets ctime to *now* whatever it is asked), and its seccomp filter
//!   refuses `EXT4_IOC_MOVE_EXT` — the one ext4 call found that changes a
//!   file's bytes (the donor's) without touching its times, checked on a
//!   real ext4; the other ext4 ioctls that move data need
//!   `CAP_SYS_ADMIN`. A path deleted and made again (possibly on the same
//!   inode number) gets a new ctime.
//! * **The ctime of a later change differs from the recorded one.** The
//!   kernel stamps ctime from the coarse real-time clock (or a finer one,
//!   never below it), truncated to the file system's granularity. A change
//!   within the same tick (or the same second, on an ext4 with 128-byte
//!   inodes) as the recorded ctime would keep it. So the stat table holds a
//!   file only if its ctime is strictly before a *fence*, the coarse clock
//!   read after the baseline walk and before the session starts: every
//!   change the session makes is stamped at or after the fence. And it
//!   holds a file only if its ctime has a non-zero nanosecond part: an ext4
//!   that stores whole seconds gives none, so nothing is reused there. The
//!   timestamps are ext4's own (set while the stage was filled), not the
//!   host source's. What this leaves is the host's real-time clock stepped
//!   back during the session onto a recorded nanosecond: the agent cannot
//!   step it.
//! * **Every change reached the image.** A change whose data reached the
//!   image but whose inode update did not (a host crash before the journal
//!   committed it, a journal aborted by an I/O error) would break the rule
//!   above, so the table records the boot it was taken in and the stage
//!   reuses nothing after a reboot or when the file system recorded an
//!   error (its superblock's error state or error count).
//!
//! Apply does not rely on any of this: it checks every file's bytes
//! against the final manifest as it copies them.

use glove_types::manifest::{Manifest, MAX_ENTRIES, MAX_PATH_BYTES};
use glove_types::Sha256Digest;
use rustix::fs::Stat;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// The side file's format name.
pub const STAT_FORMAT: &str = "glove.baseline-stat-v1";

/// Largest side file decoded (a million files of under 4 KiB paths would
/// be more; such a stage simply hashes everything).
pub const MAX_STAT_BYTES: usize = 256 << 20;

/// What the final manifest compares: a regular file's identity and times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStat {
    /// The inode number (on the same image; the device differs by mount).
    pub ino: u64,
    /// The size in bytes.
    pub size: u64,
    /// mtime: seconds and nanoseconds.
    pub mtime: (i64, i64),
    /// ctime: seconds and nanoseconds.
    pub ctime: (i64, i64),
}

impl FileStat {
    /// The fields of `st`.
    pub fn of(st: &Stat) -> FileStat {
        FileStat {
            ino: st.st_ino,
            size: u64::try_from(st.st_size).unwrap_or(u64::MAX),
            mtime: (st.st_mtime, i64::try_from(st.st_mtime_nsec).unwrap_or(-1)),
            ctime: (st.st_ctime, i64::try_from(st.st_ctime_nsec).unwrap_or(-1)),
        }
    }
}

/// The side file: which boot it was taken in, the fence, and the files
/// whose ctime is before the fence, sorted by path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatTable {
    format: String,
    boot_id: String,
    fence: (i64, i64),
    files: Vec<(String, FileStat)>,
}

impl StatTable {
    /// The table of `files` (path and stat, any order) taken in boot
    /// `boot_id` with the fence `fence` (see the module docs): only files
    /// whose ctime is before the fence and has a nanosecond part are kept.
    pub fn new(boot_id: &str, fence: (i64, i64), mut files: Vec<(String, FileStat)>) -> Self {
        files.retain(|(_, s)| usable(s, fence));
        files.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        files.dedup_by(|a, b| a.0 == b.0);
        StatTable {
            format: STAT_FORMAT.to_owned(),
            boot_id: boot_id.to_owned(),
            fence,
            files,
        }
    }

    /// The boot it was taken in.
    pub fn boot_id(&self) -> &str {
        &self.boot_id
    }

    /// How many files it holds.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether it holds no file.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The side file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Decodes a side file strictly: its format, at most [`MAX_ENTRIES`]
    /// files, paths that a manifest could hold, sorted and unique, times
    /// with nanoseconds below 10⁹, every ctime before the fence. `None`
    /// for anything else (the caller then hashes everything).
    pub fn decode(bytes: &[u8]) -> Option<StatTable> {
        if bytes.len() > MAX_STAT_BYTES {
            return None;
        }
        let t: StatTable = serde_json::from_slice(bytes).ok()?;
        let ok = t.format == STAT_FORMAT
            && !t.boot_id.is_empty()
            && t.boot_id.len() <= 64
            && valid_time(t.fence)
            && t.files.len() <= MAX_ENTRIES
            && t.files
                .iter()
                .all(|(p, s)| !p.is_empty() && p.len() <= MAX_PATH_BYTES && usable(s, t.fence))
            && t.files
                .windows(2)
                .all(|w| matches!(w, [a, b] if a.0.as_bytes() < b.0.as_bytes()));
        ok.then_some(t)
    }
}

/// A time of the epoch or after, nanoseconds below 10⁹.
fn valid_time((s, ns): (i64, i64)) -> bool {
    s >= 0 && (0..1_000_000_000).contains(&ns)
}

/// Whether the table may hold a file of stat `s`: valid times, a ctime
/// strictly before the fence and with a nanosecond part (module docs).
fn usable(s: &FileStat, fence: (i64, i64)) -> bool {
    valid_time(s.mtime) && valid_time(s.ctime) && s.ctime < fence && s.ctime.1 != 0
}

/// The baseline's files a walk may keep the digest of: the stat table
/// joined with the baseline manifest's digests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KnownFiles {
    files: HashMap<String, (FileStat, Sha256Digest)>,
}

impl KnownFiles {
    /// Each file of `table` that `baseline` records as a regular file of
    /// the same size, with its digest.
    pub fn join(table: &StatTable, baseline: &Manifest) -> KnownFiles {
        let files = table
            .files
            .iter()
            .filter_map(|(path, st)| {
                let e = baseline.get(path)?;
                let d = e.digest?;
                (e.kind == glove_types::manifest::EntryKind::File && e.size == st.size)
                    .then(|| (path.clone(), (*st, d)))
            })
            .collect();
        KnownFiles { files }
    }

    /// The baseline digest of the file at `path` if its stat is `st`.
    pub fn digest(&self, path: &str, st: &FileStat) -> Option<Sha256Digest> {
        match self.files.get(path) {
            Some((known, d)) if known == st => Some(*d),
            _ => None,
        }
    }

    /// How many files it holds.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether it holds no file.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}
