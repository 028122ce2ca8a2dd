//! Path exposures: the policy, the journal records and the control
//! parameters never panic on any input and round-trip what they accept
//! (twins of `fuzz/fuzz_targets/exposure_*.rs`); and a model-based test
//! of the exposure journal on a real file (grants, replacements,
//! revocations and reopenings, compared with a plain model of who is
//! live at which generation).

use glove_control::exposures::{CreateParams, RevokeParams};
use glove_journal::exposure::{replay_exposure_bytes, ExposureJournal};
use glove_types::exposure::lease::{scope_digest, CreatedRecord, RevokedRecord};
use glove_types::exposure::{starter, ExposureMode, ExposurePolicy, LeaseState, StarterRoot};
use glove_types::ids::{ExposureId, ExposureLabel, ExposureRootId, RuntimeTemplateId};
use glove_types::policy::{Access, Materialization};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

const POLICY_SEED: &[u8] = include_bytes!("../../fuzz/seeds/exposure_policy/starter.json");

fn record(id: &str, generation: u64, project: u8, label: &str) -> CreatedRecord {
    let mut r = CreatedRecord {
        exposure_id: ExposureId::new(id).expect("id"),
        generation,
        scope_digest: glove_types::Sha256Digest::of(b""),
        scope_nonce: [project; 16],
        label: ExposureLabel::new(label).expect("label"),
        modes: vec![ExposureMode::new(
            Access::ReadOnly,
            Materialization::Copy,
            4096,
        )],
        created_at_ms: 10,
        expires_at_ms: 1_000_000,
        runtimes: vec![RuntimeTemplateId::new("codex-safe").expect("id")],
        root_id: ExposureRootId::new("src").expect("id"),
        relative_path: format!("p{project}"),
        dev: 1,
        ino: u64::from(project),
    };
    r.scope_digest = scope_digest(&r.scope()).expect("digest");
    r
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        if let Ok(p) = ExposurePolicy::decode(&data) {
            let b = p.canonical_bytes().expect("encodes");
            prop_assert_eq!(ExposurePolicy::decode(&b).ok(), Some(p));
        }
        if let Ok(r) = CreatedRecord::decode(&data) {
            prop_assert_eq!(r.encode().ok(), Some(data.clone()));
        }
        if let Ok(r) = RevokedRecord::decode(&data) {
            prop_assert_eq!(r.encode().ok(), Some(data.clone()));
        }
        if let Err(e) = replay_exposure_bytes(&data) {
            prop_assert!(e.is_corrupt());
        }
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&data) {
            let _ = serde_json::from_value::<CreateParams>(v.clone());
            let _ = serde_json::from_value::<RevokeParams>(v);
        }
    }

    #[test]
    fn a_changed_byte_of_a_policy_is_refused_or_decodes_consistently(
        at in 0usize..POLICY_SEED.len(), b in any::<u8>()
    ) {
        let mut data = POLICY_SEED.to_vec();
        data[at] = b;
        if let Ok(p) = ExposurePolicy::decode(&data) {
            let again = ExposurePolicy::decode(&p.canonical_bytes().expect("encodes"));
            prop_assert_eq!(again.ok(), Some(p));
        }
    }

    #[test]
    fn a_changed_byte_of_a_record_is_refused_or_is_the_same_record(
        at in 0usize..400, b in any::<u8>()
    ) {
        let bytes = record("e1", 1, 3, "app").encode().expect("encode");
        let at = at % bytes.len();
        let mut data = bytes.clone();
        data[at] = b;
        // The scope digest binds every local fact: a change decodes only
        // when it changes nothing.
        if let Ok(r) = CreatedRecord::decode(&data) {
            prop_assert_eq!(r.encode().ok(), Some(data));
        }
    }

    #[test]
    fn starter_policies_decode(
        names in proptest::collection::btree_set("[a-zA-Z0-9 _.-]{1,12}", 1..5),
        templates in proptest::collection::vec("[a-z][a-z0-9-]{0,10}", 0..4),
    ) {
        // Distinct last components under one parent: never overlapping.
        let paths: std::collections::BTreeSet<String> =
            names.iter().map(|n| format!("/srv/{}", n.replace('.', "x"))).collect();
        let roots: Vec<(PathBuf, StarterRoot)> = paths
            .iter()
            .map(|p| (PathBuf::from(p), StarterRoot::default()))
            .collect();
        let templates: Vec<RuntimeTemplateId> =
            templates.iter().map(|t| RuntimeTemplateId::new(t.clone()).expect("id")).collect();
        let bytes = starter(&roots, &templates).expect("starter");
        let p = ExposurePolicy::decode(&bytes).expect("decodes");
        prop_assert_eq!(p.roots().len(), roots.len());
        prop_assert_eq!(p.canonical_bytes().expect("encodes"), bytes);
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// Enroll project `p` (replacing a live lease when `replace`).
    Grant { p: u8, replace: bool },
    /// Revoke project `p`'s exposure.
    Revoke { p: u8 },
    /// Close and reopen the journal.
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..4, any::<bool>()).prop_map(|(p, replace)| Op::Grant { p, replace }),
        (0u8..4).prop_map(|p| Op::Revoke { p }),
        Just(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn the_journal_agrees_with_a_model(ops in proptest::collection::vec(op(), 1..24)) {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let path = d.path().join("exposures.journal");
        let mut j = Some(ExposureJournal::create(&path, None).expect("create"));
        // Model: per project, (generation, live).
        let mut model: BTreeMap<u8, (u64, bool)> = BTreeMap::new();
        for op in ops {
            let jj = j.as_mut().expect("open");
            match op {
                Op::Grant { p, replace } => {
                    let (generation, live) = model.get(&p).copied().unwrap_or((0, false));
                    let r = record(&format!("e{p}"), generation + 1, p, "app");
                    let got = jj.grant(r, replace, 20);
                    if live && !replace {
                        prop_assert_eq!(got.err().map(|e| e.code().as_str()), Some("exposure_live_exists"));
                    } else {
                        prop_assert!(got.is_ok());
                        model.insert(p, (generation + 1, true));
                    }
                }
                Op::Revoke { p } => {
                    let got = jj.revoke(&ExposureId::new(format!("e{p}")).expect("id"), 30);
                    match model.get_mut(&p) {
                        Some((_, live)) if *live => {
                            prop_assert!(got.is_ok());
                            *live = false;
                        }
                        Some(_) => prop_assert_eq!(got.err().map(|e| e.code().as_str()), Some("exposure_revoked")),
                        None => prop_assert_eq!(got.err().map(|e| e.code().as_str()), Some("exposure_unknown")),
                    }
                }
                Op::Reopen => {
                    drop(j.take());
                    j = Some(ExposureJournal::open(&path, None).expect("reopen").0);
                }
            }
            let jj = j.as_ref().expect("open");
            for (p, (generation, live)) in &model {
                let id = ExposureId::new(format!("e{p}")).expect("id");
                let gens = jj.leases().generations(&id);
                prop_assert_eq!(gens.len() as u64, *generation);
                let want = if *live { LeaseState::Live } else { LeaseState::Revoked };
                prop_assert_eq!(gens.last().map(|l| l.state(40)), Some(want));
                prop_assert_eq!(jj.leases().usable(&id, *generation, 40).is_ok(), *live);
            }
            // Only the newest generation of each is ever live.
            prop_assert!(jj.leases().newest().filter(|l| l.state(40) == LeaseState::Live).count()
                == model.values().filter(|(_, l)| *l).count());
        }
        drop(j.take());
        let image = std::fs::read(&path).expect("read");
        prop_assert!(replay_exposure_bytes(&image).is_ok());
    }
}
