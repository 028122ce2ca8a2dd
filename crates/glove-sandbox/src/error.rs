//! The sandbox error: a stable code, the step that failed, and detail.

use glove_types::codes::sandbox::*;
use glove_types::ErrorCode;
use std::fmt;

/// Why a launch was refused or failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SandboxError {
    /// The launch spec breaks a rule.
    Spec {
        /// What is wrong.
        detail: String,
    },
    /// The caller is multi-threaded.
    Multithreaded {
        /// Threads seen in `/proc/self/status`.
        threads: u32,
    },
    /// A limit cannot be enforced as strictly as required.
    LimitUnenforceable {
        /// Which limit.
        limit: &'static str,
        /// Why.
        detail: String,
    },
    /// cgroup setup failed.
    Cgroup {
        /// What failed.
        detail: String,
    },
    /// clone3 failed.
    Clone {
        /// errno text.
        detail: String,
    },
    /// A setup step inside the sandbox failed.
    Setup {
        /// The step, e.g. `pivot_root`.
        step: String,
        /// errno text.
        detail: String,
    },
    /// A read-only bind target lies at or below a writable directory,
    /// which would hide it.
    BindShadowed {
        /// The bind's target inside the sandbox.
        target: String,
        /// The writable directory laid over it.
        by: String,
    },
    /// A read-only bind or grant would expose a Unix socket.
    SocketExposed {
        /// Which bind and which socket.
        detail: String,
    },
    /// A path grant was refused.
    Grant {
        /// Which grant and why.
        detail: String,
    },
    /// A library bundle was refused.
    Bundle {
        /// Which bundle and why.
        detail: String,
    },
    /// The pinned executable is not the file that was resolved.
    ExecutableChanged {
        /// What differed.
        detail: String,
    },
    /// A credential lease could not be bound.
    Lease {
        /// Which lease and why.
        detail: String,
    },
    /// Copying a directory in failed.
    Copy {
        /// What failed.
        detail: String,
    },
    /// seccomp filter build or install failed.
    Seccomp {
        /// What failed.
        detail: String,
    },
    /// `execve` failed.
    Exec {
        /// The executable.
        executable: String,
        /// errno text.
        detail: String,
    },
    /// Talking to the sandbox failed.
    Io {
        /// What failed.
        detail: String,
    },
}

impl SandboxError {
    /// The stable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            SandboxError::Spec { .. } => SANDBOX_SPEC_INVALID,
            SandboxError::Multithreaded { .. } => SANDBOX_MULTITHREADED,
            SandboxError::LimitUnenforceable { .. } => SANDBOX_LIMIT_UNENFORCEABLE,
            SandboxError::Cgroup { .. } => SANDBOX_CGROUP_FAILED,
            SandboxError::Clone { .. } => SANDBOX_CLONE_FAILED,
            SandboxError::Setup { .. } => SANDBOX_SETUP_FAILED,
            SandboxError::Copy { .. } => SANDBOX_COPY_FAILED,
            SandboxError::BindShadowed { .. } => SANDBOX_BIND_SHADOWED,
            SandboxError::SocketExposed { .. } => SANDBOX_SOCKET_EXPOSED,
            SandboxError::Grant { .. } => SANDBOX_GRANT_REFUSED,
            SandboxError::Bundle { .. } => SANDBOX_BUNDLE_REFUSED,
            SandboxError::ExecutableChanged { .. } => SANDBOX_EXECUTABLE_CHANGED,
            SandboxError::Lease { .. } => SANDBOX_LEASE_REFUSED,
            SandboxError::Seccomp { .. } => SANDBOX_SECCOMP_FAILED,
            SandboxError::Exec { .. } => SANDBOX_EXEC_FAILED,
            SandboxError::Io { .. } => SANDBOX_IO_FAILED,
        }
    }
}

impl fmt::Display for SandboxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SandboxError::Spec { detail } => write!(f, "invalid launch spec: {detail}"),
            SandboxError::Multithreaded { threads } => write!(
                f,
                "launch needs a single-threaded process; this one has {threads} threads"
            ),
            SandboxError::LimitUnenforceable { limit, detail } => {
                write!(
                    f,
                    "the {limit} limit cannot be enforced strictly here: {detail}"
                )
            }
            SandboxError::Cgroup { detail } => write!(f, "cgroup setup failed: {detail}"),
            SandboxError::Clone { detail } => {
                write!(f, "cannot create the sandbox namespaces: {detail}")
            }
            SandboxError::Setup { step, detail } => {
                write!(f, "sandbox setup failed at {step}: {detail}")
            }
            SandboxError::Copy { detail } => write!(f, "copy into the sandbox failed: {detail}"),
            SandboxError::BindShadowed { target, by } => write!(
                f,
                "the read-only bind {target} would be hidden by the writable directory {by}"
            ),
            SandboxError::SocketExposed { detail } => {
                write!(f, "a read-only mount would expose a socket: {detail}")
            }
            SandboxError::Grant { detail } => write!(f, "path grant refused: {detail}"),
            SandboxError::ExecutableChanged { detail } => {
                write!(f, "the executable was swapped or changed: {detail}")
            }
            SandboxError::Lease { detail } => write!(f, "credential lease refused: {detail}"),
            SandboxError::Bundle { detail } => write!(f, "library bundle refused: {detail}"),
            SandboxError::Seccomp { detail } => write!(f, "seccomp: {detail}"),
            SandboxError::Exec { executable, detail } => {
                write!(f, "cannot execute {executable} in the sandbox: {detail}")
            }
            SandboxError::Io { detail } => write!(f, "sandbox I/O failed: {detail}"),
        }
    }
}

impl std::error::Error for SandboxError {}
