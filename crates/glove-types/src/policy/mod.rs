//! The operator's session policy, schema version 1.
//!
//! [`ValidatedPolicy::from_json`] decodes a policy strictly (see
//! [`crate::canon`]) and checks every rule; each broken rule has its own code
//! in [`crate::codes::policy`]. The field reference is `docs/policy.md`.

mod generate;
mod launch;
mod model;
mod raw;
mod validate;

pub use generate::{generate_template, GenerateTarget, TemplateRequest};
pub use launch::{adapter_command_digest, ADAPTER_COMMAND_DOMAIN};
pub use model::*;
pub use validate::{MAX_CPU_RATE_MILLICPUS, MIN_CPU_RATE_MILLICPUS};

use crate::ids::{PolicyId, SecretHandle};
use crate::{canon, Rejection};
use serde::Serialize;

/// Largest policy file accepted, in bytes.
pub const MAX_POLICY_BYTES: usize = 1 << 20;

/// What `glove policy explain` shows: every validated part of a policy,
/// with each template's computed adapter digest. Unlike
/// [`ValidatedPolicy`], an explanation also exists when a template's claimed
/// digest is wrong (both digests are shown), so it can never be used to
/// admit a plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Explanation {
    /// Policy revision.
    pub revision: u64,
    /// Longest plan lifetime, milliseconds.
    pub max_plan_ttl_ms: u64,
    /// Templates with their computed digests.
    pub runtime_templates: Vec<ExplainedTemplate>,
    /// Path aliases.
    pub path_aliases: Vec<PathAlias>,
    /// Projection destinations.
    pub library_projection_destinations: Vec<ProjectionDestination>,
    /// Resource profiles.
    pub resource_profiles: Vec<ResourceProfile>,
    /// Egress ids.
    pub egress_policy_ids: Vec<PolicyId>,
    /// Egress definitions.
    pub egress_policies: Vec<EgressPolicy>,
    /// Tool policy ids.
    pub tool_policy_ids: Vec<PolicyId>,
    /// Tool policy definitions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_policies: Vec<ToolPolicy>,
    /// Secret handles.
    pub secret_handles: Vec<SecretHandle>,
    /// Credential sources.
    pub credential_sources: Vec<CredentialSource>,
    /// Remote backend.
    pub remote_backend: Option<RemoteBackend>,
    /// Whether every claimed digest matched (the policy is valid).
    pub valid: bool,
}

/// A template as explained, with the digest Glove computed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ExplainedTemplate {
    /// The template.
    #[serde(flatten)]
    pub template: RuntimeTemplate,
    /// The digest of its launch fields.
    pub computed_adapter_command_digest: crate::Sha256Digest,
    /// Whether the claimed digest equals the computed one.
    pub digest_matches: bool,
}

impl Explanation {
    /// Decodes a policy and checks every rule except the adapter digest
    /// comparison, which it reports instead.
    pub fn from_json(bytes: &[u8]) -> Result<Self, Rejection> {
        let raw: raw::RawPolicy = canon::decode(bytes, MAX_POLICY_BYTES, canon::Form::Strict)?;
        let (p, mismatches) = validate::validate(raw, true)?;
        let runtime_templates = p
            .runtime_templates
            .into_iter()
            .map(|t| {
                let computed = mismatches
                    .iter()
                    .find(|(id, _)| id == &t.runtime_template_id)
                    .map(|(_, d)| *d);
                ExplainedTemplate {
                    computed_adapter_command_digest: computed.unwrap_or(t.adapter_command_digest),
                    digest_matches: computed.is_none(),
                    template: t,
                }
            })
            .collect();
        Ok(Explanation {
            revision: p.revision,
            max_plan_ttl_ms: p.max_plan_ttl_ms,
            runtime_templates,
            path_aliases: p.path_aliases,
            library_projection_destinations: p.library_projection_destinations,
            resource_profiles: p.resource_profiles,
            egress_policy_ids: p.egress_policy_ids,
            egress_policies: p.egress_policies,
            tool_policy_ids: p.tool_policy_ids,
            tool_policies: p.tool_policies,
            secret_handles: p.secret_handles,
            credential_sources: p.credential_sources,
            remote_backend: p.remote_backend,
            valid: mismatches.is_empty(),
        })
    }
}

