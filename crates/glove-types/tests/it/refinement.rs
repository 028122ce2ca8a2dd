//! `refinement-eval-v1` in policies and plans: evaluation templates, the
//! plan's `refinement` binding (decoding and admission), and a fixture
//! checked against its plan. Inputs are `docs/examples/refinement-*.json`.

use glove_types::codes::json::*;
use glove_types::codes::plan::*;
use glove_types::codes::refinement::*;
use glove_types::plan::{admit, plan_context_digest, DecodedPlan};
use glove_types::policy::ValidatedPolicy;
use glove_types::refinement::{
    matched_context_digest, refinement_plan_context_digest, Evaluation, Fixture, Variant,
};
use glove_types::{canon, ErrorCode, Sha256Digest};
use serde_json::{json, Value};

const NOW: u64 = crate::plan::NOW;

/// A change made to a test value, applied once.
type Once<'a, T> = Box<dyn FnOnce(&mut T) + 'a>;
/// A change made to a test value.
type Edit<'a, T> = Box<dyn Fn(&mut T) + 'a>;

pub(crate) fn policy_value() -> Value {
    serde_json::from_slice(&crate::example("refinement-policy.json")).expect("policy")
}

pub(crate) fn policy() -> ValidatedPolicy {
    ValidatedPolicy::from_json(&crate::example("refinement-policy.json")).expect("policy")
}

pub(crate) fn plan_value() -> Value {
    serde_json::from_slice(&crate::example("refinement-plan.json")).expect("plan")
}

pub(crate) fn fixture_value() -> Value {
    serde_json::from_slice(&crate::example("refinement-fixture.json")).expect("fixture")
}

fn bytes(v: &Value) -> Vec<u8> {
    canon::to_canonical(v).expect("canonical")
}

fn decode_plan(v: &Value) -> DecodedPlan {
    DecodedPlan::decode(&bytes(v)).expect("plan decodes")
}

/// Binds `plan` to `fixture`: the fixture projection's digest is the
/// fixture's SHA-256 (in the binding and in library_projections) and the
/// matched context is recomputed, as a controller would.
pub(crate) fn rebind(plan: &mut Value, fixture: &Value) {
    let sha = Sha256Digest::of(&bytes(fixture)).to_hex();
    let id = plan["refinement"]["fixture"]["projection_id"].clone();
    plan["refinement"]["fixture"]["sha256"] = json!(sha);
    for p in plan["library_projections"].as_array_mut().expect("array") {
        if p["projection_id"] == id {
            p["sha256"] = json!(sha);
        }
    }
    let pc = refinement_plan_context_digest(&decode_plan(plan)).expect("context");
    let fc = Fixture::decode(&bytes(fixture))
        .expect("fixture")
        .context_digest();
    plan["refinement"]["matched_context_digest"] = json!(matched_context_digest(&pc, &fc).to_hex());
}

/// The candidate plan and fixture of the example's matched pair.
pub(crate) fn candidate_pair() -> (Value, Value) {
    let (mut plan, mut fixture) = (plan_value(), fixture_value());
    let cand = plan["refinement"]["candidate"].clone();
    plan["session_id"] = json!("eval-0001-candidate");
    fixture["session_id"] = json!("eval-0001-candidate");
    fixture["variant"] = json!("candidate");
    plan["refinement"]["variant"] = json!("candidate");
    plan["idempotency_key"] = json!("eval-0001-candidate");
    let fixture_proj = plan["refinement"]["fixture"].clone();
    plan["library_projections"] = json!([fixture_proj, cand]);
    fixture["selected_projection"] = cand;
    rebind(&mut plan, &fixture);
    (plan, fixture)
}

fn refuse_policy(f: impl FnOnce(&mut Value)) -> ErrorCode {
    let mut v = policy_value();
    f(&mut v);
    match ValidatedPolicy::from_json(&bytes(&v)) {
        Ok(_) => panic!("policy accepted: {v}"),
        Err(e) => e.code(),
    }
}

fn refuse_plan(policy_edit: impl FnOnce(&mut Value), f: impl FnOnce(&mut Value)) -> ErrorCode {
    let mut pv = policy_value();
    policy_edit(&mut pv);
    let policy = ValidatedPolicy::from_json(&bytes(&pv)).expect("policy");
    let mut v = plan_value();
    f(&mut v);
    let r = DecodedPlan::decode(&bytes(&v)).and_then(|p| admit(p, None, &policy, NOW));
    match r {
        Ok(_) => panic!("plan admitted: {v}"),
        Err(e) => {
            let shown = e.to_string();
            for local in ["/srv", "/opt/", "/usr/bin"] {
                assert!(!shown.contains(local), "{shown:?} leaks {local}");
            }
            e.code()
        }
    }
}

