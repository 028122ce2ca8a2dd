//! One `runtime_templates[]` entry built from explicit values, with its
//! adapter command digest computed: what `glove policy generate` prints.
//!
//! The launch fields go through the same checks as a policy's (absolute
//! canonical paths, `NAME=value` environment, no reserved names, read-only
//! paths neither `/` nor overlapping the pinned executable, discovery only
//! for a native runtime matching the runtime id). Environment, read-only
//! paths, aliases and destinations are sorted, as the policy requires.
//! Whether the aliases and destinations exist is the policy's to check when
//! the entry is pasted into one.

use super::raw::{RawLaunch, RawTemplate};
use super::validate::{check_template_ids, launch};
use super::{adapter_command_digest, SandboxBackend};
use crate::codes::policy::POLICY_SANDBOX_BACKEND_UNKNOWN;
use crate::ids::RuntimeId;
use crate::{canon, Rejection};

/// What runs: a pinned executable, or discovery over explicit directories.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GenerateTarget {
    /// `executable_path`.
    Pinned(String),
    /// `runtime_discovery` (the runtime id) over `executable_search_paths`,
    /// in this order.
    Discovery(Vec<String>),
}

/// The explicit values of one template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateRequest {
    /// `runtime_template_id`.
    pub template_id: String,
    /// `runtime_id`.
    pub runtime_id: String,
    /// `sandbox_backend` (`linux_production` unless given).
    pub sandbox_backend: String,
    /// What runs.
    pub target: GenerateTarget,
    /// `launch.arguments`, in order.
    pub arguments: Vec<String>,
    /// `launch.environment`.
    pub environment: Vec<String>,
    /// `launch.read_only_paths`.
    pub read_only_paths: Vec<String>,
    /// `allowed_path_aliases`.
    pub allowed_path_aliases: Vec<String>,
    /// `allowed_projection_destinations`.
    pub allowed_projection_destinations: Vec<String>,
}

/// The entry as canonical JSON, its digest filled in.
pub fn generate_template(req: &TemplateRequest) -> Result<Vec<u8>, Rejection> {
    let sorted = |v: &[String]| {
        let mut v = v.to_vec();
        v.sort();
        v
    };
    let (executable_path, runtime_discovery, executable_search_paths) = match &req.target {
        GenerateTarget::Pinned(p) => (Some(p.clone()), None, None),
        GenerateTarget::Discovery(dirs) => (None, Some(req.runtime_id.clone()), Some(dirs.clone())),
    };
    let raw_launch = RawLaunch {
        executable_path,
        runtime_discovery,
        executable_search_paths,
        arguments: req.arguments.clone(),
        environment: sorted(&req.environment),
        read_only_paths: sorted(&req.read_only_paths),
    };
    let runtime_id = RuntimeId::new(req.runtime_id.clone()).map_err(|e| e.at("runtime_id"))?;
    let checked = launch(&raw_launch, &runtime_id).map_err(|e| e.at("launch"))?;
    if SandboxBackend::parse(&req.sandbox_backend).is_none() {
        return Err(Rejection::new(
            POLICY_SANDBOX_BACKEND_UNKNOWN,
            format!("{:?} is not a sandbox backend", req.sandbox_backend),
        )
        .at("sandbox_backend"));
    }
    let digest = adapter_command_digest(runtime_id.as_str(), &checked)?;
    let raw = RawTemplate {
        runtime_template_id: req.template_id.clone(),
        runtime_id: req.runtime_id.clone(),
        adapter_command_digest: digest.to_hex(),
        sandbox_backend: req.sandbox_backend.clone(),
        allowed_path_aliases: sorted(&req.allowed_path_aliases),
        allowed_projection_destinations: sorted(&req.allowed_projection_destinations),
        launch: raw_launch,
        evaluation: None,
    };
    check_template_ids(&raw)?;
    canon::encode(&raw)
}
