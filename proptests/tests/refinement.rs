//! Properties of `refinement-eval-v1` (glove_types::refinement), for
//! auditors:
//!
//! 1. arbitrary bytes never panic the fixture decoder, and whatever it
//!    accepts is exactly the encoding of the fixture it returns;
//! 2. a generated valid fixture decodes and re-encodes to its bytes, and
//!    any one change that breaks a rule of the fixture is refused;
//! 3. `Fixture::check_against` accepts a generated matched plan and
//!    refuses the plan or fixture with any one bound field changed;
//! 4. the evaluator's result does not depend on how the stream is cut
//!    into chunks, finds a literal exactly when it occurs in the stream
//!    (split across chunks or not), hashes every byte, and its outcome
//!    obeys the outcome rules.
//!
//! Every test lives in `mod refinement`:
//! `cargo test -p glove-proptests refinement`.

mod refinement {
    use glove_types::canon::{to_canonical, MAX_SAFE_INTEGER};
    use glove_types::plan::DecodedPlan;
    use glove_types::refinement::{
        matched_context_digest, refinement_plan_context_digest, Evaluator, Evidence, Expectation,
        ExpectedTermination, Fixture, Observed, ObservedEnd,
    };
    use glove_types::Sha256Digest;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    const ID: &str = "[a-z0-9][a-z0-9._-]{0,20}";
    const PLAN: &[u8] = include_bytes!("../../docs/examples/refinement-plan.json");

    fn hex() -> impl Strategy<Value = String> {
        any::<[u8; 32]>().prop_map(|b| Sha256Digest::from_bytes(b).to_hex())
    }

    fn literals() -> impl Strategy<Value = (Vec<String>, Vec<String>)> {
        // One sorted set, split in two: sorted, unique and disjoint.
        prop::collection::btree_set("(?s).{1,8}", 0..8).prop_map(|set| {
            let (mut req, mut forb) = (Vec::new(), Vec::new());
            for (i, s) in set.into_iter().enumerate() {
                if i % 2 == 0 {
                    req.push(s);
                } else {
                    forb.push(s);
                }
            }
            (req, forb)
        })
    }

    fn expect() -> impl Strategy<Value = Value> {
        (
            any::<bool>(),
            0u64..=255,
            prop::option::of(1u64..=86_400_000),
            literals(),
        )
            .prop_map(|(signaled, code, latency, (req, forb))| {
                let (termination, code) = if signaled {
                    ("signaled", code % 64 + 1)
                } else {
                    ("exited", code)
                };
                let mut e = json!({
                    "termination": termination,
                    "exit_code": code,
                    "required_literals": req,
                    "forbidden_literals": forb,
                });
                if let Some(l) = latency {
                    e["max_wall_latency_ms"] = json!(l);
                }
                e
            })
    }

    /// A valid fixture as a JSON value.
    fn fixture() -> impl Strategy<Value = Value> {
        (
            (ID, ID, ID, ID, any::<bool>()),
            prop::collection::vec(hex(), 5),
            (
                "\\PC{1,40}",
                "\\PC{1,40}",
                "[a-z0-9-]{1,20}",
                0..=MAX_SAFE_INTEGER,
            ),
            prop::option::of("\\PC{1,30}"),
            prop::collection::btree_set("[a-z0-9:-]{1,12}", 0..5),
            (ID, ID),
            expect(),
        )
            .prop_filter("base and candidate differ", |t| t.1[1] != t.1[2])
            .prop_map(
                |(
                    (run, pair, session, fixture_id, cand),
                    d,
                    (ds, model, harness, seed),
                    module,
                    selectors,
                    (bid, cid),
                    expect,
                )| {
                    let (variant, sel_id, sel_sha) = if cand {
                        ("candidate", format!("c-{cid}"), d[2].clone())
                    } else {
                        ("base", format!("b-{bid}"), d[1].clone())
                    };
                    let mut f = json!({
                        "schema": "glove.refinement-eval-fixture-v1",
                        "evaluation_run_id": run, "matched_pair_id": pair,
                        "session_id": session, "variant": variant,
                        "proposal_digest": d[0], "base_projection_digest": d[1],
                        "candidate_projection_digest": d[2], "fixture_digest": d[3],
                        "dataset_digest": d[4], "fixture_id": fixture_id,
                        "dataset_ref": ds, "seed": seed, "model_identity": model,
                        "harness": harness,
                        "selected_projection": {"destination_alias": "skills",
                            "projection_id": sel_id, "sha256": sel_sha},
                        "expect": expect,
                    });
                    if let Some(m) = module {
                        f["module_identity"] = json!(m);
                    }
                    if !selectors.is_empty() {
                        f["selectors"] = json!(selectors);
                    }
                    f
                },
            )
    }

    fn bytes(v: &Value) -> Vec<u8> {
        // serde_json's compact, key-sorted form for what the canonical
        // encoder refuses to write (an out-of-range integer).
        to_canonical(v).unwrap_or_else(|_| serde_json::to_vec(v).unwrap())
    }

