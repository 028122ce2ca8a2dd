//! Glove's pure data layer.
//!
//! A tour of the crate:
//!
//! * [`apply`] — the apply authorization, its signed file and the apply
//!   trust policy (schemas only; signatures are checked in `glove-control`);
//! * [`codes`] — the one catalogue of stable error codes, one table per area;
//! * [`error`] — [`Rejection`], a code plus location plus message;
//! * [`ids`] — validated identifier newtypes with one charset and bound;
//! * [`digest`] — SHA-256 / BLAKE3 digests as 64 lowercase hex characters and
//!   Glove's domain-separated digest definitions;
//! * [`canon`] — the strict decoder and the RFC 8785 canonical encoder;
//! * [`stage`] — session stages and apply states with their legal transitions;
//! * [`paths`] — canonical absolute path checks used by the schemas;
//! * [`policy`] — the operator's session policy, decoded into a
//!   [`policy::ValidatedPolicy`] that cannot exist unless every rule held;
//! * [`plan`] — the controller's identifier-only plan and
//!   [`plan::admit`], which yields an [`plan::AdmittedPlan`];
//! * [`receipt`] — the typed `resource_v1`, `apply_v1` and
//!   `refinement_v1` receipt bodies, their canonical encodings and strict
//!   decoders;
//! * [`refinement`] — `refinement-eval-v1`: a plan's refinement binding,
//!   the evaluation fixture, the matched-context digests and the streaming
//!   evaluator that synthesizes the outcome;
//! * [`harness`] — the agent harnesses, one file each (names and npm
//!   layout, staging, private home, skills, MCP configuration, model
//!   endpoint), and their registry [`harness::NativeRuntime`];
//! * [`bundle`] — the library bundle format (strict canonical decoder,
//!   digest verification) and the expansion of `skill` entries into an
//!   Agent Skills directory;
//! * [`exposure`] — the path-exposure policy, leases, the exposure
//!   journal's record schemas and the scope digest;
//! * [`manifest`] — the workspace manifest of a retained workspace: its
//!   definition, canonical encoding, strict decoder, digest and blockers.
//!
//! The crate does no I/O and contains no `unsafe` code.
#![forbid(unsafe_code)]

pub mod apply;
pub mod bundle;
pub mod canon;
pub mod codes;
pub mod digest;
pub mod egress;
pub mod error;
pub mod exposure;
pub mod harness;
pub mod ids;
pub mod manifest;
pub mod neutralize;
pub mod paths;
pub mod plan;
pub mod policy;
pub mod receipt;
pub mod refinement;
pub mod stage;

pub use codes::ErrorCode;
pub use digest::{Blake3Digest, Sha256Digest};
pub use error::Rejection;
