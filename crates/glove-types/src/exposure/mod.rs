//! Dynamic path exposures: the owner's exposure policy, the leases the
//! exposure journal records, and what a catalog may show of them.
//!
//! * this module — [`ExposurePolicy`], the protected file that names the
//!   owner-approved roots (each with its allowed exact mode tuples and
//!   longest lifetime) and the runtime templates that may use exposures,
//!   decoded strictly into a validated value; and [`starter`], the
//!   canonical policy `glove setup --path-root` writes;
//! * [`lease`] — a lease's modes, state and redacted catalog entry, the
//!   exposure journal's two record schemas (created, revoked) with their
//!   strict canonical decoders, and the scope digest.
//!
//! The field reference is `docs/operations.md` ("Path exposures").
//! Nothing here does I/O: opening a project beneath its root is
//! `glove-control`'s.

pub mod lease;

use crate::canon::{self, Form};
use crate::codes::exposure::*;
use crate::ids::{ExposureRootId, RuntimeTemplateId};
use crate::paths::{check_canonical, overlaps, RESTRICTED_HOST_ROOTS};
use crate::policy::{Access, Materialization};
use crate::Rejection;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

pub use lease::{ExposureMode, LeaseState};

/// The exposure policy's schema version.
pub const EXPOSURE_POLICY_SCHEMA_VERSION: u64 = 1;
/// Largest exposure policy file, in bytes (the protected-file bound).
pub const MAX_EXPOSURE_POLICY_BYTES: usize = 1 << 20;
/// Most roots in one policy.
pub const MAX_ROOTS: usize = 64;
/// Most runtime templates one policy names.
pub const MAX_RUNTIME_TEMPLATES: usize = 64;
/// Longest lifetime a root may allow: 90 days.
pub const MAX_TTL_SECS: u64 = 90 * 24 * 3600;
/// Largest byte quota of one mode: 64 GiB.
pub const MAX_MODE_BYTES: u64 = 64 << 30;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    schema_version: u64,
    roots: Vec<RawRoot>,
    runtime_templates: Vec<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoot {
    root_id: String,
    path: String,
    max_ttl_secs: u64,
    modes: Vec<RawMode>,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMode {
    pub(crate) access: String,
    pub(crate) materialization: String,
    pub(crate) max_bytes: u64,
}

/// One owner-approved root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExposureRoot {
    id: ExposureRootId,
    path: String,
    max_ttl_secs: u64,
    modes: Vec<ExposureMode>,
}

impl ExposureRoot {
    /// The root's id (local only).
    pub fn id(&self) -> &ExposureRootId {
        &self.id
    }
    /// The root directory (canonical, absolute; local only).
    pub fn path(&self) -> &str {
        &self.path
    }
    /// The longest lifetime a lease beneath it may have.
    pub fn max_ttl_secs(&self) -> u64 {
        self.max_ttl_secs
    }
    /// The allowed mode tuples, one per access, sorted by access.
    pub fn modes(&self) -> &[ExposureMode] {
        &self.modes
    }
}

/// A validated exposure policy: only [`ExposurePolicy::decode`] makes one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExposurePolicy {
    roots: Vec<ExposureRoot>,
    runtime_templates: Vec<RuntimeTemplateId>,
}

fn invalid(code: crate::ErrorCode, at: impl AsRef<str>, msg: impl Into<String>) -> Rejection {
    Rejection::new(code, msg).at(at)
}

/// Sorted, unique and bounded, by `key`.
fn sorted<T, K: Ord>(
    items: &[T],
    max: usize,
    at: &str,
    key: impl Fn(&T) -> K,
) -> Result<(), Rejection> {
    if items.len() > max {
        return Err(invalid(
            EXPOSURE_POLICY_NOT_CANONICAL,
            at,
            format!("at most {max} entries"),
        ));
    }
    for (i, w) in items.windows(2).enumerate() {
        if key(&w[0]) >= key(&w[1]) {
            return Err(invalid(
                EXPOSURE_POLICY_NOT_CANONICAL,
                format!("{at}[{}]", i + 1),
                "entries must be sorted and appear once",
            ));
        }
    }
    Ok(())
}

