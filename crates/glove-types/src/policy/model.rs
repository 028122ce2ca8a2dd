//! The validated policy model. Every value here has passed its rule; the
//! types have no public constructors, so holding one is the proof.

use crate::digest::Sha256Digest;
use crate::ids::{AliasId, PolicyId, ProfileId, RuntimeId, RuntimeTemplateId, SecretHandle};
use serde::Serialize;

/// Where a runtime template may run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxBackend {
    /// Glove's Linux managed-session sandbox.
    LinuxProduction,
    /// A remote Linux container; construction-only, never operational.
    RemoteLinuxContainer,
}

impl SandboxBackend {
    /// Parses the wire name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "linux_production" => Some(Self::LinuxProduction),
            "remote_linux_container" => Some(Self::RemoteLinuxContainer),
            _ => None,
        }
    }

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::LinuxProduction => "linux_production",
            Self::RemoteLinuxContainer => "remote_linux_container",
        }
    }
}

macro_rules! wire_enum {
    ($(#[$m:meta])* $name:ident { $( $(#[$vm:meta])* $v:ident = $s:literal ),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        pub enum $name { $( $(#[$vm])* #[serde(rename = $s)] $v ),+ }

        impl $name {
            /// Parses the wire name.
            pub fn parse(s: &str) -> Option<Self> {
                match s { $( $s => Some(Self::$v), )+ _ => None }
            }
            /// The wire name.
            pub const fn as_str(self) -> &'static str {
                match self { $( Self::$v => $s ),+ }
            }
        }
    };
}

wire_enum!(
    /// How a granted path may be used.
    Access {
        /// Bound read-only.
        ReadOnly = "read_only",
        /// A private copy in a quota-sized tmpfs, discarded after the session.
        EphemeralWrite = "ephemeral_write",
        /// A private copy in a hard-sized image that outlives the session.
        RetainedWrite = "retained_write",
        /// Legacy live host writes: parsed, always refused at launch.
        DirectWrite = "direct_write",
    }
);

wire_enum!(
    /// How a grant reaches the sandbox.
    Materialization {
        /// A bind mount of the host directory.
        Bind = "bind",
        /// A copy made without following links.
        Copy = "copy",
    }
);

wire_enum!(
    /// What to do when the alias's host path is missing.
    CreatePolicy {
        /// The host path must exist.
        RequireExisting = "require_existing",
        /// Start from an empty directory when the host path is missing.
        EmptyDirectory = "empty_directory",
    }
);

wire_enum!(
    /// What happens to a materialization after the session.
    CleanupPolicy {
        /// Nothing was materialized (read-only binds, direct writes).
        None = "none",
        /// Removed at cleanup.
        Remove = "remove",
        /// Kept for inspection and a later, separate apply.
        Retain = "retain",
    }
);

/// The six limits of a resource profile. Every field is positive and within
/// the documented bound (`docs/policy.md`) when it comes from a validated
/// policy; deserializing one (an internal wire format) checks nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceLimits {
    /// CPU time, milliseconds.
    pub cpu_time_ms: u64,
    /// Memory, bytes (no swap).
    pub memory_bytes: u64,
    /// Maximum number of processes and threads.
    pub pids: u64,
    /// Wall-clock time, milliseconds.
    pub wall_time_ms: u64,
    /// Writable disk, bytes.
    pub disk_bytes: u64,
    /// Terminal output, bytes.
    pub terminal_output_bytes: u64,
}

/// A named resource profile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ResourceProfile {
    pub(crate) profile_id: ProfileId,
    #[serde(flatten)]
    pub(crate) limits: ResourceLimits,
    /// An operator-local CPU rate (not one of the plan's six limits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cpu_rate_millicpus: Option<u64>,
}

impl ResourceProfile {
    /// The profile id.
    pub fn id(&self) -> &ProfileId {
        &self.profile_id
    }
    /// The six limits.
    pub fn limits(&self) -> &ResourceLimits {
        &self.limits
    }
    /// The CPU rate limit in thousandths of a CPU (cgroup `cpu.max`), if
    /// the operator set one. Local to the policy: plans carry the six
    /// limits only.
    pub fn cpu_rate_millicpus(&self) -> Option<u64> {
        self.cpu_rate_millicpus
    }
}

