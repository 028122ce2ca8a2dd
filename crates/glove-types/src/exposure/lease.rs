//! Leases and the exposure journal's records.
//!
//! A lease is one generation of one project's exposure. The journal holds
//! two record kinds, each a canonical JSON object of exactly these members
//! (decoded strictly: canonical bytes only, no unknown or missing field,
//! at most [`MAX_RECORD_BYTES`]):
//!
//! * **created** — `exposure_id`, `generation` (1, 2, …), `scope_digest`,
//!   `scope_nonce` (32 hex), `label`, `modes` (1 to 3, sorted by access),
//!   `created_at_ms`, `expires_at_ms` (after creation), `runtimes` (sorted,
//!   unique), and the local-only `root_id`, `relative_path` (beneath the
//!   root, canonical, never empty) and the source identity `dev`, `ino`;
//! * **revoked** — `exposure_id`, `generation`, `revoked_at_ms`.
//!
//! The scope digest binds a lease to what it exposes without showing it:
//!
//! ```text
//! scope_digest = SHA-256( "glove.exposure-scope.v1" || 0x00 || C )
//! ```
//!
//! where `C` is the canonical JSON of `{dev, exposure_id, generation, ino,
//! label, relative_path, root_id, scope_nonce}`. The random nonce keeps a
//! controller that sees the digest from testing guesses of the path. A
//! created record whose digest does not verify does not decode.
//!
//! A catalog entry ([`CatalogEntry`]) is the redacted view: id,
//! generation, scope digest, label, modes, expiry, runtimes and state —
//! never the root, the path or the source identity.

use super::RawMode;
use crate::canon::{self, Form};
use crate::codes::exposure::*;
use crate::digest::{to_hex, Sha256Digest};
use crate::ids::{ExposureId, ExposureLabel, ExposureRootId, RuntimeTemplateId};
use crate::policy::{Access, Materialization};
use crate::Rejection;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// Largest record payload, in bytes.
pub const MAX_RECORD_BYTES: usize = 8 * 1024;
/// Longest relative path, in bytes.
pub const MAX_RELATIVE_PATH: usize = 4096;
/// Domain of the scope digest.
pub const SCOPE_DOMAIN: &str = "glove.exposure-scope.v1";

/// One allowed way to use an exposure: access, materialization and byte
/// quota, exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ExposureMode {
    /// Access mode: `read_only`, `ephemeral_write` or `retained_write`.
    pub access: Access,
    /// Materialization: `copy` (the project is copied into a quota-sized
    /// file system of the sandbox).
    pub materialization: Materialization,
    /// The byte quota of the copy.
    pub max_bytes: u64,
}

impl ExposureMode {
    /// A mode (unchecked; [`ExposureMode::check`] says whether exposures
    /// support it).
    pub const fn new(access: Access, materialization: Materialization, max_bytes: u64) -> Self {
        ExposureMode {
            access,
            materialization,
            max_bytes,
        }
    }

    /// Whether exposures support this tuple: read-only, ephemeral or
    /// retained writable copies of 1 byte to [`super::MAX_MODE_BYTES`] (a
    /// retained copy is an image of at least 16 MiB, checked when it is
    /// made).
    pub fn check(&self) -> Result<(), Rejection> {
        let bad = |m: &str| Rejection::new(EXPOSURE_POLICY_MODE_INVALID, m.to_owned());
        match self.access {
            Access::ReadOnly | Access::EphemeralWrite | Access::RetainedWrite => {}
            Access::DirectWrite => {
                return Err(bad(
                    "an exposure's access is read_only, ephemeral_write or retained_write",
                ))
            }
        }
        if self.materialization != Materialization::Copy {
            return Err(bad("an exposure's materialization is copy"));
        }
        if self.max_bytes == 0 || self.max_bytes > super::MAX_MODE_BYTES {
            return Err(bad("max_bytes must lie in 1..=68719476736"));
        }
        Ok(())
    }

