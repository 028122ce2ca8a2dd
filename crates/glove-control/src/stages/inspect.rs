//! Inspecting a frozen stage: its two manifests (checked against the
//! record's digests), its image mounted read-only, and the source it came
//! from, opened without links and checked to be the same directory.

use super::{freeze, StageDir, StageRecord, BASELINE, FINAL, MAX_MANIFEST_BYTES};
use crate::workspace::content::Trees;
use crate::workspace::diff::{compare, Changes};
use glove_sandbox::retained::{self, Mounted};
use glove_types::codes::retained::*;
use glove_types::manifest::Manifest;
use glove_types::Rejection;
use rustix::fd::{AsFd, OwnedFd};

/// A frozen stage, mounted read-only, beside its source.
#[derive(Debug)]
pub struct Inspection {
    /// The record.
    pub record: StageRecord,
    /// The manifest taken at staging.
    pub baseline: Manifest,
    /// The manifest taken when frozen.
    pub last: Manifest,
    mounted: Mounted,
    source: OwnedFd,
}

fn invalid(m: impl Into<String>) -> Rejection {
    Rejection::new(RETAINED_STAGE_INVALID, m)
}

/// Reads a manifest file of the stage and checks its digest.
pub fn read_manifest(
    stage: &StageDir,
    name: &str,
    digest: Option<glove_types::Sha256Digest>,
) -> Result<Manifest, Rejection> {
    let m = Manifest::decode(&stage.read(name, MAX_MANIFEST_BYTES)?)?;
    if Some(m.digest()?) != digest {
        return Err(invalid(format!("{name} does not match the stage's record")));
    }
    Ok(m)
}

/// Opens the stage's source as it was recorded: no link anywhere in its
/// path, the same device and inode.
pub fn open_source(record: &StageRecord) -> Result<OwnedFd, Rejection> {
    let (Some(path), Some(identity)) = (&record.source, record.source_identity) else {
        return Err(Rejection::new(
            RETAINED_SOURCE_INVALID,
            "the stage was started empty: it has no source",
        ));
    };
    let fd = glove_fs::unconfined::open_dir_no_links(std::path::Path::new(path)).map_err(|e| {
        Rejection::new(
            RETAINED_SOURCE_INVALID,
            format!("the source {path} cannot be opened without links: {e}"),
        )
    })?;
    let st = rustix::fs::fstat(&fd).map_err(|e| super::io("stat the source", e))?;
    if (st.st_dev, st.st_ino) != identity {
        return Err(Rejection::new(
            RETAINED_SOURCE_INVALID,
            format!("{path} is no longer the directory the stage was filled from"),
        ));
    }
    Ok(fd)
}

/// Freezes the stage if its session is over and not yet frozen, then
/// mounts it read-only beside its source.
pub fn inspect(stage: &StageDir, now_ms: u64) -> Result<Inspection, Rejection> {
    let record = freeze(stage, now_ms)?;
    if let Some(txn) = &record.applied_by {
        return Err(Rejection::new(
            RETAINED_STAGE_APPLIED,
            format!("the stage was applied to its source by transaction {txn}"),
        ));
    }
    let baseline = read_manifest(stage, BASELINE, record.baseline())?;
    let last = read_manifest(stage, FINAL, record.final_manifest())?;
    let source = open_source(&record)?;
    let image = stage.image(false)?;
    super::freeze::refuse_if_mounted(image.as_fd())?;
    let mounted = retained::mount_image(image.as_fd(), false)
        .map_err(|e| Rejection::new(RETAINED_IMAGE_FAILED, e.to_string()))?;
    Ok(Inspection {
        record,
        baseline,
        last,
        mounted,
        source,
    })
}

impl Inspection {
    /// The two trees the renderings read.
    pub fn trees(&self) -> Trees<'_> {
        Trees {
            source: self.source.as_fd(),
            stage: self.mounted.root(),
        }
    }

    /// What changed.
    pub fn changes(&self) -> Changes {
        compare(&self.baseline, &self.last)
    }

    /// Adds the stage's two manifest digests to a JSON object.
    pub fn add_digests(&self, v: &mut serde_json::Value) {
        if let Some(m) = v.as_object_mut() {
            m.insert(
                "baseline_digest".into(),
                self.record.baseline_digest.clone().into(),
            );
            m.insert(
                "final_digest".into(),
                self.record.final_digest.clone().into(),
            );
            // Which stage it is (an apply authorization names it).
            m.insert("alias".into(), self.record.alias.clone().into());
        }
    }

    /// The source directory.
    pub fn source(&self) -> rustix::fd::BorrowedFd<'_> {
        self.source.as_fd()
    }

    /// The stage's root (read-only).
    pub fn stage_root(&self) -> rustix::fd::BorrowedFd<'_> {
        self.mounted.root()
    }

    /// Unmounts the image and waits for its loop device to go.
    pub fn release(self) -> Result<(), Rejection> {
        self.mounted
            .release()
            .map_err(|e| Rejection::new(RETAINED_STAGE_BUSY, e.to_string()))
    }
}
