//! The apply transaction: applying a retained stage to its source, as a
//! typestate.
//!
//! ```text
//! reserved ──▶ prepared ──▶ committed ──▶ applied   (terminal, receipt, then cleanup)
//!    │            │             │
//!    ├────────────┴──▶ failed   │                   (terminal, receipt)
//!    └────────────┴─────────────┴──▶ ambiguous      (never left automatically)
//! ```
//!
//! * [`Txn<'id, S>`](Txn) is branded like a session (see
//!   [`crate::brand`]): it spends only proofs it minted. Replay and recovery
//!   hand out [`ParkedTxn<S>`](ParkedTxn), which a fresh brand turns back
//!   into a `Txn` ([`ParkedTxn::enter`]).
//! * [`Txn::log_reserve`] consumes the grant id, authorization digest and
//!   manifest digest in a [`SingleUseRegistry`] before its record is
//!   appended; a reused value fails closed.
//! * `Failed` and `Applied` need a durable terminal receipt, confirmed with
//!   the [`ReceiptLog`](crate::ReceiptLog) port, and a durable record.
//! * [`Txn<Applied>::cleanup_baseline`](Txn::cleanup_baseline) runs the
//!   [`BaselineCleanup`](crate::BaselineCleanup) port; only an applied
//!   transaction (receipt durable) has it, and it is idempotent.
//! * [`Txn<Ambiguous>`](Txn) has no transition at all.
//! * [`replay_apply`] replays a transaction and [`AnyApply::classify`] classifies it from
//!   descriptor-proven findings.

mod parked;
mod record;
mod recovery;
mod registry;
mod states;
mod txn;

pub use parked::ParkedTxn;
pub use record::{ApplyEntry, ApplyRecord, APPLY_RECORD_FORMAT};
pub use recovery::{
    classify, replay_apply, AnyApply, Classification, DescriptorFindings, LocatorCheck,
    RecoveredApply, TreeFinding,
};
pub use registry::SingleUseRegistry;
pub use states::{
    AmbiguityReason, Ambiguous, Applied, ApplyStage, Committed, Failable, Failed, Prepared,
    Reserved, Undecided,
};
pub use txn::Txn;

use core::fmt;
use glove_types::ids::check_id;
use glove_types::{Rejection, Sha256Digest};

macro_rules! id_type {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// Validates an identifier (Glove's shared id charset and bound).
            pub fn new(s: impl Into<String>) -> Result<Self, Rejection> {
                let s = s.into();
                check_id(&s)?;
                Ok(Self(s))
            }

            /// The identifier.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_type!(
    /// An apply transaction id.
    TransactionId
);
id_type!(
    /// An apply grant id (globally single-use).
    GrantId
);

/// What an apply transaction reserves, each value globally single-use, plus
/// the commitment to the exposure locator that recovery re-opens.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reservation {
    /// The grant id.
    pub grant_id: GrantId,
    /// Digest of the signed apply authorization.
    pub authorization_digest: Sha256Digest,
    /// Digest of the staged manifest.
    pub manifest_digest: Sha256Digest,
    /// Digest of the exposure locator (exposure id, generation, scope digest,
    /// source identity digest) recovery uses to re-open the parent.
    pub locator_digest: Sha256Digest,
}
