//! A plan's `refinement` binding and its admission rules.
//!
//! ```text
//! "refinement":{"base":{"destination_alias":…,"projection_id":…,"sha256":…},
//!               "candidate":{…},"fixture":{…},
//!               "matched_context_digest":"<64 lowercase hex>",
//!               "variant":"base"|"candidate"}
//! ```
//!
//! Decoding (part of [`DecodedPlan::decode`]) refuses unknown members, a
//! projection id used twice among fixture, base and candidate, base and
//! candidate with one digest, and an unknown variant
//! (`refinement_binding_invalid`). Admission (`admit_binding`) holds the rules that
//! need the template: see the module docs of [`crate::refinement`].

use crate::codes::refinement::*;
use crate::digest::Sha256Digest;
use crate::plan::{DecodedPlan, LibraryProjection, RawProjection};
use crate::policy::{RuntimeTemplate, ValidatedPolicy};
use crate::Rejection;
use serde::{Deserialize, Serialize, Serializer};

/// Which skill of a matched pair a session evaluates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Variant {
    /// The base (current) skill.
    Base,
    /// The candidate (proposed) skill.
    Candidate,
}

impl Variant {
    /// The wire name: `base` or `candidate`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Variant::Base => "base",
            Variant::Candidate => "candidate",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Variant> {
        [Variant::Base, Variant::Candidate]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

impl Serialize for Variant {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBinding {
    base: RawProjection,
    candidate: RawProjection,
    fixture: RawProjection,
    matched_context_digest: String,
    variant: String,
}

/// A plan's `refinement` binding (see the module docs). Only the plan
/// decoder makes one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RefinementBinding {
    base: LibraryProjection,
    candidate: LibraryProjection,
    fixture: LibraryProjection,
    matched_context_digest: Sha256Digest,
    variant: Variant,
}

fn invalid(msg: impl Into<String>) -> Rejection {
    Rejection::new(REFINEMENT_BINDING_INVALID, msg)
}

impl RawBinding {
    /// The structural rules of a binding; locations are relative to the
    /// `refinement` member.
    pub(crate) fn decode(&self) -> Result<RefinementBinding, Rejection> {
        let base = self.base.decode("base")?;
        let candidate = self.candidate.decode("candidate")?;
        let fixture = self.fixture.decode("fixture")?;
        let variant = Variant::parse(&self.variant)
            .ok_or_else(|| invalid("variant is base or candidate").at("variant"))?;
        let matched_context_digest = Sha256Digest::parse(&self.matched_context_digest)
            .map_err(|r| r.at("matched_context_digest"))?;
        for (a, b, at) in [
            (&fixture, &base, "base.projection_id"),
            (&fixture, &candidate, "candidate.projection_id"),
            (&base, &candidate, "candidate.projection_id"),
        ] {
            if a.projection_id == b.projection_id {
                return Err(invalid(format!(
                    "projection id {} is bound twice; fixture, base and candidate are distinct",
                    b.projection_id
                ))
                .at(at));
            }
        }
        if base.sha256 == candidate.sha256 {
            return Err(invalid(
                "base and candidate have one digest; a matched pair compares two skills",
            )
            .at("candidate.sha256"));
        }
        Ok(RefinementBinding {
            base,
            candidate,
            fixture,
            matched_context_digest,
            variant,
        })
    }
}

impl RefinementBinding {
    /// The fixture projection (read by Glove before launch, never mounted
    /// into the child).
    pub fn fixture(&self) -> &LibraryProjection {
        &self.fixture
    }
    /// The base skill projection.
    pub fn base(&self) -> &LibraryProjection {
        &self.base
    }
    /// The candidate skill projection.
    pub fn candidate(&self) -> &LibraryProjection {
        &self.candidate
    }
    /// The projection of the selected variant: [`Self::base`] or
    /// [`Self::candidate`].
    pub fn selected(&self) -> &LibraryProjection {
        match self.variant {
            Variant::Base => &self.base,
            Variant::Candidate => &self.candidate,
        }
    }
    /// The variant this session evaluates.
    pub fn variant(&self) -> Variant {
        self.variant
    }
    /// The matched-context digest the controller committed to
    /// ([`super::matched_context_digest`]).
    pub fn matched_context_digest(&self) -> &Sha256Digest {
        &self.matched_context_digest
    }
}

/// The admission rules of a plan's binding against its template (the
/// template is already resolved): a binding exactly for an evaluation
/// template, no path grant or exposure, library projections exactly
/// {fixture, selected}, and every bound destination allowed.
pub(crate) fn admit_binding(
    plan: &DecodedPlan,
    tpl: &RuntimeTemplate,
    policy: &ValidatedPolicy,
) -> Result<(), Rejection> {
    let binding = match (tpl.evaluation(), plan.refinement()) {
        (None, None) => return Ok(()),
        (None, Some(_)) => {
            return Err(Rejection::new(
                REFINEMENT_BINDING_UNEXPECTED,
                format!(
                    "template {} is not an evaluation template; a plan for it has no refinement binding",
                    tpl.id()
                ),
            )
            .at("refinement"))
        }
        (Some(e), None) => {
            return Err(Rejection::new(
                REFINEMENT_BINDING_MISSING,
                format!(
                    "template {} evaluates with {}; the plan needs a refinement binding",
                    tpl.id(),
                    e.as_str()
                ),
            )
            .at("refinement"))
        }
        (Some(_), Some(b)) => b,
    };
    if !plan.path_grants.is_empty() {
        return Err(Rejection::new(
            REFINEMENT_PATH_GRANT_REFUSED,
            "a refinement plan grants no path",
        )
        .at("path_grants"));
    }
    if !plan.path_exposures.is_empty() {
        return Err(Rejection::new(
            REFINEMENT_PATH_GRANT_REFUSED,
            "a refinement plan names no path exposure",
        )
        .at("path_exposures"));
    }
    let projections = &plan.library_projections;
    let (fixture, selected) = (binding.fixture(), binding.selected());
    let exact =
        projections.len() == 2 && projections.contains(fixture) && projections.contains(selected);
    if !exact {
        return Err(Rejection::new(
            REFINEMENT_PROJECTION_MISMATCH,
            format!(
                "library_projections must be exactly the fixture {} and the selected {} skill {} \
                 (same id, sha256 and destination alias)",
                fixture.projection_id,
                binding.variant().as_str(),
                selected.projection_id
            ),
        )
        .at("library_projections"));
    }
    for (name, p) in [
        ("base", binding.base()),
        ("candidate", binding.candidate()),
        ("fixture", binding.fixture()),
    ] {
        crate::plan::check_destination(
            policy,
            tpl,
            &p.destination_alias,
            &format!("refinement.{name}.destination_alias"),
        )?;
    }
    Ok(())
}
