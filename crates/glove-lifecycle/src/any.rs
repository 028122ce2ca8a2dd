//! `AnySession`: the one dynamic view of a session, for the registry, replay
//! and the control protocol.
//!
//! Every variant holds a [`ParkedSession`]: the dynamic world holds no
//! brand, so a session kept here has to be branded again (a new scope, a
//! new brand) before it can log or move. Going back to a typed stage is
//! explicit and checked: `try_into_<stage>` returns the typed parked
//! session or, with `lifecycle_wrong_stage`, the `AnySession` unchanged. Every match over `AnySession` in this crate names
//! all seven variants; there is no catch-all arm to hide a forgotten stage.

use crate::error::{LifecycleError, Refused};
use crate::evidence::PlanDigests;
use crate::parked::ParkedSession;
#[cfg(feature = "test-support")]
use crate::record::SessionEntry;
#[cfg(feature = "test-support")]
use crate::session::Repeat;
use crate::session::Session;
use crate::stage::{Created, Exited, Failed, Preparing, Running, Starting, Stopping};
use glove_types::ids::SessionId;
use glove_types::stage::SessionStage;

/// A session in any stage.
#[derive(Debug)]
pub enum AnySession {
    /// See [`Created`].
    Created(ParkedSession<Created>),
    /// See [`Preparing`].
    Preparing(ParkedSession<Preparing>),
    /// See [`Starting`].
    Starting(ParkedSession<Starting>),
    /// See [`Running`].
    Running(ParkedSession<Running>),
    /// See [`Stopping`].
    Stopping(ParkedSession<Stopping>),
    /// See [`Exited`].
    Exited(ParkedSession<Exited>),
    /// See [`Failed`].
    Failed(ParkedSession<Failed>),
}

macro_rules! each {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            AnySession::Created($s) => $e,
            AnySession::Preparing($s) => $e,
            AnySession::Starting($s) => $e,
            AnySession::Running($s) => $e,
            AnySession::Stopping($s) => $e,
            AnySession::Exited($s) => $e,
            AnySession::Failed($s) => $e,
        }
    };
}

macro_rules! conversions {
    ($($variant:ident, $ty:ident, $method:ident);+ $(;)?) => {
        $(
            impl From<ParkedSession<$ty>> for AnySession {
                fn from(s: ParkedSession<$ty>) -> Self {
                    AnySession::$variant(s)
                }
            }
            impl From<Session<'_, $ty>> for AnySession {
                /// Parks the session (drops its brand).
                fn from(s: Session<'_, $ty>) -> Self {
                    AnySession::$variant(s.park())
                }
            }
        )+
        impl AnySession {
            $(
                #[doc = concat!("The typed (parked) session if it is `", stringify!($variant), "`; otherwise `lifecycle_wrong_stage` with `self` handed back. Give it a brand ([`ParkedSession::enter`]) to advance it.")]
                #[expect(
                    unreachable_patterns,
                    reason = "the fallback names all seven stages, the matched one included, so a new stage cannot slip through a catch-all"
                )]
                pub fn $method(self) -> Result<ParkedSession<$ty>, Refused<AnySession>> {
                    match self {
                        AnySession::$variant(s) => Ok(s),
                        other @ (AnySession::Created(_)
                        | AnySession::Preparing(_)
                        | AnySession::Starting(_)
                        | AnySession::Running(_)
                        | AnySession::Stopping(_)
                        | AnySession::Exited(_)
                        | AnySession::Failed(_)) => {
                            let e = LifecycleError::WrongStage {
                                expected: SessionStage::$variant,
                                actual: other.stage(),
                            };
                            Err(Refused::new(other, e))
                        }
                    }
                }
            )+
        }
    };
}

conversions! {
    Created, Created, try_into_created;
    Preparing, Preparing, try_into_preparing;
    Starting, Starting, try_into_starting;
    Running, Running, try_into_running;
    Stopping, Stopping, try_into_stopping;
    Exited, Exited, try_into_exited;
    Failed, Failed, try_into_failed;
}

impl AnySession {
    /// The stage.
    pub fn stage(&self) -> SessionStage {
        each!(self, s => s.stage())
    }

    /// The session id.
    pub fn id(&self) -> &SessionId {
        each!(self, s => s.id())
    }

    /// Both plan digests.
    pub fn digests(&self) -> &PlanDigests {
        each!(self, s => s.digests())
    }

    /// Sequence number of the last durable record.
    pub fn last_seq(&self) -> u64 {
        each!(self, s => s.last_seq())
    }

    /// Whether the session is exited or failed.
    pub fn is_terminal(&self) -> bool {
        self.stage().is_terminal()
    }

    /// Classifies a requested transition, given as the record it would
    /// append, against the durable history:
    ///
    /// * `Ok(Repeat::AlreadyRecorded)`: the identical record is durable; the
    ///   request is a repeat and must be answered without a second record;
    /// * `Ok(Repeat::New)`: not yet taken and legal now;
    /// * `Err(lifecycle_transition_conflict)`: that transition was taken with
    ///   different input (fail closed);
    /// * `Err(lifecycle_illegal_transition)`: not reachable from this stage.
    ///
    /// For a start, build the entry from the *unverified* authorization's
    /// digest: a byte-identical retry is then recognised before its nonce is
    /// checked (and refused as a replay).
    ///
    /// Feature `test-support` only: it takes the record type, which is
    /// private to this crate otherwise.
    #[cfg(feature = "test-support")]
    pub fn check_repeat(&self, entry: &SessionEntry) -> Result<Repeat, LifecycleError> {
        each!(self, s => s.repeat_of(entry))
    }
}
