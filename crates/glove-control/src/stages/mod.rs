//! Retained stages: where an agent's retained workspace waits between its
//! session and an apply.
//!
//! ```text
//! <stages>/                      mode 0700, the service user's
//!   <session id>/                one directory per session
//!     <alias>/                   one stage per retained workspace
//!       image.ext4               the workspace's ext4 image (0600, 0400 once frozen)
//!       baseline.json            the manifest taken when it was filled
//!       baseline.stat            its regular files' stats (advisory, see `reuse.rs`)
//!       final.json               the manifest taken when it was frozen
//!       stage.json               the record (atomic, see [`StageRecord`])
//!       lock                     held (flock) by the session while it runs
//! ```
//!
//! A stage is *live* while its session runs (the session's process holds
//! `lock`), then *frozen*: the image is mounted read-only, the final
//! manifest taken, and the record says so. A live stage whose lock is free
//! belongs to a session that died (a crash, a restart, a reboot): freezing
//! it on first use is its recovery. Nothing here follows a link: each
//! directory and file is opened beneath the one above it.

mod freeze;
mod inspect;
mod record;
mod reuse;

pub use freeze::{freeze, make, manifest_of, LiveStage, MakeStage};
pub use inspect::{inspect, open_source, read_manifest, Inspection};

pub use record::{StageRecord, StageState, MAX_RECORD_BYTES, STAGE_SCHEMA};

use glove_fs::{Errno, OFlags};
use glove_types::codes::retained::*;
use glove_types::Rejection;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The image file's name.
pub const IMAGE: &str = "image.ext4";
/// The baseline manifest's file name.
pub const BASELINE: &str = "baseline.json";
/// The baseline's stat table (not part of any manifest or digest: it
/// only lets the final manifest skip reading files the session left
/// alone).
pub const STAT: &str = "baseline.stat";
/// The final manifest's file name.
pub const FINAL: &str = "final.json";
/// The record's file name.
pub const RECORD: &str = "stage.json";
const LOCK: &str = "lock";

/// Largest manifest file read (a million entries of about 200 bytes).
pub const MAX_MANIFEST_BYTES: u64 = 256 << 20;

fn io(what: impl std::fmt::Display, e: impl std::fmt::Display) -> Rejection {
    Rejection::new(RETAINED_STAGE_IO, format!("{what}: {e}"))
}

/// The directory of stages.
#[derive(Debug)]
pub struct StageStore {
    path: PathBuf,
    dir: OwnedFd,
}

/// One stage's directory.
#[derive(Debug)]
pub struct StageDir {
    path: PathBuf,
    dir: OwnedFd,
    session_id: String,
    alias: String,
}

/// A stage as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageSummary {
    /// The record.
    pub record: StageRecord,
    /// Whether its session still holds it.
    pub running: bool,
    /// The image's allocated bytes on the host.
    pub allocated_bytes: u64,
}

impl StageSummary {
    /// The stage as `glove stages list --json` and `stages_list` show it
    /// (its source is a host path: the owner's only).
    pub fn to_json(&self) -> serde_json::Value {
        let r = &self.record;
        let state = if self.running {
            "running"
        } else {
            match r.state {
                StageState::Live => "live",
                StageState::Frozen => "frozen",
            }
        };
        serde_json::json!({
            "session_id": r.session_id, "alias": r.alias, "state": state,
            "running": self.running, "bytes": r.bytes,
            "allocated_bytes": self.allocated_bytes, "created_at_ms": r.created_at_ms,
            "source": r.source, "baseline_digest": r.baseline_digest,
            "final_digest": r.final_digest, "applied_by": r.applied_by,
        })
    }
}

impl StageStore {
    /// Opens the directory of stages, creating it (mode 0700) when missing;
    /// it must be the service user's, mode 0700.
    pub fn open(path: &Path) -> Result<StageStore, Rejection> {
        let dir = crate::placement::ensure_dir(path, "the stage directory")?;
        Ok(StageStore {
            path: path.to_owned(),
            dir,
        })
    }

