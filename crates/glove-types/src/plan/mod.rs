//! The controller's plan, schema version 1, and its admission.
//!
//! A plan is identifier-only: no field can carry a host path, an executable,
//! an environment variable or a secret value. Plans must arrive as canonical
//! JSON ([`crate::canon`]); [`DecodedPlan::decode`] checks the structure and
//! [`admit`] matches it against a [`ValidatedPolicy`], yielding an
//! [`AdmittedPlan`] with the plan's three digests. [`new`] writes plans
//! for people: built from a policy, or canonicalized from a hand edit.

mod admission;
mod digests;
pub mod new;

pub use admission::admit;
pub(crate) use admission::check_destination;
pub(crate) use digests::shared_context;
pub use digests::{plan_context_digest, PLAN_CONTEXT_DOMAIN};

use crate::codes::json::JSON_INVALID_TYPE;
use crate::codes::plan::*;
use crate::digest::{Blake3Digest, Sha256Digest};
use crate::ids::{
    AliasId, ExposureId, IdempotencyKey, PolicyId, ProfileId, ProjectionId, RuntimeId,
    RuntimeTemplateId, SecretHandle, SessionId,
};
use crate::policy::{
    Access, CleanupPolicy, Materialization, ResourceLimits, SandboxBackend, ValidatedPolicy,
};
use crate::refinement::binding::RawBinding;
use crate::refinement::RefinementBinding;
use crate::{canon, Rejection};
use serde::{Deserialize, Serialize};

/// Largest plan accepted, in bytes.
pub const MAX_PLAN_BYTES: usize = 64 * 1024;
/// Most entries in any plan array.
pub const MAX_PLAN_ENTRIES: usize = 64;
/// Clock skew tolerated for `issued_at_ms` in the future, milliseconds.
pub const MAX_CLOCK_SKEW_MS: u64 = 30_000;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RawPlan {
    schema_version: u64,
    session_id: String,
    idempotency_key: String,
    policy_revision: u64,
    issued_at_ms: u64,
    expires_at_ms: u64,
    runtime_template_id: String,
    runtime_id: String,
    adapter_command_digest: String,
    sandbox_backend: String,
    resource_profile: RawLimits,
    egress_policy_ids: Vec<String>,
    tool_policy_ids: Vec<String>,
    secret_handles: Vec<String>,
    path_grants: Vec<RawGrant>,
    library_projections: Vec<RawProjection>,
    /// Absent when the plan names no exposure (never an empty array), so
    /// every plan without one keeps its bytes and digests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path_exposures: Option<Vec<RawExposure>>,
    /// Absent unless the plan is for an evaluation template
    /// (`refinement-eval-v1`), so every other plan keeps its bytes and
    /// digests.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    refinement: Option<RawBinding>,
}

/// An optional member that, when given, is a value: `null` is refused
/// (`json_invalid_type`) rather than read as absent, which would give one
/// plan two encodings.
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RawExposure {
    exposure_id: String,
    generation: u64,
    access: String,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    profile_id: String,
    cpu_time_ms: u64,
    memory_bytes: u64,
    pids: u64,
    wall_time_ms: u64,
    disk_bytes: u64,
    terminal_output_bytes: u64,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RawGrant {
    alias: String,
    access: String,
    materialization: String,
    cleanup_policy: String,
    ttl_secs: u64,
    max_bytes: u64,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProjection {
    projection_id: String,
    sha256: String,
    destination_alias: String,
}

impl RawProjection {
    /// The typed projection; locations are prefixed with `at`.
    pub(crate) fn decode(&self, at: &str) -> Result<LibraryProjection, Rejection> {
        Ok(LibraryProjection {
            projection_id: ProjectionId::new(self.projection_id.clone())
                .map_err(|e| e.at(format!("{at}.projection_id")))?,
            sha256: Sha256Digest::parse(&self.sha256).map_err(|e| e.at(format!("{at}.sha256")))?,
            destination_alias: AliasId::new(self.destination_alias.clone())
                .map_err(|e| e.at(format!("{at}.destination_alias")))?,
        })
    }
}

/// A path grant requested by a plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PathGrant {
    /// The policy's path alias.
    pub alias: AliasId,
    /// Requested access mode.
    pub access: Access,
    /// Requested materialization.
    pub materialization: Materialization,
    /// Requested cleanup policy.
    pub cleanup_policy: CleanupPolicy,
    /// Grant lifetime, seconds.
    pub ttl_secs: u64,
    /// Byte quota.
    pub max_bytes: u64,
}

/// A path exposure requested by a plan: a lease of the service's exposure
/// journal named by id and generation, and the access the session wants
/// (one of the lease's modes; its materialization and quota come from
/// the lease).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlanExposure {
    /// The exposure id.
    pub exposure_id: ExposureId,
    /// The generation the plan was written for (must be the newest).
    pub generation: u64,
    /// The access mode asked for.
    pub access: Access,
}

