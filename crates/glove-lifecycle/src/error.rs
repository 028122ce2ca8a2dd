//! The crate's error type.
//!
//! One `#[non_exhaustive]` enum with typed context; every variant maps to a
//! stable [`ErrorCode`] through [`LifecycleError::code`]. Start-authorization
//! failures have their own enum ([`StartAuthError`]) because the verifier is
//! usable on its own; they are carried here unchanged, code included.

use crate::start_auth::StartAuthError;
use core::fmt;
use glove_types::codes::lifecycle as c;
use glove_types::stage::{ApplyState, SessionStage};
use glove_types::{ErrorCode, Rejection};

use crate::proof::SubjectKind;

/// Why a lifecycle operation was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LifecycleError {
    /// A port (transition log, receipt log, cleanup) reported a failure; the
    /// port's own code is kept and returned by [`LifecycleError::code`].
    Port {
        /// The code the port reported.
        code: ErrorCode,
    },
    /// The log acknowledged a record other than the one it was handed.
    AppendReceiptMismatch {
        /// Sequence number of the record that was handed to the log.
        expected_seq: u64,
        /// Sequence number named by the acknowledgement.
        acknowledged_seq: u64,
    },
    /// A durable proof belongs to another session or transaction.
    ProofSubjectMismatch {
        /// The subject the transition is for.
        expected: String,
        /// The subject the proof was minted for.
        found: String,
    },
    /// A durable proof does not follow the subject's last record.
    ProofStale {
        /// The sequence number the next record must have.
        expected_seq: u64,
        /// The proof's sequence number.
        found_seq: u64,
    },
    /// A transition already recorded is repeated with different input.
    TransitionConflict {
        /// Which kind of subject.
        kind: SubjectKind,
        /// Sequence number of the record already stored.
        seq: u64,
    },
    /// A replayed session record moves between stages the graph forbids.
    IllegalTransition {
        /// Stage before the record.
        from: SessionStage,
        /// Stage the record enters.
        to: SessionStage,
    },
    /// A replayed apply record moves between states the graph forbids.
    IllegalApplyTransition {
        /// State before the record.
        from: ApplyState,
        /// State the record enters.
        to: ApplyState,
    },
    /// A dynamic session is not in the stage a typed conversion needs.
    WrongStage {
        /// The stage asked for.
        expected: SessionStage,
        /// The session's stage.
        actual: SessionStage,
    },
    /// A recovered apply transaction is not in the state asked for.
    WrongApplyState {
        /// The state asked for.
        expected: ApplyState,
        /// The transaction's state.
        actual: ApplyState,
    },
    /// A stored record could not be decoded or names invalid values.
    RecordInvalid {
        /// The underlying rejection (a JSON, id or digest code).
        detail: Rejection,
    },
    /// Stored records are out of sequence or break the digest chain.
    RecordSequence {
        /// The sequence number expected next.
        expected_seq: u64,
        /// The sequence number found.
        found_seq: u64,
    },
    /// A replayed record names another subject.
    RecordForeign {
        /// The subject being rebuilt.
        expected: String,
        /// The subject the record names.
        found: String,
    },
    /// A replayed history does not begin with its creation (or reservation)
    /// record.
    MissingCreation {
        /// Which kind of subject.
        kind: SubjectKind,
    },
    /// A process identity field is out of range.
    ProcessIdentityInvalid {
        /// The offending field.
        field: &'static str,
    },
    /// The launch specification to bind is not canonical JSON.
    LaunchSpecInvalid {
        /// The canonical-JSON rejection.
        detail: Rejection,
    },
    /// No durable terminal receipt exists for the subject.
    ReceiptMissing {
        /// The receipt sequence number that was referenced.
        receipt_seq: u64,
    },
    /// The durable terminal receipt differs from the reference.
    ReceiptMismatch {
        /// The referenced receipt sequence number.
        referenced_seq: u64,
        /// The durable receipt's sequence number.
        durable_seq: u64,
    },
    /// The durable terminal receipt is of another kind than the session's
    /// plan requires.
    ReceiptKindMismatch {
        /// The kind the plan requires.
        expected: crate::evidence::TerminalKind,
        /// The kind the receipt log holds.
        durable: crate::evidence::TerminalKind,
    },
    /// A recorded failure code is not in the catalogue.
    FailureCodeUnknown {
        /// The code as stored (at most 64 characters kept).
        code: String,
    },
    /// A start authorization was refused.
    StartAuth(StartAuthError),
    /// An apply grant id was already reserved.
    GrantReused,
    /// An apply authorization digest was already reserved.
    AuthorizationReused,
    /// An apply manifest digest was already reserved.
    ManifestReused,
    /// The single-use registry is at its bound.
    RegistryFull {
        /// The registry's bound, in reservations.
        capacity: usize,
    },
}

