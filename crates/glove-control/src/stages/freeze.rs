//! Making a stage and freezing it: the image is made and filled, the
//! baseline taken, and after the session the image is mounted read-only
//! and the final manifest taken.

use super::{StageDir, StageRecord, StageState, BASELINE, FINAL, IMAGE, STAGE_SCHEMA};
use crate::workspace::known::{FileStat, KnownFiles};
use glove_sandbox::retained::{self, Held, Mkfs};
use glove_sandbox::spec::RetainedMount;
use glove_types::codes::retained::*;
use glove_types::{Rejection, Sha256Digest};
use rustix::fd::{AsFd, BorrowedFd};
use std::path::Path;

/// Takes the manifest of the tree below `root` (an ext4 stage: its
/// `lost+found` is not part of it); returns its canonical bytes and digest.
pub fn manifest_of(root: BorrowedFd<'_>) -> Result<(Vec<u8>, Sha256Digest), Rejection> {
    let (bytes, digest, _) = taken_of(root, None)?;
    Ok((bytes, digest))
}

/// A manifest's canonical bytes and digest, and its regular files' stats.
type TakenBytes = (Vec<u8>, Sha256Digest, Vec<(String, FileStat)>);

/// [`manifest_of`], keeping the digests of `known` files whose stat is
/// unchanged; also returns every regular file's stat.
fn taken_of(root: BorrowedFd<'_>, known: Option<&KnownFiles>) -> Result<TakenBytes, Rejection> {
    let opts = crate::workspace::manifest::TakeOptions {
        skip_lost_found: true,
        ..Default::default()
    };
    let t = crate::workspace::manifest::take_with(root, &opts, known)
        .map_err(|e| Rejection::new(RETAINED_MANIFEST_FAILED, e.to_rejection().message()))?;
    Ok((t.manifest.canonical_bytes()?, t.manifest.digest()?, t.stats))
}

fn sandbox(code: glove_types::ErrorCode, e: glove_sandbox::SandboxError) -> Rejection {
    Rejection::new(code, e.to_string())
}

/// Refuses while a mount of the image lives (the session's, in a sandbox
/// whose supervisor died and left the stage's lock free): attaching it a
/// second time would put two file systems over one ext4.
pub(crate) fn refuse_if_mounted(image: BorrowedFd<'_>) -> Result<(), Rejection> {
    match retained::image_in_use(image) {
        Ok(false) => Ok(()),
        Ok(true) => Err(Rejection::new(
            RETAINED_STAGE_BUSY,
            "the stage's image is still mounted: its session may still run",
        )),
        Err(e) => Err(sandbox(RETAINED_IMAGE_FAILED, e)),
    }
}

/// What [`make`] asks for.
#[derive(Clone, Debug)]
pub struct MakeStage<'a> {
    /// The checked `mkfs.ext4` ([`retained::support`]).
    pub mkfs: &'a Mkfs,
    /// Where the workspace appears inside the sandbox.
    pub target: &'a str,
    /// The host directory to fill it from (`None`: start empty); with
    /// `source_fd`, only what the stage record names (apply re-opens it and
    /// checks its identity).
    pub source: Option<&'a Path>,
    /// The source already held open (a path exposure's project): the fill
    /// reads it through this descriptor, never resolving the path again.
    pub source_fd: Option<rustix::fd::BorrowedFd<'a>>,
    /// The image's size.
    pub bytes: u64,
    /// Who owns every entry (the agent's host identity).
    pub owner: (u32, u32),
    /// Now, in ms since the epoch.
    pub now_ms: u64,
}

/// A stage made and handed to a launch: its mount goes into the spec, the
/// loop device and the stage's lock stay here until the session ends.
#[derive(Debug)]
pub struct LiveStage {
    /// The stage.
    pub stage: StageDir,
    /// The session's hold on the stage.
    pub lock: super::StageLock,
    /// The loop device, released at the end.
    pub held: Held,
    /// The baseline manifest's digest.
    pub baseline_digest: Sha256Digest,
    /// The image file's device and inode.
    pub image_identity: (u64, u64),
    /// The image's size.
    pub bytes: u64,
}

