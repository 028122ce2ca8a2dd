//! Glove's lifecycles as typestates: the session lifecycle and the apply
//! transaction, with write-ahead proofs.
//!
//! A tour of the crate:
//!
//! * [`session`] — [`Session<'id, S>`](Session): one type per stage
//!   (`Created → Preparing → Starting → Running → Stopping → Exited`, and
//!   `Failed` from every live stage). Each transition is `log_<step>` (append
//!   the record, get a [`Durable`] proof) then `<step>(self, proof)`.
//! * [`brand`] — [`Brand<'id>`](Brand) and [`with_brand`]: the generative
//!   lifetime that ties a proof to the one session that minted it, so a
//!   proof of session A spent on session B does not compile.
//! * [`parked`] — [`ParkedSession<S>`]: a session outside any brand scope
//!   (what the dynamic world keeps); a fresh brand makes it a `Session`
//!   again.
//! * [`stage`] — the sealed stage types and the evidence each holds.
//! * [`evidence`] — [`PlanDigests`], [`LaunchBinding`], [`ProcessIdentity`],
//!   [`TerminalReceiptRef`], [`StopReason`].
//! * [`proof`] — [`Durable<'id, R>`](Durable), the write-ahead proof only this crate
//!   mints, and what a log sees of a record ([`PendingRecord`],
//!   [`AppendReceipt`]).
//! * [`ports`] — the traits storage, time and the observed world are
//!   reached through: [`TransitionLog`], [`RecordSource`], [`ReceiptLog`],
//!   [`ObservedProcess`], [`Clock`], [`BaselineCleanup`].
//! * [`start_auth`] — [`StartAuthorization`]: HMAC-SHA-256, short-lived,
//!   bound to the session and both plan digests, single-use nonce.
//! * [`any`] — [`AnySession`], the one dynamic view, with checked
//!   `try_into_<stage>` conversions and idempotent-repeat checks.
//! * `record` (private) — the canonical-JSON session record the log
//!   stores. No other crate can build one: stores hand records back as
//!   [`StoredRecord`]s through [`RecordSource`], and replay reads only that.
//! * [`recovery`] — rebuild sessions from records; interrupted ones become a
//!   [`RecoveryDecision`] with a code, never a silent success.
//! * [`apply`] — the apply transaction typestate, its single-use registry
//!   and its recovery classification.
//! * [`error`] — [`LifecycleError`], every variant with a stable code.
//! * `memory` (feature `test-support`) — in-memory ports for tests.
//!
//! The crate does no I/O, depends on `glove-types` only among Glove crates,
//! and contains no `unsafe` code. `docs/lifecycle.md` has the diagrams, the
//! transition table and the recovery rules.
//!
//! # Example
//!
//! A whole session against in-memory ports (a real service passes its
//! journal, receipt journal and system clock instead):
//!
//! ```
//! # #[cfg(feature = "test-support")] fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use glove_lifecycle::memory::{ManualClock, MemoryLog, MemoryReceipts, Observed};
//! use glove_lifecycle::*;
//! use glove_types::{ids::SessionId, Blake3Digest, Sha256Digest};
//!
//! let mut log = MemoryLog::new();
//! let mut receipts = MemoryReceipts::new();
//! let clock = ManualClock::at(1_000_000);
//! let key = ServiceKey::new(&[7u8; 32])?;
//! let mut nonces = UsedNonces::new(1024);
//!
//! let id = SessionId::new("s-1")?;
//! let digests = PlanDigests::new(Sha256Digest::of(b"plan"), Blake3Digest::of(b"plan"));
//!
//! // A brand names this one session inside the closure; its proofs carry
//! // the brand, so no other session could spend them.
//! let exited = with_brand(|brand| -> Result<_, Box<dyn std::error::Error>> {
//!     // Write-ahead: each record is durable before the next stage exists.
//!     let created = Session::create(Session::log_create(brand, &id, digests, &mut log)?)?;
//!     let proof = created.log_prepare(&mut log)?;
//!     let preparing = created.prepare(proof).map_err(LifecycleError::from)?;
//!
//!     let auth = StartAuthorization::issue(&key, StartAuthFields {
//!         session_id: id.clone(),
//!         digests,
//!         nonce: Nonce::from_bytes([1; 16]),
//!         issued_at_ms: 1_000_000,
//!         expires_at_ms: 1_030_000,
//!     })?;
//!     let verified = auth.verify(&key, &id, &digests, StartAuthPolicy::default(), &clock, &mut nonces)?;
//!     let binding = LaunchBinding::of_launch_spec(br#"{"argv":["/usr/bin/true"]}"#)?;
//!     let proof = preparing.log_start(binding, verified, &mut log)?;
//!     let starting = preparing.start(proof).map_err(LifecycleError::from)?;
//!
//!     // The identity is made from an observed process (the runtime's
//!     // `ObservedProcess` port over what it read from /proc).
//!     let who = ProcessIdentity::observed(&Observed {
//!         boot_id: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0".into(),
//!         pid: 4242,
//!         start_time_ticks: 99,
//!         cgroup_id: 7,
//!     })?;
//!     let proof = starting.log_run(who, &mut log)?;
//!     let running = starting.run(proof).map_err(LifecycleError::from)?;
//!     let proof = running.log_stop(StopReason::AgentExited, &mut log)?;
//!     let stopping = running.stop(proof).map_err(LifecycleError::from)?;
//!
//!     // The terminal receipt is durable in the receipt journal first; only
//!     // the receipt log hands out its reference.
//!     receipts.append(Subject::Session(&id), 1, Sha256Digest::of(b"receipt"));
//!     let receipt = TerminalReceiptRef::durable(&receipts, Subject::Session(&id))?
//!         .ok_or("no durable receipt")?;
//!     let proof = stopping.log_exit(receipt, &receipts, &mut log)?;
//!     let exited = stopping.exit(proof).map_err(LifecycleError::from)?;
//!     // Leaving the scope: the session is parked (its brand dropped).
//!     Ok(exited.park())
//! })?;
//! assert_eq!(exited.receipt().receipt_seq(), 1);
//!
//! // Recovery reads the same log (a `RecordSource`) and finds the terminal
//! // session.
//! let report = recover_all(&log);
//! assert!(matches!(report.sessions.get(&id), Some(Ok(Recovered::Exited(_)))));
//! # Ok(()) }
//! # #[cfg(not(feature = "test-support"))] fn main() {}
//! ```
#![forbid(unsafe_code)]

