//! [`EgressError`]: why the proxy could not be set up or finished.
//!
//! Refusals of a single connection or request are not errors of the
//! proxy: they are answered to the agent and audited (see the crate docs).

use glove_journal::JournalError;
use glove_types::ids::SecretHandle;

/// A failure to prepare, start or finish a session's egress proxy.
///
/// No variant ever carries a brokered credential's value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EgressError {
    /// The egress journal could not be created, written or read.
    #[error("egress journal: {0}")]
    Journal(#[from] JournalError),
    /// A brokered credential's source could not be used.
    #[error("brokered credential {handle}: {reason}")]
    Credential {
        /// The credential's handle.
        handle: SecretHandle,
        /// What is wrong with its source (never its value).
        reason: String,
    },
    /// A system call or the runtime failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The underlying error.
        source: std::io::Error,
    },
    /// An audit event in the journal does not decode.
    #[error("egress journal record {seq}: {message}")]
    Event {
        /// The record's sequence number.
        seq: u64,
        /// Why it does not decode.
        message: String,
    },
    /// The roots upstreams are verified against are unusable (no system
    /// bundle found, or a bundle or extra root that cannot be read or
    /// holds no certificate).
    #[error("upstream trust roots: {0}")]
    TrustRoots(String),
    /// The proxy's thread ended abnormally.
    #[error("the egress proxy thread panicked")]
    Panicked,
}

impl EgressError {
    /// The stable code.
    pub fn code(&self) -> glove_types::ErrorCode {
        use glove_types::codes::egress::*;
        match self {
            // Where the journal was put is the operator's to fix: the
            // placement's own code, not an audit failure.
            EgressError::Journal(e @ JournalError::Placement(_)) => e.code(),
            EgressError::Journal(_) => EGRESS_AUDIT_FAILED,
            EgressError::Credential { .. } => EGRESS_CREDENTIAL_UNAVAILABLE,
            EgressError::Event { .. } => EGRESS_EVENT_INVALID,
            EgressError::TrustRoots(_) => EGRESS_TRUST_ROOTS_INVALID,
            EgressError::Io { .. } | EgressError::Panicked => EGRESS_PROXY_FAILED,
        }
    }

    pub(crate) fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> EgressError {
        move |source| EgressError::Io { what, source }
    }
}