    /// Where the stages are.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sub(&self, parent: BorrowedFd<'_>, name: &str, create: bool) -> Result<OwnedFd, Errno> {
        if create {
            match glove_fs::mkdir_in(parent, OsStr::new(name), 0o700) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(e),
            }
        }
        let fd = glove_fs::open_in(parent, OsStr::new(name), OFlags::RDONLY | OFlags::DIRECTORY)?;
        let f = glove_fs::facts(fd.as_fd())?;
        if f.private_dir(0o700).is_err() {
            return Err(Errno::ACCESS);
        }
        Ok(fd)
    }

    /// Makes the directory of a new stage; an existing stage of the same
    /// session and alias is refused.
    pub fn create(&self, session_id: &str, alias: &str) -> Result<StageDir, Rejection> {
        glove_types::ids::check_id(session_id)?;
        glove_types::ids::check_id(alias)?;
        let s = self
            .sub(self.dir.as_fd(), session_id, true)
            .map_err(|e| io(format!("stage directory of session {session_id}"), e))?;
        match glove_fs::mkdir_in(s.as_fd(), OsStr::new(alias), 0o700) {
            Ok(()) => {}
            Err(Errno::EXIST) => {
                return Err(Rejection::new(
                    RETAINED_STAGE_EXISTS,
                    format!("session {session_id} already has a stage {alias}"),
                ))
            }
            Err(e) => return Err(io("make the stage directory", e)),
        }
        let dir = self
            .sub(s.as_fd(), alias, false)
            .map_err(|e| io("open the stage directory", e))?;
        glove_fs::sync_dir(s.as_fd()).map_err(|e| io("sync", e))?;
        glove_fs::sync_dir(self.dir.as_fd()).map_err(|e| io("sync", e))?;
        Ok(StageDir {
            path: self.path.join(session_id).join(alias),
            dir,
            session_id: session_id.to_owned(),
            alias: alias.to_owned(),
        })
    }

    /// Opens an existing stage of `session_id`; `alias` may be left out
    /// when the session has exactly one.
    pub fn open_stage(&self, session_id: &str, alias: Option<&str>) -> Result<StageDir, Rejection> {
        glove_types::ids::check_id(session_id)?;
        let missing = || {
            Rejection::new(
                RETAINED_STAGE_NOT_FOUND,
                format!("session {session_id} has no retained stage"),
            )
        };
        let s = match self.sub(self.dir.as_fd(), session_id, false) {
            Ok(s) => s,
            Err(Errno::NOENT) => return Err(missing()),
            Err(e) => return Err(io(format!("stage directory of session {session_id}"), e)),
        };
        let alias = match alias {
            Some(a) => {
                glove_types::ids::check_id(a)?;
                a.to_owned()
            }
            None => {
                let names = list_names(s.as_fd()).map_err(|e| io("list", e))?;
                match names.as_slice() {
                    [one] => one.clone(),
                    [] => return Err(missing()),
                    many => {
                        return Err(Rejection::new(
                            RETAINED_STAGE_NOT_FOUND,
                            format!(
                                "session {session_id} has several stages ({}); name one",
                                many.join(", ")
                            ),
                        ))
                    }
                }
            }
        };
        let dir = match self.sub(s.as_fd(), &alias, false) {
            Ok(d) => d,
            Err(Errno::NOENT) => return Err(missing()),
            Err(e) => return Err(io("open the stage directory", e)),
        };
        Ok(StageDir {
            path: self.path.join(session_id).join(&alias),
            dir,
            session_id: session_id.to_owned(),
            alias,
        })
    }

    /// Every stage with a readable record, sorted by session and alias;
    /// a directory without a record (a stage that was being made when its
    /// maker died) is listed with `record: None` in `broken`.
    pub fn list(&self) -> Result<(Vec<StageSummary>, Vec<String>), Rejection> {
        let mut out = Vec::new();
        let mut broken = Vec::new();
        for session in list_names(self.dir.as_fd()).map_err(|e| io("list stages", e))? {
            let Ok(s) = self.sub(self.dir.as_fd(), &session, false) else {
                broken.push(session);
                continue;
            };
            for alias in list_names(s.as_fd()).map_err(|e| io("list stages", e))? {
                match self
                    .open_stage(&session, Some(&alias))
                    .and_then(|d| d.summary())
                {
                    Ok(sum) => out.push(sum),
                    Err(_) => broken.push(format!("{session}/{alias}")),
                }
            }
        }
        Ok((out, broken))
    }

    /// Removes a stage: refused while its session runs. The image goes
    /// first, the record last, so a crash halfway leaves a stage that is
    /// listed as broken and removed again.
    pub fn remove(&self, session_id: &str, alias: Option<&str>) -> Result<(), Rejection> {
        let stage = self.open_stage(session_id, alias)?;
        let _lock = stage.lock_or_live()?;
        // Never under a live mount of its image (a session whose
        // supervisor died): the stage goes once nothing holds it.
        if let Ok(image) = stage.image(false) {
            freeze::refuse_if_mounted(rustix::fd::AsFd::as_fd(&image))?;
        }
        for name in [IMAGE, BASELINE, STAT, FINAL, LOCK, RECORD] {
            match glove_fs::unlink_in(stage.dir.as_fd(), OsStr::new(name)) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(e) => return Err(io(format!("remove {name}"), e)),
            }
        }
        let s = self
            .sub(self.dir.as_fd(), session_id, false)
            .map_err(|e| io("open the session's stages", e))?;
        rustix::fs::unlinkat(&s, stage.alias.as_str(), rustix::fs::AtFlags::REMOVEDIR)
            .map_err(|e| io("remove the stage directory", e))?;
        if list_names(s.as_fd()).map(|n| n.is_empty()).unwrap_or(false) {
            let _ = rustix::fs::unlinkat(&self.dir, session_id, rustix::fs::AtFlags::REMOVEDIR);
        }
        glove_fs::sync_dir(self.dir.as_fd()).map_err(|e| io("sync", e))?;
        Ok(())
    }
}

