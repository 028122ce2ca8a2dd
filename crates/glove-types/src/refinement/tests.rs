//! Unit tests of the fixture rules, the evaluator and the outcome. The
//! plan, policy, digest and receipt tests that read `docs/examples` are in
//! `tests/it/refinement.rs`.

use super::outcome::*;
use super::*;
use crate::codes::json::*;
use crate::codes::refinement::*;
use crate::ErrorCode;
use serde_json::{json, Value};

const FIXTURE: &[u8] = include_bytes!("../../../../docs/examples/refinement-fixture.json");

/// A change made to a test value, applied once.
type Once<'a, T> = Box<dyn FnOnce(&mut T) + 'a>;
/// A change made to a test value.
type Edit<'a, T> = Box<dyn Fn(&mut T) + 'a>;

fn base() -> Value {
    serde_json::from_slice(FIXTURE).unwrap()
}

fn decode(v: &Value) -> Result<Fixture, crate::Rejection> {
    // serde_json's compact form (sorted keys) for what the canonical
    // encoder refuses to write, such as an out-of-range integer.
    let bytes = crate::canon::to_canonical(v).unwrap_or_else(|_| serde_json::to_vec(v).unwrap());
    Fixture::decode(&bytes)
}

fn refuse(f: impl FnOnce(&mut Value)) -> ErrorCode {
    let mut v = base();
    f(&mut v);
    match decode(&v) {
        Ok(_) => panic!("mutated fixture accepted: {v}"),
        Err(e) => e.code(),
    }
}

#[test]
fn example_fixture_decodes_to_its_accessors() {
    let f = Fixture::decode(FIXTURE).unwrap();
    assert_eq!(f.encode().unwrap(), FIXTURE);
    assert_eq!(f.canonical_bytes(), FIXTURE);
    assert_eq!(f.sha256(), crate::Sha256Digest::of(FIXTURE));
    assert_eq!(f.evaluation_run_id().as_str(), "run-0001");
    assert_eq!(f.matched_pair_id().as_str(), "pair-0001");
    assert_eq!(f.session_id().as_str(), "eval-0001-base");
    assert_eq!(f.variant(), Variant::Base);
    assert_eq!(f.fixture_id().as_str(), "review-smoke");
    assert_eq!(f.dataset_ref(), "datasets/review-smoke@1");
    assert_eq!(f.seed(), 42);
    assert_eq!(f.model_identity(), "scripted-endpoint/echo-1");
    assert!(!f.harness().is_empty());
    assert_eq!(f.module_identity(), Some("code-review"));
    assert_eq!(f.selectors(), ["case-1", "case-2"]);
    assert_eq!(f.selected_projection().projection_id.as_str(), "skill-base");
    assert_eq!(f.base_projection_digest(), &f.selected_projection().sha256);
    assert_ne!(f.candidate_projection_digest(), f.base_projection_digest());
    for d in [f.proposal_digest(), f.fixture_digest(), f.dataset_digest()] {
        assert_ne!(d, f.base_projection_digest());
    }
    let e = f.expect();
    assert_eq!(e.termination(), ExpectedTermination::Exited);
    assert_eq!(e.exit_code(), 0);
    assert_eq!(e.max_wall_latency_ms(), Some(60_000));
    assert_eq!(e.required_literals(), ["PASS", "review complete"]);
    assert_eq!(e.forbidden_literals(), ["FAIL", "Traceback"]);
}

#[test]
fn optional_members_may_be_absent_but_not_null_or_empty() {
    let mut v = base();
    let o = v.as_object_mut().unwrap();
    o.remove("module_identity");
    o.remove("selectors");
    o["expect"]
        .as_object_mut()
        .unwrap()
        .remove("max_wall_latency_ms");
    let f = decode(&v).unwrap();
    assert_eq!(f.module_identity(), None);
    assert!(f.selectors().is_empty());
    assert_eq!(f.expect().max_wall_latency_ms(), None);
    assert_eq!(
        refuse(|v| v["module_identity"] = Value::Null),
        REFINEMENT_FIXTURE_INVALID
    );
    assert_eq!(
        refuse(|v| v["expect"]["max_wall_latency_ms"] = Value::Null),
        REFINEMENT_FIXTURE_INVALID
    );
    assert_eq!(
        refuse(|v| v["selectors"] = json!([])),
        REFINEMENT_FIXTURE_NOT_CANONICAL
    );
}