fn refuse(f: impl FnOnce(&mut Value)) -> ErrorCode {
    refuse_plan(|_| {}, f)
}

#[test]
fn evaluation_templates_in_the_example_policy() {
    let p = policy();
    let eval = p.template("codex-eval").expect("template");
    assert_eq!(eval.evaluation(), Some(Evaluation::RefinementEvalV1));
    assert!(eval.allowed_path_aliases().is_empty());
    let plain = p.template("codex-safe").expect("template");
    assert_eq!(plain.evaluation(), None);
    // An ordinary template says nothing of evaluations when shown.
    let shown = serde_json::to_value(plain).expect("json");
    assert!(shown.get("evaluation").is_none(), "{shown}");
    let shown = serde_json::to_value(eval).expect("json");
    assert_eq!(shown["evaluation"], json!("refinement-eval-v1"));
}

#[test]
fn evaluation_template_rules() {
    let t = "/runtime_templates/0";
    let set =
        |ptr: String, val: Value| move |v: &mut Value| *v.pointer_mut(&ptr).expect("pointer") = val;
    assert_eq!(
        refuse_policy(set(format!("{t}/evaluation"), json!("refinement-eval-v2"))),
        REFINEMENT_EVALUATION_UNKNOWN
    );
    assert_eq!(
        refuse_policy(set(
            format!("{t}/allowed_path_aliases"),
            json!(["workspace"])
        )),
        REFINEMENT_TEMPLATE_INVALID
    );
    assert_eq!(
        refuse_policy(set(
            format!("{t}/allowed_projection_destinations"),
            json!(["skills"])
        )),
        REFINEMENT_TEMPLATE_INVALID
    );
    assert_eq!(
        refuse_policy(set(
            format!("{t}/sandbox_backend"),
            json!("remote_linux_container")
        )),
        REFINEMENT_TEMPLATE_INVALID
    );
}

#[test]
fn the_example_plan_is_admitted_with_its_binding() {
    let raw = crate::example("refinement-plan.json");
    let p = DecodedPlan::decode(&raw).expect("decode");
    let b = p.refinement().expect("binding").clone();
    assert_eq!(b.variant(), Variant::Base);
    assert_eq!(b.selected(), b.base());
    assert_eq!(b.fixture().projection_id.as_str(), "fixture-review-smoke");
    assert_eq!(b.base().projection_id.as_str(), "skill-base");
    assert_eq!(b.candidate().projection_id.as_str(), "skill-candidate");
    let a = admit(p, None, &policy(), NOW).expect("admit");
    assert_eq!(a.refinement(), Some(&b));
    assert_eq!(a.library_projections().len(), 2);
    // The ordinary plan-context digest is defined for it as for any plan.
    assert_eq!(
        a.plan_context_digest(),
        &plan_context_digest(a.plan()).expect("context")
    );
    // Serialized, the plan shows its binding in its wire form.
    let shown = serde_json::to_value(a.plan()).expect("json");
    assert_eq!(shown["refinement"], plan_value()["refinement"]);
    // An ordinary plan shows none.
    let plain = DecodedPlan::decode(&crate::example("plan.json")).expect("plan");
    assert!(plain.refinement().is_none());
    assert!(serde_json::to_value(&plain)
        .expect("json")
        .get("refinement")
        .is_none());
}

#[test]
fn the_binding_decodes_strictly() {
    let r = "refinement";
    let cases: Vec<(ErrorCode, Once<'_, Value>)> = vec![
        (JSON_UNKNOWN_FIELD, Box::new(|v| v[r]["extra"] = json!(1))),
        (
            JSON_UNKNOWN_FIELD,
            Box::new(|v| v[r]["base"]["target"] = json!("/x")),
        ),
        (
            JSON_MISSING_FIELD,
            Box::new(|v| {
                v[r].as_object_mut().expect("obj").remove("candidate");
            }),
        ),
        (JSON_INVALID_TYPE, Box::new(|v| v[r] = Value::Null)),
        (
            REFINEMENT_BINDING_INVALID,
            Box::new(|v| v[r]["variant"] = json!("both")),
        ),
        (
            REFINEMENT_BINDING_INVALID,
            Box::new(|v| v[r]["candidate"]["projection_id"] = json!("skill-base")),
        ),
        (
            REFINEMENT_BINDING_INVALID,
            Box::new(|v| v[r]["base"]["projection_id"] = json!("fixture-review-smoke")),
        ),
        (
            REFINEMENT_BINDING_INVALID,
            Box::new(|v| v[r]["candidate"]["projection_id"] = json!("fixture-review-smoke")),
        ),
        (
            REFINEMENT_BINDING_INVALID,
            Box::new(|v| v[r]["candidate"]["sha256"] = v[r]["base"]["sha256"].clone()),
        ),
        (
            glove_types::codes::ids::DIGEST_INVALID,
            Box::new(|v| v[r]["matched_context_digest"] = json!("00")),
        ),
        (
            glove_types::codes::ids::ID_INVALID,
            Box::new(|v| v[r]["fixture"]["destination_alias"] = json!("A")),
        ),
    ];
    for (want, f) in cases {
        let mut v = plan_value();
        f(&mut v);
        let got = DecodedPlan::decode(&bytes(&v)).map(|_| ()).unwrap_err();
        assert_eq!(got.code(), want, "{got}");
        if !got.code().as_str().starts_with("json_") {
            assert!(got.location().starts_with("refinement"), "{got}");
        }
    }
}