impl LifecycleError {
    /// The stable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            LifecycleError::Port { code } => *code,
            LifecycleError::AppendReceiptMismatch { .. } => c::LIFECYCLE_APPEND_RECEIPT_MISMATCH,
            LifecycleError::ProofSubjectMismatch { .. } => c::LIFECYCLE_PROOF_SUBJECT_MISMATCH,
            LifecycleError::ProofStale { .. } => c::LIFECYCLE_PROOF_STALE,
            LifecycleError::TransitionConflict { .. } => c::LIFECYCLE_TRANSITION_CONFLICT,
            LifecycleError::IllegalTransition { .. } => c::LIFECYCLE_ILLEGAL_TRANSITION,
            LifecycleError::IllegalApplyTransition { .. } => c::LIFECYCLE_ILLEGAL_TRANSITION,
            LifecycleError::WrongStage { .. } => c::LIFECYCLE_WRONG_STAGE,
            LifecycleError::WrongApplyState { .. } => c::LIFECYCLE_WRONG_STAGE,
            LifecycleError::RecordInvalid { .. } => c::LIFECYCLE_RECORD_INVALID,
            LifecycleError::RecordSequence { .. } => c::LIFECYCLE_RECORD_SEQUENCE,
            LifecycleError::RecordForeign { .. } => c::LIFECYCLE_RECORD_FOREIGN,
            LifecycleError::MissingCreation { .. } => c::LIFECYCLE_RECORD_MISSING_CREATION,
            LifecycleError::ProcessIdentityInvalid { .. } => c::LIFECYCLE_PROCESS_IDENTITY_INVALID,
            LifecycleError::LaunchSpecInvalid { .. } => c::LIFECYCLE_LAUNCH_SPEC_INVALID,
            LifecycleError::ReceiptMissing { .. } => c::LIFECYCLE_RECEIPT_MISSING,
            LifecycleError::ReceiptMismatch { .. } => c::LIFECYCLE_RECEIPT_MISMATCH,
            LifecycleError::ReceiptKindMismatch { .. } => c::LIFECYCLE_RECEIPT_KIND_MISMATCH,
            LifecycleError::FailureCodeUnknown { .. } => c::LIFECYCLE_FAILURE_CODE_UNKNOWN,
            LifecycleError::StartAuth(e) => e.code(),
            LifecycleError::GrantReused => c::APPLY_GRANT_REUSED,
            LifecycleError::AuthorizationReused => c::APPLY_AUTHORIZATION_REUSED,
            LifecycleError::ManifestReused => c::APPLY_MANIFEST_REUSED,
            LifecycleError::RegistryFull { .. } => c::APPLY_REGISTRY_FULL,
        }
    }

    pub(crate) fn record(detail: Rejection) -> Self {
        LifecycleError::RecordInvalid { detail }
    }
}