/// A library projection requested by a plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LibraryProjection {
    /// Projection id.
    pub projection_id: ProjectionId,
    /// SHA-256 of the bundle file.
    pub sha256: Sha256Digest,
    /// The policy's projection destination alias.
    pub destination_alias: AliasId,
}

/// A structurally valid plan (canonical bytes, valid ids, digests and enum
/// values, sorted unique arrays) that has not been matched to a policy yet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DecodedPlan {
    #[serde(skip)]
    pub(crate) canonical: Vec<u8>,
    pub(crate) schema_version: u64,
    pub(crate) session_id: SessionId,
    pub(crate) idempotency_key: IdempotencyKey,
    pub(crate) policy_revision: u64,
    pub(crate) issued_at_ms: u64,
    pub(crate) expires_at_ms: u64,
    pub(crate) runtime_template_id: RuntimeTemplateId,
    pub(crate) runtime_id: RuntimeId,
    pub(crate) adapter_command_digest: Sha256Digest,
    pub(crate) sandbox_backend: SandboxBackend,
    pub(crate) profile_id: ProfileId,
    pub(crate) limits: ResourceLimits,
    pub(crate) egress_policy_ids: Vec<PolicyId>,
    pub(crate) tool_policy_ids: Vec<PolicyId>,
    pub(crate) secret_handles: Vec<SecretHandle>,
    pub(crate) path_grants: Vec<PathGrant>,
    pub(crate) library_projections: Vec<LibraryProjection>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) path_exposures: Vec<PlanExposure>,
    /// The `refinement` binding of a plan for an evaluation template.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) refinement: Option<RefinementBinding>,
}

fn sorted_unique<T, K: Ord>(
    items: &[T],
    field: &str,
    key: impl Fn(&T) -> K,
) -> Result<(), Rejection> {
    if items.len() > MAX_PLAN_ENTRIES {
        return Err(
            Rejection::new(PLAN_TOO_MANY, format!("at most {MAX_PLAN_ENTRIES} entries")).at(field),
        );
    }
    for (i, w) in items.windows(2).enumerate() {
        let (a, b) = (key(&w[0]), key(&w[1]));
        if a == b {
            return Err(Rejection::new(PLAN_ARRAY_DUPLICATE, "entry appears twice")
                .at(format!("{field}[{}]", i + 1)));
        }
        if a > b {
            return Err(
                Rejection::new(PLAN_ARRAY_NOT_CANONICAL, "entries must be sorted")
                    .at(format!("{field}[{}]", i + 1)),
            );
        }
    }
    Ok(())
}

fn id_list<T>(
    items: &[String],
    field: &str,
    make: impl Fn(String) -> Result<T, Rejection>,
) -> Result<Vec<T>, Rejection> {
    sorted_unique(items, field, |s| s.clone())?;
    items
        .iter()
        .enumerate()
        .map(|(i, s)| make(s.clone()).map_err(|e| e.at(format!("{field}[{i}]"))))
        .collect()
}

fn wire<T>(v: &str, field: &str, parse: impl Fn(&str) -> Option<T>) -> Result<T, Rejection> {
    parse(v).ok_or_else(|| {
        Rejection::new(
            JSON_INVALID_TYPE,
            format!("{v:?} is not a defined {field} value"),
        )
        .at(field)
    })
}

/// Most exposures one plan (and so one sandbox) may name.
pub const MAX_PLAN_EXPOSURES: usize = 16;

/// The `path_exposures` array: absent, or 1 to [`MAX_PLAN_EXPOSURES`]
/// entries sorted by exposure id without repeats (an empty array is not
/// canonical: it is omitted instead), generations from 1, access
/// `read_only` or `ephemeral_write`.
fn decode_exposures(raw: Option<&[RawExposure]>) -> Result<Vec<PlanExposure>, Rejection> {
    let Some(raw) = raw else {
        return Ok(Vec::new());
    };
    if raw.is_empty() {
        return Err(Rejection::new(
            PLAN_ARRAY_NOT_CANONICAL,
            "an empty path_exposures is omitted, never written",
        )
        .at("path_exposures"));
    }
    if raw.len() > MAX_PLAN_EXPOSURES {
        return Err(Rejection::new(
            PLAN_TOO_MANY,
            format!("at most {MAX_PLAN_EXPOSURES} exposures"),
        )
        .at("path_exposures"));
    }
    sorted_unique(raw, "path_exposures", |e| e.exposure_id.clone())?;
    raw.iter()
        .enumerate()
        .map(|(i, e)| {
            let at = format!("path_exposures[{i}]");
            let access = wire(&e.access, "access", Access::parse).map_err(|r| r.at(&at))?;
            if access == Access::DirectWrite {
                return Err(Rejection::new(
                    crate::codes::exposure::EXPOSURE_ACCESS_NOT_ALLOWED,
                    "an exposure is used read_only, ephemeral_write or retained_write",
                )
                .at(format!("{at}.access")));
            }
            if e.generation == 0 {
                return Err(Rejection::new(
                    crate::codes::exposure::EXPOSURE_GENERATION_STALE,
                    "generations start at 1",
                )
                .at(format!("{at}.generation")));
            }
            Ok(PlanExposure {
                exposure_id: ExposureId::new(e.exposure_id.clone())
                    .map_err(|r| r.at(format!("{at}.exposure_id")))?,
                generation: e.generation,
                access,
            })
        })
        .collect()
}

