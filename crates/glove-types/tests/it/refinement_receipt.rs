//! The `refinement_v1` receipt body: an example built from an evaluation
//! of the example fixture, pinned by a snapshot; its one encoding; and the
//! decoder's refusals.

use glove_types::codes::journal::RECEIPT_BODY_INVALID;
use glove_types::codes::json::JSON_UNKNOWN_FIELD;
use glove_types::codes::refinement::*;
use glove_types::ids::{AliasId, ProjectionId, SessionId};
use glove_types::plan::LibraryProjection;
use glove_types::policy::ResourceLimits;
use glove_types::receipt::{
    EvaluatorState, Projection, RefinementReceiptV1, ResourceReceiptV1, Termination, Usage,
};
use glove_types::refinement::{Evaluator, Fixture, Observed, ObservedEnd, Variant};
use glove_types::{Blake3Digest, ErrorCode, Sha256Digest};

/// A change made to a test value.
type Edit<'a, T> = Box<dyn Fn(&mut T) + 'a>;

fn projection(p: &LibraryProjection, target: &str) -> Projection {
    Projection {
        projection_id: p.projection_id.clone(),
        destination_alias: p.destination_alias.clone(),
        target: target.into(),
        sha256: p.sha256,
    }
}

fn resource(session: &SessionId, skill: &Projection) -> ResourceReceiptV1 {
    ResourceReceiptV1 {
        session_id: session.clone(),
        plan_content_digest: Sha256Digest::of(&crate::example("refinement-plan.json")),
        controller_plan_digest: Blake3Digest::of(&crate::example("refinement-plan.json")),
        launch_binding_digest: Some(Sha256Digest::from_bytes([7; 32])),
        limits: Some(ResourceLimits {
            cpu_time_ms: 1000,
            memory_bytes: 67_108_864,
            pids: 16,
            wall_time_ms: 2000,
            disk_bytes: 2_097_152,
            terminal_output_bytes: 1_048_576,
        }),
        projections: vec![skill.clone()],
        usage: Some(Usage {
            cpu_time_ms: 12,
            peak_memory_bytes: 4_194_304,
            pids_peak: 2,
            wall_time_ms: 180,
            disk_bytes: 0,
            terminal_bytes: 31,
        }),
        termination: Termination::Exited {
            code: 0,
            limits_reached: vec![],
        },
        recovery: None,
        adapter: None,
        egress: None,
        mcp: None,
        retained: vec![],
    }
}

/// The example: the example fixture's session, evaluated over a scripted
/// transcript that passes.
pub(crate) fn example() -> RefinementReceiptV1 {
    let fixture = Fixture::decode(&crate::example("refinement-fixture.json")).expect("fixture");
    let mut ev = Evaluator::new(fixture.expect());
    for chunk in [&b"review: PA"[..], b"SS\r\nreview comp", b"lete\r\n"] {
        ev.feed(chunk);
    }
    let r = ev.finish(&Observed {
        termination: ObservedEnd::Exited(0),
        latency_us: 180_250,
        stream_complete: true,
        resource_stop: None,
    });
    assert!(r.outcome.passed, "{:?}", r.outcome);
    let plan = glove_types::plan::DecodedPlan::decode(&crate::example("refinement-plan.json"))
        .expect("plan");
    let b = plan.refinement().expect("binding");
    let mounted = projection(b.selected(), "/opt/sage/skills/skill-base");
    RefinementReceiptV1 {
        session_id: fixture.session_id().clone(),
        fixture: b.fixture().clone(),
        selected: b.selected().clone(),
        variant: b.variant(),
        matched_context_digest: *b.matched_context_digest(),
        outcome_commitment: Some(r.outcome.commitment()),
        outcome: Some(r.outcome),
        raw_pty_sha256: Some(r.raw_pty_sha256),
        raw_pty_bytes: r.raw_pty_bytes,
        evaluator: EvaluatorState {
            complete: r.complete,
            evidence: Some(r.evidence),
        },
        resource: resource(fixture.session_id(), &mounted),
    }
}

/// The same session when the evaluation could not run.
fn not_run() -> RefinementReceiptV1 {
    let mut r = example();
    r.outcome = None;
    r.outcome_commitment = None;
    r.raw_pty_sha256 = None;
    r.raw_pty_bytes = 0;
    r.evaluator = EvaluatorState {
        complete: false,
        evidence: None,
    };
    r.resource.usage = None;
    r.resource.termination = Termination::Failed {
        code: "sandbox_spawn_failed".into(),
        message: "the sandbox could not be built".into(),
    };
    r
}

#[test]
fn example_snapshot_and_round_trip() {
    let r = example();
    let b = r.encode().expect("encode");
    assert_eq!(RefinementReceiptV1::decode(&b).expect("decode"), r);
    let s = String::from_utf8(b).expect("utf8");
    assert!(s.contains("\"receipt_kind\":\"refinement_v1\""), "{s}");
    assert!(s.contains("\"receipt_kind\":\"resource_v1\""), "{s}");
    assert!(s.contains("\"session_id\":\"eval-0001-base\""), "{s}");
    crate::snap!(insta::assert_snapshot!("refinement_receipt_v1", s));
    let n = not_run();
    let b = n.encode().expect("encode");
    assert_eq!(RefinementReceiptV1::decode(&b).expect("decode"), n);
    let s = String::from_utf8(b).expect("utf8");
    assert!(
        s.contains("\"evaluator\":{\"complete\":false,\"evidence\":\"none\"}"),
        "{s}"
    );
    assert!(s.contains("\"outcome\":null"), "{s}");
}

fn code(r: &RefinementReceiptV1) -> ErrorCode {
    r.encode().expect_err("encode refuses").code()
}