/// A policy that passed every rule. It cannot be built any other way.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ValidatedPolicy {
    pub(crate) schema_version: u64,
    pub(crate) revision: u64,
    pub(crate) max_plan_ttl_ms: u64,
    pub(crate) runtime_templates: Vec<RuntimeTemplate>,
    pub(crate) path_aliases: Vec<PathAlias>,
    pub(crate) library_projection_destinations: Vec<ProjectionDestination>,
    pub(crate) resource_profiles: Vec<ResourceProfile>,
    pub(crate) egress_policy_ids: Vec<PolicyId>,
    pub(crate) egress_policies: Vec<EgressPolicy>,
    pub(crate) tool_policy_ids: Vec<PolicyId>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) tool_policies: Vec<ToolPolicy>,
    pub(crate) secret_handles: Vec<SecretHandle>,
    pub(crate) credential_sources: Vec<CredentialSource>,
    pub(crate) remote_backend: Option<RemoteBackend>,
}

impl ValidatedPolicy {
    /// Decodes and validates a policy document (at most
    /// [`MAX_POLICY_BYTES`]).
    pub fn from_json(bytes: &[u8]) -> Result<Self, Rejection> {
        let raw: raw::RawPolicy = canon::decode(bytes, MAX_POLICY_BYTES, canon::Form::Strict)?;
        validate::validate(raw, false).map(|(p, _)| p)
    }

    /// The policy revision plans must name.
    pub fn revision(&self) -> u64 {
        self.revision
    }
    /// Longest plan lifetime, milliseconds.
    pub fn max_plan_ttl_ms(&self) -> u64 {
        self.max_plan_ttl_ms
    }
    /// Templates, sorted by id.
    pub fn runtime_templates(&self) -> &[RuntimeTemplate] {
        &self.runtime_templates
    }
    /// Path aliases, sorted by alias.
    pub fn path_aliases(&self) -> &[PathAlias] {
        &self.path_aliases
    }
    /// Projection destinations, sorted by alias.
    pub fn library_projection_destinations(&self) -> &[ProjectionDestination] {
        &self.library_projection_destinations
    }
    /// Resource profiles, sorted by id.
    pub fn resource_profiles(&self) -> &[ResourceProfile] {
        &self.resource_profiles
    }
    /// Egress policy ids plans may name.
    pub fn egress_policy_ids(&self) -> &[PolicyId] {
        &self.egress_policy_ids
    }
    /// Egress policies with endpoints (ids without a definition are offline).
    pub fn egress_policies(&self) -> &[EgressPolicy] {
        &self.egress_policies
    }
    /// Tool policy ids plans may name.
    pub fn tool_policy_ids(&self) -> &[PolicyId] {
        &self.tool_policy_ids
    }

    /// Tool policy definitions (sorted by id), each listed in
    /// [`Self::tool_policy_ids`].
    pub fn tool_policies(&self) -> &[ToolPolicy] {
        &self.tool_policies
    }
    /// Secret handles plans may name.
    pub fn secret_handles(&self) -> &[SecretHandle] {
        &self.secret_handles
    }
    /// Credential sources behind secret handles.
    pub fn credential_sources(&self) -> &[CredentialSource] {
        &self.credential_sources
    }
    /// The construction-only remote backend, if configured.
    pub fn remote_backend(&self) -> Option<&RemoteBackend> {
        self.remote_backend.as_ref()
    }

    /// Looks a template up by id.
    pub fn template(&self, id: &str) -> Option<&RuntimeTemplate> {
        self.runtime_templates
            .binary_search_by(|t| t.runtime_template_id.as_str().cmp(id))
            .ok()
            .and_then(|i| self.runtime_templates.get(i))
    }
    /// Looks a path alias up.
    pub fn path_alias(&self, alias: &str) -> Option<&PathAlias> {
        self.path_aliases
            .binary_search_by(|a| a.alias.as_str().cmp(alias))
            .ok()
            .and_then(|i| self.path_aliases.get(i))
    }
    /// Looks a projection destination up.
    pub fn destination(&self, alias: &str) -> Option<&ProjectionDestination> {
        self.library_projection_destinations
            .binary_search_by(|a| a.alias.as_str().cmp(alias))
            .ok()
            .and_then(|i| self.library_projection_destinations.get(i))
    }
    /// Looks a resource profile up.
    pub fn profile(&self, id: &str) -> Option<&ResourceProfile> {
        self.resource_profiles
            .binary_search_by(|p| p.profile_id.as_str().cmp(id))
            .ok()
            .and_then(|i| self.resource_profiles.get(i))
    }
}
