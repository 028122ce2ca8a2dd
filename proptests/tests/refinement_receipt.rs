//! Properties of the `refinement_v1` receipt body, for auditors:
//!
//! 1. every valid body (an evaluation that ran, from a real evaluator run,
//!    or one that could not run) encodes to canonical bytes that decode
//!    back to the same value, and the fuzz seeds are such bodies;
//! 2. changing, inserting or deleting any byte of an encoded body either
//!    fails to decode or decodes to a value whose encoding is exactly the
//!    changed bytes;
//! 3. arbitrary bytes never panic the decoder.
//!
//! Every test lives in `mod refinement`:
//! `cargo test -p glove-proptests refinement`.

mod refinement {
    use glove_types::ids::{AliasId, ProjectionId, SessionId};
    use glove_types::plan::LibraryProjection;
    use glove_types::receipt::{
        EvaluatorState, RefinementReceiptV1, ResourceReceiptV1, Termination, Usage,
    };
    use glove_types::refinement::{
        Evaluator, Expectation, ExpectedTermination, Observed, ObservedEnd, Variant,
    };
    use glove_types::{Blake3Digest, Sha256Digest};
    use proptest::prelude::*;

    const ID: &str = "[a-z0-9][a-z0-9._-]{0,30}";

    fn projection(id: String, sha: [u8; 32]) -> LibraryProjection {
        LibraryProjection {
            projection_id: ProjectionId::new(id).unwrap(),
            destination_alias: AliasId::new("skills").unwrap(),
            sha256: Sha256Digest::from_bytes(sha),
        }
    }

    fn resource(session: &SessionId, ran: bool, code: i32) -> ResourceReceiptV1 {
        ResourceReceiptV1 {
            session_id: session.clone(),
            plan_content_digest: Sha256Digest::from_bytes([1; 32]),
            controller_plan_digest: Blake3Digest::from_bytes([2; 32]),
            launch_binding_digest: ran.then_some(Sha256Digest::from_bytes([3; 32])),
            limits: None,
            projections: vec![],
            usage: ran.then(Usage::default),
            termination: if ran {
                Termination::Exited {
                    code,
                    limits_reached: vec![],
                }
            } else {
                Termination::Failed {
                    code: "sandbox_spawn_failed".into(),
                    message: "no".into(),
                }
            },
            recovery: None,
            adapter: None,
            egress: None,
            mcp: None,
            retained: vec![],
        }
    }

    prop_compose! {
        fn receipt()(
            session in ID,
            (fid, sid) in (ID, ID).prop_filter("distinct", |(a, b)| a != b),
            shas in any::<[[u8; 32]; 3]>(),
            candidate in any::<bool>(),
            ran in any::<bool>(),
            lits in prop::collection::btree_set("[a-c]{1,3}", 0..5),
            stream in prop::collection::vec(prop::sample::select(b"abc\xc3\xa9\xff".to_vec()), 0..40),
            complete in any::<bool>(),
            stop in any::<bool>(),
            code in 0i32..2,
            latency_us in 0u64..10_000_000,
        ) -> RefinementReceiptV1 {
            let session = SessionId::new(session).unwrap();
            let lits: Vec<String> = lits.into_iter().collect();
            let (req, forb) = lits.split_at(lits.len() / 2);
            let e = Expectation::new(
                ExpectedTermination::Exited, 0, Some(1), req.to_vec(), forb.to_vec(),
            ).unwrap();
            let mut ev = Evaluator::new(&e);
            ev.feed(&stream);
            let r = ev.finish(&Observed {
                termination: ObservedEnd::Exited(code),
                latency_us,
                stream_complete: complete,
                resource_stop: stop.then(|| "memory".into()),
            });
            let (outcome, commitment, sha, bytes, evaluator) = if ran {
                (
                    Some(r.outcome.clone()),
                    Some(r.outcome.commitment()),
                    Some(r.raw_pty_sha256),
                    r.raw_pty_bytes,
                    EvaluatorState { complete: r.complete, evidence: Some(r.evidence) },
                )
            } else {
                (None, None, None, 0, EvaluatorState { complete: false, evidence: None })
            };
            RefinementReceiptV1 {
                resource: resource(&session, ran, code),
                session_id: session,
                fixture: projection(fid, shas[0]),
                selected: projection(sid, shas[1]),
                variant: if candidate { Variant::Candidate } else { Variant::Base },
                matched_context_digest: Sha256Digest::from_bytes(shas[2]),
                outcome,
                outcome_commitment: commitment,
                raw_pty_sha256: sha,
                raw_pty_bytes: bytes,
                evaluator,
            }
        }
    }

    #[test]
    fn refinement_fuzz_seeds_are_valid_bodies() {
        for seed in [
            &include_bytes!("../../fuzz/seeds/receipt_refinement/passed")[..],
            &include_bytes!("../../fuzz/seeds/receipt_refinement/not_run")[..],
        ] {
            let r = RefinementReceiptV1::decode(seed).unwrap();
            assert_eq!(r.encode().unwrap(), seed);
        }
        let f = include_bytes!("../../fuzz/seeds/refinement_fixture/example");
        let d = glove_types::refinement::Fixture::decode(f).unwrap();
        assert_eq!(d.encode().unwrap(), f);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn receipts_round_trip(r in receipt()) {
            let b = r.encode().unwrap();
            prop_assert_eq!(RefinementReceiptV1::decode(&b).unwrap(), r);
        }

        #[test]
        fn mutated_receipts_never_decode_to_another_encoding(
            r in receipt(),
            at in any::<usize>(),
            how in 0u8..3,
            byte in any::<u8>(),
        ) {
            let mut b = r.encode().unwrap();
            let at = at % b.len();
            match how {
                0 => b[at] = byte,
                1 => b.insert(at, byte),
                _ => { b.remove(at); }
            }
            if let Ok(v) = RefinementReceiptV1::decode(&b) {
                prop_assert_eq!(v.encode().unwrap(), b);
            }
        }

        #[test]
        fn receipt_arbitrary_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..800)) {
            if let Ok(v) = RefinementReceiptV1::decode(&b) {
                prop_assert_eq!(v.encode().unwrap(), b);
            }
        }
    }
}
