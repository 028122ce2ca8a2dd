//! The `refinement_v1` receipt body: how a `refinement-eval-v1` session's
//! evaluation ended, with the full `resource_v1` body of the same session
//! nested inside, as a typed value with one canonical encoding and a
//! strict decoder.
//!
//! ```text
//! {"evaluator":{"complete":bool,"evidence":"valid"|"invalid"|"none"},
//!  "fixture":{projection},"matched_context_digest":…,
//!  "outcome":{…}|null,"outcome_commitment":…|null,
//!  "raw_pty_bytes":n,"raw_pty_sha256":…|null,
//!  "receipt_kind":"refinement_v1","resource":{…"receipt_kind":"resource_v1"…},
//!  "selected":{projection},"session_id":…,"variant":"base"|"candidate"}
//! ```
//!
//! A projection is the plan's commitment,
//! `{"destination_alias","projection_id","sha256"}`, as in the binding: the
//! fixture is never mounted, and where the selected skill was mounted is in
//! the nested resource receipt's `projections`. The receipt journal files
//! the body under its top-level `session_id`.
//!
//! An evaluation that ran has its outcome, the outcome's commitment
//! ([`Outcome::commitment`]), the stream's SHA-256 and an evidence state;
//! one that could not run (the session failed before the evaluator was
//! finished) has none of the four (`null`, evidence `"none"`, zero bytes,
//! `complete` false). [`RefinementReceiptV1::decode`] accepts exactly the
//! bytes [`RefinementReceiptV1::encode`] produces for some valid value:
//! `receipt_body_invalid` (or the strict decoder's `json_*`, `id_invalid`,
//! `digest_invalid`) for a malformed body or one whose parts disagree,
//! `refinement_outcome_invalid` for an outcome that breaks its rules,
//! `refinement_outcome_commitment_mismatch` for a commitment that is not
//! the outcome's, `refinement_receipt_session_mismatch` for a nested
//! resource body of another session; the nested body is decoded by
//! [`ResourceReceiptV1::decode`] with its own codes.

use super::ResourceReceiptV1;
use crate::canon::{self, Form};
use crate::codes::journal::RECEIPT_BODY_INVALID;
use crate::codes::refinement::{
    REFINEMENT_OUTCOME_COMMITMENT_MISMATCH, REFINEMENT_RECEIPT_SESSION_MISMATCH,
};
use crate::error::Rejection;
use crate::ids::{AliasId, ProjectionId, SessionId};
use crate::plan::LibraryProjection;
use crate::refinement::{Evidence, Outcome, Variant};
use crate::Sha256Digest;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The `receipt_kind` of this body.
pub const REFINEMENT_KIND: &str = "refinement_v1";

/// Largest body accepted, in bytes: the receipt journal's default body
/// bound, so every body that encodes can be journaled.
pub const MAX_REFINEMENT_BODY_BYTES: usize = 64 * 1024;

/// The evaluator's state when the receipt was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EvaluatorState {
    /// Whether the evaluator saw the whole stream.
    pub complete: bool,
    /// The evidence, `None` when the evaluation did not run (`"none"`).
    pub evidence: Option<Evidence>,
}