#[test]
fn admission_of_refinement_plans() {
    // An evaluation template needs a binding; an ordinary one refuses it.
    assert_eq!(
        refuse(|v| {
            v.as_object_mut().expect("obj").remove("refinement");
        }),
        REFINEMENT_BINDING_MISSING
    );
    assert_eq!(
        refuse(|v| v["runtime_template_id"] = json!("codex-safe")),
        REFINEMENT_BINDING_UNEXPECTED
    );
    // No path grant and no exposure, whatever the template allows.
    assert_eq!(
        refuse(|v| {
            v["path_grants"] = json!([{"access":"ephemeral_write","alias":"workspace",
                "cleanup_policy":"remove","materialization":"copy","max_bytes":2097152,"ttl_secs":60}]);
        }),
        REFINEMENT_PATH_GRANT_REFUSED
    );
    assert_eq!(
        refuse(|v| {
            v["path_exposures"] = json!([{"access":"read_only","exposure_id":"e1","generation":1}]);
        }),
        REFINEMENT_PATH_GRANT_REFUSED
    );
    // library_projections are exactly {fixture, selected}.
    let lp = "library_projections";
    let mismatches: Vec<Once<'_, Value>> = vec![
        Box::new(|v| {
            v[lp].as_array_mut().expect("array").pop();
        }),
        Box::new(|v| v[lp] = json!([])),
        Box::new(|v| v[lp][1] = v["refinement"]["candidate"].clone()),
        Box::new(|v| v[lp][0]["destination_alias"] = json!("skills")),
        Box::new(|v| v[lp][1]["sha256"] = json!("11".repeat(32))),
        Box::new(|v| {
            let extra = json!({"destination_alias":"skills","projection_id":"zz-extra",
                               "sha256":"22".repeat(32)});
            v[lp].as_array_mut().expect("array").push(extra);
        }),
    ];
    for f in mismatches {
        assert_eq!(refuse(f), REFINEMENT_PROJECTION_MISMATCH);
    }
    // Every bound destination is the policy's and the template's.
    assert_eq!(
        refuse(|v| v["refinement"]["candidate"]["destination_alias"] = json!("libraries")),
        PLAN_PROJECTION_DESTINATION_UNKNOWN
    );
    let add_other = |p: &mut Value| {
        p["library_projection_destinations"]
            .as_array_mut()
            .expect("array")
            .insert(1, json!({"alias":"extra","target_path":"/opt/extra"}));
    };
    assert_eq!(
        refuse_plan(add_other, |v| {
            v["refinement"]["candidate"]["destination_alias"] = json!("extra");
        }),
        PLAN_PROJECTION_DESTINATION_NOT_ALLOWED
    );
}

#[test]
fn a_fixture_is_checked_against_its_plan() {
    let plan = decode_plan(&plan_value());
    let fixture = Fixture::decode(&crate::example("refinement-fixture.json")).expect("fixture");
    fixture
        .check_against(&plan)
        .expect("the example pair matches");
    assert_eq!(
        &fixture.sha256(),
        &plan.refinement().expect("binding").fixture().sha256
    );
    // The candidate side of the pair shares both contexts and so the
    // matched context.
    let (cplan_v, cfix_v) = candidate_pair();
    let cplan = decode_plan(&cplan_v);
    let cfix = Fixture::decode(&bytes(&cfix_v)).expect("fixture");
    cfix.check_against(&cplan)
        .expect("the candidate pair matches");
    admit(cplan.clone(), None, &policy(), NOW).expect("candidate admitted");
    assert_eq!(
        refinement_plan_context_digest(&plan).expect("pc"),
        refinement_plan_context_digest(&cplan).expect("pc")
    );
    assert_eq!(fixture.context_digest(), cfix.context_digest());
    assert_eq!(
        plan.refinement().expect("b").matched_context_digest(),
        cplan.refinement().expect("b").matched_context_digest()
    );
    // Crossed, they do not.
    assert_eq!(
        fixture.check_against(&cplan).unwrap_err().code(),
        REFINEMENT_FIXTURE_MISMATCH
    );
    assert_eq!(
        cfix.check_against(&plan).unwrap_err().code(),
        REFINEMENT_FIXTURE_MISMATCH
    );
    // No binding, no check.
    let plain = DecodedPlan::decode(&crate::example("plan.json")).expect("plan");
    assert_eq!(
        fixture.check_against(&plain).unwrap_err().code(),
        REFINEMENT_BINDING_MISSING
    );
    assert_eq!(
        refinement_plan_context_digest(&plain).unwrap_err().code(),
        REFINEMENT_BINDING_MISSING
    );
}

