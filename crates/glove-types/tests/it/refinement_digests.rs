//! The `refinement-eval-v1` vectors of `docs/digests.md` (between the
//! `refinement-vectors` markers) are recomputed here, through the API and
//! from the written definitions alone.

use glove_types::plan::DecodedPlan;
use glove_types::refinement::{
    matched_context_digest, refinement_plan_context_digest, Fixture, LiteralCount, Outcome,
};
use glove_types::Sha256Digest;
use sha2::{Digest, Sha256};

const BEGIN: &str = "<!-- refinement-vectors:begin -->";
const END: &str = "<!-- refinement-vectors:end -->\n";

/// The canonical refinement plan context `P` of `refinement-plan.json`, as
/// `docs/digests.md` shows it.
const P: &str = r#"{"adapter_command_digest":"9d1ee6f01f40c5813bf566765cef30fc98c0fed227945707f7c1c2e5d3608bf1","egress_policy_ids":["no-network"],"policy_revision":7,"resource_limits":{"cpu_time_ms":1000,"disk_bytes":2097152,"memory_bytes":67108864,"pids":16,"profile_id":"small","terminal_output_bytes":1048576,"wall_time_ms":2000},"runtime_id":"codex","runtime_template_id":"codex-eval","sandbox_backend":"linux_production","secret_handles":[],"skills":{"base":{"destination_alias":"skills","projection_id":"skill-base","sha256":"bc72a689b2b8a78d6faeba20f76c3cca0f597a9225e11992f7314841b091b995"},"candidate":{"destination_alias":"skills","projection_id":"skill-candidate","sha256":"38190adc9eefc3581e0404c2590e524fc8ce84567179a2e94d4736be889d44d5"}},"tool_policy_ids":[]}"#;

/// The example outcome of `docs/digests.md`.
const OUTCOME: &str = r#"{"failed_assertions":["forbidden_literal:1","required_literal:0"],"forbidden_literals":{"expected":2,"matched":1},"latency_us":180250,"passed":false,"required_literals":{"expected":2,"matched":1}}"#;

fn outcome() -> Outcome {
    Outcome {
        passed: false,
        latency_us: 180_250,
        failed_assertions: vec!["forbidden_literal:1".into(), "required_literal:0".into()],
        required_literals: LiteralCount {
            expected: 2,
            matched: 1,
        },
        forbidden_literals: LiteralCount {
            expected: 2,
            matched: 1,
        },
    }
}

fn sha_domain(domain: &str, bytes: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(domain.as_bytes());
    h.update([0u8]);
    h.update(bytes);
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn vectors() -> String {
    let mut out = format!("{BEGIN}\n| vector | value |\n| --- | --- |\n");
    let mut row = |name: &str, v: String| out.push_str(&format!("| {name} | `{v}` |\n"));
    let fixture_bytes = crate::example("refinement-fixture.json");
    let plan = DecodedPlan::decode(&crate::example("refinement-plan.json")).expect("plan");
    let fixture = Fixture::decode(&fixture_bytes).expect("fixture");
    let pc = refinement_plan_context_digest(&plan).expect("context");
    let fc = fixture.context_digest();
    let matched = matched_context_digest(&pc, &fc);
    assert_eq!(
        &matched,
        plan.refinement().expect("binding").matched_context_digest()
    );
    row(
        "refinement_plan_context of refinement-plan.json",
        pc.to_hex(),
    );
    row("fixture_context of refinement-fixture.json", fc.to_hex());
    row(
        "matched_context of the two (the plan's `matched_context_digest`)",
        matched.to_hex(),
    );
    row(
        "sha256 of refinement-fixture.json (the fixture projection's digest)",
        Sha256Digest::of(&fixture_bytes).to_hex(),
    );
    row(
        "outcome_commitment of the example outcome",
        outcome().commitment().to_hex(),
    );
    out.push_str(END);
    out
}

#[test]
fn docs_refinement_vectors_in_step() {
    let path = crate::repo_root().join("docs/digests.md");
    let doc = std::fs::read_to_string(&path).expect("docs/digests.md");
    let want = vectors();
    let (Some(b), Some(e)) = (doc.find(BEGIN), doc.find(END)) else {
        panic!("docs/digests.md lacks the refinement vector markers");
    };
    let current = &doc[b..e + END.len()];
    if std::env::var_os("GLOVE_BLESS").is_some() {
        std::fs::write(&path, doc.replace(current, &want)).expect("write");
        return;
    }
    assert_eq!(
        current, want,
        "docs/digests.md refinement vectors are stale; rerun with GLOVE_BLESS=1"
    );
}

/// The three context digests and the commitment from the written
/// definitions alone: SHA-256 over the domain, a zero byte and the
/// canonical JSON shown in `docs/digests.md`.
#[test]
fn refinement_digests_from_the_definitions() {
    let doc = std::fs::read_to_string(crate::repo_root().join("docs/digests.md")).expect("doc");
    let plan = DecodedPlan::decode(&crate::example("refinement-plan.json")).expect("plan");
    let pc = sha_domain("glove.refinement-plan-context.v1", P.as_bytes());
    assert_eq!(
        refinement_plan_context_digest(&plan).expect("pc").to_hex(),
        pc
    );
    assert!(doc.contains(P), "docs/digests.md lacks P");

    // F: the fixture's canonical bytes without three members. Removing a
    // member of a canonical object leaves it canonical.
    let fixture_bytes = crate::example("refinement-fixture.json");
    let mut v: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&fixture_bytes).expect("json");
    for k in ["session_id", "variant", "selected_projection"] {
        assert!(v.remove(k).is_some(), "{k}");
    }
    let f = serde_json::to_string(&v).expect("json");
    let fc = sha_domain("glove.refinement-fixture-context.v1", f.as_bytes());
    let fixture = Fixture::decode(&fixture_bytes).expect("fixture");
    assert_eq!(fixture.context_digest().to_hex(), fc);

    let m = format!(r#"{{"fixture_context":"{fc}","plan_context":"{pc}"}}"#);
    let matched = sha_domain("glove.refinement-matched-context.v1", m.as_bytes());
    assert_eq!(
        plan.refinement()
            .expect("binding")
            .matched_context_digest()
            .to_hex(),
        matched
    );

    assert_eq!(outcome().encode().expect("encode"), OUTCOME.as_bytes());
    assert!(doc.contains(OUTCOME), "docs/digests.md lacks the outcome");
    assert_eq!(
        outcome().commitment().to_hex(),
        sha_domain("glove.refinement-outcome.v1", OUTCOME.as_bytes())
    );
    for d in [pc, fc, matched] {
        assert!(doc.contains(&d), "docs/digests.md lacks {d}");
    }
}