/// The registered harnesses; each one's descriptor is its file in
/// [`crate::harness`].
pub use crate::harness::NativeRuntime;

/// What a template runs: a pinned executable or a discovery surface.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum LaunchTarget {
    /// One absolute executable path.
    Pinned {
        /// The executable.
        executable_path: String,
    },
    /// A native runtime found in explicit, ordered search directories.
    Discovery {
        /// The runtime whose executable is searched for.
        runtime: NativeRuntime,
        /// Ordered search directories; the inherited `PATH` is never used.
        executable_search_paths: Vec<String>,
    },
}

/// The launch fields of a template, all covered by its adapter digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Launch {
    pub(crate) target: LaunchTarget,
    pub(crate) arguments: Vec<String>,
    pub(crate) environment: Vec<String>,
    pub(crate) read_only_paths: Vec<String>,
}

impl Launch {
    /// The executable or discovery surface.
    pub fn target(&self) -> &LaunchTarget {
        &self.target
    }
    /// Ordered arguments.
    pub fn arguments(&self) -> &[String] {
        &self.arguments
    }
    /// Canonical `NAME=value` entries, sorted, unique names.
    pub fn environment(&self) -> &[String] {
        &self.environment
    }
    /// Sorted read-only host paths mounted at the same place inside.
    pub fn read_only_paths(&self) -> &[String] {
        &self.read_only_paths
    }
}

/// A validated runtime template.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RuntimeTemplate {
    pub(crate) runtime_template_id: RuntimeTemplateId,
    pub(crate) runtime_id: RuntimeId,
    pub(crate) adapter_command_digest: Sha256Digest,
    pub(crate) sandbox_backend: SandboxBackend,
    pub(crate) allowed_path_aliases: Vec<AliasId>,
    pub(crate) allowed_projection_destinations: Vec<AliasId>,
    pub(crate) launch: Launch,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) evaluation: Option<crate::refinement::Evaluation>,
}

impl RuntimeTemplate {
    /// The template id.
    pub fn id(&self) -> &RuntimeTemplateId {
        &self.runtime_template_id
    }
    /// The runtime id.
    pub fn runtime_id(&self) -> &RuntimeId {
        &self.runtime_id
    }
    /// The adapter command digest (checked against the launch fields).
    pub fn adapter_command_digest(&self) -> &Sha256Digest {
        &self.adapter_command_digest
    }
    /// The sandbox backend.
    pub fn sandbox_backend(&self) -> SandboxBackend {
        self.sandbox_backend
    }
    /// Aliases a plan may grant with this template.
    pub fn allowed_path_aliases(&self) -> &[AliasId] {
        &self.allowed_path_aliases
    }
    /// Destinations a plan may project libraries to with this template.
    pub fn allowed_projection_destinations(&self) -> &[AliasId] {
        &self.allowed_projection_destinations
    }
    /// The launch fields.
    pub fn launch(&self) -> &Launch {
        &self.launch
    }
    /// The evaluator, for an evaluation template (`None` for an ordinary
    /// one).
    pub fn evaluation(&self) -> Option<crate::refinement::Evaluation> {
        self.evaluation
    }
}

/// One allowed way to use a path alias.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct AccessTuple {
    /// Access mode.
    pub access: Access,
    /// Materialization.
    pub materialization: Materialization,
    /// Create policy.
    pub create_policy: CreatePolicy,
    /// Cleanup policy.
    pub cleanup_policy: CleanupPolicy,
    /// Byte quota (zero for read-only access).
    pub max_bytes: u64,
}

/// A validated path alias: host path and sandbox target stay local.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PathAlias {
    pub(crate) alias: AliasId,
    pub(crate) host_path: String,
    pub(crate) target_path: String,
    pub(crate) max_ttl_secs: u64,
    pub(crate) access: Vec<AccessTuple>,
}

