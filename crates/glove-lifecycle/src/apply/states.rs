//! Apply-transaction state types. Sealed; not `Clone`, `Default` or
//! `Deserialize`.

use crate::evidence::TerminalReceiptRef;
use crate::proof::{sealed::Sealed, Recordable, SubjectKind};
use glove_types::stage::ApplyState;
use glove_types::{ErrorCode, Sha256Digest};

use super::recovery::TreeFinding;

/// An apply-transaction state. Sealed.
pub trait ApplyStage: Recordable + Sealed {
    /// The state as stored and reported.
    const STATE: ApplyState;
}

/// States a transaction can fail from before commit (`reserved`,
/// `prepared`). Sealed.
pub trait Failable: ApplyStage {}

/// States whose outcome can become ambiguous (`reserved`, `prepared`,
/// `committed`). Sealed.
pub trait Undecided: ApplyStage {}

macro_rules! state {
    ($ty:ident, $state:ident $(, $extra:ident)*) => {
        impl Sealed for $ty {}
        impl Recordable for $ty {
            const KIND: SubjectKind = SubjectKind::Apply;
        }
        impl ApplyStage for $ty {
            const STATE: ApplyState = ApplyState::$state;
        }
        $( impl $extra for $ty {} )*
    };
}

/// Grant, authorization and manifest reserved.
#[derive(Debug)]
pub struct Reserved {
    pub(crate) reservation: super::Reservation,
}
state!(Reserved, Reserved, Failable, Undecided);

/// The candidate tree is staged and synced beside the source.
#[derive(Debug)]
pub struct Prepared {
    pub(crate) candidate_digest: Sha256Digest,
}
state!(Prepared, Prepared, Failable, Undecided);

/// The atomic exchange happened; the old source is retained as baseline.
#[derive(Debug)]
pub struct Committed {
    pub(crate) candidate_digest: Sha256Digest,
}
state!(Committed, Committed, Undecided);

/// Terminal: applied, with a durable receipt.
#[derive(Debug)]
pub struct Applied {
    pub(crate) receipt: TerminalReceiptRef,
    pub(crate) cleaned: bool,
}
state!(Applied, Applied);

/// Terminal: failed before commit, with a durable receipt.
#[derive(Debug)]
pub struct Failed {
    pub(crate) code: ErrorCode,
    pub(crate) failed_in: ApplyState,
    pub(crate) receipt: TerminalReceiptRef,
}
state!(Failed, Failed);

/// The evidence cannot prove any one state. Stays consumed; nothing
/// automatic leaves it.
#[derive(Debug)]
pub struct Ambiguous {
    pub(crate) reason: AmbiguityReason,
}
state!(Ambiguous, Ambiguous);

/// Why a transaction is ambiguous.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AmbiguityReason {
    /// The runtime recorded that an operation's outcome is unknown.
    Recorded {
        /// The runtime's code.
        code: ErrorCode,
    },
    /// Recovery could not re-open the exposure by its locator.
    LocatorUnverified,
    /// The journal and the descriptor findings disagree.
    EvidenceConflict {
        /// The state the journal proves.
        journal: ApplyState,
        /// What sits at the source.
        source: TreeFinding,
        /// What sits at the staging location.
        staging: TreeFinding,
    },
}

impl Prepared {
    /// Digest of the staged candidate tree.
    pub fn candidate_digest(&self) -> Sha256Digest {
        self.candidate_digest
    }
}

impl Committed {
    /// Digest of the exchanged-in candidate tree.
    pub fn candidate_digest(&self) -> Sha256Digest {
        self.candidate_digest
    }
}

impl Applied {
    /// The terminal receipt.
    pub fn receipt(&self) -> TerminalReceiptRef {
        self.receipt
    }

    /// Whether baseline cleanup has succeeded in this process.
    pub fn baseline_cleaned(&self) -> bool {
        self.cleaned
    }
}

impl Failed {
    /// The failure code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The state it failed in.
    pub fn failed_in(&self) -> ApplyState {
        self.failed_in
    }

    /// The terminal receipt.
    pub fn receipt(&self) -> TerminalReceiptRef {
        self.receipt
    }
}

impl Ambiguous {
    /// Why.
    pub fn reason(&self) -> AmbiguityReason {
        self.reason
    }
}