#[test]
fn every_rule_has_its_code() {
    let long = |n: usize| "x".repeat(n);
    let cases: Vec<(ErrorCode, Once<'_, Value>)> = vec![
        (
            REFINEMENT_FIXTURE_SCHEMA,
            Box::new(|v| v["schema"] = json!("glove.refinement-eval-fixture-v2")),
        ),
        (
            REFINEMENT_FIXTURE_INVALID,
            Box::new(|v| v["variant"] = json!("both")),
        ),
        (
            REFINEMENT_FIXTURE_INVALID,
            Box::new(|v| v["expect"]["termination"] = json!("stopped")),
        ),
        (JSON_UNKNOWN_FIELD, Box::new(|v| v["extra"] = json!(1))),
        (
            JSON_UNKNOWN_FIELD,
            Box::new(|v| v["expect"]["stdout"] = json!("x")),
        ),
        (
            JSON_UNKNOWN_FIELD,
            Box::new(|v| v["selected_projection"]["target"] = json!("/x")),
        ),
        (
            JSON_MISSING_FIELD,
            Box::new(|v| {
                v.as_object_mut().unwrap().remove("seed");
            }),
        ),
        (
            JSON_MISSING_FIELD,
            Box::new(|v| {
                v["expect"]
                    .as_object_mut()
                    .unwrap()
                    .remove("forbidden_literals");
            }),
        ),
        (
            crate::codes::ids::ID_INVALID,
            Box::new(|v| v["matched_pair_id"] = json!("Pair")),
        ),
        (
            crate::codes::ids::ID_INVALID,
            Box::new(|v| v["session_id"] = json!("")),
        ),
        (
            crate::codes::ids::DIGEST_INVALID,
            Box::new(|v| v["dataset_digest"] = json!("AB")),
        ),
        (
            REFINEMENT_FIXTURE_BOUND,
            Box::new(|v| v["dataset_ref"] = json!("")),
        ),
        (
            REFINEMENT_FIXTURE_BOUND,
            Box::new(move |v| v["dataset_ref"] = json!(long(257))),
        ),
        (
            REFINEMENT_FIXTURE_BOUND,
            Box::new(|v| v["dataset_ref"] = json!("a\nb")),
        ),
        (
            REFINEMENT_FIXTURE_BOUND,
            Box::new(|v| v["model_identity"] = json!("\u{7f}")),
        ),
        (
            REFINEMENT_FIXTURE_BOUND,
            Box::new(move |v| v["harness"] = json!(long(65))),
        ),
        (
            REFINEMENT_FIXTURE_BOUND,
            Box::new(|v| v["module_identity"] = json!("")),
        ),
        (
            REFINEMENT_FIXTURE_BOUND,
            Box::new(|v| v["selectors"] = json!(["", "a"])),
        ),
        (
            REFINEMENT_FIXTURE_BOUND,
            Box::new(move |v| v["selectors"] = json!([long(129)])),
        ),
        (
            REFINEMENT_FIXTURE_BOUND,
            Box::new(|v| {
                v["selectors"] = json!((0..33).map(|i| format!("s{i:02}")).collect::<Vec<_>>())
            }),
        ),
        (
            REFINEMENT_FIXTURE_NOT_CANONICAL,
            Box::new(|v| v["selectors"] = json!(["b", "a"])),
        ),
        (
            REFINEMENT_FIXTURE_NOT_CANONICAL,
            Box::new(|v| v["selectors"] = json!(["a", "a"])),
        ),
        (
            JSON_INTEGER_OUT_OF_RANGE,
            Box::new(|v| v["seed"] = json!(1u64 << 53)),
        ),
        (JSON_NEGATIVE_NUMBER, Box::new(|v| v["seed"] = json!(-1))),
        (
            REFINEMENT_FIXTURE_BOUND,
            Box::new(|v| v["expect"]["exit_code"] = json!(256)),
        ),
        (
            REFINEMENT_FIXTURE_BOUND,
            Box::new(|v| {
                v["expect"]["termination"] = json!("signaled");
                v["expect"]["exit_code"] = json!(0);
            }),
        ),
        (
            REFINEMENT_FIXTURE_BOUND,
            Box::new(|v| {
                v["expect"]["termination"] = json!("signaled");
                v["expect"]["exit_code"] = json!(65);
            }),
        ),
        (
            REFINEMENT_FIXTURE_BOUND,
            Box::new(|v| v["expect"]["max_wall_latency_ms"] = json!(0)),
        ),
        (
            REFINEMENT_FIXTURE_BOUND,
            Box::new(|v| v["expect"]["max_wall_latency_ms"] = json!(86_400_001)),
        ),
        (
            REFINEMENT_FIXTURE_BOUND,
            Box::new(|v| v["expect"]["required_literals"] = json!([""])),
        ),
        (
            REFINEMENT_FIXTURE_BOUND,
            Box::new(move |v| v["expect"]["forbidden_literals"] = json!([long(1025)])),
        ),
        (
            REFINEMENT_FIXTURE_BOUND,
            Box::new(|v| {
                v["expect"]["required_literals"] =
                    json!((0..65).map(|i| format!("r{i:02}")).collect::<Vec<_>>())
            }),
        ),
        (
            REFINEMENT_FIXTURE_NOT_CANONICAL,
            Box::new(|v| v["expect"]["required_literals"] = json!(["b", "a"])),
        ),
        (
            REFINEMENT_FIXTURE_NOT_CANONICAL,
            Box::new(|v| v["expect"]["forbidden_literals"] = json!(["FAIL", "FAIL"])),
        ),
        // Byte order, not code-point-insensitive or locale order.
        (
            REFINEMENT_FIXTURE_NOT_CANONICAL,
            Box::new(|v| v["expect"]["forbidden_literals"] = json!(["a", "B"])),
        ),
        (
            REFINEMENT_LITERAL_CONFLICT,
            Box::new(|v| v["expect"]["forbidden_literals"] = json!(["PASS"])),
        ),
    ];
    for (want, f) in cases {
        let mut v = base();
        f(&mut v);
        let got = decode(&v).map(|_| ()).unwrap_err();
        assert_eq!(got.code(), want, "{v}: {got}");
    }
    // Literals may hold any UTF-8, control characters included.
    let mut v = base();
    v["expect"]["required_literals"] = json!(["\u{1b}[32mok", "caf\u{e9}\n"]);
    assert!(decode(&v).is_ok());
}

