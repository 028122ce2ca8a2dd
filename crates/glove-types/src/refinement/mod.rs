//! `refinement-eval-v1`: a Glove-owned declarative evaluation of one skill
//! variant (base or candidate) against a fixture, on the Linux managed
//! runtime. Everything here is pure data and computation; gloved does the
//! I/O.
//!
//! The pieces, in the order a session meets them:
//!
//! * [`Evaluation`] — what a runtime template's optional `evaluation`
//!   member names; an evaluation template allows no path alias and at
//!   least two projection destinations (checked when the policy is
//!   validated);
//! * [`RefinementBinding`] ([`binding`]) — a plan's `refinement` member:
//!   the fixture, base and candidate projections, the selected
//!   [`Variant`] and the matched-context digest. [`crate::plan::admit`]
//!   requires one exactly for evaluation templates, refuses path grants and
//!   exposures with it, and requires the plan's library projections to be
//!   exactly the fixture and the selected skill;
//! * [`Fixture`] ([`fixture`]) — the fixture projection's bytes, strictly
//!   decoded (`glove.refinement-eval-fixture-v1`), and
//!   [`Fixture::check_against`] the plan before the child is released;
//! * the digests ([`digests`]): [`refinement_plan_context_digest`],
//!   [`Fixture::context_digest`] and [`matched_context_digest`], which
//!   binds a matched base/candidate pair to one context;
//! * [`Evaluator`] ([`evaluator`]) — fed every raw PTY byte, in order;
//!   [`Evaluator::finish`] synthesizes the [`Outcome`] ([`outcome`]) and
//!   its commitment from the stream and the trusted [`Observed`] end.
//!
//! The `refinement_v1` receipt body that records all of it is
//! [`crate::receipt::RefinementReceiptV1`]. Codes are in
//! [`crate::codes::refinement`]; the digest definitions and vectors are in
//! `docs/digests.md`.

pub mod binding;
pub mod digests;
pub mod evaluator;
pub mod expect;
pub mod fixture;
mod matcher;
pub mod outcome;
mod utf8;

#[cfg(test)]
mod tests;

pub use binding::{RefinementBinding, Variant};
pub use digests::{
    matched_context_digest, refinement_plan_context_digest, FIXTURE_CONTEXT_DOMAIN,
    MATCHED_CONTEXT_DOMAIN, REFINEMENT_PLAN_CONTEXT_DOMAIN,
};
pub use evaluator::{Evaluator, Evidence, Observed, ObservedEnd};
pub use expect::{Expectation, ExpectedTermination};
pub use fixture::{Fixture, FIXTURE_SCHEMA, MAX_FIXTURE_BYTES};
pub use outcome::{LiteralCount, Outcome, OUTCOME_DOMAIN};

use serde::{Serialize, Serializer};

/// The `refinement_evaluation_protocol_schema_version` a service
/// advertises when it can run `refinement-eval-v1` sessions (the Linux
/// managed runtime and the protected library-bundle store both
/// constructed); a service that cannot advertises `0`.
pub const REFINEMENT_EVALUATION_PROTOCOL_SCHEMA_VERSION: u64 = 1;

/// The evaluator a runtime template names in its optional `evaluation`
/// member. A template without one is an ordinary template. Deliberately
/// exhaustive: a new evaluator must be handled wherever one is matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Evaluation {
    /// `refinement-eval-v1`: the declarative transcript evaluator.
    RefinementEvalV1,
}

impl Evaluation {
    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Evaluation::RefinementEvalV1 => "refinement-eval-v1",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Evaluation> {
        [Evaluation::RefinementEvalV1]
            .into_iter()
            .find(|e| e.as_str() == s)
    }
}

impl Serialize for Evaluation {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}
