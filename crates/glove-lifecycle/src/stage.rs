//! Session stage types.
//!
//! Each stage is its own type holding the evidence that entering it required.
//! [`Stage`] is sealed: the set of stages is closed and only this crate's
//! transition methods move a [`Session`](crate::Session) between them.
//! [`Live`] marks the five non-terminal stages, the only ones with a `fail`
//! transition. None of these types is `Clone`, `Copy`, `Default` or
//! `Deserialize`.

use crate::evidence::{
    LaunchBinding, PlanDigests, ProcessIdentity, StopReason, TerminalReceiptRef,
};
use crate::proof::{sealed::Sealed, Recordable, SubjectKind};
use crate::start_auth::Nonce;
use glove_types::stage::SessionStage;
use glove_types::{ErrorCode, Sha256Digest};

/// A session stage. Sealed.
pub trait Stage: Recordable + Sealed {
    /// The stage as stored and reported.
    const STAGE: SessionStage;
}

/// A non-terminal stage: one a session can still fail from. Sealed.
pub trait Live: Stage {}

macro_rules! stage {
    ($ty:ident, $stage:ident, live) => {
        stage!($ty, $stage);
        impl Live for $ty {}
    };
    ($ty:ident, $stage:ident) => {
        impl Sealed for $ty {}
        impl Recordable for $ty {
            const KIND: SubjectKind = SubjectKind::Session;
        }
        impl Stage for $ty {
            const STAGE: SessionStage = SessionStage::$stage;
        }
    };
}

/// Created from an admitted plan; nothing prepared yet.
#[derive(Debug)]
pub struct Created {
    pub(crate) digests: PlanDigests,
}
stage!(Created, Created, live);

/// Materializations and bindings are being prepared.
#[derive(Debug)]
pub struct Preparing {
    pub(crate) _private: (),
}
stage!(Preparing, Preparing, live);

/// Launch intent recorded: the sandbox is being launched under a launch
/// binding and a verified start authorization.
#[derive(Debug)]
pub struct Starting {
    pub(crate) binding: LaunchBinding,
    pub(crate) authorization: Sha256Digest,
    pub(crate) nonce: Nonce,
    pub(crate) authorization_expires_at_ms: u64,
}
stage!(Starting, Starting, live);

/// The agent runs; its process identity is recorded. Keeps the launch
/// binding it was started under.
#[derive(Debug)]
pub struct Running {
    pub(crate) binding: LaunchBinding,
    pub(crate) identity: ProcessIdentity,
}
stage!(Running, Running, live);

/// Stop intent recorded; finalization is under way. Keeps the launch
/// binding and the process identity of the running stage.
#[derive(Debug)]
pub struct Stopping {
    pub(crate) binding: LaunchBinding,
    pub(crate) identity: ProcessIdentity,
    pub(crate) reason: StopReason,
}
stage!(Stopping, Stopping, live);

/// Terminal: ended, with a durable terminal receipt.
#[derive(Debug)]
pub struct Exited {
    pub(crate) receipt: TerminalReceiptRef,
}
stage!(Exited, Exited);

/// Terminal: failed with a stable code in a given stage, with a durable
/// terminal receipt.
#[derive(Debug)]
pub struct Failed {
    pub(crate) code: ErrorCode,
    pub(crate) failed_in: SessionStage,
    pub(crate) receipt: TerminalReceiptRef,
}
stage!(Failed, Failed);

impl Starting {
    /// The launch binding.
    pub fn binding(&self) -> LaunchBinding {
        self.binding
    }

    /// Digest of the start authorization that allowed the launch.
    pub fn authorization_digest(&self) -> Sha256Digest {
        self.authorization
    }

    /// The authorization's nonce.
    pub fn nonce(&self) -> Nonce {
        self.nonce
    }

    /// When the authorization expired or expires (Unix ms).
    pub fn authorization_expires_at_ms(&self) -> u64 {
        self.authorization_expires_at_ms
    }
}

impl Running {
    /// The recorded process identity.
    pub fn identity(&self) -> &ProcessIdentity {
        &self.identity
    }

    /// The launch binding the session was started under.
    pub fn binding(&self) -> LaunchBinding {
        self.binding
    }
}

impl Stopping {
    /// Why the session is stopping.
    pub fn reason(&self) -> StopReason {
        self.reason
    }

    /// The process identity recorded when the session ran.
    pub fn identity(&self) -> &ProcessIdentity {
        &self.identity
    }

    /// The launch binding the session was started under.
    pub fn binding(&self) -> LaunchBinding {
        self.binding
    }
}

impl Exited {
    /// The terminal receipt.
    pub fn receipt(&self) -> TerminalReceiptRef {
        self.receipt
    }
}

impl Failed {
    /// The stable failure code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The stage the session failed in.
    pub fn failed_in(&self) -> SessionStage {
        self.failed_in
    }

    /// The terminal receipt.
    pub fn receipt(&self) -> TerminalReceiptRef {
        self.receipt
    }
}