impl DecodedPlan {
    /// Decodes a plan that must be canonical JSON of at most
    /// [`MAX_PLAN_BYTES`].
    pub fn decode(bytes: &[u8]) -> Result<Self, Rejection> {
        let raw: RawPlan = canon::decode(bytes, MAX_PLAN_BYTES, canon::Form::Canonical)?;
        if raw.schema_version != 1 {
            return Err(Rejection::new(
                PLAN_SCHEMA_VERSION,
                format!(
                    "schema_version {} is not supported; expected 1",
                    raw.schema_version
                ),
            )
            .at("schema_version"));
        }
        let rp = &raw.resource_profile;
        let mut path_grants = Vec::with_capacity(raw.path_grants.len());
        sorted_unique(&raw.path_grants, "path_grants", |g| g.alias.clone())?;
        for (i, g) in raw.path_grants.iter().enumerate() {
            let at = format!("path_grants[{i}]");
            path_grants.push(PathGrant {
                alias: AliasId::new(g.alias.clone()).map_err(|e| e.at(format!("{at}.alias")))?,
                access: wire(&g.access, "access", Access::parse).map_err(|e| e.at(&at))?,
                materialization: wire(
                    &g.materialization,
                    "materialization",
                    Materialization::parse,
                )
                .map_err(|e| e.at(&at))?,
                cleanup_policy: wire(&g.cleanup_policy, "cleanup_policy", CleanupPolicy::parse)
                    .map_err(|e| e.at(&at))?,
                ttl_secs: g.ttl_secs,
                max_bytes: g.max_bytes,
            });
        }
        sorted_unique(&raw.library_projections, "library_projections", |p| {
            p.projection_id.clone()
        })?;
        let mut library_projections = Vec::with_capacity(raw.library_projections.len());
        for (i, p) in raw.library_projections.iter().enumerate() {
            library_projections.push(p.decode(&format!("library_projections[{i}]"))?);
        }
        let path_exposures = decode_exposures(raw.path_exposures.as_deref())?;
        let refinement = match &raw.refinement {
            Some(b) => Some(b.decode().map_err(|e| e.at("refinement"))?),
            None => None,
        };
        Ok(DecodedPlan {
            path_exposures,
            refinement,
            canonical: bytes.to_vec(),
            schema_version: raw.schema_version,
            session_id: SessionId::new(raw.session_id.clone()).map_err(|e| e.at("session_id"))?,
            idempotency_key: IdempotencyKey::new(raw.idempotency_key.clone())
                .map_err(|e| e.at("idempotency_key"))?,
            policy_revision: raw.policy_revision,
            issued_at_ms: raw.issued_at_ms,
            expires_at_ms: raw.expires_at_ms,
            runtime_template_id: RuntimeTemplateId::new(raw.runtime_template_id.clone())
                .map_err(|e| e.at("runtime_template_id"))?,
            runtime_id: RuntimeId::new(raw.runtime_id.clone()).map_err(|e| e.at("runtime_id"))?,
            adapter_command_digest: Sha256Digest::parse(&raw.adapter_command_digest)
                .map_err(|e| e.at("adapter_command_digest"))?,
            sandbox_backend: wire(
                &raw.sandbox_backend,
                "sandbox_backend",
                SandboxBackend::parse,
            )?,
            profile_id: ProfileId::new(rp.profile_id.clone())
                .map_err(|e| e.at("resource_profile.profile_id"))?,
            limits: ResourceLimits {
                cpu_time_ms: rp.cpu_time_ms,
                memory_bytes: rp.memory_bytes,
                pids: rp.pids,
                wall_time_ms: rp.wall_time_ms,
                disk_bytes: rp.disk_bytes,
                terminal_output_bytes: rp.terminal_output_bytes,
            },
            egress_policy_ids: id_list(&raw.egress_policy_ids, "egress_policy_ids", PolicyId::new)?,
            tool_policy_ids: id_list(&raw.tool_policy_ids, "tool_policy_ids", PolicyId::new)?,
            secret_handles: id_list(&raw.secret_handles, "secret_handles", SecretHandle::new)?,
            path_grants,
            library_projections,
        })
    }

