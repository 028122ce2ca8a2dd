//! The session record: what the transition log stores for each transition.
//!
//! The log treats records as opaque bytes; they are canonical JSON produced
//! and read only here. Reading is strict: canonical form required (the bytes
//! must equal their re-encoding), unknown fields, duplicate keys and floats
//! rejected, every id and digest re-validated. The serde types below are the
//! private wire form; [`SessionRecord`] and [`SessionEntry`] are the typed,
//! validated view.
//!
//! ```text
//! {"entry":{"stage":"running","boot_id":"…","cgroup_id":7,"pid":42,"start_time_ticks":9},
//!  "format":"glove.lifecycle.session-record.v1","prev":"<64 hex>","seq":3,"session_id":"s-1"}
//! ```
//! (keys are sorted in the real bytes; `prev` is `null` on record 0).
//!
//! Private to the crate: nothing outside can build a record, so nothing
//! outside can hand replay a record the lifecycle did not write (stores
//! hand records back through [`crate::RecordSource`]). Feature
//! `test-support` re-exports the two types for tests.
#![cfg_attr(
    not(feature = "test-support"),
    expect(
        unreachable_pub,
        reason = "public only through the test-support re-export"
    )
)]

use crate::error::LifecycleError;
use crate::evidence::{
    LaunchBinding, PlanDigests, ProcessIdentity, StopReason, TerminalReceiptRef,
};
use crate::proof::SESSION_RECORD_DOMAIN;
use crate::start_auth::Nonce;
use glove_types::canon::{self, Form};
use glove_types::codes::json::JSON_INVALID_TYPE;
use glove_types::ids::SessionId;
use glove_types::stage::SessionStage;
use glove_types::{Blake3Digest, ErrorCode, Rejection, Sha256Digest};
use serde::{Deserialize, Serialize};

/// Largest session record accepted, in bytes.
pub(crate) const MAX_RECORD_BYTES: usize = 4096;

/// The typed content of one session record: the stage it enters and the
/// evidence that stage needs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionEntry {
    /// Record 0: the session exists, bound to both plan digests.
    Created {
        /// The plan digests.
        digests: PlanDigests,
    },
    /// Preparation began.
    Preparing,
    /// Launch intent under a binding and a verified authorization.
    Starting {
        /// Commitment to the launch.
        binding: LaunchBinding,
        /// Digest of the start authorization's bytes.
        authorization: Sha256Digest,
        /// The authorization's nonce (rebuilds the used-nonce set).
        nonce: Nonce,
        /// The authorization's expiry.
        authorization_expires_at_ms: u64,
    },
    /// The agent runs as this process.
    Running {
        /// The process identity.
        identity: ProcessIdentity,
    },
    /// Stop intent.
    Stopping {
        /// Why.
        reason: StopReason,
    },
    /// Ended with a durable terminal receipt.
    Exited {
        /// The receipt.
        receipt: TerminalReceiptRef,
    },
    /// Failed in `failed_in` with `code`, with a durable terminal receipt.
    Failed {
        /// Stable failure code.
        code: ErrorCode,
        /// The stage the session was in.
        failed_in: SessionStage,
        /// The receipt.
        receipt: TerminalReceiptRef,
    },
}

impl SessionEntry {
    /// The stage this record enters.
    pub fn stage(&self) -> SessionStage {
        match self {
            SessionEntry::Created { .. } => SessionStage::Created,
            SessionEntry::Preparing => SessionStage::Preparing,
            SessionEntry::Starting { .. } => SessionStage::Starting,
            SessionEntry::Running { .. } => SessionStage::Running,
            SessionEntry::Stopping { .. } => SessionStage::Stopping,
            SessionEntry::Exited { .. } => SessionStage::Exited,
            SessionEntry::Failed { .. } => SessionStage::Failed,
        }
    }
}