impl fmt::Display for LifecycleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.code())?;
        match self {
            LifecycleError::Port { code } => write!(f, "a port reported {code}"),
            LifecycleError::AppendReceiptMismatch {
                expected_seq,
                acknowledged_seq,
            } => write!(
                f,
                "the log acknowledged record {acknowledged_seq} while record {expected_seq} was appended"
            ),
            LifecycleError::ProofSubjectMismatch { expected, found } => write!(
                f,
                "the durable proof belongs to {found:?}, not {expected:?}"
            ),
            LifecycleError::ProofStale {
                expected_seq,
                found_seq,
            } => write!(
                f,
                "the durable proof is for record {found_seq}; the next record is {expected_seq}"
            ),
            LifecycleError::TransitionConflict { kind, seq } => write!(
                f,
                "{} record {seq} is already stored with different content",
                kind.as_str()
            ),
            LifecycleError::IllegalTransition { from, to } => write!(
                f,
                "a session cannot move from {} to {}",
                from.as_str(),
                to.as_str()
            ),
            LifecycleError::IllegalApplyTransition { from, to } => {
                write!(f, "an apply transaction cannot move from {} to {}", from.as_str(), to.as_str())
            }
            LifecycleError::WrongStage { expected, actual } => write!(
                f,
                "the session is {}, not {}",
                actual.as_str(),
                expected.as_str()
            ),
            LifecycleError::WrongApplyState { expected, actual } => {
                write!(f, "the apply transaction is {}, not {}", actual.as_str(), expected.as_str())
            }
            LifecycleError::RecordInvalid { detail } => {
                write!(f, "stored record rejected ({}): {detail}", detail.code())
            }
            LifecycleError::RecordSequence {
                expected_seq,
                found_seq,
            } => write!(
                f,
                "expected record {expected_seq}, found record {found_seq} (or a broken digest chain)"
            ),
            LifecycleError::RecordForeign { expected, found } => {
                write!(f, "a record of {found:?} appeared in the history of {expected:?}")
            }
            LifecycleError::MissingCreation { kind } => write!(
                f,
                "the {} history does not begin with its first record",
                kind.as_str()
            ),
            LifecycleError::ProcessIdentityInvalid { field } => {
                write!(f, "process identity field {field} is out of range")
            }
            LifecycleError::LaunchSpecInvalid { detail } => {
                write!(f, "launch specification rejected ({}): {detail}", detail.code())
            }
            LifecycleError::ReceiptMissing { receipt_seq } => write!(
                f,
                "no durable terminal receipt (referenced receipt {receipt_seq})"
            ),
            LifecycleError::ReceiptMismatch {
                referenced_seq,
                durable_seq,
            } => write!(
                f,
                "referenced receipt {referenced_seq} differs from durable receipt {durable_seq}"
            ),
            LifecycleError::ReceiptKindMismatch { expected, durable } => write!(
                f,
                "the session's plan ends with a {} receipt; the durable receipt is {}",
                expected.as_str(),
                durable.as_str()
            ),
            LifecycleError::FailureCodeUnknown { code } => {
                write!(f, "failure code {code:?} is not in the catalogue")
            }
            LifecycleError::StartAuth(e) => write!(f, "{e}"),
            LifecycleError::GrantReused => f.write_str("the grant id was already reserved"),
            LifecycleError::AuthorizationReused => {
                f.write_str("the authorization digest was already reserved")
            }
            LifecycleError::ManifestReused => f.write_str("the manifest digest was already reserved"),
            LifecycleError::RegistryFull { capacity } => {
                write!(f, "the single-use registry holds its bound of {capacity}")
            }
        }
    }
}

impl std::error::Error for LifecycleError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LifecycleError::RecordInvalid { detail }
            | LifecycleError::LaunchSpecInvalid { detail } => Some(detail),
            LifecycleError::StartAuth(e) => Some(e),
            LifecycleError::Port { .. }
            | LifecycleError::AppendReceiptMismatch { .. }
            | LifecycleError::ProofSubjectMismatch { .. }
            | LifecycleError::ProofStale { .. }
            | LifecycleError::TransitionConflict { .. }
            | LifecycleError::IllegalTransition { .. }
            | LifecycleError::IllegalApplyTransition { .. }
            | LifecycleError::WrongStage { .. }
            | LifecycleError::WrongApplyState { .. }
            | LifecycleError::RecordSequence { .. }
            | LifecycleError::RecordForeign { .. }
            | LifecycleError::MissingCreation { .. }
            | LifecycleError::ProcessIdentityInvalid { .. }
            | LifecycleError::ReceiptMissing { .. }
            | LifecycleError::ReceiptMismatch { .. }
            | LifecycleError::ReceiptKindMismatch { .. }
            | LifecycleError::FailureCodeUnknown { .. }
            | LifecycleError::GrantReused
            | LifecycleError::AuthorizationReused
            | LifecycleError::ManifestReused
            | LifecycleError::RegistryFull { .. } => None,
        }
    }
}

impl From<StartAuthError> for LifecycleError {
    fn from(e: StartAuthError) -> Self {
        LifecycleError::StartAuth(e)
    }
}

/// A refused transition: the error, and the value the transition consumed,
/// handed back so the caller can still fail or inspect it.
#[must_use = "a refused transition hands the session back; keep or fail it"]
pub struct Refused<T> {
    // Boxed: sessions are a few hundred bytes and ride in the `Err` arm.
    inner: Box<(T, LifecycleError)>,
}

impl<T> Refused<T> {
    pub(crate) fn new(value: T, error: LifecycleError) -> Self {
        Self {
            inner: Box::new((value, error)),
        }
    }

    /// The reason.
    pub fn error(&self) -> &LifecycleError {
        &self.inner.1
    }

    /// The reason's stable code.
    pub fn code(&self) -> ErrorCode {
        self.inner.1.code()
    }

    /// The value handed back and the reason.
    pub fn into_parts(self) -> (T, LifecycleError) {
        *self.inner
    }
}

impl<T> fmt::Debug for Refused<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Refused")
            .field("error", &self.inner.1)
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Display for Refused<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.inner.1, f)
    }
}

impl<T> std::error::Error for Refused<T> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.inner.1)
    }
}

impl<T> From<Refused<T>> for LifecycleError {
    fn from(r: Refused<T>) -> Self {
        r.inner.1
    }
}