/// Makes the image in `stage`, fills it from the source by the no-follow
/// descriptor walk, records the baseline manifest and a live record, and
/// returns the mount for the launch.
pub fn make(stage: StageDir, m: &MakeStage<'_>) -> Result<(LiveStage, RetainedMount), Rejection> {
    let lock = stage.lock_or_live()?;
    let source = match (m.source_fd, m.source) {
        (Some(held), _) => {
            let fd = rustix::io::fcntl_dupfd_cloexec(held, 3)
                .map_err(|e| super::io("duplicate the source", e))?;
            let st = rustix::fs::fstat(&fd).map_err(|e| super::io("stat the source", e))?;
            if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Directory {
                return Err(Rejection::new(
                    RETAINED_SOURCE_INVALID,
                    "the held source is not a directory",
                ));
            }
            Some(fd)
        }
        (None, None) => None,
        (None, Some(p)) => {
            if !p.is_absolute() {
                return Err(Rejection::new(
                    RETAINED_SOURCE_INVALID,
                    format!("{} is not an absolute path", p.display()),
                ));
            }
            let fd = glove_fs::unconfined::open_dir_no_links(p).map_err(|e| {
                Rejection::new(
                    RETAINED_SOURCE_INVALID,
                    format!(
                        "{}: {e} (it must be a directory reached without links)",
                        p.display()
                    ),
                )
            })?;
            Some(fd)
        }
    };
    let source_identity = match &source {
        Some(fd) => {
            let st = rustix::fs::fstat(fd).map_err(|e| super::io("stat the source", e))?;
            Some((st.st_dev, st.st_ino))
        }
        None => None,
    };
    if !(retained::MIN_IMAGE_BYTES..=retained::MAX_IMAGE_BYTES).contains(&m.bytes) {
        return Err(Rejection::new(
            RETAINED_SIZE_INVALID,
            format!(
                "{} bytes is outside {}..={} bytes",
                m.bytes,
                retained::MIN_IMAGE_BYTES,
                retained::MAX_IMAGE_BYTES
            ),
        ));
    }
    let image = retained::create_image(m.mkfs, stage.dir(), stage.path(), IMAGE, m.bytes, m.owner)
        .map_err(|e| sandbox(RETAINED_IMAGE_FAILED, e))?;
    let st = rustix::fs::fstat(&image).map_err(|e| super::io("stat the image", e))?;
    let mounted = retained::mount_image(image.as_fd(), true)
        .map_err(|e| sandbox(RETAINED_IMAGE_FAILED, e))?;
    drop(image);
    mounted
        .fill(source.as_ref().map(|s| s.as_fd()), m.owner)
        .map_err(|e| sandbox(RETAINED_FILL_FAILED, e))?;
    let (bytes, baseline_digest, stats) = taken_of(mounted.root(), None)?;
    stage.write(BASELINE, &bytes)?;
    // Before the session starts: its changes are all stamped after this.
    super::reuse::write_table(&stage, stats)?;
    stage.write_record(&StageRecord {
        schema: STAGE_SCHEMA.into(),
        session_id: stage.session_id().to_owned(),
        alias: stage.alias().to_owned(),
        target: m.target.to_owned(),
        source: m.source.map(|p| p.display().to_string()),
        source_identity,
        bytes: m.bytes,
        created_at_ms: m.now_ms,
        baseline_digest: baseline_digest.to_string(),
        state: StageState::Live,
        frozen_at_ms: None,
        final_digest: None,
        image_identity: (st.st_dev, st.st_ino),
        applied_by: None,
    })?;
    let (mount, held) = mounted.into_grant(m.target.to_owned());
    Ok((
        LiveStage {
            stage,
            lock,
            held,
            baseline_digest,
            image_identity: (st.st_dev, st.st_ino),
            bytes: m.bytes,
        },
        mount,
    ))
}

impl LiveStage {
    /// The session is over: waits for its mount to go, then freezes.
    pub fn finish(self, now_ms: u64) -> Result<StageRecord, Rejection> {
        let LiveStage {
            stage, lock, held, ..
        } = self;
        held.release(retained::RELEASE_TIMEOUT)
            .map_err(|e| Rejection::new(RETAINED_STAGE_BUSY, e.to_string()))?;
        freeze_locked(&stage, now_ms, &lock)
    }
}

/// Freezes a stage whose session is over (a live record whose lock is free
/// is a session that died): mounts the image read-only, takes the final
/// manifest and records it. A frozen stage is returned as it is.
pub fn freeze(stage: &StageDir, now_ms: u64) -> Result<StageRecord, Rejection> {
    let lock = stage.lock_or_live()?;
    freeze_locked(stage, now_ms, &lock)
}

fn freeze_locked(
    stage: &StageDir,
    now_ms: u64,
    _lock: &super::StageLock,
) -> Result<StageRecord, Rejection> {
    let mut record = stage.record()?;
    if record.state == StageState::Frozen {
        return Ok(record);
    }
    // Read-write only so that a journal left by a crash can be replayed;
    // the file system itself is mounted read-only.
    let image = stage.image(true)?;
    refuse_if_mounted(image.as_fd())?;
    let mounted = retained::mount_image(image.as_fd(), false)
        .map_err(|e| sandbox(RETAINED_IMAGE_FAILED, e))?;
    let known = super::reuse::known_files(stage, &record, image.as_fd());
    let (bytes, digest, _) = taken_of(mounted.root(), known.as_ref())?;
    mounted
        .release()
        .map_err(|e| sandbox(RETAINED_STAGE_BUSY, e))?;
    stage.write(FINAL, &bytes)?;
    glove_fs::chmod(image.as_fd(), 0o400).map_err(|e| super::io("chmod the image", e))?;
    record.state = StageState::Frozen;
    record.frozen_at_ms = Some(now_ms);
    record.final_digest = Some(digest.to_string());
    stage.write_record(&record)?;
    Ok(record)
}