/// One decoded, validated session record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRecord {
    /// The session.
    pub session_id: SessionId,
    /// Position in the session's history (0 = creation).
    pub seq: u64,
    /// Digest of record `seq - 1` (none for record 0).
    pub prev: Option<Sha256Digest>,
    /// What the record says.
    pub entry: SessionEntry,
}

/// Wire format tag written into every session record.
pub(crate) const SESSION_RECORD_FORMAT: &str = SESSION_RECORD_DOMAIN;

impl SessionRecord {
    /// The canonical bytes of this record.
    #[cfg(feature = "test-support")]
    pub fn encode(&self) -> Result<Vec<u8>, LifecycleError> {
        encode(&self.session_id, self.seq, self.prev, &self.entry)
    }

    /// Strictly decodes canonical record bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, LifecycleError> {
        let wire: WireRecord = canon::decode(bytes, MAX_RECORD_BYTES, Form::Canonical)
            .map_err(LifecycleError::record)?;
        if wire.format != SESSION_RECORD_FORMAT {
            return Err(bad("format", "unknown session record format"));
        }
        let session_id = SessionId::new(wire.session_id).map_err(|r| rec(r, "session_id"))?;
        let prev = match wire.prev {
            None => None,
            Some(p) => Some(Sha256Digest::parse(&p).map_err(|r| rec(r, "prev"))?),
        };
        if (wire.seq == 0) != prev.is_none() {
            return Err(bad("prev", "prev must be null exactly on record 0"));
        }
        Ok(Self {
            session_id,
            seq: wire.seq,
            prev,
            entry: wire.entry.into_typed()?,
        })
    }
}

pub(crate) fn encode(
    session_id: &SessionId,
    seq: u64,
    prev: Option<Sha256Digest>,
    entry: &SessionEntry,
) -> Result<Vec<u8>, LifecycleError> {
    let wire = WireRecord {
        format: SESSION_RECORD_FORMAT.to_owned(),
        session_id: session_id.as_str().to_owned(),
        seq,
        prev: prev.map(|p| p.to_hex()),
        entry: WireEntry::from_typed(entry),
    };
    canon::encode(&wire).map_err(LifecycleError::record)
}

pub(crate) fn rec(r: Rejection, at: &str) -> LifecycleError {
    LifecycleError::record(r.at(at))
}

pub(crate) fn bad(at: &str, msg: &str) -> LifecycleError {
    LifecycleError::record(Rejection::new(JSON_INVALID_TYPE, msg).at(at))
}

pub(crate) fn failure_code(s: &str) -> Result<ErrorCode, LifecycleError> {
    ErrorCode::from_code(s).ok_or_else(|| LifecycleError::FailureCodeUnknown {
        code: s.chars().take(64).collect(),
    })
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireRecord {
    format: String,
    session_id: String,
    seq: u64,
    prev: Option<String>,
    entry: WireEntry,
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "stage", rename_all = "snake_case", deny_unknown_fields)]
enum WireEntry {
    Created {
        plan_content_digest: String,
        controller_plan_digest: String,
        /// `"refinement_v1"` for a refinement evaluation plan; absent
        /// otherwise (so every other creation record keeps its bytes).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        receipt_kind: Option<String>,
    },
    Preparing {},
    Starting {
        launch_binding: String,
        authorization_digest: String,
        nonce: String,
        authorization_expires_at_ms: u64,
    },
    Running {
        boot_id: String,
        pid: u32,
        start_time_ticks: u64,
        cgroup_id: u64,
    },
    Stopping {
        reason: String,
    },
    Exited {
        receipt_seq: u64,
        receipt_digest: String,
    },
    Failed {
        code: String,
        failed_in: SessionStage,
        receipt_seq: u64,
        receipt_digest: String,
    },
}