    pub(crate) fn from_raw(m: &RawMode) -> Result<Self, Rejection> {
        let access = Access::parse(&m.access).ok_or_else(|| {
            Rejection::new(
                EXPOSURE_POLICY_MODE_INVALID,
                format!("{:?} is not an access", m.access),
            )
            .at("access")
        })?;
        let materialization = Materialization::parse(&m.materialization).ok_or_else(|| {
            Rejection::new(
                EXPOSURE_POLICY_MODE_INVALID,
                format!("{:?} is not a materialization", m.materialization),
            )
            .at("materialization")
        })?;
        let mode = ExposureMode::new(access, materialization, m.max_bytes);
        mode.check()?;
        Ok(mode)
    }

    pub(crate) fn to_raw(self) -> RawMode {
        RawMode {
            access: self.access.as_str().to_owned(),
            materialization: self.materialization.as_str().to_owned(),
            max_bytes: self.max_bytes,
        }
    }

    /// The mode as JSON.
    pub fn to_json(self) -> Value {
        json!({"access": self.access.as_str(), "materialization": self.materialization.as_str(), "max_bytes": self.max_bytes})
    }
}

/// Where a lease stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LeaseState {
    /// Usable until its expiry.
    Live,
    /// Revoked by the owner (or replaced).
    Revoked,
    /// Past its expiry.
    Expired,
}

impl LeaseState {
    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            LeaseState::Live => "live",
            LeaseState::Revoked => "revoked",
            LeaseState::Expired => "expired",
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCreated {
    exposure_id: String,
    generation: u64,
    scope_digest: String,
    scope_nonce: String,
    label: String,
    modes: Vec<RawMode>,
    created_at_ms: u64,
    expires_at_ms: u64,
    runtimes: Vec<String>,
    root_id: String,
    relative_path: String,
    dev: u64,
    ino: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRevoked {
    exposure_id: String,
    generation: u64,
    revoked_at_ms: u64,
}

/// A **created** record: one lease as it was granted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreatedRecord {
    /// The exposure id (stable across a project's generations).
    pub exposure_id: ExposureId,
    /// The generation, from 1.
    pub generation: u64,
    /// The scope digest (see the module docs).
    pub scope_digest: Sha256Digest,
    /// The nonce bound into the scope digest.
    pub scope_nonce: [u8; 16],
    /// The label (the catalog name and the sandbox destination).
    pub label: ExposureLabel,
    /// The allowed modes, sorted by access.
    pub modes: Vec<ExposureMode>,
    /// When it was granted (Unix ms).
    pub created_at_ms: u64,
    /// When it expires (Unix ms).
    pub expires_at_ms: u64,
    /// The runtime templates that may use it, sorted.
    pub runtimes: Vec<RuntimeTemplateId>,
    /// The root it lies beneath (local only).
    pub root_id: ExposureRootId,
    /// Its path beneath the root (local only).
    pub relative_path: String,
    /// The project directory's device (local only).
    pub dev: u64,
    /// The project directory's inode (local only).
    pub ino: u64,
}

/// A **revoked** record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RevokedRecord {
    /// The exposure id.
    pub exposure_id: ExposureId,
    /// The generation revoked.
    pub generation: u64,
    /// When (Unix ms).
    pub revoked_at_ms: u64,
}

fn bad(msg: impl Into<String>) -> Rejection {
    Rejection::new(EXPOSURE_RECORD_INVALID, msg)
}

/// Checks a path relative to a root: non-empty, no leading or trailing
/// `/`, no empty, `.` or `..` component, no NUL, at most
/// [`MAX_RELATIVE_PATH`] bytes.
pub fn check_relative(p: &str) -> Result<(), Rejection> {
    let ok = !p.is_empty()
        && p.len() <= MAX_RELATIVE_PATH
        && !p.contains('\0')
        && p.split('/').all(|c| !matches!(c, "" | "." | ".."));
    if ok {
        Ok(())
    } else {
        Err(Rejection::new(
            EXPOSURE_PATH_INVALID,
            "a path beneath a root must be non-empty, without empty, '.' or '..' components",
        ))
    }
}

