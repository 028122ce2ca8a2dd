//! Capability discovery: which methods this service advertises, derived
//! from the components that were actually constructed and are operational.
//!
//! | component | adds |
//! | --- | --- |
//! | receipt journal (always, `gloved` requires it) | `receipts_page`, `receipts_ack` |
//! | session policy | `validate_plan` |
//! | policy and session store | `create_session`, `session_status` |
//! | an *operational* Linux managed runtime (materialization root, start-authorization key, passed probe) | the lifecycle methods |
//! | the path-exposure policy and journal | `exposure_create`, `exposure_revoke` (owner only), `exposure_catalog` |
//!
//! `capabilities` itself is always advertised. A remote backend named by the
//! policy is construction-only: the document reports it with
//! `lifecycle_operational: false`, adapter schema 0 and no managed runtime
//! ids, and it never adds a method. A materialization root without a
//! start-authorization key, or whose strict sandbox probe fails, adds
//! nothing; a library bundle root is checked at startup and adds no
//! method by itself. Any method not in the
//! list answers `method_not_found`, whatever objects exist.

use crate::protocol::PROTOCOL_VERSION;
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// Every method name the protocol defines, advertised or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Method {
    /// The capability document.
    Capabilities,
    /// Validate a plan against the frozen policy.
    ValidatePlan,
    /// Durably create a session (idempotent).
    CreateSession,
    /// A session's stage and digests.
    SessionStatus,
    /// Every session the store holds, with its stage, paged.
    SessionList,
    /// A page of receipts.
    ReceiptsPage,
    /// Acknowledge the exact head of the last page.
    ReceiptsAck,
    /// Lifecycle (managed runtime): start.
    StartSession,
    /// Lifecycle: attach to the PTY stream.
    Attach,
    /// Lifecycle: terminal input.
    WriteStdin,
    /// Lifecycle: terminal size.
    Resize,
    /// Lifecycle: signal the agent.
    Signal,
    /// Lifecycle: detach from the stream.
    Detach,
    /// Lifecycle: stop.
    StopSession,
    /// Lifecycle: clean up.
    CleanupSession,
    /// Owner only: the retained stages.
    StagesList,
    /// Owner only: what a stage changed.
    StageDiff,
    /// Owner only: remove a stage.
    StageRemove,
    /// Owner only: apply a stage to its source.
    StageApply,
    /// Owner only: enroll a project as a path exposure.
    ExposureCreate,
    /// Owner only: revoke a path exposure.
    ExposureRevoke,
    /// The redacted exposure catalog.
    ExposureCatalog,
}

impl Method {
    /// Every method.
    pub const ALL: [Method; 22] = [
        Method::Capabilities,
        Method::ValidatePlan,
        Method::CreateSession,
        Method::SessionStatus,
        Method::SessionList,
        Method::ReceiptsPage,
        Method::ReceiptsAck,
        Method::StartSession,
        Method::Attach,
        Method::WriteStdin,
        Method::Resize,
        Method::Signal,
        Method::Detach,
        Method::StopSession,
        Method::CleanupSession,
        Method::StagesList,
        Method::StageDiff,
        Method::StageRemove,
        Method::StageApply,
        Method::ExposureCreate,
        Method::ExposureRevoke,
        Method::ExposureCatalog,
    ];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Method::Capabilities => "capabilities",
            Method::ValidatePlan => "validate_plan",
            Method::StagesList => "stages_list",
            Method::StageDiff => "stage_diff",
            Method::StageRemove => "stage_remove",
            Method::StageApply => "stage_apply",
            Method::ExposureCreate => "exposure_create",
            Method::ExposureRevoke => "exposure_revoke",
            Method::ExposureCatalog => "exposure_catalog",
            Method::CreateSession => "create_session",
            Method::SessionStatus => "session_status",
            Method::SessionList => "session_list",
            Method::ReceiptsPage => "receipts_page",
            Method::ReceiptsAck => "receipts_ack",
            Method::StartSession => "start_session",
            Method::Attach => "attach",
            Method::WriteStdin => "write_stdin",
            Method::Resize => "resize",
            Method::Signal => "signal",
            Method::Detach => "detach",
            Method::StopSession => "stop_session",
            Method::CleanupSession => "cleanup_session",
        }
    }

    /// Looks a wire name up.
    pub fn parse(s: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.as_str() == s)
    }

    /// Whether the method belongs to the managed-session lifecycle.
    pub const fn is_lifecycle(self) -> bool {
        matches!(
            self,
            Method::StartSession
                | Method::Attach
                | Method::WriteStdin
                | Method::Resize
                | Method::Signal
                | Method::Detach
                | Method::StopSession
                | Method::CleanupSession
        )
    }
}

