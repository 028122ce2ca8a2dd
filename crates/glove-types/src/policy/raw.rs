//! The policy document exactly as written: serde structs with no meaning
//! attached yet. Validation turns them into the types in [`super`].

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPolicy {
    pub(crate) schema_version: u64,
    pub(crate) revision: u64,
    pub(crate) max_plan_ttl_ms: u64,
    pub(crate) runtime_templates: Vec<RawTemplate>,
    pub(crate) path_aliases: Vec<RawAlias>,
    pub(crate) library_projection_destinations: Vec<RawDestination>,
    pub(crate) resource_profiles: Vec<RawProfile>,
    pub(crate) egress_policy_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) egress_policies: Vec<RawEgress>,
    pub(crate) tool_policy_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) tool_policies: Vec<RawToolPolicy>,
    pub(crate) secret_handles: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) credential_sources: Vec<RawCredential>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) remote_backend: Option<RawRemote>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTemplate {
    pub(crate) runtime_template_id: String,
    pub(crate) runtime_id: String,
    pub(crate) adapter_command_digest: String,
    pub(crate) sandbox_backend: String,
    pub(crate) allowed_path_aliases: Vec<String>,
    pub(crate) allowed_projection_destinations: Vec<String>,
    pub(crate) launch: RawLaunch,
    /// The evaluator of an evaluation template (`"refinement-eval-v1"`);
    /// absent for an ordinary template, so existing policies keep their
    /// bytes and digests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) evaluation: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLaunch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) executable_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) runtime_discovery: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) executable_search_paths: Option<Vec<String>>,
    pub(crate) arguments: Vec<String>,
    pub(crate) environment: Vec<String>,
    pub(crate) read_only_paths: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAlias {
    pub(crate) alias: String,
    pub(crate) host_path: String,
    pub(crate) target_path: String,
    pub(crate) max_ttl_secs: u64,
    pub(crate) access: Vec<RawAccess>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAccess {
    pub(crate) access: String,
    pub(crate) materialization: String,
    pub(crate) create_policy: String,
    pub(crate) cleanup_policy: String,
    pub(crate) max_bytes: u64,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDestination {
    pub(crate) alias: String,
    pub(crate) target_path: String,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProfile {
    pub(crate) profile_id: String,
    pub(crate) cpu_time_ms: u64,
    pub(crate) memory_bytes: u64,
    pub(crate) pids: u64,
    pub(crate) wall_time_ms: u64,
    pub(crate) disk_bytes: u64,
    pub(crate) terminal_output_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cpu_rate_millicpus: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEgress {
    pub(crate) egress_policy_id: String,
    pub(crate) endpoints: Vec<String>,
    pub(crate) allow_private: bool,
    // The proxy's settings (see `crate::egress::settings`), absent when
    // empty so that a policy without them keeps its digest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) limits: Vec<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) hosts: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) port_mappings: Vec<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) brokered: Vec<RawPolicyBrokered>,
}

/// A tool policy's definition: the MCP profile file gloved reads when a
/// session naming it starts.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawToolPolicy {
    pub(crate) tool_policy_id: String,
    pub(crate) profile_path: String,
}

/// A brokered credential in a session policy: its source is the handle's
/// credential source.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPolicyBrokered {
    pub(crate) secret_handle: String,
    pub(crate) env: String,
    pub(crate) header: String,
    pub(crate) endpoints: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) scheme: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCredential {
    pub(crate) secret_handle: String,
    pub(crate) source_path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) runtime_id: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRemote {
    pub(crate) host: String,
    pub(crate) port: u64,
    pub(crate) user: String,
    pub(crate) host_key: String,
    pub(crate) container_image: String,
    pub(crate) container_image_digest: String,
}