fn parse_nonce(s: &str) -> Option<[u8; 16]> {
    if s.len() != 32
        || !s
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// The inputs of a scope digest.
#[derive(Clone, Copy, Debug)]
pub struct Scope<'a> {
    /// The exposure id.
    pub exposure_id: &'a ExposureId,
    /// The generation.
    pub generation: u64,
    /// The label.
    pub label: &'a ExposureLabel,
    /// The root id.
    pub root_id: &'a ExposureRootId,
    /// The relative path.
    pub relative_path: &'a str,
    /// Device and inode of the project.
    pub identity: (u64, u64),
    /// The random nonce.
    pub nonce: &'a [u8; 16],
}

/// The scope digest (see the module docs).
pub fn scope_digest(s: &Scope<'_>) -> Result<Sha256Digest, Rejection> {
    let c = canon::to_canonical(&json!({
        "dev": s.identity.0,
        "exposure_id": s.exposure_id.as_str(),
        "generation": s.generation,
        "ino": s.identity.1,
        "label": s.label.as_str(),
        "relative_path": s.relative_path,
        "root_id": s.root_id.as_str(),
        "scope_nonce": to_hex(s.nonce),
    }))?;
    Ok(Sha256Digest::of_domain(SCOPE_DOMAIN, &c))
}

impl CreatedRecord {
    /// The scope this record binds.
    pub fn scope(&self) -> Scope<'_> {
        Scope {
            exposure_id: &self.exposure_id,
            generation: self.generation,
            label: &self.label,
            root_id: &self.root_id,
            relative_path: &self.relative_path,
            identity: (self.dev, self.ino),
            nonce: &self.scope_nonce,
        }
    }

    /// Checks every rule of a created record (the decoder's, for one built
    /// in memory).
    pub fn check(&self) -> Result<(), Rejection> {
        if self.generation == 0 {
            return Err(bad("generation starts at 1").at("generation"));
        }
        if self.expires_at_ms <= self.created_at_ms {
            return Err(bad("expires_at_ms must follow created_at_ms").at("expires_at_ms"));
        }
        if self.modes.is_empty() || self.modes.len() > 3 {
            return Err(bad("1 to 3 modes").at("modes"));
        }
        for m in &self.modes {
            m.check()
                .map_err(|r| bad(r.message().to_owned()).at("modes"))?;
        }
        if self.modes.windows(2).any(|w| w[0].access >= w[1].access) {
            return Err(bad("modes must be sorted by access and unique").at("modes"));
        }
        if self.runtimes.len() > super::MAX_RUNTIME_TEMPLATES
            || self.runtimes.windows(2).any(|w| w[0] >= w[1])
        {
            return Err(bad("runtimes must be sorted, unique and bounded").at("runtimes"));
        }
        check_relative(&self.relative_path)
            .map_err(|r| bad(r.message().to_owned()).at("relative_path"))?;
        if scope_digest(&self.scope())? != self.scope_digest {
            return Err(bad("the scope digest does not verify").at("scope_digest"));
        }
        Ok(())
    }

    /// Decodes a created record (see the module docs).
    pub fn decode(bytes: &[u8]) -> Result<CreatedRecord, Rejection> {
        let r: RawCreated = canon::decode(bytes, MAX_RECORD_BYTES, Form::Canonical)
            .map_err(|e| bad(e.message().to_owned()).at(e.location()))?;
        let id = |s: &str, at: &str| bad(format!("{s:?} is not an identifier")).at(at);
        let rec = CreatedRecord {
            exposure_id: ExposureId::new(r.exposure_id.clone())
                .map_err(|_| id(&r.exposure_id, "exposure_id"))?,
            generation: r.generation,
            scope_digest: Sha256Digest::parse(&r.scope_digest)
                .map_err(|_| bad("not a digest").at("scope_digest"))?,
            scope_nonce: parse_nonce(&r.scope_nonce)
                .ok_or_else(|| bad("not 32 hex").at("scope_nonce"))?,
            label: ExposureLabel::new(r.label.clone()).map_err(|_| id(&r.label, "label"))?,
            modes: r
                .modes
                .iter()
                .map(|m| {
                    ExposureMode::from_raw(m).map_err(|e| bad(e.message().to_owned()).at("modes"))
                })
                .collect::<Result<_, _>>()?,
            created_at_ms: r.created_at_ms,
            expires_at_ms: r.expires_at_ms,
            runtimes: r
                .runtimes
                .iter()
                .map(|t| RuntimeTemplateId::new(t.clone()).map_err(|_| id(t, "runtimes")))
                .collect::<Result<_, _>>()?,
            root_id: ExposureRootId::new(r.root_id.clone())
                .map_err(|_| id(&r.root_id, "root_id"))?,
            relative_path: r.relative_path,
            dev: r.dev,
            ino: r.ino,
        };
        rec.check()?;
        Ok(rec)
    }

    /// The record's canonical bytes.
    pub fn encode(&self) -> Result<Vec<u8>, Rejection> {
        canon::encode(&RawCreated {
            exposure_id: self.exposure_id.as_str().to_owned(),
            generation: self.generation,
            scope_digest: self.scope_digest.to_hex(),
            scope_nonce: to_hex(&self.scope_nonce),
            label: self.label.as_str().to_owned(),
            modes: self.modes.iter().map(|m| m.to_raw()).collect(),
            created_at_ms: self.created_at_ms,
            expires_at_ms: self.expires_at_ms,
            runtimes: self
                .runtimes
                .iter()
                .map(|t| t.as_str().to_owned())
                .collect(),
            root_id: self.root_id.as_str().to_owned(),
            relative_path: self.relative_path.clone(),
            dev: self.dev,
            ino: self.ino,
        })
    }

    /// The mode for `access`, if the lease allows it.
    pub fn mode(&self, access: Access) -> Option<&ExposureMode> {
        self.modes.iter().find(|m| m.access == access)
    }
}

