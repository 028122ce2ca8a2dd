//! The one internal error of the service logic, and its single mapping to
//! the wire.
//!
//! Everything below dispatch returns a [`ControlError`]; dispatch (and only
//! dispatch, see [`crate::service`]) turns it into a
//! [`RpcError`](crate::protocol::RpcError) with [`ControlError::to_wire`].
//! Every variant has a stable [`code`](ControlError::code); messages never
//! name host paths.

use crate::protocol::{RpcError, INTERNAL_ERROR, INVALID_PARAMS};
use glove_journal::JournalError;
use glove_lifecycle::{LifecycleError, PortError, StartAuthError};
use glove_types::codes::control::{CONTROL_INTERNAL, METHOD_NOT_FOUND};
use glove_types::{ErrorCode, Rejection};

/// What went wrong while serving a request.
#[derive(Debug)]
pub enum ControlError {
    /// The request's parameters do not decode (JSON-RPC "invalid params").
    InvalidParams(Rejection),
    /// The request is refused as made: a code, a message and where.
    Refused(Rejection),
    /// The lifecycle refused a transition.
    Lifecycle(LifecycleError),
    /// A store, journal or other port failed with its own code.
    Port(PortError),
    /// The session store or the receipt journal failed.
    Journal(JournalError),
    /// The start authorization is refused.
    Authorization(StartAuthError),
    /// The method is not advertised by this service.
    MethodNotFound(String),
    /// An invariant of the service did not hold (a poisoned lock, a
    /// missing component); the detail goes to the log, not the wire.
    Internal(&'static str),
}

impl ControlError {
    /// A refusal with `code` and `message`.
    pub fn refused(code: ErrorCode, message: impl Into<String>) -> ControlError {
        ControlError::Refused(Rejection::new(code, message))
    }

    /// The stable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            ControlError::InvalidParams(r) | ControlError::Refused(r) => r.code(),
            ControlError::Lifecycle(e) => e.code(),
            ControlError::Port(e) => e.code(),
            ControlError::Journal(e) => e.code(),
            ControlError::Authorization(e) => e.code(),
            ControlError::MethodNotFound(_) => METHOD_NOT_FOUND,
            ControlError::Internal(_) => CONTROL_INTERNAL,
        }
    }

    /// The error as the wire carries it: the one place this mapping is
    /// made.
    pub fn to_wire(&self) -> RpcError {
        match self {
            ControlError::InvalidParams(r) => {
                let mut e = RpcError::from_rejection(r);
                e.rpc_code = INVALID_PARAMS;
                e
            }
            ControlError::Refused(r) => RpcError::from_rejection(r),
            ControlError::Lifecycle(e) => {
                RpcError::from_rejection(&Rejection::new(e.code(), e.code().meaning()))
            }
            ControlError::Port(e) => {
                RpcError::from_rejection(&Rejection::new(e.code(), e.code().meaning()))
            }
            // Journal messages name sessions and numbers, never paths.
            ControlError::Journal(e) => {
                RpcError::from_rejection(&Rejection::new(e.code(), e.to_string()))
            }
            ControlError::Authorization(e) => RpcError::from_rejection(
                &Rejection::new(e.code(), e.to_string()).at("authorization"),
            ),
            ControlError::MethodNotFound(m) => RpcError::method_not_found(m),
            ControlError::Internal(_) => RpcError::new(
                INTERNAL_ERROR,
                CONTROL_INTERNAL,
                "the service could not complete the request",
            ),
        }
    }
}

impl core::fmt::Display for ControlError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ControlError::Internal(what) => write!(f, "{CONTROL_INTERNAL}: {what}"),
            other => {
                let w = other.to_wire();
                write!(f, "{}: {}", w.code, w.message)
            }
        }
    }
}

impl std::error::Error for ControlError {}

impl From<Rejection> for ControlError {
    fn from(r: Rejection) -> Self {
        ControlError::Refused(r)
    }
}

impl From<LifecycleError> for ControlError {
    fn from(e: LifecycleError) -> Self {
        ControlError::Lifecycle(e)
    }
}

impl From<PortError> for ControlError {
    fn from(e: PortError) -> Self {
        ControlError::Port(e)
    }
}

impl From<JournalError> for ControlError {
    fn from(e: JournalError) -> Self {
        ControlError::Journal(e)
    }
}

impl From<StartAuthError> for ControlError {
    fn from(e: StartAuthError) -> Self {
        ControlError::Authorization(e)
    }
}

/// The lock policy, in two parts.
///
/// * The shared session store and receipt journal (and the used-nonce
///   set): [`lock`]. A lock poisoned by a panic fails closed: the request
///   gets `control_internal`, and so does every later request that needs
///   that lock; nothing is written through a value a panic may have left
///   half-changed. A restart replays the durable state.
/// * In-memory registries that hold nothing durable (live sessions, their
///   transcripts and writers): [`mem`]. A poisoned one is used as it is,
///   so a session thread can still report its end through the durable
///   path (which takes [`lock`] and fails closed there).
pub fn lock<T>(m: &std::sync::Mutex<T>) -> Result<std::sync::MutexGuard<'_, T>, ControlError> {
    m.lock().map_err(|_| {
        tracing::error!("a service lock is poisoned; requests that need it fail until a restart");
        ControlError::Internal("poisoned lock")
    })
}

/// The in-memory side of the lock policy (see [`lock`]).
pub fn mem<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use glove_types::codes::control::SESSION_NOT_LIVE;

    #[test]
    fn each_variant_keeps_its_code_on_the_wire() {
        let cases = [
            ControlError::refused(SESSION_NOT_LIVE, "gone"),
            ControlError::InvalidParams(Rejection::new(SESSION_NOT_LIVE, "x")),
            ControlError::MethodNotFound("nope".into()),
            ControlError::Internal("test"),
        ];
        for c in &cases {
            assert_eq!(c.to_wire().code, c.code(), "{c}");
        }
        assert_eq!(cases[1].to_wire().rpc_code, INVALID_PARAMS);
        assert_eq!(cases[3].to_wire().rpc_code, INTERNAL_ERROR);
    }

    #[test]
    fn a_poisoned_lock_fails_closed() {
        let m = std::sync::Arc::new(std::sync::Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock();
            panic!("poison");
        })
        .join();
        let e = lock(&m).expect_err("refused");
        assert_eq!(e.code(), CONTROL_INTERNAL);
    }
}
