//! The evaluation fixture (`glove.refinement-eval-fixture-v1`): what a
//! `refinement-eval-v1` session is evaluated against. Glove reads it from
//! the plan's fixture projection before launch; the child never sees it.
//!
//! ```text
//! {"base_projection_digest":sha256,"candidate_projection_digest":sha256,
//!  "dataset_digest":sha256,"dataset_ref":text,"evaluation_run_id":id,
//!  "expect":{"exit_code":n,"forbidden_literals":[…],
//!            ["max_wall_latency_ms":n,]"required_literals":[…],
//!            "termination":"exited"|"signaled"},
//!  "fixture_digest":sha256,"fixture_id":id,"harness":text,
//!  "matched_pair_id":id,"model_identity":text,["module_identity":text,]
//!  "proposal_digest":sha256,"schema":"glove.refinement-eval-fixture-v1",
//!  "seed":n,"selected_projection":{"destination_alias","projection_id","sha256"},
//!  ["selectors":[text…],]"session_id":id,"variant":"base"|"candidate"}
//! ```
//!
//! [`Fixture::decode`] accepts only canonical JSON of at most
//! [`MAX_FIXTURE_BYTES`] that is exactly the encoding of a valid value.
//! The strict decoder's own codes come first (`json_*`: invalid UTF-8, a
//! repeated key, non-canonical bytes, an unknown or missing member, a wrong
//! type; `id_invalid`, `digest_invalid` for ids and digests); then the
//! fixture's rules, each with a `refinement_*` code:
//!
//! * `schema` is [`FIXTURE_SCHEMA`] (`refinement_fixture_schema`);
//! * `variant` and `expect.termination` are defined values, optional
//!   members are absent rather than `null` (`refinement_fixture_invalid`);
//! * texts are 1 to their bound of bytes without a control character:
//!   `dataset_ref` and `model_identity` and `module_identity` 256,
//!   `harness` 64, each selector 128; at most 32 selectors; `seed` at most
//!   2^53 − 1; `exit_code` 0 to 255 for `exited`, the signal 1 to 64 for
//!   `signaled`; `max_wall_latency_ms` 1 to 86,400,000; at most 64
//!   literals per list, each 1 to 1024 bytes of UTF-8 (any characters)
//!   (`refinement_fixture_bound`);
//! * `selectors` (present only when non-empty) and each literal list are
//!   sorted in byte order without repeats
//!   (`refinement_fixture_not_canonical`);
//! * no literal is both required and forbidden (`refinement_literal_conflict`).

use super::digests::{
    matched_context_digest, refinement_plan_context_digest, FIXTURE_CONTEXT_DOMAIN,
};
use super::expect::{bound, check_list, check_text, invalid, RawExpect};
use super::{Expectation, ExpectedTermination, Variant};
use crate::canon::{self, Form, MAX_SAFE_INTEGER};
use crate::codes::refinement::*;
use crate::digest::Sha256Digest;
use crate::ids::{EvaluationId, SessionId};
use crate::plan::{DecodedPlan, LibraryProjection, RawProjection};
use crate::Rejection;
use serde::Deserialize;
use serde_json::{json, Value};

/// The fixture's `schema`.
pub const FIXTURE_SCHEMA: &str = "glove.refinement-eval-fixture-v1";
/// Largest fixture, in bytes.
pub const MAX_FIXTURE_BYTES: usize = 64 * 1024;
/// Most selectors.
pub const MAX_SELECTORS: usize = 32;
/// Longest selector, in bytes.
pub const MAX_SELECTOR_BYTES: usize = 128;
/// Longest `dataset_ref`, `model_identity` and `module_identity`, bytes.
pub const MAX_IDENTITY_BYTES: usize = 256;
/// Longest `harness`, in bytes.
pub const MAX_HARNESS_BYTES: usize = 64;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFixture {
    schema: String,
    evaluation_run_id: String,
    matched_pair_id: String,
    session_id: String,
    variant: String,
    proposal_digest: String,
    base_projection_digest: String,
    candidate_projection_digest: String,
    fixture_digest: String,
    dataset_digest: String,
    fixture_id: String,
    dataset_ref: String,
    seed: u64,
    model_identity: String,
    harness: String,
    #[serde(default)]
    module_identity: Option<String>,
    #[serde(default)]
    selectors: Option<Vec<String>>,
    selected_projection: RawProjection,
    expect: RawExpect,
}

