//! What a session's parts need, from the policy and the admitted plan.

use super::Runtime;
use crate::assembly::egress::EgressInput;
use crate::assembly::mcp::McpInput;
use crate::assembly::Inputs;
use crate::error::ControlError;
use glove_types::ids::SessionId;
use glove_types::plan::AdmittedPlan;
use glove_types::policy::ValidatedPolicy;

impl Runtime {
    /// What the session's parts need, from the policy and the admitted
    /// plan: the egress policy's proxy, the tool policy's mediator, the
    /// leases `build_spec` acquired.
    pub(super) fn inputs(
        &self,
        policy: &ValidatedPolicy,
        admitted: &AdmittedPlan,
        id: &SessionId,
        leases: Vec<crate::assembly::lease::LeaseHold>,
        retained_grants: Vec<super::spec::RetainedGrant>,
    ) -> Result<Inputs, ControlError> {
        let runtime = policy
            .runtime_templates()
            .iter()
            .find(|t| t.id() == admitted.runtime_template_id())
            .map(|t| t.runtime_id().as_str().to_owned())
            .unwrap_or_default();
        let root = &self.cfg.materialization_root;
        let public = |e: crate::assembly::AttachError| {
            tracing::warn!(session_id = ?id.as_str(), code = e.code().as_str(), "{}", e.detail());
            ControlError::from(e.public())
        };
        let egress = match super::egress::session_settings(policy, admitted, &runtime)? {
            Some(settings) => {
                let dir = root.join("egress");
                crate::assembly::egress::journal_dir(&dir).map_err(public)?;
                Some(EgressInput {
                    settings,
                    extra_roots: self.cfg.egress_extra_roots.clone(),
                    journal: dir.join(format!("{}.journal", id.as_str())),
                })
            }
            None => None,
        };
        // The tool policy's mediator: the audit journal and the pins kept
        // beside the other journals, the relay beside the launcher.
        let mcp = match super::mcp::tool_policy_for(policy, admitted)? {
            Some(tool) => {
                let dir = root.join("mcp");
                let pins = dir.join("pins");
                crate::assembly::mcp::private_dir(&dir)
                    .and_then(|()| crate::assembly::mcp::private_dir(&pins))
                    .map_err(public)?;
                Some(McpInput {
                    profile: tool.profile_path().into(),
                    tool_policy_id: Some(tool.id().as_str().to_owned()),
                    // Its own base, apart from `glove run`'s (which may
                    // be the same runtime directory): each sweeps only the
                    // stale directories of its own kind.
                    runtime_base: self.cfg.runtime_dir.join("mcp-managed"),
                    relay: self
                        .cfg
                        .launcher
                        .parent()
                        .map(|d| d.join("glove"))
                        .unwrap_or_default(),
                    audit: dir.join(format!("{}.journal", id.as_str())),
                    pins: pins.join(format!("{}.json", tool.id().as_str())),
                })
            }
            None => None,
        };
        // Retained workspaces: stages kept below the materialization root.
        let mut retained = Vec::new();
        if !retained_grants.is_empty() {
            // A controller sees the code and no path; the log has the rest.
            let store = std::sync::Arc::new(
                crate::stages::StageStore::open(&root.join("stages")).map_err(|e| {
                    public(crate::assembly::AttachError::new(
                        e.code(),
                        "the stage directory is not usable",
                        e.message(),
                    ))
                })?,
            );
            let owner = glove_sandbox::launch::PRIVILEGED_AGENT_HOST_ID;
            for g in retained_grants {
                let host = std::path::PathBuf::from(&g.host_path);
                let source = if g.create_if_missing && !host.exists() {
                    None
                } else {
                    Some(host)
                };
                retained.push(crate::assembly::retained::RetainedInput {
                    store: store.clone(),
                    alias: g.alias,
                    target: g.target,
                    source_fd: g.source_fd,
                    source,
                    bytes: g.max_bytes,
                    owner: (owner, owner),
                });
            }
        }
        Ok(Inputs {
            session_id: id.clone(),
            egress,
            mcp,
            leases,
            retained,
        })
    }
}