/// A `refinement_v1` receipt body (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefinementReceiptV1 {
    /// The session.
    pub session_id: SessionId,
    /// The fixture projection (read by Glove, not mounted).
    pub fixture: LibraryProjection,
    /// The selected skill projection.
    pub selected: LibraryProjection,
    /// The variant evaluated.
    pub variant: Variant,
    /// The matched-context digest of the plan's binding.
    pub matched_context_digest: Sha256Digest,
    /// The outcome; `None` when the evaluation could not run.
    pub outcome: Option<Outcome>,
    /// [`Outcome::commitment`] of `outcome`.
    pub outcome_commitment: Option<Sha256Digest>,
    /// SHA-256 of the raw PTY stream the evaluator saw.
    pub raw_pty_sha256: Option<Sha256Digest>,
    /// Length of that stream, bytes.
    pub raw_pty_bytes: u64,
    /// The evaluator's state.
    pub evaluator: EvaluatorState,
    /// The session's full `resource_v1` body.
    pub resource: ResourceReceiptV1,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireProjection {
    projection_id: String,
    destination_alias: String,
    sha256: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireEvaluator {
    complete: bool,
    evidence: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    receipt_kind: String,
    session_id: String,
    fixture: WireProjection,
    selected: WireProjection,
    variant: String,
    matched_context_digest: String,
    outcome: Option<Outcome>,
    outcome_commitment: Option<String>,
    raw_pty_sha256: Option<String>,
    raw_pty_bytes: u64,
    evaluator: WireEvaluator,
    resource: Value,
}

fn bad(msg: impl Into<String>) -> Rejection {
    Rejection::new(RECEIPT_BODY_INVALID, msg)
}

fn to_wire(p: &LibraryProjection) -> WireProjection {
    WireProjection {
        projection_id: p.projection_id.as_str().into(),
        destination_alias: p.destination_alias.as_str().into(),
        sha256: p.sha256.to_hex(),
    }
}

fn from_wire(p: WireProjection, at: &str) -> Result<LibraryProjection, Rejection> {
    Ok(LibraryProjection {
        projection_id: ProjectionId::new(p.projection_id)
            .map_err(|r| r.at(format!("{at}.projection_id")))?,
        destination_alias: AliasId::new(p.destination_alias)
            .map_err(|r| r.at(format!("{at}.destination_alias")))?,
        sha256: Sha256Digest::parse(&p.sha256).map_err(|r| r.at(format!("{at}.sha256")))?,
    })
}

impl RefinementReceiptV1 {
    /// The rules the types alone do not carry.
    fn check(&self) -> Result<(), Rejection> {
        if self.resource.session_id != self.session_id {
            return Err(Rejection::new(
                REFINEMENT_RECEIPT_SESSION_MISMATCH,
                "the nested resource receipt names another session",
            )
            .at("resource.session_id"));
        }
        if self.fixture.projection_id == self.selected.projection_id {
            return Err(bad("the fixture and the selected skill are distinct").at("selected"));
        }
        match &self.outcome {
            Some(o) => {
                o.check().map_err(|r| r.at("outcome"))?;
                if self.outcome_commitment != Some(o.commitment()) {
                    return Err(Rejection::new(
                        REFINEMENT_OUTCOME_COMMITMENT_MISMATCH,
                        "outcome_commitment is not the commitment of the outcome",
                    )
                    .at("outcome_commitment"));
                }
                if self.raw_pty_sha256.is_none() {
                    return Err(
                        bad("an evaluation that ran has its stream digest").at("raw_pty_sha256")
                    );
                }
                let Some(evidence) = self.evaluator.evidence else {
                    return Err(bad("an evaluation that ran has evidence").at("evaluator"));
                };
                // Invalid evidence fails the outcome with the reason named.
                let named = |n: &str| o.failed_assertions.iter().any(|a| a == n);
                let invalid = !self.evaluator.complete || named("utf8");
                if (evidence == Evidence::Invalid) != invalid
                    || self.evaluator.complete == named("stream_incomplete")
                {
                    return Err(bad("the evidence disagrees with the outcome").at("evaluator"));
                }
            }
            None => {
                let ran = self.outcome_commitment.is_some()
                    || self.raw_pty_sha256.is_some()
                    || self.raw_pty_bytes != 0
                    || self.evaluator.evidence.is_some()
                    || self.evaluator.complete;
                if ran {
                    return Err(bad(
                        "an evaluation that did not run has no commitment, stream or evidence",
                    )
                    .at("outcome"));
                }
            }
        }
        if self.raw_pty_bytes > canon::MAX_SAFE_INTEGER {
            return Err(bad("raw_pty_bytes is at most 2^53 - 1").at("raw_pty_bytes"));
        }
        Ok(())
    }

    /// The canonical encoding. Fails for a value [`Self::decode`] would
    /// refuse (see the module docs), including a nested resource body
    /// [`ResourceReceiptV1::encode`] refuses.
    pub fn encode(&self) -> Result<Vec<u8>, Rejection> {
        self.check()?;
        let resource = self.resource.encode().map_err(|r| r.at("resource"))?;
        let resource = canon::parse_canonical(&resource, super::MAX_BODY_BYTES)?;
        let wire = Wire {
            receipt_kind: REFINEMENT_KIND.into(),
            session_id: self.session_id.as_str().into(),
            fixture: to_wire(&self.fixture),
            selected: to_wire(&self.selected),
            variant: self.variant.as_str().into(),
            matched_context_digest: self.matched_context_digest.to_hex(),
            outcome: self.outcome.clone(),
            outcome_commitment: self.outcome_commitment.map(|d| d.to_hex()),
            raw_pty_sha256: self.raw_pty_sha256.map(|d| d.to_hex()),
            raw_pty_bytes: self.raw_pty_bytes,
            evaluator: WireEvaluator {
                complete: self.evaluator.complete,
                evidence: self
                    .evaluator
                    .evidence
                    .map_or("none", Evidence::as_str)
                    .into(),
            },
            resource,
        };
        let bytes = canon::encode(&wire)?;
        if bytes.len() > MAX_REFINEMENT_BODY_BYTES {
            return Err(bad(format!(
                "the body is {} bytes; the bound is {MAX_REFINEMENT_BODY_BYTES}",
                bytes.len()
            )));
        }
        Ok(bytes)
    }

    /// Decodes a body strictly: only the canonical encoding of a valid
    /// value is accepted.
    pub fn decode(bytes: &[u8]) -> Result<RefinementReceiptV1, Rejection> {
        let w: Wire = canon::decode(bytes, MAX_REFINEMENT_BODY_BYTES, Form::Canonical)?;
        if w.receipt_kind != REFINEMENT_KIND {
            return Err(bad(format!("receipt_kind is not {REFINEMENT_KIND}")).at("receipt_kind"));
        }
        let resource = canon::to_canonical(&w.resource)?;
        let resource = ResourceReceiptV1::decode(&resource).map_err(|r| r.at("resource"))?;
        let evidence = match w.evaluator.evidence.as_str() {
            "none" => None,
            e => Some(Evidence::parse(e).ok_or_else(|| {
                bad("evidence is valid, invalid or none").at("evaluator.evidence")
            })?),
        };
        let sha = |s: &str, at: &str| Sha256Digest::parse(s).map_err(|r| r.at(at));
        let v = RefinementReceiptV1 {
            session_id: SessionId::new(w.session_id).map_err(|r| r.at("session_id"))?,
            fixture: from_wire(w.fixture, "fixture")?,
            selected: from_wire(w.selected, "selected")?,
            variant: Variant::parse(&w.variant)
                .ok_or_else(|| bad("variant is base or candidate").at("variant"))?,
            matched_context_digest: sha(&w.matched_context_digest, "matched_context_digest")?,
            outcome: w.outcome,
            outcome_commitment: w
                .outcome_commitment
                .as_deref()
                .map(|s| sha(s, "outcome_commitment"))
                .transpose()?,
            raw_pty_sha256: w
                .raw_pty_sha256
                .as_deref()
                .map(|s| sha(s, "raw_pty_sha256"))
                .transpose()?,
            raw_pty_bytes: w.raw_pty_bytes,
            evaluator: EvaluatorState {
                complete: w.evaluator.complete,
                evidence,
            },
            resource,
        };
        // One encoding per value (and every rule of `check`).
        if v.encode()? != bytes {
            return Err(bad("the body is not the encoding of its value"));
        }
        Ok(v)
    }
}