#[test]
fn only_canonical_bounded_utf8_decodes() {
    let pretty = serde_json::to_vec_pretty(&base()).unwrap();
    assert_eq!(
        Fixture::decode(&pretty).unwrap_err().code(),
        JSON_NONCANONICAL
    );
    let s = String::from_utf8(FIXTURE.to_vec()).unwrap();
    let dup = s.replacen("{\"base", "{\"seed\":1,\"base", 1);
    assert_eq!(
        Fixture::decode(dup.as_bytes()).unwrap_err().code(),
        JSON_DUPLICATE_KEY
    );
    let mut bad = FIXTURE.to_vec();
    let at = s.find("scripted-endpoint").unwrap();
    bad[at] = 0xff;
    assert_eq!(Fixture::decode(&bad).unwrap_err().code(), JSON_INVALID_UTF8);
    let mut big = base();
    big["dataset_ref"] = json!("x".repeat(MAX_FIXTURE_BYTES));
    let big = crate::canon::to_canonical(&big).unwrap();
    assert_eq!(Fixture::decode(&big).unwrap_err().code(), JSON_TOO_LARGE);
}

fn expectation(required: &[&str], forbidden: &[&str]) -> Expectation {
    let own = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
    Expectation::new(
        ExpectedTermination::Exited,
        0,
        Some(1000),
        own(required),
        own(forbidden),
    )
    .unwrap()
}