/// What the construction-only remote backend reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteBackendDiagnostic {
    /// The container image digest the policy pins (hex).
    pub container_image_digest: String,
    /// Whether the SSH artifacts were written beneath the runtime directory.
    pub ssh_artifacts_prepared: bool,
}

/// The components a service was built from, as constructed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Components {
    /// The frozen session policy's revision, when one was loaded.
    pub policy_revision: Option<u64>,
    /// A session store was opened (and replayed).
    pub session_store: bool,
    /// A receipt journal was opened (and replayed).
    pub receipt_journal: bool,
    /// A Linux managed runtime that reports itself operational (its strict
    /// sandbox probe passed at startup).
    pub managed_runtime_operational: bool,
    /// A library bundle store was constructed.
    pub library_bundle_store: bool,
    /// The construction-only remote backend, when the policy names one.
    pub remote_backend: Option<RemoteBackendDiagnostic>,
    /// Retained workspaces can be made here (root in the initial user
    /// namespace, loop devices, ext4, a checked mkfs.ext4).
    pub retained_workspaces: bool,
    /// Apply is configured: a trust policy loaded and the apply books open.
    pub apply_operational: bool,
    /// The path-exposure policy was loaded and its journal replayed.
    pub path_exposures: bool,
}

/// The advertised methods and the capability document.
#[derive(Clone, Debug, PartialEq)]
pub struct Capabilities {
    methods: BTreeSet<Method>,
    document: Value,
}

impl Capabilities {
    /// Derives the capabilities from constructed components.
    pub fn derive(c: &Components) -> Self {
        let mut methods = BTreeSet::from([Method::Capabilities]);
        if c.receipt_journal {
            methods.extend([Method::ReceiptsPage, Method::ReceiptsAck]);
        }
        if c.policy_revision.is_some() {
            methods.insert(Method::ValidatePlan);
            if c.session_store {
                methods.extend([
                    Method::CreateSession,
                    Method::SessionStatus,
                    Method::SessionList,
                ]);
            }
        }
        // The lifecycle needs an operational local runtime and a store to
        // drive; a remote backend never enables it.
        let lifecycle = c.managed_runtime_operational
            && c.remote_backend.is_none()
            && methods.contains(&Method::CreateSession);
        if lifecycle {
            methods.extend(Method::ALL.into_iter().filter(|m| m.is_lifecycle()));
        }
        // Stages exist only where the runtime makes them; apply only with a
        // trust policy. All four answer the owner only.
        let retained = lifecycle && c.retained_workspaces;
        if retained {
            methods.extend([Method::StagesList, Method::StageDiff, Method::StageRemove]);
        }
        let apply = retained && c.apply_operational;
        if apply {
            methods.insert(Method::StageApply);
        }
        // Exposures: create and revoke answer the owner only, the catalog
        // anyone authenticated.
        if c.path_exposures {
            methods.extend([
                Method::ExposureCreate,
                Method::ExposureRevoke,
                Method::ExposureCatalog,
            ]);
        }
        // Refinement evaluation runs on the Linux managed runtime and reads
        // its fixture from the protected library bundle store: 1 only with
        // both constructed (and so the lifecycle served), 0 otherwise.
        let refinement = u64::from(lifecycle && c.library_bundle_store);
        let names: Vec<&str> = methods.iter().map(|m| m.as_str()).collect();
        let remote = c.remote_backend.as_ref().map(|r| {
            json!({
                "adapter_schema_version": 0,
                "container_image_digest": r.container_image_digest,
                "lifecycle_operational": false,
                "managed_runtime_ids": [],
                "resource_enforcement": false,
                "ssh_artifacts_prepared": r.ssh_artifacts_prepared,
                "verified_receipts": false,
            })
        });
        let document = json!({
            "protocol_version": PROTOCOL_VERSION,
            "methods": names,
            // 1 only where the native harness adapters (private home,
            // expanded skills, managed environment, credential leases, all
            // committed to the launch binding and the receipt) are active:
            // an operational Linux managed runtime. 0 everywhere else.
            "agent_runtime_adapter_schema_version": if lifecycle { AGENT_RUNTIME_ADAPTER_SCHEMA_VERSION } else { 0 },
            "refinement_evaluation_protocol_schema_version": refinement,
            // 1 once the owner can apply a stage here (a trust policy is
            // loaded and retained workspaces work); 0 otherwise.
            "apply_schema_version": if apply { APPLY_SCHEMA_VERSION } else { 0 },
            "retained_workspaces": retained,
            "managed_runtime": {
                "lifecycle_operational": lifecycle,
                "managed_runtime_ids": if lifecycle {
                    glove_types::policy::NativeRuntime::ALL.map(|r| r.runtime_id()).to_vec()
                } else {
                    Vec::new()
                },
                "resource_enforcement": lifecycle,
            },
            "remote_backend": remote,
            "session_policy_revision": c.policy_revision,
        });
        Capabilities { methods, document }
    }

