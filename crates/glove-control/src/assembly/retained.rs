//! Retained workspaces: a part that makes a stage (an ext4 image filled
//! from the source, [`crate::stages`]) before the build, hands its mount
//! to the sandbox, and freezes it when the session ends. What the agent
//! wrote stays in the stage for `glove diff` and `glove apply`; nothing is
//! written to the source.

use super::{AttachError, SpecParts};
use crate::stages::{self, LiveStage, MakeStage, StageRecord, StageStore};
use glove_types::codes::retained::RETAINED_UNSUPPORTED;
use glove_types::ids::SessionId;
use glove_types::{Rejection, Sha256Digest};
use std::path::PathBuf;
use std::sync::Arc;

/// One retained workspace a door asks for.
#[derive(Clone, Debug)]
pub struct RetainedInput {
    /// Where stages are kept.
    pub store: Arc<StageStore>,
    /// The grant alias (`workspace` for `--workspace`): names the stage.
    pub alias: String,
    /// Where it appears inside the sandbox.
    pub target: String,
    /// The host directory it is filled from (`None`: starts empty).
    pub source: Option<PathBuf>,
    /// That directory already held open (a path exposure): filled through
    /// it, the path kept only for the stage record.
    pub source_fd: Option<Arc<rustix::fd::OwnedFd>>,
    /// The image's size in bytes.
    pub bytes: u64,
    /// The agent's host identity: every entry is its.
    pub owner: (u32, u32),
}

/// What a retained workspace reports at the end.
#[derive(Debug)]
pub struct RetainedReport {
    /// The grant alias.
    pub alias: String,
    /// The baseline manifest's digest.
    pub baseline_digest: Sha256Digest,
    /// The image's device and inode, and its size.
    pub image: ((u64, u64), u64),
    /// The stage as frozen, or why it could not be.
    pub frozen: Result<StageRecord, AttachError>,
}

impl RetainedReport {
    /// The stage as a receipt commits it.
    pub fn receipt(&self) -> glove_types::receipt::RetainedReceipt {
        let (final_digest, error) = match &self.frozen {
            Ok(r) => (r.final_digest.clone(), None),
            Err(e) => (None, Some(e.code().as_str().to_owned())),
        };
        glove_types::receipt::RetainedReceipt {
            alias: self.alias.clone(),
            image: self.image.0,
            bytes: self.image.1,
            baseline_digest: self.baseline_digest.to_string(),
            final_digest,
            error,
        }
    }
}

fn fault(e: Rejection, summary: &str) -> AttachError {
    AttachError::new(e.code(), summary, e.message())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Whether retained workspaces can be made here; the reason when not.
pub fn supported() -> Result<(), String> {
    glove_sandbox::retained::support()
        .map(drop)
        .map_err(|u| u.reason)
}

/// A stage made for a session not yet built.
#[derive(Debug)]
pub struct Prepared {
    live: LiveStage,
    store: Arc<StageStore>,
}

impl Prepared {
    /// Makes the stage and adds its mount to the spec.
    pub fn prepare(
        input: RetainedInput,
        session_id: &SessionId,
        spec: &mut impl SpecParts,
    ) -> Result<Prepared, AttachError> {
        let mkfs = glove_sandbox::retained::support().map_err(|u| {
            AttachError::new(
                RETAINED_UNSUPPORTED,
                "retained workspaces are not available on this host",
                u.reason,
            )
        })?;
        let summary = "the retained workspace could not be staged";
        let stage = input
            .store
            .create(session_id.as_str(), &input.alias)
            .map_err(|e| fault(e, summary))?;
        let made = stages::make(
            stage,
            &MakeStage {
                mkfs: &mkfs,
                target: &input.target,
                source: input.source.as_deref(),
                source_fd: input.source_fd.as_deref().map(rustix::fd::AsFd::as_fd),
                bytes: input.bytes,
                owner: input.owner,
                now_ms: now_ms(),
            },
        );
        let (live, mount) = match made {
            Ok(x) => x,
            Err(e) => {
                let _ = input.store.remove(session_id.as_str(), Some(&input.alias));
                return Err(fault(e, summary));
            }
        };
        spec.add_retained(mount);
        Ok(Prepared {
            live,
            store: input.store,
        })
    }

    /// The session ended (or failed after its build): freezes the stage.
    pub fn finish(self) -> RetainedReport {
        let alias = self.live.stage.alias().to_owned();
        let baseline_digest = self.live.baseline_digest;
        let image = (self.live.image_identity, self.live.bytes);
        RetainedReport {
            alias,
            baseline_digest,
            image,
            frozen: self
                .live
                .finish(now_ms())
                .map_err(|e| fault(e, "the retained workspace could not be frozen")),
        }
    }

    /// The sandbox was never built: the stage goes.
    pub fn discard(self) {
        let session = self.live.stage.session_id().to_owned();
        let alias = self.live.stage.alias().to_owned();
        let LiveStage { lock, held, .. } = self.live;
        let _ = held.release(glove_sandbox::retained::RELEASE_TIMEOUT);
        drop(lock);
        let _ = self.store.remove(&session, Some(&alias));
    }
}