/// A decoded evaluation fixture (see the module docs). Only
/// [`Fixture::decode`] makes one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fixture {
    canonical: Vec<u8>,
    evaluation_run_id: EvaluationId,
    matched_pair_id: EvaluationId,
    session_id: SessionId,
    variant: Variant,
    proposal_digest: Sha256Digest,
    base_projection_digest: Sha256Digest,
    candidate_projection_digest: Sha256Digest,
    fixture_digest: Sha256Digest,
    dataset_digest: Sha256Digest,
    fixture_id: EvaluationId,
    dataset_ref: String,
    seed: u64,
    model_identity: String,
    harness: String,
    module_identity: Option<String>,
    selectors: Vec<String>,
    selected_projection: LibraryProjection,
    expect: Expectation,
}

fn digest(s: &str, at: &str) -> Result<Sha256Digest, Rejection> {
    Sha256Digest::parse(s).map_err(|r| r.at(at))
}

fn id(s: String, at: &str) -> Result<EvaluationId, Rejection> {
    EvaluationId::new(s).map_err(|r| r.at(at))
}

impl Fixture {
    /// Decodes a fixture strictly (see the module docs).
    pub fn decode(bytes: &[u8]) -> Result<Fixture, Rejection> {
        let raw: RawFixture = canon::decode(bytes, MAX_FIXTURE_BYTES, Form::Canonical)?;
        if raw.schema != FIXTURE_SCHEMA {
            return Err(Rejection::new(
                REFINEMENT_FIXTURE_SCHEMA,
                format!("schema is not {FIXTURE_SCHEMA}"),
            )
            .at("schema"));
        }
        let variant = Variant::parse(&raw.variant)
            .ok_or_else(|| invalid("variant is base or candidate").at("variant"))?;
        check_text(&raw.dataset_ref, MAX_IDENTITY_BYTES).map_err(|r| r.at("dataset_ref"))?;
        check_text(&raw.model_identity, MAX_IDENTITY_BYTES).map_err(|r| r.at("model_identity"))?;
        check_text(&raw.harness, MAX_HARNESS_BYTES).map_err(|r| r.at("harness"))?;
        if let Some(m) = &raw.module_identity {
            check_text(m, MAX_IDENTITY_BYTES).map_err(|r| r.at("module_identity"))?;
        }
        if raw.seed > MAX_SAFE_INTEGER {
            return Err(bound("seed is at most 2^53 - 1").at("seed"));
        }
        let selectors = match raw.selectors {
            Some(s) if s.is_empty() => {
                return Err(Rejection::new(
                    REFINEMENT_FIXTURE_NOT_CANONICAL,
                    "no selectors are written by omitting the member, never as []",
                )
                .at("selectors"))
            }
            s => s.unwrap_or_default(),
        };
        check_list(
            &selectors,
            MAX_SELECTORS,
            MAX_SELECTOR_BYTES,
            true,
            "selectors",
        )?;
        let e = raw.expect;
        let termination = ExpectedTermination::parse(&e.termination)
            .ok_or_else(|| invalid("termination is exited or signaled").at("expect.termination"))?;
        let expect = Expectation::new(
            termination,
            e.exit_code,
            e.max_wall_latency_ms,
            e.required_literals,
            e.forbidden_literals,
        )
        .map_err(|r| r.at("expect"))?;
        let f = Fixture {
            canonical: bytes.to_vec(),
            evaluation_run_id: id(raw.evaluation_run_id, "evaluation_run_id")?,
            matched_pair_id: id(raw.matched_pair_id, "matched_pair_id")?,
            session_id: SessionId::new(raw.session_id).map_err(|r| r.at("session_id"))?,
            variant,
            proposal_digest: digest(&raw.proposal_digest, "proposal_digest")?,
            base_projection_digest: digest(&raw.base_projection_digest, "base_projection_digest")?,
            candidate_projection_digest: digest(
                &raw.candidate_projection_digest,
                "candidate_projection_digest",
            )?,
            fixture_digest: digest(&raw.fixture_digest, "fixture_digest")?,
            dataset_digest: digest(&raw.dataset_digest, "dataset_digest")?,
            fixture_id: id(raw.fixture_id, "fixture_id")?,
            dataset_ref: raw.dataset_ref,
            seed: raw.seed,
            model_identity: raw.model_identity,
            harness: raw.harness,
            module_identity: raw.module_identity,
            selectors,
            selected_projection: raw.selected_projection.decode("selected_projection")?,
            expect,
        };
        // One encoding per value: an optional member given as null decodes
        // but does not re-encode to these bytes.
        if f.encode()? != bytes {
            return Err(invalid(
                "the fixture is not the encoding of its value (an optional member is null?)",
            ));
        }
        Ok(f)
    }

