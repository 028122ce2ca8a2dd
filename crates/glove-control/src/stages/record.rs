//! A stage's record (`stage.json`): what the stage is, where it came from,
//! and how far it has got. Written whole and atomically; read strictly.

use glove_types::codes::retained::RETAINED_STAGE_INVALID;
use glove_types::{Rejection, Sha256Digest};
use serde::{Deserialize, Serialize};

/// The record's schema name.
pub const STAGE_SCHEMA: &str = "glove.stage-v1";

/// Largest record read.
pub const MAX_RECORD_BYTES: u64 = 64 << 10;

/// How far a stage has got.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageState {
    /// Its session may still write to it.
    Live,
    /// Its session ended; the image is only ever mounted read-only again
    /// and the final manifest is recorded.
    Frozen,
}

/// A stage's record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageRecord {
    /// [`STAGE_SCHEMA`].
    pub schema: String,
    /// The session that wrote to it.
    pub session_id: String,
    /// The grant alias (or `workspace` for `--workspace`).
    pub alias: String,
    /// Where the workspace was inside the sandbox.
    pub target: String,
    /// The host directory it was filled from (absent: started empty). A
    /// host path: shown to the owner, never to a remote caller.
    pub source: Option<String>,
    /// The source directory's device and inode at staging.
    pub source_identity: Option<(u64, u64)>,
    /// The image's size in bytes.
    pub bytes: u64,
    /// When the stage was made (ms since the epoch).
    pub created_at_ms: u64,
    /// Digest of the baseline manifest (`baseline.json`).
    pub baseline_digest: String,
    /// How far it has got.
    pub state: StageState,
    /// When it was frozen.
    pub frozen_at_ms: Option<u64>,
    /// Digest of the final manifest (`final.json`), once frozen.
    pub final_digest: Option<String>,
    /// The image file's device and inode.
    pub image_identity: (u64, u64),
    /// The apply transaction that brought the stage into its source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_by: Option<String>,
}

impl StageRecord {
    /// The baseline manifest's digest (checked when decoded).
    pub fn baseline(&self) -> Option<Sha256Digest> {
        Sha256Digest::parse(&self.baseline_digest).ok()
    }

    /// The final manifest's digest, once frozen.
    pub fn final_manifest(&self) -> Option<Sha256Digest> {
        self.final_digest
            .as_deref()
            .and_then(|d| Sha256Digest::parse(d).ok())
    }

    /// Encodes the record (pretty JSON: a person may read it).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).unwrap_or_default();
        v.push(b'\n');
        v
    }

    /// Decodes a record strictly: unknown fields, a wrong schema or a
    /// frozen record without its final digest are refused.
    pub fn decode(bytes: &[u8]) -> Result<StageRecord, Rejection> {
        let r: StageRecord = serde_json::from_slice(bytes)
            .map_err(|e| Rejection::new(RETAINED_STAGE_INVALID, format!("stage record: {e}")))?;
        if r.schema != STAGE_SCHEMA {
            return Err(Rejection::new(
                RETAINED_STAGE_INVALID,
                format!("stage record schema {:?} is not {STAGE_SCHEMA}", r.schema),
            ));
        }
        if (r.state == StageState::Frozen) != r.final_digest.is_some() {
            return Err(Rejection::new(
                RETAINED_STAGE_INVALID,
                "a stage record has a final digest exactly when it is frozen",
            ));
        }
        Sha256Digest::parse(&r.baseline_digest)?;
        if let Some(d) = &r.final_digest {
            Sha256Digest::parse(d)?;
        }
        glove_types::ids::check_id(&r.session_id)?;
        glove_types::ids::check_id(&r.alias)?;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StageRecord {
        StageRecord {
            schema: STAGE_SCHEMA.into(),
            session_id: "s-1".into(),
            alias: "workspace".into(),
            target: "/workspace".into(),
            source: Some("/home/u/proj".into()),
            source_identity: Some((1, 2)),
            bytes: 64 << 20,
            created_at_ms: 1,
            baseline_digest: Sha256Digest::of_domain("t", b"a").to_string(),
            state: StageState::Live,
            frozen_at_ms: None,
            final_digest: None,
            image_identity: (3, 4),
            applied_by: None,
        }
    }

    #[test]
    fn round_trips_and_refuses_inconsistent_records() {
        let r = sample();
        assert_eq!(StageRecord::decode(&r.encode()).ok(), Some(r.clone()));
        let mut frozen = r.clone();
        frozen.state = StageState::Frozen;
        assert_eq!(
            StageRecord::decode(&frozen.encode())
                .err()
                .map(|e| e.code()),
            Some(RETAINED_STAGE_INVALID)
        );
        let mut text = String::from_utf8(r.encode()).unwrap_or_default();
        text = text.replacen('{', "{\"extra\":1,", 1);
        assert!(StageRecord::decode(text.as_bytes()).is_err());
    }
}