impl WireEntry {
    fn from_typed(e: &SessionEntry) -> Self {
        match e {
            SessionEntry::Created { digests } => WireEntry::Created {
                plan_content_digest: digests.plan_content_digest().to_hex(),
                controller_plan_digest: digests.controller_plan_digest().to_hex(),
                receipt_kind: match digests.terminal_kind() {
                    crate::evidence::TerminalKind::Resource => None,
                    k => Some(k.as_str().to_owned()),
                },
            },
            SessionEntry::Preparing => WireEntry::Preparing {},
            SessionEntry::Starting {
                binding,
                authorization,
                nonce,
                authorization_expires_at_ms,
            } => WireEntry::Starting {
                launch_binding: binding.digest().to_hex(),
                authorization_digest: authorization.to_hex(),
                nonce: nonce.to_hex(),
                authorization_expires_at_ms: *authorization_expires_at_ms,
            },
            SessionEntry::Running { identity } => WireEntry::Running {
                boot_id: identity.boot_id().to_owned(),
                pid: identity.pid(),
                start_time_ticks: identity.start_time_ticks(),
                cgroup_id: identity.cgroup_id(),
            },
            SessionEntry::Stopping { reason } => WireEntry::Stopping {
                reason: reason.as_str().to_owned(),
            },
            SessionEntry::Exited { receipt } => WireEntry::Exited {
                receipt_seq: receipt.receipt_seq(),
                receipt_digest: receipt.receipt_digest().to_hex(),
            },
            SessionEntry::Failed {
                code,
                failed_in,
                receipt,
            } => WireEntry::Failed {
                code: code.as_str().to_owned(),
                failed_in: *failed_in,
                receipt_seq: receipt.receipt_seq(),
                receipt_digest: receipt.receipt_digest().to_hex(),
            },
        }
    }

    fn into_typed(self) -> Result<SessionEntry, LifecycleError> {
        let sha = |s: &str, at: &str| Sha256Digest::parse(s).map_err(|r| rec(r, at));
        Ok(match self {
            WireEntry::Created {
                plan_content_digest,
                controller_plan_digest,
                receipt_kind,
            } => {
                let digests = PlanDigests::new(
                    sha(&plan_content_digest, "entry.plan_content_digest")?,
                    Blake3Digest::parse(&controller_plan_digest)
                        .map_err(|r| rec(r, "entry.controller_plan_digest"))?,
                );
                // One encoding: a resource plan's record has no member.
                let digests = match receipt_kind.as_deref() {
                    None => digests,
                    Some("refinement_v1") => digests.refinement(),
                    Some(_) => {
                        return Err(bad(
                            "entry.receipt_kind",
                            "receipt_kind is absent or \"refinement_v1\"",
                        ))
                    }
                };
                SessionEntry::Created { digests }
            }
            WireEntry::Preparing {} => SessionEntry::Preparing,
            WireEntry::Starting {
                launch_binding,
                authorization_digest,
                nonce,
                authorization_expires_at_ms,
            } => SessionEntry::Starting {
                binding: LaunchBinding::from_digest(sha(&launch_binding, "entry.launch_binding")?),
                authorization: sha(&authorization_digest, "entry.authorization_digest")?,
                nonce: Nonce::parse(&nonce).map_err(|r| rec(r, "entry.nonce"))?,
                authorization_expires_at_ms,
            },
            WireEntry::Running {
                boot_id,
                pid,
                start_time_ticks,
                cgroup_id,
            } => SessionEntry::Running {
                identity: ProcessIdentity::new(&boot_id, pid, start_time_ticks, cgroup_id)?,
            },
            WireEntry::Stopping { reason } => SessionEntry::Stopping {
                reason: StopReason::parse(&reason)
                    .ok_or_else(|| bad("entry.reason", "unknown stop reason"))?,
            },
            WireEntry::Exited {
                receipt_seq,
                receipt_digest,
            } => SessionEntry::Exited {
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
            } => SessionEntry::Failed {
                code: failure_code(&code)?,
                failed_in,
                receipt: TerminalReceiptRef::new(
                    receipt_seq,
                    sha(&receipt_digest, "entry.receipt_digest")?,
                ),
            },
        })
    }
}