    fn to_value(&self) -> Value {
        let mut v = json!({
            "schema": FIXTURE_SCHEMA,
            "evaluation_run_id": self.evaluation_run_id,
            "matched_pair_id": self.matched_pair_id,
            "session_id": self.session_id,
            "variant": self.variant,
            "proposal_digest": self.proposal_digest,
            "base_projection_digest": self.base_projection_digest,
            "candidate_projection_digest": self.candidate_projection_digest,
            "fixture_digest": self.fixture_digest,
            "dataset_digest": self.dataset_digest,
            "fixture_id": self.fixture_id,
            "dataset_ref": self.dataset_ref,
            "seed": self.seed,
            "model_identity": self.model_identity,
            "harness": self.harness,
            "selected_projection": self.selected_projection,
            "expect": self.expect.to_value(),
        });
        if let Some(o) = v.as_object_mut() {
            if let Some(m) = &self.module_identity {
                o.insert("module_identity".into(), json!(m));
            }
            if !self.selectors.is_empty() {
                o.insert("selectors".into(), json!(self.selectors));
            }
        }
        v
    }

    /// The canonical encoding of the value (for a decoded fixture, the
    /// bytes it was decoded from).
    pub fn encode(&self) -> Result<Vec<u8>, Rejection> {
        canon::to_canonical(&self.to_value())
    }

    /// The bytes the fixture was decoded from.
    pub fn canonical_bytes(&self) -> &[u8] {
        &self.canonical
    }

    /// SHA-256 of [`Self::canonical_bytes`] (no domain).
    pub fn sha256(&self) -> Sha256Digest {
        Sha256Digest::of(&self.canonical)
    }

    /// The fixture context: `sha256_domain(
    /// "glove.refinement-fixture-context.v1", F)` where `F` is the
    /// canonical fixture without `session_id`, `variant` and
    /// `selected_projection`, so the two fixtures of a matched pair share
    /// it.
    pub fn context_digest(&self) -> Sha256Digest {
        let mut v = self.to_value();
        if let Some(o) = v.as_object_mut() {
            for k in ["session_id", "variant", "selected_projection"] {
                o.remove(k);
            }
        }
        // Every string and integer of a decoded fixture encodes; the
        // fallback is never taken.
        let bytes = canon::to_canonical(&v).unwrap_or_default();
        Sha256Digest::of_domain(FIXTURE_CONTEXT_DOMAIN, &bytes)
    }