    /// The advertised method named `name`, if any.
    pub fn advertised(&self, name: &str) -> Option<Method> {
        Method::parse(name).filter(|m| self.methods.contains(m))
    }

    /// The advertised methods.
    pub fn methods(&self) -> impl Iterator<Item = Method> + '_ {
        self.methods.iter().copied()
    }

    /// The document `capabilities` returns.
    pub fn document(&self) -> &Value {
        &self.document
    }
}

/// The apply schema an operational apply serves: `glove.apply-authorization-v1`
/// authorizations, `stage_apply` on the owner socket, `apply_v1` receipts.
pub const APPLY_SCHEMA_VERSION: u64 = 1;

/// The agent-runtime adapter schema an operational Linux managed runtime
/// serves: the native adapters of `docs/harnesses.md`.
pub const AGENT_RUNTIME_ADAPTER_SCHEMA_VERSION: u64 = 1;

#[cfg(test)]
mod tests {
    use super::*;

    fn names(c: &Components) -> Vec<&'static str> {
        Capabilities::derive(c)
            .methods()
            .map(Method::as_str)
            .collect()
    }

    #[test]
    fn rows() {
        let mut c = Components {
            receipt_journal: true,
            ..Components::default()
        };
        assert_eq!(names(&c), ["capabilities", "receipts_page", "receipts_ack"]);
        c.session_store = true;
        assert_eq!(names(&c), ["capabilities", "receipts_page", "receipts_ack"]);
        c.policy_revision = Some(1);
        assert_eq!(
            names(&c),
            [
                "capabilities",
                "validate_plan",
                "create_session",
                "session_status",
                "session_list",
                "receipts_page",
                "receipts_ack"
            ]
        );
        c.remote_backend = Some(RemoteBackendDiagnostic {
            container_image_digest: "00".into(),
            ssh_artifacts_prepared: true,
        });
        c.managed_runtime_operational = true;
        assert!(!names(&c).contains(&"start_session"));
        c.remote_backend = None;
        assert!(names(&c).contains(&"start_session"));
    }

    #[test]
    fn refinement_evaluation_needs_the_managed_runtime_and_the_bundle_store() {
        let version = |c: &Components| {
            Capabilities::derive(c).document()["refinement_evaluation_protocol_schema_version"]
                .clone()
        };
        let mut c = Components {
            receipt_journal: true,
            session_store: true,
            policy_revision: Some(1),
            managed_runtime_operational: true,
            ..Components::default()
        };
        assert_eq!(version(&c), 0, "no bundle store");
        c.library_bundle_store = true;
        assert_eq!(version(&c), 1);
        c.managed_runtime_operational = false;
        assert_eq!(version(&c), 0, "no operational runtime");
        c.managed_runtime_operational = true;
        c.remote_backend = Some(RemoteBackendDiagnostic {
            container_image_digest: "00".into(),
            ssh_artifacts_prepared: true,
        });
        assert_eq!(version(&c), 0, "a remote backend serves no lifecycle");
    }

    #[test]
    fn the_adapter_schema_is_claimed_only_by_an_operational_runtime() {
        let mut c = Components {
            receipt_journal: true,
            session_store: true,
            policy_revision: Some(1),
            managed_runtime_operational: true,
            ..Components::default()
        };
        let caps = Capabilities::derive(&c);
        assert_eq!(
            caps.document()["managed_runtime"]["lifecycle_operational"],
            true
        );
        assert_eq!(caps.document()["agent_runtime_adapter_schema_version"], 1);
        assert_eq!(
            caps.document()["managed_runtime"]["managed_runtime_ids"],
            serde_json::json!(["codex", "claude-code", "pi", "copilot", "opencode"])
        );
        c.managed_runtime_operational = false;
        let caps = Capabilities::derive(&c);
        assert_eq!(caps.document()["agent_runtime_adapter_schema_version"], 0);
        c.managed_runtime_operational = true;
        c.remote_backend = Some(RemoteBackendDiagnostic {
            container_image_digest: "00".into(),
            ssh_artifacts_prepared: true,
        });
        let caps = Capabilities::derive(&c);
        assert_eq!(caps.document()["agent_runtime_adapter_schema_version"], 0);
    }
}