    /// The plan that matches fixture `f`: the example plan with the
    /// fixture's session, skills and variant, bound to its bytes.
    fn plan_for(f: &Value) -> Value {
        let mut p: Value = serde_json::from_slice(PLAN).unwrap();
        let sel = f["selected_projection"].clone();
        let variant = f["variant"].as_str().unwrap();
        let other = if variant == "base" {
            "candidate"
        } else {
            "base"
        };
        let other_sha = f[format!("{other}_projection_digest")].clone();
        let other_id = format!("{}-other", sel["projection_id"].as_str().unwrap());
        let r = &mut p["refinement"];
        r[variant] = sel.clone();
        r[other] = json!({"destination_alias": "skills", "projection_id": other_id,
                          "sha256": other_sha});
        r["variant"] = json!(variant);
        r["fixture"]["sha256"] = json!(Sha256Digest::of(&bytes(f)).to_hex());
        let fixture_proj = r["fixture"].clone();
        p["session_id"] = f["session_id"].clone();
        let mut lp = [fixture_proj, sel];
        lp.sort_by(|a, b| {
            a["projection_id"]
                .as_str()
                .cmp(&b["projection_id"].as_str())
        });
        p["library_projections"] = json!(lp);
        let decoded = DecodedPlan::decode(&bytes(&p)).unwrap();
        let pc = refinement_plan_context_digest(&decoded).unwrap();
        let fc = Fixture::decode(&bytes(f)).unwrap().context_digest();
        p["refinement"]["matched_context_digest"] =
            json!(matched_context_digest(&pc, &fc).to_hex());
        p
    }

    /// Changes that each break one rule of a fixture.
    fn breaking(f: &mut Value, which: usize) {
        let e = &mut f["expect"];
        match which {
            0 => f["schema"] = json!("glove.refinement-eval-fixture-v2"),
            1 => f["variant"] = json!("both"),
            2 => f["extra"] = json!(1),
            3 => {
                f.as_object_mut().unwrap().remove("dataset_digest");
            }
            4 => f["dataset_ref"] = json!(""),
            5 => f["model_identity"] = json!("a\u{1}b"),
            6 => f["harness"] = json!("h".repeat(65)),
            7 => f["seed"] = json!(MAX_SAFE_INTEGER + 1),
            8 => f["session_id"] = json!("Not-An-Id"),
            9 => f["fixture_digest"] = json!("not hex"),
            10 => f["selectors"] = json!([]),
            11 => f["selectors"] = json!(["b", "a"]),
            12 => f["module_identity"] = Value::Null,
            13 => f["selected_projection"]["target"] = json!("/x"),
            14 => e["termination"] = json!("stopped"),
            15 => {
                let max = if e["termination"] == "exited" {
                    256
                } else {
                    65
                };
                e["exit_code"] = json!(max);
            }
            16 => e["max_wall_latency_ms"] = json!(0),
            17 => e["required_literals"] = json!(["same", "same"]),
            18 => e["forbidden_literals"] = json!(["z", "a"]),
            19 => {
                e["required_literals"] = json!(["both"]);
                e["forbidden_literals"] = json!(["both"]);
            }
            20 => e["required_literals"] = json!([""]),
            _ => e["forbidden_literals"] = json!(["x".repeat(1025)]),
        }
    }

    /// Changes to a matched plan or fixture that each break the match
    /// (`true`: change the plan).
    fn unmatching(p: &mut Value, f: &mut Value, which: usize) {
        let r = &mut p["refinement"];
        match which {
            0 => p["session_id"] = json!("another-session"),
            1 => f["session_id"] = json!("another-session"),
            2 => r["matched_context_digest"] = json!("77".repeat(32)),
            3 => p["policy_revision"] = json!(8),
            4 => f["seed"] = json!(f["seed"].as_u64().unwrap() ^ 1),
            5 => f["dataset_ref"] = json!("another dataset"),
            6 => f["proposal_digest"] = json!("78".repeat(32)),
            7 => {
                let v = if f["variant"] == "base" {
                    "candidate"
                } else {
                    "base"
                };
                f["variant"] = json!(v);
            }
            8 => f["selected_projection"]["destination_alias"] = json!("elsewhere"),
            9 => {
                let other = if f["variant"] == "base" {
                    "candidate"
                } else {
                    "base"
                };
                r[other]["sha256"] = json!("79".repeat(32));
            }
            10 => {
                let other = if f["variant"] == "base" {
                    "candidate"
                } else {
                    "base"
                };
                r[other]["projection_id"] = json!("zz-renamed");
            }
            _ => p["resource_profile"]["pids"] = json!(17),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn fixture_arbitrary_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..700)) {
            if let Ok(f) = Fixture::decode(&b) {
                prop_assert_eq!(f.encode().unwrap(), b);
            }
        }

