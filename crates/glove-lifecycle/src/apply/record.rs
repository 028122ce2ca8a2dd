//! The apply-transaction record, stored by the apply journal as opaque
//! canonical JSON (same rules as [`crate::record`]).

use super::{GrantId, Reservation, TransactionId};
use crate::error::LifecycleError;
use crate::evidence::TerminalReceiptRef;
use crate::proof::APPLY_RECORD_DOMAIN;
use crate::record::{bad, failure_code, rec, MAX_RECORD_BYTES};
use glove_types::canon::{self, Form};
use glove_types::stage::ApplyState;
use glove_types::{ErrorCode, Sha256Digest};
use serde::{Deserialize, Serialize};

/// Wire format tag written into every apply record.
pub const APPLY_RECORD_FORMAT: &str = APPLY_RECORD_DOMAIN;

/// The typed content of one apply record.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApplyEntry {
    /// Record 0: the single-use values are reserved.
    Reserved {
        /// What was reserved.
        reservation: Reservation,
    },
    /// The candidate is staged and synced.
    Prepared {
        /// Digest of the candidate tree.
        candidate_digest: Sha256Digest,
    },
    /// The exchange happened.
    Committed,
    /// Terminal: applied with a durable receipt.
    Applied {
        /// The receipt.
        receipt: TerminalReceiptRef,
    },
    /// Terminal: failed with a durable receipt.
    Failed {
        /// Failure code.
        code: ErrorCode,
        /// The state it failed in.
        failed_in: ApplyState,
        /// The receipt.
        receipt: TerminalReceiptRef,
    },
    /// The outcome is unknown; stays consumed.
    Ambiguous {
        /// Why.
        code: ErrorCode,
    },
}

impl ApplyEntry {
    /// The state this record enters.
    pub fn state(&self) -> ApplyState {
        match self {
            ApplyEntry::Reserved { .. } => ApplyState::Reserved,
            ApplyEntry::Prepared { .. } => ApplyState::Prepared,
            ApplyEntry::Committed => ApplyState::Committed,
            ApplyEntry::Applied { .. } => ApplyState::Applied,
            ApplyEntry::Failed { .. } => ApplyState::Failed,
            ApplyEntry::Ambiguous { .. } => ApplyState::Ambiguous,
        }
    }
}

/// One decoded, validated apply record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplyRecord {
    /// The transaction.
    pub txn_id: TransactionId,
    /// Position in the transaction's history.
    pub seq: u64,
    /// Digest of record `seq - 1`.
    pub prev: Option<Sha256Digest>,
    /// What the record says.
    pub entry: ApplyEntry,
}

impl ApplyRecord {
    /// The canonical bytes.
    pub fn encode(&self) -> Result<Vec<u8>, LifecycleError> {
        encode(&self.txn_id, self.seq, self.prev, &self.entry)
    }

    /// Strictly decodes canonical bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, LifecycleError> {
        let w: WireRecord = canon::decode(bytes, MAX_RECORD_BYTES, Form::Canonical)
            .map_err(LifecycleError::record)?;
        if w.format != APPLY_RECORD_FORMAT {
            return Err(bad("format", "unknown apply record format"));
        }
        let txn_id = TransactionId::new(w.txn_id).map_err(|r| rec(r, "txn_id"))?;
        let prev = match w.prev {
            None => None,
            Some(p) => Some(Sha256Digest::parse(&p).map_err(|r| rec(r, "prev"))?),
        };
        if (w.seq == 0) != prev.is_none() {
            return Err(bad("prev", "prev must be null exactly on record 0"));
        }
        Ok(Self {
            txn_id,
            seq: w.seq,
            prev,
            entry: w.entry.into_typed()?,
        })
    }
}

