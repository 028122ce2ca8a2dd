//! `glove receipts show` for a `refinement_v1` receipt: the evaluation's
//! lines (the nested resource receipt is rendered after them).

use super::{bytes, clean, line, ms, short};
use glove_types::receipt::RefinementReceiptV1;

/// A refinement evaluation's lines (its nested resource receipt follows).
pub(super) fn refinement(o: &mut String, r: &RefinementReceiptV1) {
    let p = |x: &glove_types::plan::LibraryProjection| {
        format!(
            "{} ({})",
            clean(x.projection_id.as_str()),
            short(&x.sha256.to_hex())
        )
    };
    line(
        o,
        "evaluation",
        &format!(
            "refinement-eval-v1, variant {}, skill {}, fixture {}",
            r.variant.as_str(),
            p(&r.selected),
            p(&r.fixture)
        ),
    );
    line(o, "matched", &short(&r.matched_context_digest.to_hex()));
    let verdict = match &r.outcome {
        None => "no outcome: the evaluation did not complete".to_owned(),
        Some(x) => format!(
            "{} in {}; required literals {}/{} found, forbidden {}/{} seen{}",
            if x.passed { "PASSED" } else { "FAILED" },
            ms(x.latency_us / 1000),
            x.required_literals.matched,
            x.required_literals.expected,
            x.forbidden_literals.matched,
            x.forbidden_literals.expected,
            if x.failed_assertions.is_empty() {
                String::new()
            } else {
                format!("; failed: {}", clean(&x.failed_assertions.join(", ")))
            }
        ),
    };
    line(o, "outcome", &verdict);
    let evidence = r.evaluator.evidence.map_or("none", |e| e.as_str());
    let stream = r
        .raw_pty_sha256
        .map_or_else(|| "-".to_owned(), |d| short(&d.to_hex()));
    line(
        o,
        "evidence",
        &format!(
            "{evidence}, evaluator {}; terminal stream {} ({})",
            if r.evaluator.complete {
                "complete"
            } else {
                "INCOMPLETE"
            },
            bytes(r.raw_pty_bytes),
            stream
        ),
    );
}