    /// Checks the fixture against the plan it is evaluated under: the
    /// plan has a binding (`refinement_binding_missing`); the fixture's
    /// session, variant, base and candidate digests and selected projection
    /// are the plan's (`refinement_fixture_mismatch`); and the matched
    /// context of the plan and the fixture is the one the binding commits
    /// to (`refinement_matched_context_mismatch`).
    pub fn check_against(&self, plan: &DecodedPlan) -> Result<(), Rejection> {
        let b = plan.refinement().ok_or_else(|| {
            Rejection::new(
                REFINEMENT_BINDING_MISSING,
                "the plan has no refinement binding",
            )
            .at("refinement")
        })?;
        let mismatch = |field: &str, what: &str| {
            Err(Rejection::new(
                REFINEMENT_FIXTURE_MISMATCH,
                format!("the fixture's {what} is not the plan's"),
            )
            .at(field))
        };
        if &self.session_id != plan.session_id() {
            return mismatch("session_id", "session");
        }
        if self.variant != b.variant() {
            return mismatch("variant", "variant");
        }
        if self.base_projection_digest != b.base().sha256 {
            return mismatch("base_projection_digest", "base projection digest");
        }
        if self.candidate_projection_digest != b.candidate().sha256 {
            return mismatch("candidate_projection_digest", "candidate projection digest");
        }
        if &self.selected_projection != b.selected() {
            return mismatch("selected_projection", "selected projection");
        }
        let plan_context = refinement_plan_context_digest(plan)?;
        let matched = matched_context_digest(&plan_context, &self.context_digest());
        if &matched != b.matched_context_digest() {
            return Err(Rejection::new(
                REFINEMENT_MATCHED_CONTEXT_MISMATCH,
                "the matched context of the plan and the fixture is not the binding's",
            )
            .at("refinement.matched_context_digest"));
        }
        Ok(())
    }

    /// The evaluation run.
    pub fn evaluation_run_id(&self) -> &EvaluationId {
        &self.evaluation_run_id
    }
    /// The matched pair (a base and a candidate session share it).
    pub fn matched_pair_id(&self) -> &EvaluationId {
        &self.matched_pair_id
    }
    /// The session the fixture is for.
    pub fn session_id(&self) -> &SessionId {
        &self.session_id
    }
    /// The variant the fixture is for.
    pub fn variant(&self) -> Variant {
        self.variant
    }
    /// Digest of the refinement proposal.
    pub fn proposal_digest(&self) -> &Sha256Digest {
        &self.proposal_digest
    }
    /// Digest of the base skill projection.
    pub fn base_projection_digest(&self) -> &Sha256Digest {
        &self.base_projection_digest
    }
    /// Digest of the candidate skill projection.
    pub fn candidate_projection_digest(&self) -> &Sha256Digest {
        &self.candidate_projection_digest
    }
    /// The controller's digest of the fixture definition.
    pub fn fixture_digest(&self) -> &Sha256Digest {
        &self.fixture_digest
    }
    /// Digest of the dataset.
    pub fn dataset_digest(&self) -> &Sha256Digest {
        &self.dataset_digest
    }
    /// The fixture id.
    pub fn fixture_id(&self) -> &EvaluationId {
        &self.fixture_id
    }
    /// The dataset reference.
    pub fn dataset_ref(&self) -> &str {
        &self.dataset_ref
    }
    /// The deterministic seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }
    /// The model identity.
    pub fn model_identity(&self) -> &str {
        &self.model_identity
    }
    /// The harness.
    pub fn harness(&self) -> &str {
        &self.harness
    }
    /// The module identity, when given.
    pub fn module_identity(&self) -> Option<&str> {
        self.module_identity.as_deref()
    }
    /// The selectors, sorted (empty when none).
    pub fn selectors(&self) -> &[String] {
        &self.selectors
    }
    /// The selected skill projection.
    pub fn selected_projection(&self) -> &LibraryProjection {
        &self.selected_projection
    }
    /// What the evaluator checks.
    pub fn expect(&self) -> &Expectation {
        &self.expect
    }
}