pub(crate) fn encode(
    txn_id: &TransactionId,
    seq: u64,
    prev: Option<Sha256Digest>,
    entry: &ApplyEntry,
) -> Result<Vec<u8>, LifecycleError> {
    canon::encode(&WireRecord {
        format: APPLY_RECORD_FORMAT.to_owned(),
        txn_id: txn_id.as_str().to_owned(),
        seq,
        prev: prev.map(|p| p.to_hex()),
        entry: WireEntry::from_typed(entry),
    })
    .map_err(LifecycleError::record)
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireRecord {
    format: String,
    txn_id: String,
    seq: u64,
    prev: Option<String>,
    entry: WireEntry,
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case", deny_unknown_fields)]
enum WireEntry {
    Reserved {
        grant_id: String,
        authorization_digest: String,
        manifest_digest: String,
        locator_digest: String,
    },
    Prepared {
        candidate_digest: String,
    },
    Committed {},
    Applied {
        receipt_seq: u64,
        receipt_digest: String,
    },
    Failed {
        code: String,
        failed_in: ApplyState,
        receipt_seq: u64,
        receipt_digest: String,
    },
    Ambiguous {
        code: String,
    },
}

impl WireEntry {
    fn from_typed(e: &ApplyEntry) -> Self {
        match e {
            ApplyEntry::Reserved { reservation: r } => WireEntry::Reserved {
                grant_id: r.grant_id.as_str().to_owned(),
                authorization_digest: r.authorization_digest.to_hex(),
                manifest_digest: r.manifest_digest.to_hex(),
                locator_digest: r.locator_digest.to_hex(),
            },
            ApplyEntry::Prepared { candidate_digest } => WireEntry::Prepared {
                candidate_digest: candidate_digest.to_hex(),
            },
            ApplyEntry::Committed => WireEntry::Committed {},
            ApplyEntry::Applied { receipt } => WireEntry::Applied {
                receipt_seq: receipt.receipt_seq(),
                receipt_digest: receipt.receipt_digest().to_hex(),
            },
            ApplyEntry::Failed {
                code,
                failed_in,
                receipt,
            } => WireEntry::Failed {
                code: code.as_str().to_owned(),
                failed_in: *failed_in,
                receipt_seq: receipt.receipt_seq(),
                receipt_digest: receipt.receipt_digest().to_hex(),
            },
            ApplyEntry::Ambiguous { code } => WireEntry::Ambiguous {
                code: code.as_str().to_owned(),
            },
        }
    }

    fn into_typed(self) -> Result<ApplyEntry, LifecycleError> {
        let sha = |s: &str, at: &str| Sha256Digest::parse(s).map_err(|r| rec(r, at));
        Ok(match self {
            WireEntry::Reserved {
                grant_id,
                authorization_digest,
                manifest_digest,
                locator_digest,
            } => ApplyEntry::Reserved {
                reservation: Reservation {
                    grant_id: GrantId::new(grant_id).map_err(|r| rec(r, "entry.grant_id"))?,
                    authorization_digest: sha(&authorization_digest, "entry.authorization_digest")?,
                    manifest_digest: sha(&manifest_digest, "entry.manifest_digest")?,
                    locator_digest: sha(&locator_digest, "entry.locator_digest")?,
                },
            },
            WireEntry::Prepared { candidate_digest } => ApplyEntry::Prepared {
                candidate_digest: sha(&candidate_digest, "entry.candidate_digest")?,
            },
            WireEntry::Committed {} => ApplyEntry::Committed,
            WireEntry::Applied {
                receipt_seq,
                receipt_digest,
            } => ApplyEntry::Applied {
                receipt: TerminalReceiptRef::new(
                    receipt_seq,
                    sha(&receipt_digest, "entry.receipt_digest")?,
                ),
            },
            WireEntry::Failed {
                code,
                failed_in,
                receipt_seq,
                receipt_digest,
            } => ApplyEntry::Failed {
                code: failure_code(&code)?,
                failed_in,
                receipt: TerminalReceiptRef::new(
                    receipt_seq,
                    sha(&receipt_digest, "entry.receipt_digest")?,
                ),
            },
            WireEntry::Ambiguous { code } => ApplyEntry::Ambiguous {
                code: failure_code(&code)?,
            },
        })
    }
}