#[test]
fn values_whose_parts_disagree_do_not_encode() {
    let mut r = example();
    r.outcome_commitment = Some(Sha256Digest::from_bytes([1; 32]));
    assert_eq!(code(&r), REFINEMENT_OUTCOME_COMMITMENT_MISMATCH);
    let mut r = example();
    r.outcome_commitment = None;
    assert_eq!(code(&r), REFINEMENT_OUTCOME_COMMITMENT_MISMATCH);
    let mut r = example();
    r.resource.session_id = SessionId::new("other").expect("id");
    assert_eq!(code(&r), REFINEMENT_RECEIPT_SESSION_MISMATCH);
    let mut r = example();
    if let Some(o) = r.outcome.as_mut() {
        o.passed = false;
    }
    r.outcome_commitment = r.outcome.as_ref().map(|o| o.commitment());
    assert_eq!(code(&r), REFINEMENT_OUTCOME_INVALID);
    let edits: Vec<Edit<'_, RefinementReceiptV1>> = vec![
        Box::new(|r| r.raw_pty_sha256 = None),
        Box::new(|r| r.evaluator.evidence = None),
        Box::new(|r| r.evaluator.evidence = Some(glove_types::refinement::Evidence::Invalid)),
        Box::new(|r| r.evaluator.complete = false),
        Box::new(|r| r.raw_pty_bytes = 1 << 53),
        Box::new(|r| r.selected = r.fixture.clone()),
    ];
    for e in edits {
        let mut r = example();
        e(&mut r);
        assert_eq!(code(&r), RECEIPT_BODY_INVALID, "{r:?}");
    }
    let edits: Vec<Edit<'_, RefinementReceiptV1>> = vec![
        Box::new(|r| r.raw_pty_bytes = 1),
        Box::new(|r| r.raw_pty_sha256 = Some(Sha256Digest::from_bytes([2; 32]))),
        Box::new(|r| r.evaluator.complete = true),
        Box::new(|r| r.outcome_commitment = Some(Sha256Digest::from_bytes([2; 32]))),
    ];
    for e in edits {
        let mut r = not_run();
        e(&mut r);
        assert_eq!(code(&r), RECEIPT_BODY_INVALID, "{r:?}");
    }
}

#[test]
fn refuses_what_is_not_the_encoding_of_a_value() {
    let ok = String::from_utf8(example().encode().expect("encode")).expect("utf8");
    let hex = example().selected.sha256.to_hex();
    let cases = [
        ok.replacen("\"refinement_v1\"", "\"resource_v1\"", 1),
        ok.replacen("\"resource_v1\"", "\"refinement_v1\"", 1),
        ok.replacen("\"variant\":\"base\"", "\"variant\":\"both\"", 1),
        ok.replacen("\"evidence\":\"valid\"", "\"evidence\":\"maybe\"", 1),
        ok.replacen("\"evaluator\":{", "\"evaluator\":{\"x\":1,", 1),
        ok.replacen("\"eval-0001-base\"", "\"Eval\"", 1),
        ok.replacen(&hex, &"0G".repeat(32), 1),
        ok.replacen(
            "\"destination_alias\":",
            "\"target\":\"/x\",\"destination_alias\":",
            1,
        ),
        ok.replacen("\"passed\":true", "\"passed\":false", 1),
        ok.replacen(':', ": ", 1),
        format!("{ok}\n"),
        ok.replacen("\"latency_us\"", "\"extra\":1,\"latency_us\"", 1),
    ];
    for c in cases {
        assert_ne!(c, ok);
        let got = RefinementReceiptV1::decode(c.as_bytes()).expect_err("refused");
        let s = got.code().as_str();
        assert!(
            s.starts_with("json_")
                || s.starts_with("refinement_")
                || [
                    "receipt_body_invalid",
                    "id_invalid",
                    "digest_invalid",
                    "path_invalid"
                ]
                .contains(&s)
                || s.starts_with("policy_path"),
            "{s}: {c}"
        );
    }
    let unknown = ok.replacen("\"evaluator\"", "\"aaa\":1,\"evaluator\"", 1);
    assert_eq!(
        RefinementReceiptV1::decode(unknown.as_bytes())
            .expect_err("refused")
            .code(),
        JSON_UNKNOWN_FIELD
    );
}

#[test]
fn variants_and_ids_survive() {
    let mut r = example();
    r.variant = Variant::Candidate;
    r.selected.projection_id = ProjectionId::new("skill-candidate").expect("id");
    r.selected.destination_alias = AliasId::new("skills").expect("id");
    let b = r.encode().expect("encode");
    assert_eq!(RefinementReceiptV1::decode(&b).expect("decode"), r);
}

/// The fuzz seeds of `receipt_refinement` and `refinement_fixture` are the
/// examples' encodings (regenerate with `GLOVE_BLESS=1`).
#[test]
fn fuzz_seeds_are_the_examples() {
    let dir = crate::repo_root().join("fuzz/seeds");
    let seeds = [
        (
            "receipt_refinement/passed",
            example().encode().expect("encode"),
        ),
        (
            "receipt_refinement/not_run",
            not_run().encode().expect("encode"),
        ),
        (
            "refinement_fixture/example",
            crate::example("refinement-fixture.json"),
        ),
    ];
    for (name, want) in seeds {
        let path = dir.join(name);
        if std::env::var_os("GLOVE_BLESS").is_some() {
            std::fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
            std::fs::write(&path, &want).expect("write");
            continue;
        }
        let got = std::fs::read(&path).unwrap_or_default();
        assert!(
            got == want,
            "fuzz/seeds/{name} is stale; rerun with GLOVE_BLESS=1"
        );
    }
}