impl RevokedRecord {
    /// Decodes a revoked record.
    pub fn decode(bytes: &[u8]) -> Result<RevokedRecord, Rejection> {
        let r: RawRevoked = canon::decode(bytes, MAX_RECORD_BYTES, Form::Canonical)
            .map_err(|e| bad(e.message().to_owned()).at(e.location()))?;
        if r.generation == 0 {
            return Err(bad("generation starts at 1").at("generation"));
        }
        Ok(RevokedRecord {
            exposure_id: ExposureId::new(r.exposure_id)
                .map_err(|_| bad("not an identifier").at("exposure_id"))?,
            generation: r.generation,
            revoked_at_ms: r.revoked_at_ms,
        })
    }

    /// The record's canonical bytes.
    pub fn encode(&self) -> Result<Vec<u8>, Rejection> {
        canon::encode(&RawRevoked {
            exposure_id: self.exposure_id.as_str().to_owned(),
            generation: self.generation,
            revoked_at_ms: self.revoked_at_ms,
        })
    }
}

/// What a catalog shows of one lease: nothing local.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogEntry {
    /// The exposure id.
    pub exposure_id: ExposureId,
    /// The generation.
    pub generation: u64,
    /// The scope digest.
    pub scope_digest: Sha256Digest,
    /// The label.
    pub label: ExposureLabel,
    /// The allowed modes.
    pub modes: Vec<ExposureMode>,
    /// Expiry (Unix ms).
    pub expires_at_ms: u64,
    /// The runtime templates that may use it.
    pub runtimes: Vec<RuntimeTemplateId>,
    /// Its state now.
    pub state: LeaseState,
}

impl CatalogEntry {
    /// The redacted view of a created record in `state`.
    pub fn of(rec: &CreatedRecord, state: LeaseState) -> CatalogEntry {
        CatalogEntry {
            exposure_id: rec.exposure_id.clone(),
            generation: rec.generation,
            scope_digest: rec.scope_digest,
            label: rec.label.clone(),
            modes: rec.modes.clone(),
            expires_at_ms: rec.expires_at_ms,
            runtimes: rec.runtimes.clone(),
            state,
        }
    }

    /// The entry as JSON (exactly the redacted members).
    pub fn to_json(&self) -> Value {
        json!({
            "exposure_id": self.exposure_id.as_str(),
            "generation": self.generation,
            "scope_digest": self.scope_digest.to_hex(),
            "label": self.label.as_str(),
            "modes": self.modes.iter().map(|m| m.to_json()).collect::<Vec<_>>(),
            "expires_at_ms": self.expires_at_ms,
            "runtimes": self.runtimes.iter().map(|t| t.as_str()).collect::<Vec<_>>(),
            "state": self.state.as_str(),
        })
    }
}
