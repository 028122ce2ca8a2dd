//! A managed session's egress: the plan's egress policy (at most one with
//! endpoints), its brokered credentials, the channel and the session's
//! proxy, and the summary the receipt commits to.

use glove_egress::{Broker, ProxyConfig, ProxyHandle, ProxyLimits, Summary, TlsRoots};
use glove_sandbox::wire::SpecWire;
use glove_types::codes::control::{
    SESSION_CREDENTIAL_UNSUPPORTED, SESSION_EGRESS_CONFLICT, SESSION_EGRESS_FAILED,
};
use glove_types::egress::settings::EgressSettings;
use glove_types::ids::{SecretHandle, SessionId};
use glove_types::plan::AdmittedPlan;
use glove_types::policy::ValidatedPolicy;
use glove_types::receipt::EgressReceipt;
use glove_types::Rejection;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

/// How long connections still open at the agent's end may finish.
pub(super) const FINISH_GRACE: Duration = Duration::from_secs(2);

/// The handles the plan's egress policy brokers that the plan names (each
/// one the proxy's; none of them is a lease).
pub(super) fn brokered_handles(
    policy: &ValidatedPolicy,
    admitted: &AdmittedPlan,
) -> Vec<SecretHandle> {
    match settings_for(policy, admitted) {
        Ok(Some(s)) => s
            .brokered()
            .iter()
            .map(|b| b.secret_handle.clone())
            .filter(|h| admitted.secret_handles().contains(h))
            .collect(),
        _ => Vec::new(),
    }
}

/// Whether any egress policy of the policy brokers `handle` (such a key
/// is only ever the proxy's, never a lease).
pub(super) fn brokered_by_any(policy: &ValidatedPolicy, handle: &SecretHandle) -> bool {
    policy.egress_policies().iter().any(|e| {
        e.settings()
            .is_some_and(|s| s.brokered().iter().any(|b| &b.secret_handle == handle))
    })
}

/// What the session's proxy enforces: the plan's egress policy, with only
/// the brokered credentials the plan names in `secret_handles` (so an
/// approver sees every credential a session can use; the others are not
/// even given a placeholder). A credential source bound to a runtime
/// (`runtime_id`) is brokered only for that runtime.
pub(super) fn session_settings(
    policy: &ValidatedPolicy,
    admitted: &AdmittedPlan,
    runtime: &str,
) -> Result<Option<EgressSettings>, Rejection> {
    let Some(s) = settings_for(policy, admitted)? else {
        return Ok(None);
    };
    let s = s.keep_brokered(admitted.secret_handles());
    for b in s.brokered() {
        let bound = policy
            .credential_sources()
            .iter()
            .find(|c| c.handle() == &b.secret_handle)
            .and_then(|c| c.runtime_id());
        if let Some(r) = bound {
            if r.as_str() != runtime {
                return Err(Rejection::new(
                    SESSION_CREDENTIAL_UNSUPPORTED,
                    format!(
                        "the credential source of {} is bound to runtime {}",
                        b.secret_handle.as_str(),
                        r.as_str()
                    ),
                )
                .at("secret_handles"));
            }
        }
    }
    Ok(Some(s))
}

/// The egress policy a plan's session gets: `None` (offline) when it names
/// none with endpoints; more than one is refused.
fn settings_for<'a>(
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
    roots: TlsRoots,
}

fn failed(m: impl Into<String>) -> Rejection {
    Rejection::new(SESSION_EGRESS_FAILED, m)
}

impl EgressStart {
    /// Finds the system bundle (with `extra_roots` added: the roots
    /// upstreams are verified against), reads the brokered credentials and
    /// sets the spec's environment, egress ports and trust files.
    pub(super) fn prepare(
        settings: &EgressSettings,
        extra_roots: &[String],
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
        // Upstreams are verified only inside terminated tunnels: a policy
        // without them needs no system bundle.
        let roots = if broker.terminates_tls() {
            TlsRoots::system()
                .map(|r| TlsRoots {
                    extra_pem: extra_roots.to_vec(),
                    ..r
                })
                // Read now, as the proxy will: a bundle that cannot be used
                // refuses the start before the sandbox's trust file is made
                // from it.
                .and_then(|r| r.check().map(|()| r))
                .map_err(|e| {
                    tracing::warn!(code = e.code().as_str(), "egress trust roots: {e}");
                    failed(format!(
                        "{}: the upstream trust roots are unusable",
                        e.code().as_str()
                    ))
                })?
        } else {
            TlsRoots {
                extra_pem: extra_roots.to_vec(),
                system_bundle: None,
            }
        };
        spec.environment
            .extend(glove_egress::sandbox_environment(&broker));
        spec.egress_ports = Some(glove_egress::sandbox_ports(settings));
        for (path, text) in glove_egress::sandbox_trust_files(&broker, &roots) {
            spec.files.retain(|(p, _)| p != &path);
            spec.files.push((path, text));
        }
        Ok(EgressStart {
            settings: settings.clone(),
            broker,
            roots,
        })
    }

    /// The egress policy's id.
    pub(super) fn policy_id(&self) -> String {
        self.settings.policy_id().as_str().to_owned()
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
            tls_roots: self.roots,
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
        requests_failed: s.requests_failed,
        connections_closed: s.connections_closed,
        refusals_unjournaled: s.refusals_unjournaled,
        names_resolved: s.names_resolved,
        bytes_up: s.bytes_up,
        bytes_down: s.bytes_down,
        journal_records: s.journal_records,
        journal_head: s.journal_head.iter().map(|b| format!("{b:02x}")).collect(),
        audit_failed: s.audit_failed,
    }
}

/// The receipt's egress member when the proxy could not report: the
/// policy, no counts, a zero head, and `audit_failed`, so a failed proxy
/// is never mistaken for an offline session.
pub(super) fn receipt_of_failure(policy_id: &str) -> EgressReceipt {
    EgressReceipt {
        policy_id: policy_id.to_owned(),
        connections_allowed: 0,
        connections_refused: 0,
        requests_allowed: 0,
        requests_refused: 0,
        requests_failed: 0,
        connections_closed: 0,
        refusals_unjournaled: 0,
        names_resolved: 0,
        bytes_up: 0,
        bytes_down: 0,
        journal_records: 0,
        journal_head: "0".repeat(64),
        audit_failed: true,
    }
}
