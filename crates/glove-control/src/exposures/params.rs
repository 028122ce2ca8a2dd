//! The parameters of `exposure_create` and `exposure_revoke`, decoded
//! strictly (unknown members refused) by the service's params decoder.

use glove_types::codes::exposure::{EXPOSURE_MODE_NOT_ALLOWED, EXPOSURE_RUNTIME_INVALID};
use glove_types::exposure::ExposureMode;
use glove_types::ids::RuntimeTemplateId;
use glove_types::policy::Access;
use glove_types::Rejection;
use serde::Deserialize;

/// Most entries in `modes` or `runtimes`.
pub const MAX_PARAM_ENTRIES: usize = 64;

/// `exposure_create`'s parameters.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CreateParams {
    /// The project: a canonical absolute path (the client made it so).
    pub path: String,
    /// The label (default: the project's last component as an identifier).
    #[serde(default)]
    pub label: Option<String>,
    /// Lifetime in seconds (default: the root's maximum).
    #[serde(default)]
    pub ttl_secs: Option<u64>,
    /// Access modes to allow, a subset of the root's (default: all).
    #[serde(default)]
    pub modes: Option<Vec<String>>,
    /// Runtime templates to allow, a subset of the policy's (default: all).
    #[serde(default)]
    pub runtimes: Option<Vec<String>>,
    /// Revoke a live lease of the project and grant the next generation,
    /// in one batch.
    #[serde(default)]
    pub replace: Option<bool>,
}

/// `exposure_revoke`'s parameters.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RevokeParams {
    /// The exposure.
    pub exposure_id: String,
    /// When given, the generation the caller means (must be the newest).
    #[serde(default)]
    pub generation: Option<u64>,
}

impl CreateParams {
    /// The modes asked for, each one of `allowed` (by access), sorted.
    pub fn modes(&self, allowed: &[ExposureMode]) -> Result<Vec<ExposureMode>, Rejection> {
        let Some(asked) = &self.modes else {
            return Ok(allowed.to_vec());
        };
        if asked.is_empty() || asked.len() > MAX_PARAM_ENTRIES {
            return Err(
                Rejection::new(EXPOSURE_MODE_NOT_ALLOWED, "ask for 1 to 3 modes").at("modes"),
            );
        }
        let mut out: Vec<ExposureMode> = Vec::new();
        for (i, a) in asked.iter().enumerate() {
            let m = Access::parse(a)
                .and_then(|acc| allowed.iter().find(|m| m.access == acc))
                .ok_or_else(|| {
                    Rejection::new(
                        EXPOSURE_MODE_NOT_ALLOWED,
                        format!("the root does not allow {a:?}"),
                    )
                    .at(format!("modes[{i}]"))
                })?;
            if !out.contains(m) {
                out.push(*m);
            }
        }
        out.sort_by_key(|m| m.access);
        Ok(out)
    }

    /// The runtime templates asked for, each one of `allowed`, sorted.
    pub fn runtimes(
        &self,
        allowed: &[RuntimeTemplateId],
    ) -> Result<Vec<RuntimeTemplateId>, Rejection> {
        let Some(asked) = &self.runtimes else {
            return Ok(allowed.to_vec());
        };
        if asked.len() > MAX_PARAM_ENTRIES {
            return Err(
                Rejection::new(EXPOSURE_RUNTIME_INVALID, "too many runtimes").at("runtimes"),
            );
        }
        let mut out = Vec::new();
        for (i, t) in asked.iter().enumerate() {
            let id =
                RuntimeTemplateId::new(t.clone()).map_err(|r| r.at(format!("runtimes[{i}]")))?;
            if !allowed.contains(&id) {
                return Err(Rejection::new(
                    EXPOSURE_RUNTIME_INVALID,
                    format!("the exposure policy does not allow template {id}"),
                )
                .at(format!("runtimes[{i}]")));
            }
            out.push(id);
        }
        out.sort();
        out.dedup();
        Ok(out)
    }
}