fn clean() -> Observed {
    Observed {
        termination: ObservedEnd::Exited(0),
        latency_us: 1_000_000,
        stream_complete: true,
        resource_stop: None,
    }
}

fn run(e: &Expectation, chunks: &[&[u8]], o: &Observed) -> evaluator::Evaluation {
    let mut ev = Evaluator::new(e);
    for c in chunks {
        ev.feed(c);
    }
    ev.finish(o)
}

#[test]
fn a_clean_run_passes_and_hashes_every_byte() {
    let e = expectation(&["PASS", "done"], &["FAIL"]);
    let stream = b"\x1b[32mPASS\x1b[0m all done\r\n";
    let r = run(&e, &[stream], &clean());
    assert!(r.outcome.passed, "{:?}", r.outcome);
    assert_eq!(r.evidence, Evidence::Valid);
    assert!(r.complete);
    assert_eq!(r.raw_pty_bytes, stream.len() as u64);
    assert_eq!(r.raw_pty_sha256, crate::Sha256Digest::of(stream));
    assert_eq!(
        r.outcome.required_literals,
        LiteralCount {
            expected: 2,
            matched: 2
        }
    );
    assert_eq!(
        r.outcome.forbidden_literals,
        LiteralCount {
            expected: 1,
            matched: 0
        }
    );
    r.outcome.check().unwrap();
    // Any chunking gives the same evaluation.
    for cut in 0..=stream.len() {
        let (a, b) = stream.split_at(cut);
        assert_eq!(run(&e, &[a, &[], b], &clean()), r, "cut at {cut}");
    }
    let bytewise: Vec<&[u8]> = stream.chunks(1).collect();
    assert_eq!(run(&e, &bytewise, &clean()), r);
}

#[test]
fn each_failure_is_named() {
    let e = expectation(&["PASS", "done"], &["FAIL", "panic"]);
    let names = |chunks: &[&[u8]], o: &Observed| {
        let r = run(&e, chunks, o);
        r.outcome.check().unwrap();
        assert_eq!(r.outcome.passed, r.outcome.failed_assertions.is_empty());
        (r.outcome.failed_assertions, r.evidence)
    };
    let ok: &[&[u8]] = &[b"PASS and done"];
    assert_eq!(names(ok, &clean()), (vec![], Evidence::Valid));
    let o = Observed {
        termination: ObservedEnd::Exited(3),
        ..clean()
    };
    assert_eq!(names(ok, &o).0, ["exit_code"]);
    for end in [ObservedEnd::Signaled(0), ObservedEnd::Failed] {
        let o = Observed {
            termination: end,
            ..clean()
        };
        assert_eq!(names(ok, &o).0, ["termination"]);
    }
    let o = Observed {
        latency_us: 1_000_001,
        ..clean()
    };
    assert_eq!(names(ok, &o).0, ["wall_latency"]);
    assert_eq!(
        names(&[b"done, FA", b"IL and pa", b"nic"], &clean()).0,
        [
            "forbidden_literal:0",
            "forbidden_literal:1",
            "required_literal:0"
        ]
    );
    assert_eq!(
        names(&[b"PASS done \xe2\x82"], &clean()),
        (vec!["utf8".to_string()], Evidence::Invalid)
    );
    assert_eq!(
        names(&[b"PASS \xff done"], &clean()),
        (vec!["utf8".to_string()], Evidence::Invalid)
    );
    let o = Observed {
        stream_complete: false,
        ..clean()
    };
    assert_eq!(
        names(ok, &o),
        (vec!["stream_incomplete".to_string()], Evidence::Invalid)
    );
    // A resource stop fails a run that otherwise holds.
    let o = Observed {
        resource_stop: Some("wall_time".into()),
        ..clean()
    };
    assert_eq!(
        names(ok, &o),
        (vec!["resource_stop".to_string()], Evidence::Valid)
    );
    // Everything at once, sorted in byte order.
    let o = Observed {
        termination: ObservedEnd::Failed,
        latency_us: u64::MAX,
        stream_complete: false,
        resource_stop: Some("memory".into()),
    };
    let r = run(&e, &[b"FAIL \xc3"], &o);
    assert_eq!(
        r.outcome.failed_assertions,
        [
            "forbidden_literal:0",
            "required_literal:0",
            "required_literal:1",
            "resource_stop",
            "stream_incomplete",
            "termination",
            "utf8",
            "wall_latency"
        ]
    );
    assert_eq!(r.outcome.latency_us, crate::canon::MAX_SAFE_INTEGER);
    r.outcome.check().unwrap();
}

