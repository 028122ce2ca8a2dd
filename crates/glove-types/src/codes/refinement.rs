//! Codes of `refinement-eval-v1`: evaluation templates, a plan's
//! `refinement` binding, the evaluation fixture, the matched context and
//! the `refinement_v1` receipt body.

define_codes! { Refinement;
    REFINEMENT_EVALUATION_UNKNOWN = "refinement_evaluation_unknown": "a runtime template's evaluation names an evaluator Glove does not define (only refinement-eval-v1)",
    REFINEMENT_TEMPLATE_INVALID = "refinement_template_invalid": "an evaluation template allows a path alias, allows fewer than two projection destinations or is not a linux_production template",
    REFINEMENT_BINDING_INVALID = "refinement_binding_invalid": "the plan's refinement binding repeats a projection id, gives base and candidate one digest or names an unknown variant",
    REFINEMENT_BINDING_MISSING = "refinement_binding_missing": "the plan's template is an evaluation template (or the operation needs a refinement plan) but the plan has no refinement binding",
    REFINEMENT_BINDING_UNEXPECTED = "refinement_binding_unexpected": "the plan carries a refinement binding but its template is not an evaluation template",
    REFINEMENT_PATH_GRANT_REFUSED = "refinement_path_grant_refused": "a refinement plan names a path grant or a path exposure; evaluations have none",
    REFINEMENT_PROJECTION_MISMATCH = "refinement_projection_mismatch": "a refinement plan's library projections are not exactly its bound fixture and selected skill",
    REFINEMENT_FIXTURE_INVALID = "refinement_fixture_invalid": "the evaluation fixture breaks its schema: an unknown variant or termination, a null or empty member that must be absent, or bytes that are not the encoding of its value",
    REFINEMENT_FIXTURE_SCHEMA = "refinement_fixture_schema": "the fixture's schema is not glove.refinement-eval-fixture-v1",
    REFINEMENT_FIXTURE_BOUND = "refinement_fixture_bound": "a fixture string, number or list lies outside its bound, or a string holds a control character",
    REFINEMENT_FIXTURE_NOT_CANONICAL = "refinement_fixture_not_canonical": "a fixture list (selectors, literals) is not sorted in byte order or repeats an entry",
    REFINEMENT_LITERAL_CONFLICT = "refinement_literal_conflict": "a transcript literal is both required and forbidden",
    REFINEMENT_FIXTURE_MISMATCH = "refinement_fixture_mismatch": "the fixture names another session, variant, base or candidate digest or selected projection than the plan's binding",
    REFINEMENT_MATCHED_CONTEXT_MISMATCH = "refinement_matched_context_mismatch": "the matched-context digest of the plan and fixture is not the one the plan's binding commits to",
    REFINEMENT_OUTCOME_INVALID = "refinement_outcome_invalid": "a refinement outcome's parts disagree: unsorted or unknown assertion names, passed with failed assertions, or more matched literals than expected",
    REFINEMENT_OUTCOME_COMMITMENT_MISMATCH = "refinement_outcome_commitment_mismatch": "a refinement receipt's outcome_commitment is not the commitment of its outcome",
    REFINEMENT_SESSION_NOT_INTERACTIVE = "refinement_session_not_interactive": "a refinement evaluation takes no terminal input, resize or signal from a client: what the evaluator judges is the agent's own run",
    REFINEMENT_RECEIPT_SESSION_MISMATCH = "refinement_receipt_session_mismatch": "a refinement receipt's nested resource receipt names another session",
}