impl PathAlias {
    /// The alias.
    pub fn id(&self) -> &AliasId {
        &self.alias
    }
    /// The host path (local only; never sent to a controller).
    pub fn host_path(&self) -> &str {
        &self.host_path
    }
    /// The path inside the sandbox.
    pub fn target_path(&self) -> &str {
        &self.target_path
    }
    /// Longest grant lifetime, seconds.
    pub fn max_ttl_secs(&self) -> u64 {
        self.max_ttl_secs
    }
    /// Allowed access tuples, one per access mode.
    pub fn access(&self) -> &[AccessTuple] {
        &self.access
    }
}

/// A library projection destination.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProjectionDestination {
    pub(crate) alias: AliasId,
    pub(crate) target_path: String,
}

impl ProjectionDestination {
    /// The destination alias.
    pub fn id(&self) -> &AliasId {
        &self.alias
    }
    /// The sandbox directory bundles are mounted under.
    pub fn target_path(&self) -> &str {
        &self.target_path
    }
}

/// A named egress policy with its endpoints.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EgressPolicy {
    pub(crate) egress_policy_id: PolicyId,
    pub(crate) endpoints: Vec<String>,
    pub(crate) allow_private: bool,
    #[serde(skip)]
    pub(crate) settings: Option<crate::egress::settings::EgressSettings>,
}

impl EgressPolicy {
    /// What the session's proxy enforces; `None` when the policy has no
    /// endpoints (the session stays offline).
    pub fn settings(&self) -> Option<&crate::egress::settings::EgressSettings> {
        self.settings.as_ref()
    }
    /// The policy id.
    pub fn id(&self) -> &PolicyId {
        &self.egress_policy_id
    }
    /// Sorted `host:port` endpoints.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }
    /// Whether private and loopback addresses are allowed.
    pub fn allow_private(&self) -> bool {
        self.allow_private
    }
}

/// A tool policy's definition: the MCP profile (docs/mcp.md) a session
/// naming the policy is mediated under. The profile is a protected file
/// read when the session starts; its digest goes into the receipt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ToolPolicy {
    pub(crate) tool_policy_id: PolicyId,
    pub(crate) profile_path: String,
}

impl ToolPolicy {
    /// The policy id.
    pub fn id(&self) -> &PolicyId {
        &self.tool_policy_id
    }
    /// The MCP profile's host path (absolute, canonical).
    pub fn profile_path(&self) -> &str {
        &self.profile_path
    }
}

/// Where the operator keeps the credential behind a secret handle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CredentialSource {
    pub(crate) secret_handle: SecretHandle,
    pub(crate) source_path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) runtime_id: Option<RuntimeId>,
}

impl CredentialSource {
    /// The handle plans name.
    pub fn handle(&self) -> &SecretHandle {
        &self.secret_handle
    }
    /// The owner-protected source file (local only).
    pub fn source_path(&self) -> &str {
        &self.source_path
    }
    /// The only runtime whose sessions may receive it as a lease (a
    /// harness's token is that harness's: a plan cannot hand it to
    /// another template's runtime). `None`: it is never leased.
    pub fn runtime_id(&self) -> Option<&RuntimeId> {
        self.runtime_id.as_ref()
    }
}

/// The construction-only remote backend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RemoteBackend {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) user: String,
    pub(crate) host_key: String,
    pub(crate) container_image: String,
    pub(crate) container_image_digest: Sha256Digest,
}

impl RemoteBackend {
    /// Host name or address (never contacted by validation).
    pub fn host(&self) -> &str {
        &self.host
    }
    /// SSH port.
    pub fn port(&self) -> u16 {
        self.port
    }
    /// SSH user.
    pub fn user(&self) -> &str {
        &self.user
    }
    /// The pinned `ssh-ed25519` host key.
    pub fn host_key(&self) -> &str {
        &self.host_key
    }
    /// The untagged `name@sha256:<hex>` image reference.
    pub fn container_image(&self) -> &str {
        &self.container_image
    }
    /// The image digest, equal to the reference's suffix.
    pub fn container_image_digest(&self) -> &Sha256Digest {
        &self.container_image_digest
    }
}