#[test]
fn signaled_expectations_compare_the_signal() {
    let e = Expectation::new(ExpectedTermination::Signaled, 9, None, vec![], vec![]).unwrap();
    let o = |end| Observed {
        termination: end,
        ..clean()
    };
    assert!(run(&e, &[], &o(ObservedEnd::Signaled(9))).outcome.passed);
    assert_eq!(
        run(&e, &[], &o(ObservedEnd::Signaled(15)))
            .outcome
            .failed_assertions,
        ["exit_code"]
    );
    assert_eq!(
        run(&e, &[], &o(ObservedEnd::Exited(9)))
            .outcome
            .failed_assertions,
        ["termination"]
    );
}

#[test]
fn outcome_rules_and_commitment() {
    let good = Outcome {
        passed: false,
        latency_us: 1500,
        failed_assertions: vec!["forbidden_literal:1".into(), "required_literal:0".into()],
        required_literals: LiteralCount {
            expected: 2,
            matched: 1,
        },
        forbidden_literals: LiteralCount {
            expected: 2,
            matched: 1,
        },
    };
    good.check().unwrap();
    let bytes = good.encode().unwrap();
    assert_eq!(
        bytes,
        br#"{"failed_assertions":["forbidden_literal:1","required_literal:0"],"forbidden_literals":{"expected":2,"matched":1},"latency_us":1500,"passed":false,"required_literals":{"expected":2,"matched":1}}"#
    );
    assert_eq!(
        good.commitment(),
        crate::Sha256Digest::of_domain(OUTCOME_DOMAIN, &bytes)
    );
    let bad: Vec<Edit<'_, Outcome>> = vec![
        Box::new(|o| o.passed = true),
        Box::new(|o| o.failed_assertions.reverse()),
        Box::new(|o| o.failed_assertions.push("required_literal:0".into())),
        Box::new(|o| o.failed_assertions[0] = "forbidden_literal:2".into()),
        Box::new(|o| o.failed_assertions[0] = "forbidden_literal:01".into()),
        Box::new(|o| o.failed_assertions.insert(0, "exit".into())),
        Box::new(|o| o.required_literals.matched = 2),
        Box::new(|o| o.forbidden_literals.matched = 0),
        Box::new(|o| o.forbidden_literals.expected = 65),
        Box::new(|o| o.latency_us = 1 << 53),
    ];
    for f in bad {
        let mut o = good.clone();
        f(&mut o);
        assert_eq!(
            o.check().unwrap_err().code(),
            REFINEMENT_OUTCOME_INVALID,
            "{o:?}"
        );
        assert_ne!(o.commitment(), good.commitment());
    }
}

#[test]
fn wire_names() {
    for v in [Variant::Base, Variant::Candidate] {
        assert_eq!(Variant::parse(v.as_str()), Some(v));
    }
    for e in [Evidence::Valid, Evidence::Invalid] {
        assert_eq!(Evidence::parse(e.as_str()), Some(e));
    }
    assert_eq!(
        Evaluation::parse("refinement-eval-v1"),
        Some(Evaluation::RefinementEvalV1)
    );
    assert_eq!(Evaluation::parse("refinement-eval-v2"), None);
    assert_eq!(Variant::parse("Base"), None);
}