pub mod any;
pub mod apply;
pub mod brand;
pub mod error;
pub mod evidence;
#[cfg(feature = "test-support")]
pub mod memory;
pub mod parked;
pub mod ports;
pub mod proof;
mod record;
pub mod recovery;
pub mod session;
pub mod stage;
pub mod start_auth;

pub use any::AnySession;
pub use brand::{with_brand, Brand};
pub use error::{LifecycleError, Refused};
pub use evidence::{
    LaunchBinding, PlanDigests, ProcessIdentity, StopReason, TerminalKind, TerminalReceiptRef,
};
pub use parked::ParkedSession;
pub use ports::{
    BaselineCleanup, Clock, ObservedProcess, PortError, ReceiptEntry, ReceiptLog, RecordSource,
    StoredRecord, TransitionLog,
};
pub use proof::{AppendReceipt, Durable, PendingRecord, Subject, SubjectKind};
/// The session record types and their encoder, for tests only (feature
/// `test-support`): without the feature no crate can write a session
/// record by hand.
#[cfg(feature = "test-support")]
pub use record::{SessionEntry, SessionRecord};
pub use recovery::{
    recover_all, recover_session, recover_stored, replay_session, Recovered, RecoveryDecision,
    RecoveryReport, Unreplayable,
};
pub use session::{Repeat, Session};
pub use stage::{Created, Exited, Failed, Live, Preparing, Running, Stage, Starting, Stopping};
#[cfg(doctest)]
#[doc = include_str!("../../../docs/lifecycle.md")]
/// The examples in `docs/lifecycle.md`, compiled and run as doctests.
pub struct LifecycleMdDoctests;

pub use start_auth::{
    Nonce, ServiceKey, StartAuthError, StartAuthFields, StartAuthPolicy, StartAuthorization,
    UsedNonces, VerifiedStart,
};