impl ExposurePolicy {
    /// Decodes a policy: strict JSON (no unknown or repeated field at any
    /// depth, no float, at most [`MAX_EXPOSURE_POLICY_BYTES`]), schema
    /// version 1, 1 to [`MAX_ROOTS`] roots sorted by id whose paths are
    /// canonical, absolute, outside the restricted host directories and
    /// pairwise disjoint, each with 1 to 3 modes sorted by access (read_only
    /// or ephemeral_write, materialization `copy`, a quota of 1 byte to
    /// [`MAX_MODE_BYTES`]) and a lifetime of 1 second to [`MAX_TTL_SECS`];
    /// runtime templates sorted, unique, at most [`MAX_RUNTIME_TEMPLATES`].
    pub fn decode(bytes: &[u8]) -> Result<ExposurePolicy, Rejection> {
        let raw: RawPolicy = canon::decode(bytes, MAX_EXPOSURE_POLICY_BYTES, Form::Strict)?;
        if raw.schema_version != EXPOSURE_POLICY_SCHEMA_VERSION {
            return Err(invalid(
                EXPOSURE_POLICY_INVALID,
                "schema_version",
                format!("schema_version {} is not 1", raw.schema_version),
            ));
        }
        if raw.roots.is_empty() {
            return Err(invalid(
                EXPOSURE_POLICY_INVALID,
                "roots",
                "at least one root",
            ));
        }
        sorted(&raw.roots, MAX_ROOTS, "roots", |r| r.root_id.clone())?;
        sorted(
            &raw.runtime_templates,
            MAX_RUNTIME_TEMPLATES,
            "runtime_templates",
            Clone::clone,
        )?;
        let mut roots: Vec<ExposureRoot> = Vec::with_capacity(raw.roots.len());
        for (i, r) in raw.roots.iter().enumerate() {
            let at = format!("roots[{i}]");
            let id = ExposureRootId::new(r.root_id.clone())
                .map_err(|e| e.at(format!("{at}.root_id")))?;
            check_root_path(&r.path).map_err(|e| e.at(format!("{at}.path")))?;
            if let Some(other) = roots.iter().find(|o| overlaps(&o.path, &r.path)) {
                return Err(invalid(
                    EXPOSURE_POLICY_ROOTS_OVERLAP,
                    format!("{at}.path"),
                    format!("root {} overlaps root {}", id, other.id),
                ));
            }
            if r.max_ttl_secs == 0 || r.max_ttl_secs > MAX_TTL_SECS {
                return Err(invalid(
                    EXPOSURE_POLICY_TTL_INVALID,
                    format!("{at}.max_ttl_secs"),
                    format!("max_ttl_secs must lie in 1..={MAX_TTL_SECS}"),
                ));
            }
            if r.modes.is_empty() {
                return Err(invalid(
                    EXPOSURE_POLICY_MODE_INVALID,
                    format!("{at}.modes"),
                    "at least one mode",
                ));
            }
            let mut modes = Vec::with_capacity(r.modes.len());
            for (k, m) in r.modes.iter().enumerate() {
                modes
                    .push(ExposureMode::from_raw(m).map_err(|e| e.at(format!("{at}.modes[{k}]")))?);
            }
            sorted(&modes, 3, &format!("{at}.modes"), |m| m.access)?;
            roots.push(ExposureRoot {
                id,
                path: r.path.clone(),
                max_ttl_secs: r.max_ttl_secs,
                modes,
            });
        }
        let runtime_templates = raw
            .runtime_templates
            .iter()
            .enumerate()
            .map(|(i, t)| {
                RuntimeTemplateId::new(t.clone())
                    .map_err(|e| e.at(format!("runtime_templates[{i}]")))
            })
            .collect::<Result<_, _>>()?;
        Ok(ExposurePolicy {
            roots,
            runtime_templates,
        })
    }

    /// The roots, sorted by id.
    pub fn roots(&self) -> &[ExposureRoot] {
        &self.roots
    }

    /// The root with this id.
    pub fn root(&self, id: &ExposureRootId) -> Option<&ExposureRoot> {
        self.roots.iter().find(|r| &r.id == id)
    }

    /// The runtime templates that may use exposures.
    pub fn runtime_templates(&self) -> &[RuntimeTemplateId] {
        &self.runtime_templates
    }

    /// The root `project` (canonical, absolute) lies beneath, with the
    /// relative path below it; `Ok(None)` when it lies beneath no root;
    /// refused when it is a root itself.
    pub fn locate<'a>(
        &'a self,
        project: &str,
    ) -> Result<Option<(&'a ExposureRoot, String)>, Rejection> {
        for r in &self.roots {
            if project == r.path {
                return Err(Rejection::new(
                    EXPOSURE_PATH_IS_ROOT,
                    format!("the project is the exposure root {} itself", r.id),
                ));
            }
            if crate::paths::is_within(project, &r.path) {
                let rel = project
                    .get(r.path.len() + 1..)
                    .unwrap_or_default()
                    .to_owned();
                return Ok(Some((r, rel)));
            }
        }
        Ok(None)
    }

    /// The policy's canonical bytes.
    pub fn canonical_bytes(&self) -> Result<Vec<u8>, Rejection> {
        let raw = RawPolicy {
            schema_version: EXPOSURE_POLICY_SCHEMA_VERSION,
            roots: self
                .roots
                .iter()
                .map(|r| RawRoot {
                    root_id: r.id.as_str().to_owned(),
                    path: r.path.clone(),
                    max_ttl_secs: r.max_ttl_secs,
                    modes: r.modes.iter().map(|m| m.to_raw()).collect(),
                })
                .collect(),
            runtime_templates: self
                .runtime_templates
                .iter()
                .map(|t| t.as_str().to_owned())
                .collect(),
        };
        canon::encode(&raw)
    }
}