fn list_names(dir: BorrowedFd<'_>) -> Result<Vec<String>, Errno> {
    let fd = glove_fs::open_in(dir, OsStr::new("."), OFlags::RDONLY | OFlags::DIRECTORY)?;
    let mut d = rustix::fs::Dir::read_from(&fd)?;
    let mut names = Vec::new();
    while let Some(e) = d.read() {
        let e = e?;
        let n = e.file_name().to_string_lossy().into_owned();
        if n != "." && n != ".." && glove_types::ids::check_id(&n).is_ok() {
            names.push(n);
        }
        if names.len() > 100_000 {
            return Err(Errno::TOOBIG);
        }
    }
    names.sort();
    Ok(names)
}

/// The session's hold on a live stage (an exclusive `flock` of its `lock`
/// file): released when dropped.
#[derive(Debug)]
pub struct StageLock {
    _fd: OwnedFd,
}

impl StageDir {
    /// The stage's directory (a host path; for the owner only).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory's descriptor.
    pub fn dir(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// The session.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The alias.
    pub fn alias(&self) -> &str {
        &self.alias
    }

    /// Takes the stage's lock, or says the session still runs.
    pub fn lock_or_live(&self) -> Result<StageLock, Rejection> {
        let fd = match glove_fs::create_in(self.dir.as_fd(), OsStr::new(LOCK), OFlags::RDWR, 0o600)
        {
            Ok(fd) => fd,
            Err(Errno::EXIST) => {
                glove_fs::open_in(self.dir.as_fd(), OsStr::new(LOCK), OFlags::RDWR)
                    .map_err(|e| io("open the stage lock", e))?
            }
            Err(e) => return Err(io("make the stage lock", e)),
        };
        match rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(StageLock { _fd: fd }),
            Err(Errno::WOULDBLOCK) => Err(Rejection::new(
                RETAINED_STAGE_LIVE,
                format!(
                    "the session {} of stage {} is still running",
                    self.session_id, self.alias
                ),
            )),
            Err(e) => Err(io("lock the stage", e)),
        }
    }

    /// Reads the record.
    pub fn record(&self) -> Result<StageRecord, Rejection> {
        StageRecord::decode(&self.read(RECORD, MAX_RECORD_BYTES)?)
    }

    /// Replaces the record durably.
    pub fn write_record(&self, r: &StageRecord) -> Result<(), Rejection> {
        self.write(RECORD, &r.encode())
    }

    /// Reads one of the stage's files whole (at most `max` bytes).
    pub fn read(&self, name: &str, max: u64) -> Result<Vec<u8>, Rejection> {
        use std::io::Read;
        let fd = glove_fs::open_in(self.dir.as_fd(), OsStr::new(name), OFlags::RDONLY)
            .map_err(|e| io(format!("open {name}"), e))?;
        let f = glove_fs::facts(fd.as_fd()).map_err(|e| io(format!("stat {name}"), e))?;
        if f.private_file(0o600).is_err() && f.private_file(0o400).is_err() {
            return Err(Rejection::new(
                RETAINED_STAGE_INVALID,
                format!("{name} is not a private file of the service user"),
            ));
        }
        if f.size > max {
            return Err(Rejection::new(
                RETAINED_STAGE_INVALID,
                format!("{name} is larger than {max} bytes"),
            ));
        }
        let mut out = Vec::with_capacity(f.size as usize);
        std::fs::File::from(fd)
            .take(max + 1)
            .read_to_end(&mut out)
            .map_err(|e| io(format!("read {name}"), e))?;
        Ok(out)
    }

    /// Writes one of the stage's files whole, durably.
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<(), Rejection> {
        glove_journal::atomic::write_file(self.dir.as_fd(), OsStr::new(name), bytes)
            .map_err(|e| io(format!("write {name}"), e))
    }

    /// Opens the image: read-write (only while live), or read-only.
    pub fn image(&self, writable: bool) -> Result<OwnedFd, Rejection> {
        let access = if writable {
            OFlags::RDWR
        } else {
            OFlags::RDONLY
        };
        glove_fs::open_in(self.dir.as_fd(), OsStr::new(IMAGE), access)
            .map_err(|e| io("open the image", e))
    }

    /// The record, whether the session still runs, and the image's
    /// allocated size.
    pub fn summary(&self) -> Result<StageSummary, Rejection> {
        let record = self.record()?;
        let running = match self.lock_or_live() {
            Ok(_) => false,
            Err(e) if e.code() == RETAINED_STAGE_LIVE => true,
            Err(e) => return Err(e),
        };
        let allocated_bytes = rustix::fs::statat(
            self.dir.as_fd(),
            IMAGE,
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
        .map(|s| (s.st_blocks as u64).saturating_mul(512))
        .unwrap_or(0);
        Ok(StageSummary {
            record,
            running,
            allocated_bytes,
        })
    }
}