    /// When the controller issued the plan, Unix ms.
    pub fn issued_at_ms(&self) -> u64 {
        self.issued_at_ms
    }

    /// The tool policy ids the plan names.
    pub fn tool_policy_ids(&self) -> &[PolicyId] {
        &self.tool_policy_ids
    }
    /// The path exposures the plan names (empty when it names none).
    pub fn path_exposures(&self) -> &[PlanExposure] {
        &self.path_exposures
    }
    /// The `refinement` binding, for a plan of an evaluation template
    /// (`refinement-eval-v1`).
    pub fn refinement(&self) -> Option<&RefinementBinding> {
        self.refinement.as_ref()
    }
    /// The runtime template id.
    pub fn runtime_template_id(&self) -> &RuntimeTemplateId {
        &self.runtime_template_id
    }
    /// The resource limits the plan asks for (every field present: the
    /// decoder refuses a plan missing one).
    pub fn limits(&self) -> &ResourceLimits {
        &self.limits
    }
    /// The exact canonical bytes the plan arrived as.
    pub fn canonical_bytes(&self) -> &[u8] {
        &self.canonical
    }
    /// The session id.
    pub fn session_id(&self) -> &SessionId {
        &self.session_id
    }
    /// The idempotency key.
    pub fn idempotency_key(&self) -> &IdempotencyKey {
        &self.idempotency_key
    }
    /// `plan_content_digest`: SHA-256 of the canonical bytes.
    pub fn plan_content_digest(&self) -> Sha256Digest {
        Sha256Digest::of(&self.canonical)
    }
    /// `controller_plan_digest`: BLAKE3 of the canonical bytes.
    pub fn controller_plan_digest(&self) -> Blake3Digest {
        Blake3Digest::of(&self.canonical)
    }
}

/// A plan that matched the policy at admission time. Only [`admit`] makes
/// one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AdmittedPlan {
    #[serde(flatten)]
    plan: DecodedPlan,
    plan_content_digest: Sha256Digest,
    controller_plan_digest: Blake3Digest,
    plan_context_digest: Sha256Digest,
}

impl AdmittedPlan {
    /// The decoded plan.
    pub fn plan(&self) -> &DecodedPlan {
        &self.plan
    }
    /// SHA-256 of the canonical plan bytes.
    pub fn plan_content_digest(&self) -> &Sha256Digest {
        &self.plan_content_digest
    }
    /// BLAKE3 of the canonical plan bytes.
    pub fn controller_plan_digest(&self) -> &Blake3Digest {
        &self.controller_plan_digest
    }
    /// The plan-context digest ([`plan_context_digest`]).
    pub fn plan_context_digest(&self) -> &Sha256Digest {
        &self.plan_context_digest
    }
    /// The resource limits the plan was admitted with.
    pub fn limits(&self) -> &ResourceLimits {
        &self.plan.limits
    }
    /// The requested path grants.
    pub fn path_grants(&self) -> &[PathGrant] {
        &self.plan.path_grants
    }
    /// The requested library projections.
    pub fn library_projections(&self) -> &[LibraryProjection] {
        &self.plan.library_projections
    }
    /// The requested path exposures.
    pub fn path_exposures(&self) -> &[PlanExposure] {
        &self.plan.path_exposures
    }
    /// The `refinement` binding, for a plan of an evaluation template.
    pub fn refinement(&self) -> Option<&RefinementBinding> {
        self.plan.refinement.as_ref()
    }
    /// The runtime template id.
    pub fn runtime_template_id(&self) -> &RuntimeTemplateId {
        &self.plan.runtime_template_id
    }
    /// Expiry time, milliseconds since the Unix epoch.
    pub fn expires_at_ms(&self) -> u64 {
        self.plan.expires_at_ms
    }
    /// The resource profile the plan names.
    pub fn profile_id(&self) -> &ProfileId {
        &self.plan.profile_id
    }
    /// The egress policies the plan names.
    pub fn egress_policy_ids(&self) -> &[PolicyId] {
        &self.plan.egress_policy_ids
    }
    /// The secret handles the plan names.
    pub fn secret_handles(&self) -> &[SecretHandle] {
        &self.plan.secret_handles
    }
    /// The tool policy ids the plan names.
    pub fn tool_policy_ids(&self) -> &[PolicyId] {
        &self.plan.tool_policy_ids
    }
}