fn check_root_path(p: &str) -> Result<(), Rejection> {
    check_canonical(p)
        .map_err(|r| Rejection::new(EXPOSURE_POLICY_ROOT_INVALID, r.message().to_owned()))?;
    if RESTRICTED_HOST_ROOTS
        .iter()
        .any(|r| crate::paths::is_within(p, r) || crate::paths::is_within(r, p))
    {
        return Err(Rejection::new(
            EXPOSURE_POLICY_ROOT_INVALID,
            "a root may not be, hold or lie in /boot, /dev, /etc, /proc, /run or /sys",
        ));
    }
    Ok(())
}

/// What [`starter`] gives each root: its modes and longest lifetime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StarterRoot {
    /// The allowed modes (sorted by access, one per access).
    pub modes: Vec<ExposureMode>,
    /// The longest lifetime of a lease beneath the root.
    pub max_ttl_secs: u64,
}

/// Byte quota of the starter's modes: 1 GiB.
pub const STARTER_MODE_BYTES: u64 = 1 << 30;
/// Longest lifetime the starter allows: 30 days.
pub const STARTER_TTL_SECS: u64 = 30 * 24 * 3600;

impl Default for StarterRoot {
    /// A read-only copy, an ephemeral writable copy and a retained one
    /// (kept for `glove diff` and `glove apply`), 1 GiB each, for at most
    /// 30 days.
    fn default() -> Self {
        StarterRoot {
            modes: vec![
                ExposureMode::new(Access::ReadOnly, Materialization::Copy, STARTER_MODE_BYTES),
                ExposureMode::new(
                    Access::EphemeralWrite,
                    Materialization::Copy,
                    STARTER_MODE_BYTES,
                ),
                ExposureMode::new(
                    Access::RetainedWrite,
                    Materialization::Copy,
                    STARTER_MODE_BYTES,
                ),
            ],
            max_ttl_secs: STARTER_TTL_SECS,
        }
    }
}

/// The canonical bytes of a starter exposure policy (what `glove setup
/// --path-root DIR` writes): one root per `(path, settings)`, its id the
/// path's last component made an identifier (`root`, then `-2`, `-3`… on
/// a repeat), and `runtime_templates` as given (sorted here). Each path
/// must already be canonical and absolute (the caller resolves it); the
/// result is decoded again, so every rule of [`ExposurePolicy::decode`]
/// holds for it.
pub fn starter(
    roots: &[(PathBuf, StarterRoot)],
    runtime_templates: &[RuntimeTemplateId],
) -> Result<Vec<u8>, Rejection> {
    let mut raw_roots: Vec<RawRoot> = Vec::new();
    for (i, (path, settings)) in roots.iter().enumerate() {
        let Some(p) = path.to_str() else {
            return Err(invalid(
                EXPOSURE_POLICY_ROOT_INVALID,
                format!("roots[{i}].path"),
                "a root path must be UTF-8",
            ));
        };
        let base = root_id_base(p);
        let mut id = base.clone();
        let mut n = 2u32;
        while raw_roots.iter().any(|r| r.root_id == id) {
            id = format!("{}-{n}", base.get(..58).unwrap_or(&base));
            n += 1;
        }
        raw_roots.push(RawRoot {
            root_id: id,
            path: p.to_owned(),
            max_ttl_secs: settings.max_ttl_secs,
            modes: settings.modes.iter().map(|m| m.to_raw()).collect(),
        });
    }
    raw_roots.sort_by(|a, b| a.root_id.cmp(&b.root_id));
    let mut templates: Vec<String> = runtime_templates
        .iter()
        .map(|t| t.as_str().to_owned())
        .collect();
    templates.sort();
    templates.dedup();
    let raw = RawPolicy {
        schema_version: EXPOSURE_POLICY_SCHEMA_VERSION,
        roots: raw_roots,
        runtime_templates: templates,
    };
    let bytes = canon::encode(&raw)?;
    ExposurePolicy::decode(&bytes)?;
    Ok(bytes)
}

/// The last component of `p` as an identifier (`root` when nothing is left).
fn root_id_base(p: &str) -> String {
    let last = p.rsplit('/').next().unwrap_or_default();
    let mut s: String = last
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .skip_while(|c| !c.is_ascii_alphanumeric())
        .take(48)
        .collect();
    if s.is_empty() {
        s = "root".into();
    }
    s
}

#[cfg(test)]
mod tests;