#[test]
fn each_fixture_mismatch_has_its_code() {
    let cases: Vec<(&str, Value, ErrorCode)> = vec![
        (
            "/session_id",
            json!("eval-0002-base"),
            REFINEMENT_FIXTURE_MISMATCH,
        ),
        ("/variant", json!("candidate"), REFINEMENT_FIXTURE_MISMATCH),
        (
            "/base_projection_digest",
            json!("33".repeat(32)),
            REFINEMENT_FIXTURE_MISMATCH,
        ),
        (
            "/candidate_projection_digest",
            json!("33".repeat(32)),
            REFINEMENT_FIXTURE_MISMATCH,
        ),
        (
            "/selected_projection/projection_id",
            json!("skill-candidate"),
            REFINEMENT_FIXTURE_MISMATCH,
        ),
        (
            "/selected_projection/destination_alias",
            json!("evaluation-fixtures"),
            REFINEMENT_FIXTURE_MISMATCH,
        ),
        ("/seed", json!(43), REFINEMENT_MATCHED_CONTEXT_MISMATCH),
        (
            "/dataset_ref",
            json!("datasets/other@1"),
            REFINEMENT_MATCHED_CONTEXT_MISMATCH,
        ),
        (
            "/expect/required_literals",
            json!(["PASS"]),
            REFINEMENT_MATCHED_CONTEXT_MISMATCH,
        ),
    ];
    let plan = decode_plan(&plan_value());
    for (ptr, val, want) in cases {
        let mut f = fixture_value();
        *f.pointer_mut(ptr).expect("pointer") = val;
        let fixture = Fixture::decode(&bytes(&f)).expect("still a valid fixture");
        assert_eq!(
            fixture.check_against(&plan).unwrap_err().code(),
            want,
            "{ptr}"
        );
    }
    // The plan side: a binding committing to another matched context.
    let mut v = plan_value();
    v["refinement"]["matched_context_digest"] = json!("44".repeat(32));
    let fixture = Fixture::decode(&crate::example("refinement-fixture.json")).expect("fixture");
    assert_eq!(
        fixture.check_against(&decode_plan(&v)).unwrap_err().code(),
        REFINEMENT_MATCHED_CONTEXT_MISMATCH
    );
}

#[test]
fn what_the_refinement_plan_context_covers() {
    let pc = |f: &dyn Fn(&mut Value)| {
        let mut v = plan_value();
        f(&mut v);
        refinement_plan_context_digest(&decode_plan(&v)).expect("context")
    };
    let base = pc(&|_| {});
    // Left out: identity, times, the variant, the fixture.
    let same: Vec<Edit<'_, Value>> = vec![
        Box::new(|v| v["session_id"] = json!("other")),
        Box::new(|v| v["idempotency_key"] = json!("other")),
        Box::new(|v| v["issued_at_ms"] = json!(1)),
        Box::new(|v| v["expires_at_ms"] = json!(2)),
        Box::new(|v| v["refinement"]["variant"] = json!("candidate")),
        Box::new(|v| v["refinement"]["fixture"]["sha256"] = json!("55".repeat(32))),
        Box::new(|v| v["refinement"]["matched_context_digest"] = json!("55".repeat(32))),
        Box::new(|v| v["library_projections"] = json!([])),
    ];
    for f in same {
        assert_eq!(pc(&*f), base);
    }
    // Covered: the runtime context and both skills.
    let differ: Vec<Edit<'_, Value>> = vec![
        Box::new(|v| v["policy_revision"] = json!(8)),
        Box::new(|v| v["runtime_template_id"] = json!("codex-safe")),
        Box::new(|v| v["resource_profile"]["pids"] = json!(17)),
        Box::new(|v| v["egress_policy_ids"] = json!([])),
        Box::new(|v| v["secret_handles"] = json!(["h"])),
        Box::new(|v| v["tool_policy_ids"] = json!(["t"])),
        Box::new(|v| v["refinement"]["base"]["sha256"] = json!("66".repeat(32))),
        Box::new(|v| v["refinement"]["candidate"]["destination_alias"] = json!("other")),
    ];
    for f in differ {
        assert_ne!(pc(&*f), base);
    }
}