        #[test]
        fn valid_fixtures_round_trip(f in fixture()) {
            let b = bytes(&f);
            let d = Fixture::decode(&b).map_err(|e| TestCaseError::fail(format!("{e}: {f}")))?;
            prop_assert_eq!(d.canonical_bytes(), b.as_slice());
            prop_assert_eq!(d.encode().unwrap(), b);
            prop_assert_eq!(d.seed(), f["seed"].as_u64().unwrap());
        }

        #[test]
        fn a_broken_rule_is_refused(f in fixture(), which in 0usize..22) {
            let mut m = f.clone();
            breaking(&mut m, which);
            let got = Fixture::decode(&bytes(&m));
            prop_assert!(got.is_err(), "change {} accepted: {}", which, m);
        }

        #[test]
        fn mutated_fixture_bytes_decode_only_as_their_encoding(
            f in fixture(), at in any::<usize>(), byte in any::<u8>(), how in 0u8..3,
        ) {
            let mut b = bytes(&f);
            let at = at % b.len();
            match how {
                0 => b[at] = byte,
                1 => b.insert(at, byte),
                _ => { b.remove(at); }
            }
            if let Ok(d) = Fixture::decode(&b) {
                prop_assert_eq!(d.encode().unwrap(), b);
            }
        }

        #[test]
        fn check_against_accepts_exactly_the_matching_plan(f in fixture(), which in 0usize..12) {
            let p = plan_for(&f);
            let plan = DecodedPlan::decode(&bytes(&p)).unwrap();
            let fixture = Fixture::decode(&bytes(&f)).unwrap();
            prop_assert!(fixture.check_against(&plan).is_ok());
            let (mut p2, mut f2) = (p.clone(), f.clone());
            unmatching(&mut p2, &mut f2, which);
            // Both sides still decode: only the match is broken.
            let plan2 = DecodedPlan::decode(&bytes(&p2)).unwrap();
            let fixture2 = Fixture::decode(&bytes(&f2)).unwrap();
            let code = fixture2.check_against(&plan2).unwrap_err().code();
            prop_assert!(
                code.as_str() == "refinement_fixture_mismatch"
                    || code.as_str() == "refinement_matched_context_mismatch",
                "{}", code
            );
        }
    }

    fn naive(hay: &[u8], lit: &str) -> bool {
        hay.windows(lit.len()).any(|w| w == lit.as_bytes())
    }

    fn stream() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            "(?s).{0,60}".prop_map(String::into_bytes),
            prop::collection::vec(prop::sample::select(b"ab\xc3\xa9\xff\n".to_vec()), 0..60),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn evaluation_is_the_same_however_the_stream_is_cut(
            lits in prop::collection::btree_set("[ab\u{e9}]{1,4}", 0..6),
            s in stream(),
            cuts in prop::collection::vec(any::<usize>(), 0..6),
            complete in any::<bool>(),
            stop in any::<bool>(),
            code in 0i32..3,
        ) {
            let lits: Vec<String> = lits.into_iter().collect();
            let (req, forb): (Vec<_>, Vec<_>) =
                lits.iter().cloned().enumerate().partition(|(i, _)| i % 2 == 0);
            let req: Vec<String> = req.into_iter().map(|(_, s)| s).collect();
            let forb: Vec<String> = forb.into_iter().map(|(_, s)| s).collect();
            let e = Expectation::new(ExpectedTermination::Exited, 0, None, req.clone(), forb.clone())
                .unwrap();
            let o = Observed {
                termination: ObservedEnd::Exited(code),
                latency_us: 5,
                stream_complete: complete,
                resource_stop: stop.then(|| "wall_time".to_string()),
            };
            let mut whole = Evaluator::new(&e);
            whole.feed(&s);
            let whole = whole.finish(&o);
            let mut at: Vec<usize> = cuts.iter().map(|c| c % (s.len() + 1)).collect();
            at.sort_unstable();
            let mut ev = Evaluator::new(&e);
            let mut from = 0;
            for c in at.into_iter().chain([s.len()]) {
                ev.feed(&s[from..c]);
                from = c;
            }
            prop_assert_eq!(ev.bytes(), s.len() as u64);
            let cut = ev.finish(&o);
            prop_assert_eq!(&cut, &whole);
            prop_assert_eq!(whole.raw_pty_sha256, Sha256Digest::of(&s));
            prop_assert_eq!(whole.raw_pty_bytes, s.len() as u64);
            let found = req.iter().filter(|l| naive(&s, l)).count() as u64;
            let seen = forb.iter().filter(|l| naive(&s, l)).count() as u64;
            prop_assert_eq!(whole.outcome.required_literals.matched, found);
            prop_assert_eq!(whole.outcome.forbidden_literals.matched, seen);
            let valid = complete && std::str::from_utf8(&s).is_ok();
            prop_assert_eq!(whole.evidence == Evidence::Valid, valid);
            prop_assert_eq!(
                whole.outcome.passed,
                valid && !stop && code == 0 && found == req.len() as u64 && seen == 0
            );
            whole.outcome.check().unwrap();
            let c = whole.outcome.commitment();
            prop_assert_eq!(c, cut.outcome.commitment());
        }
    }
}
