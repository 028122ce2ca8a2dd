//! A managed session's egress: the plan's egress policy (at most one with
//! endpoints), its brokered credentials, the channel and the session's
//! proxy, and the summary the receipt commits to.

use glove_egress::{Broker, ProxyConfig, ProxyHandle, ProxyLimits, Summary};
use glove_sandbox::wire::SpecWire;
use glove_types::codes::control::{SESSION_EGRESS_CONFLICT, SESSION_EGRESS_FAILED};
use glove_types::egress::settings::EgressSettings;
use glove_types::ids::SessionId;
use glove_types::plan::AdmittedPlan;
use glove_types::policy::ValidatedPolicy;
use glove_types::receipt::EgressReceipt;
use glove_types::Rejection;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

/// How long connections still open at the agent's end may finish.
pub(super) const FINISH_GRACE: Duration = Duration::from_secs(2);

/// The egress policy a plan's session gets: `None` (offline) when it names
/// none with endpoints; more than one is refused.
pub(super) fn settings_for<'a>(
    policy: &'a ValidatedPolicy,
    admitted: &AdmittedPlan,
) -> Result<Option<&'a EgressSettings>, Rejection> {
    let mut found: Option<&EgressSettings> = None;
    for id in admitted.egress_policy_ids() {
        let Some(s) = policy
            .egress_policies()
            .iter()
            .find(|e| e.id() == id)
            .and_then(|e| e.settings())
        else {
            continue;
        };
        if found.is_some() {
            return Err(Rejection::new(
                SESSION_EGRESS_CONFLICT,
                "the plan names more than one egress policy with endpoints",
            ));
        }
        found = Some(s);
    }
    Ok(found)
}

/// A session's egress before the launch: the credentials are read, the
/// spec has the variables and ports.
pub(super) struct EgressStart {
    settings: EgressSettings,
    broker: Broker,
}

fn failed(m: impl Into<String>) -> Rejection {
    Rejection::new(SESSION_EGRESS_FAILED, m)
}

impl EgressStart {
    /// Reads the brokered credentials and sets the spec's environment and
    /// egress ports.
    pub(super) fn prepare(
        settings: &EgressSettings,
        spec: &mut SpecWire,
    ) -> Result<EgressStart, Rejection> {
        let broker = Broker::prepare(settings).map_err(|e| {
            // The message can name a host path: the log has it.
            tracing::warn!(code = e.code().as_str(), "brokered credential: {e}");
            failed(format!(
                "{}: a brokered credential could not be read",
                e.code().as_str()
            ))
        })?;
        spec.environment
            .extend(glove_egress::sandbox_environment(&broker));
        spec.egress_ports = Some(glove_egress::sandbox_ports(settings));
        for (path, text) in glove_egress::sandbox_trust_files(
            &broker,
            Path::new(glove_egress::TlsRoots::default_bundle()),
        ) {
            spec.files.retain(|(p, _)| p != &path);
            spec.files.push((path, text));
        }
        Ok(EgressStart {
            settings: settings.clone(),
            broker,
        })
    }

    /// Makes the channel and starts the proxy on its host end; returns the
    /// running proxy and the sandbox's end (for the launcher).
    pub(super) fn start(
        self,
        session_id: &SessionId,
        journal_dir: &Path,
    ) -> Result<(ProxyHandle, OwnedFd), Rejection> {
        let (host_end, sandbox_end) =
            glove_sandbox::egress_channel().map_err(|e| failed(format!("egress channel: {e}")))?;
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(journal_dir)
                .map_err(|e| failed(format!("egress journal directory: {e}")))?;
        }
        let config = ProxyConfig {
            session_id: session_id.clone(),
            settings: self.settings,
            journal_path: journal_dir.join(format!("{}.journal", session_id.as_str())),
            limits: ProxyLimits::default(),
            tls_roots: glove_egress::TlsRoots::default(),
        };
        let handle = glove_egress::start(config, self.broker, host_end).map_err(|e| {
            tracing::warn!(code = e.code().as_str(), "egress proxy: {e}");
            failed(format!(
                "{}: the egress proxy could not be started",
                e.code().as_str()
            ))
        })?;
        Ok((handle, sandbox_end))
    }
}

/// The receipt's egress summary.
pub(super) fn receipt_of(s: &Summary) -> EgressReceipt {
    EgressReceipt {
        policy_id: s.policy_id.as_str().to_owned(),
        connections_allowed: s.connections_allowed,
        connections_refused: s.connections_refused,
        requests_allowed: s.requests_allowed,
        requests_refused: s.requests_refused,
        bytes_up: s.bytes_up,
        bytes_down: s.bytes_down,
        journal_records: s.journal_records,
        journal_head: s.journal_head.iter().map(|b| format!("{b:02x}")).collect(),
    }
}
