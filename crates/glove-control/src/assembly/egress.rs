//! The egress part: the session's proxy on its own channel, the
//! credentials it brokers, the roots it verifies upstreams against, and
//! the summary of what left the sandbox.

use super::{AttachError, SpecParts};
use glove_egress::{Broker, ProxyConfig, ProxyHandle, ProxyLimits, Summary, TlsRoots};
use glove_types::codes::egress::{EGRESS_PROXY_FAILED, EGRESS_TRUST_ROOTS_INVALID};
use glove_types::egress::settings::EgressSettings;
use glove_types::ids::SessionId;
use glove_types::receipt::EgressReceipt;
use glove_types::{ErrorCode, Rejection};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long connections still open at the agent's end may finish.
const FINISH_GRACE: Duration = Duration::from_secs(2);

/// What the egress part needs.
pub struct EgressInput {
    /// The validated egress policy the proxy enforces.
    pub settings: EgressSettings,
    /// Roots trusted for upstreams besides the system bundle (PEM texts,
    /// read with [`read_extra_roots`]).
    pub extra_roots: Vec<String>,
    /// The egress journal (a new file in an existing private directory).
    pub journal: PathBuf,
}

/// The extra roots an operator names (`--egress-ca` of `glove exec` and
/// `gloved`), read now: each a protected file (mode 0600, owned by the
/// caller, one link, at most 1 MiB) holding PEM certificates and nothing
/// else, at most [`glove_egress::MAX_EXTRA_ROOTS`] files. Any fault is
/// `egress_trust_roots_invalid`.
pub fn read_extra_roots(files: &[PathBuf]) -> Result<Vec<String>, Rejection> {
    if files.len() > glove_egress::MAX_EXTRA_ROOTS {
        return Err(Rejection::new(
            EGRESS_TRUST_ROOTS_INVALID,
            format!(
                "--egress-ca is given {} times; at most {}",
                files.len(),
                glove_egress::MAX_EXTRA_ROOTS
            ),
        ));
    }
    let mut roots = TlsRoots {
        extra_pem: Vec::new(),
        system_bundle: None,
    };
    for f in files {
        let bytes = crate::protected::read(
            f,
            crate::protected::Requirements {
                max_bytes: glove_egress::MAX_EXTRA_ROOT_BYTES,
                mode: 0o600,
            },
        )
        .map_err(|r| {
            Rejection::new(
                EGRESS_TRUST_ROOTS_INVALID,
                format!("--egress-ca: {} ({})", r.message(), r.code().as_str()),
            )
        })?;
        roots
            .add_extra_pem(&f.display().to_string(), &bytes)
            .map_err(|e| Rejection::new(e.code(), e.to_string()))?;
    }
    Ok(roots.extra_pem)
}

/// Makes `dir` (and its parents) with mode 0700 if missing: where a
/// door keeps its egress journals.
pub fn journal_dir(dir: &Path) -> Result<(), AttachError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| {
            AttachError::new(
                EGRESS_PROXY_FAILED,
                "the egress journal directory could not be made",
                format!("{}: {e}", dir.display()),
            )
        })
}

/// The egress part, prepared: credentials read, the spec changed, the
/// channel's host end kept.
pub(super) struct Prepared {
    settings: EgressSettings,
    broker: Broker,
    roots: TlsRoots,
    journal: PathBuf,
    host_end: OwnedFd,
}

/// The proxy serving a session.
pub(super) struct Running {
    handle: ProxyHandle,
    policy_id: String,
    journal: PathBuf,
}

/// What the proxy reports at the end.
#[derive(Debug)]
pub struct EgressReport {
    /// The egress policy served.
    pub policy_id: String,
    /// The egress journal.
    pub journal: PathBuf,
    /// The proxy's summary, or the code and message of why it has none.
    pub result: Result<Summary, (ErrorCode, String)>,
}

fn fault(e: &glove_egress::EgressError, summary: &str) -> AttachError {
    AttachError::new(e.code(), summary, e)
}

impl Prepared {
    /// Reads the brokered credentials and (when the proxy will terminate
    /// TLS) the trust roots; makes the channel; gives the spec the
    /// proxy's environment, the egress ports and the trust files.
    pub(super) fn prepare(
        input: EgressInput,
        spec: &mut impl SpecParts,
    ) -> Result<Prepared, AttachError> {
        let EgressInput {
            settings,
            extra_roots,
            journal,
        } = input;
        let broker = Broker::prepare(&settings)
            .map_err(|e| fault(&e, "a brokered credential could not be read"))?;
        // Upstreams are verified only inside terminated tunnels: a policy
        // without them needs no system bundle (the extra roots were checked
        // when they were read).
        let roots = if broker.terminates_tls() {
            // Read now, as the proxy will: roots that cannot be used refuse
            // the launch (the sandbox's trust file is made from them)
            // rather than end it.
            TlsRoots::system()
                .map(|r| TlsRoots {
                    extra_pem: extra_roots,
                    ..r
                })
                .and_then(|r| r.check().map(|()| r))
                .map_err(|e| fault(&e, "the upstream trust roots are unusable"))?
        } else {
            TlsRoots {
                extra_pem: extra_roots,
                system_bundle: None,
            }
        };
        let (host_end, sandbox_end) = glove_sandbox::egress_channel()
            .map_err(|e| AttachError::new(e.code(), "the egress channel could not be made", e))?;
        for entry in glove_egress::sandbox_environment(&broker) {
            spec.set_env(entry);
        }
        spec.set_egress(glove_egress::sandbox_ports(&settings), sandbox_end);
        for (path, text) in glove_egress::sandbox_trust_files(&broker, &roots) {
            spec.put_file(path, text);
        }
        Ok(Prepared {
            settings,
            broker,
            roots,
            journal,
            host_end,
        })
    }

    /// Starts the proxy on the channel's host end.
    pub(super) fn start(self, session_id: &SessionId) -> Result<Running, AttachError> {
        let policy_id = self.settings.policy_id().as_str().to_owned();
        let config = ProxyConfig {
            session_id: session_id.clone(),
            settings: self.settings,
            journal_path: self.journal.clone(),
            limits: ProxyLimits::default(),
            tls_roots: self.roots,
        };
        let handle = glove_egress::start(config, self.broker, self.host_end)
            .map_err(|e| fault(&e, "the egress proxy could not be started"))?;
        Ok(Running {
            handle,
            policy_id,
            journal: self.journal,
        })
    }
}

impl Running {
    /// Stops the proxy (open connections get [`FINISH_GRACE`]).
    pub(super) fn finish(self) -> EgressReport {
        let result = self.handle.finish(FINISH_GRACE).map_err(|e| {
            tracing::error!(code = e.code().as_str(), "egress proxy: {e}");
            (e.code(), e.to_string())
        });
        EgressReport {
            policy_id: self.policy_id,
            journal: self.journal,
            result,
        }
    }
}

impl EgressReport {
    /// The receipt's egress member. A proxy that could not report gives
    /// the policy, no counts, a zero head and `audit_failed`, so a failed
    /// proxy is never mistaken for an offline session.
    pub fn receipt(&self) -> EgressReceipt {
        match &self.result {
            Ok(s) => EgressReceipt {
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
                journal_head: glove_types::digest::to_hex(&s.journal_head),
                audit_failed: s.audit_failed,
            },
            Err(_) => EgressReceipt {
                policy_id: self.policy_id.clone(),
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
            },
        }
    }
}
