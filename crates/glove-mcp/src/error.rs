//! [`McpError`]: why a mediator could not be set up, run or finished, or
//! why a stored file does not read.
//!
//! Refusals of single frames, requests and tool calls are not errors of
//! the mediator: they are answered to the agent and audited (see the crate
//! docs).

use glove_journal::JournalError;
use glove_types::Rejection;

/// A failure to start, run or finish a mediator.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The MCP audit journal could not be created, written or read.
    #[error("MCP audit journal: {0}")]
    Journal(#[from] JournalError),
    /// The pin file could not be read or written.
    #[error("pin file: {0}")]
    PinFile(Rejection),
    /// An upstream server could not be started or initialised.
    #[error("upstream {server}: {message}")]
    Upstream {
        /// The server id.
        server: String,
        /// What went wrong (may name the operator's own paths).
        message: String,
    },
    /// An upstream server did not answer in time during start.
    #[error("upstream {server}: no answer to {method} within the deadline")]
    UpstreamTimeout {
        /// The server id.
        server: String,
        /// The method that went unanswered.
        method: String,
    },
    /// The audit could not record a decision during start.
    #[error("the MCP audit failed")]
    AuditFailed,
    /// An audit event in the journal does not decode.
    #[error("MCP audit record {seq}: {message}")]
    Event {
        /// The record's sequence number.
        seq: u64,
        /// Why it does not decode.
        message: String,
    },
    /// A system call or the runtime failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl McpError {
    /// The stable code.
    pub fn code(&self) -> glove_types::ErrorCode {
        use glove_types::codes::mcp::*;
        match self {
            McpError::Journal(_) | McpError::AuditFailed => MCP_AUDIT_FAILED,
            McpError::PinFile(_) => MCP_PIN_FILE_INVALID,
            McpError::Upstream { .. } | McpError::Io { .. } => MCP_UPSTREAM_FAILED,
            McpError::UpstreamTimeout { .. } => MCP_UPSTREAM_TIMEOUT,
            McpError::Event { .. } => MCP_EVENT_INVALID,
        }
    }
}
