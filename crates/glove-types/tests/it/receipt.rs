//! The `resource_v1` receipt body: every valid value round-trips through its
//! one encoding; the decoder refuses everything else with a code and never
//! panics.

use glove_types::ids::{AliasId, ProjectionId, SessionId};
use glove_types::policy::ResourceLimits;
use glove_types::receipt::{
    AdapterReceipt, EgressReceipt, Exit, LeaseReceipt, LimitName, McpReceipt, Projection, Recovery,
    ResourceReceiptV1, RetainedReceipt, Termination, Usage,
};
use glove_types::stage::SessionStage;
use glove_types::{Blake3Digest, Sha256Digest};
use proptest::prelude::*;

fn limit() -> impl Strategy<Value = LimitName> {
    prop_oneof![
        Just(LimitName::CpuTime),
        Just(LimitName::Memory),
        Just(LimitName::Pids),
        Just(LimitName::WallTime),
        Just(LimitName::Disk),
        Just(LimitName::TerminalOutput),
    ]
}

fn exit() -> impl Strategy<Value = Exit> {
    prop_oneof![
        any::<i32>().prop_map(|code| Exit::Exited { code }),
        any::<i32>().prop_map(|signal| Exit::Signaled { signal }),
    ]
}

fn termination() -> impl Strategy<Value = Termination> {
    let reached = || prop::collection::vec(limit(), 0..4);
    prop_oneof![
        (any::<i32>(), reached()).prop_map(|(code, limits_reached)| Termination::Exited {
            code,
            limits_reached
        }),
        (any::<i32>(), reached()).prop_map(|(signal, limits_reached)| Termination::Signaled {
            signal,
            limits_reached
        }),
        (exit(), reached()).prop_map(|(exit, limits_reached)| Termination::Stopped {
            exit,
            limits_reached
        }),
        (limit(), exit(), reached()).prop_map(|(limit, exit, mut limits_reached)| {
            limits_reached.push(limit);
            Termination::Limit {
                limit,
                exit,
                limits_reached,
            }
        }),
        ("[a-z][a-z0-9_]{0,30}", "\\PC{0,40}")
            .prop_map(|(code, message)| Termination::Failed { code, message }),
    ]
}

fn adapter() -> impl Strategy<Value = AdapterReceipt> {
    (
        prop::sample::select(vec!["codex", "claude-code", "pi", "copilot", "opencode"]),
        prop::collection::btree_set("[A-Z]{1,6}=/home/agent/[a-z.]{0,8}", 0..4),
        prop::collection::btree_set("[a-z][a-z0-9-]{0,10}", 0..4),
        prop::collection::btree_map(
            "[a-z][a-z0-9-]{0,10}",
            (1u64..50, prop::option::of(0u64..5)),
            0..3,
        ),
        prop::option::of(10u64..5000),
    )
        .prop_map(|(runtime, env, skills, leases, rate)| AdapterReceipt {
            runtime: runtime.to_owned(),
            home: "/home/agent".into(),
            managed_environment: env.into_iter().collect(),
            skills_digest: (!skills.is_empty()).then(|| Sha256Digest::of(b"s").to_hex()),
            skills: skills.into_iter().collect(),
            leases: leases
                .into_iter()
                .map(|(h, (start, grown))| LeaseReceipt {
                    secret_handle: h,
                    version_at_start: start,
                    version_at_end: grown.map(|g| start + g),
                })
                .collect(),
            cpu_rate_millicpus: rate,
        })
}

fn egress() -> impl Strategy<Value = EgressReceipt> {
    (
        "[a-z][a-z0-9-]{0,10}",
        prop::array::uniform10(0u64..1_000_000),
        any::<[u8; 32]>(),
        any::<bool>(),
    )
        .prop_map(|(id, n, head, failed)| EgressReceipt {
            policy_id: id,
            connections_allowed: n[0],
            connections_refused: n[1],
            requests_allowed: n[2],
            requests_refused: n[3],
            requests_failed: n[6],
            connections_closed: n[7],
            refusals_unjournaled: n[8],
            names_resolved: n[9],
            bytes_up: n[4],
            bytes_down: n[5],
            journal_records: n[0] + n[1] + n[2] + n[3],
            journal_head: head.iter().map(|b| format!("{b:02x}")).collect(),
            audit_failed: failed,
        })
}

fn mcp() -> impl Strategy<Value = McpReceipt> {
    (
        "[a-z][a-z0-9-]{0,10}",
        prop::array::uniform7(0u64..1_000_000),
        any::<[u8; 32]>(),
        any::<[u8; 32]>(),
        any::<bool>(),
    )
        .prop_map(|(id, n, profile, head, failed)| McpReceipt {
            tool_policy_id: id,
            profile_sha256: profile.iter().map(|b| format!("{b:02x}")).collect(),
            allowed: n[0],
            denied: n[1],
            upstream_errors: n[2],
            dropped: n[3],
            pinned: n[4],
            cancelled: n[5],
            journal_records: n[6],
            journal_head: head.iter().map(|b| format!("{b:02x}")).collect(),
            audit_failed: failed,
        })
}

fn receipt() -> impl Strategy<Value = ResourceReceiptV1> {
    (
        "[a-z0-9][a-z0-9-]{0,20}",
        any::<[u8; 8]>(),
        prop::option::of(any::<u64>()),
        prop::option::of(any::<(u64, u64, u64)>()),
        0usize..3,
        termination(),
        prop::option::of((any::<bool>(), any::<bool>(), 0u64..5, any::<bool>())),
        prop::option::of(adapter()),
        (prop::option::of(egress()), prop::option::of(mcp())),
    )
        .prop_map(
            |(id, seed, limit, usage, nproj, termination, recovery, adapter, (egress, mcp))| {
                let failed = matches!(termination, Termination::Failed { .. });
                ResourceReceiptV1 {
                    session_id: SessionId::new(id).expect("id"),
                    plan_content_digest: Sha256Digest::of(&seed),
                    controller_plan_digest: Blake3Digest::of(&seed),
                    launch_binding_digest: limit.map(|l| Sha256Digest::of(&l.to_le_bytes())),
                    limits: limit.map(|l| ResourceLimits {
                        cpu_time_ms: l % 1_000_000,
                        memory_bytes: l % 9_007_199_254_740_991,
                        pids: 16,
                        wall_time_ms: 2000,
                        disk_bytes: 0,
                        terminal_output_bytes: 1,
                    }),
                    projections: (0..nproj)
                        .map(|i| Projection {
                            projection_id: ProjectionId::new(format!("p{i}")).expect("id"),
                            destination_alias: AliasId::new("libraries").expect("id"),
                            target: format!("/opt/lib/p{i}"),
                            sha256: Sha256Digest::of(&[i as u8]),
                        })
                        .collect(),
                    usage: (!failed).then(|| {
                        let (a, b, c) = usage.unwrap_or_default();
                        Usage {
                            cpu_time_ms: a % 9_007_199_254_740_991,
                            peak_memory_bytes: b % 9_007_199_254_740_991,
                            pids_peak: c % 1000,
                            ..Usage::default()
                        }
                    }),
                    termination,
                    recovery: recovery.map(|(m, l, c, r)| Recovery {
                        stage: SessionStage::Running,
                        identity_matched: m,
                        launcher_killed: l,
                        cgroups_removed: c,
                        killed: m || l,
                        replay_error: r.then(|| "lifecycle_record_invalid".to_owned()),
                    }),
                    adapter,
                    egress,
                    retained: if nproj % 2 == 1 {
                        vec![RetainedReceipt {
                            alias: "workspace".into(),
                            image: (nproj as u64, 7),
                            bytes: 64 << 20,
                            baseline_digest: Sha256Digest::of(&seed).to_string(),
                            final_digest: (!failed).then(|| Sha256Digest::of(b"f").to_string()),
                            error: failed.then(|| "retained_stage_busy".to_owned()),
                        }]
                    } else {
                        vec![]
                    },
                    mcp,
                }
            },
        )
}

proptest! {
    #[test]
    fn every_valid_body_round_trips_through_its_one_encoding(r in receipt()) {
        let bytes = r.encode().expect("encodes");
        prop_assert_eq!(ResourceReceiptV1::decode(&bytes).expect("decodes"), r);
    }

    #[test]
    fn a_changed_byte_is_refused_or_decodes_to_a_body_that_encodes_to_it(
        r in receipt(),
        at in any::<prop::sample::Index>(),
        to in any::<u8>(),
    ) {
        let mut bytes = r.encode().expect("encodes");
        let i = at.index(bytes.len());
        bytes[i] = to;
        if let Ok(v) = ResourceReceiptV1::decode(&bytes) {
            prop_assert_eq!(v.encode().expect("encodes"), bytes);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = ResourceReceiptV1::decode(&bytes);
    }
}

fn body(edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let r = ResourceReceiptV1 {
        session_id: SessionId::new("s-1").expect("id"),
        plan_content_digest: Sha256Digest::of(b"p"),
        controller_plan_digest: Blake3Digest::of(b"p"),
        launch_binding_digest: None,
        limits: None,
        projections: vec![],
        usage: Some(Usage::default()),
        termination: Termination::Exited {
            code: 0,
            limits_reached: vec![],
        },
        recovery: None,
        adapter: None,
        egress: None,
        mcp: None,
        retained: vec![],
    };
    let mut v: serde_json::Value =
        serde_json::from_slice(&r.encode().expect("encodes")).expect("json");
    edit(&mut v);
    glove_types::canon::to_canonical(&v).expect("canonical")
}

/// A valid adapter object with `edit` applied.
fn adapter_json(edit: impl FnOnce(&mut serde_json::Value)) -> serde_json::Value {
    let mut a = serde_json::json!({
        "runtime": "codex",
        "home": "/home/agent",
        "managed_environment": ["CODEX_HOME=/home/agent/.codex", "HOME=/home/agent"],
        "skills_digest": null,
        "skills": [],
        "leases": [],
        "cpu_rate_millicpus": null,
    });
    edit(&mut a);
    a
}

#[test]
fn a_valid_adapter_object_decodes() {
    let bytes = body(|v| v["adapter"] = adapter_json(|_| {}));
    let r = ResourceReceiptV1::decode(&bytes).expect("decodes");
    assert_eq!(r.adapter.expect("adapter").runtime, "codex");
}

#[test]
fn inconsistent_or_unknown_bodies_are_refused_with_a_code() {
    use serde_json::json;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("kind", body(|v| v["receipt_kind"] = json!("resource_v2"))),
        ("unknown field", body(|v| v["extra"] = json!(1))),
        ("null recovery", body(|v| v["recovery"] = json!(null))),
        (
            "recovered without recovery",
            body(|v| v["recovered"] = json!(true)),
        ),
        ("exit without usage", body(|v| v["usage"] = json!(null))),
        (
            "failed with exit",
            body(|v| v["termination"]["reason"] = json!("failed")),
        ),
        (
            "signaled with exited",
            body(|v| v["termination"]["reason"] = json!("signaled")),
        ),
        (
            "limit without limit",
            body(|v| v["termination"]["reason"] = json!("limit")),
        ),
        (
            "unknown reason",
            body(|v| v["termination"]["reason"] = json!("vanished")),
        ),
        (
            "code on success",
            body(|v| v["termination"]["code"] = json!("x")),
        ),
        (
            "bad digest",
            body(|v| v["plan_content_digest"] = json!("AB")),
        ),
        (
            "bad limit",
            body(|v| v["termination"]["limits_reached"] = json!(["fuel"])),
        ),
        ("bad id", body(|v| v["session_id"] = json!("../x"))),
        ("null adapter", body(|v| v["adapter"] = json!(null))),
        (
            "adapter of another runtime",
            body(|v| v["adapter"] = adapter_json(|a| a["runtime"] = json!("vim"))),
        ),
        (
            "unsorted environment",
            body(|v| {
                v["adapter"] = adapter_json(|a| {
                    a["managed_environment"] = json!(["HOME=/home/agent", "CODEX_HOME=/x"])
                })
            }),
        ),
        (
            "skills without their digest",
            body(|v| v["adapter"] = adapter_json(|a| a["skills"] = json!(["review"]))),
        ),
        (
            "a lease going back a version",
            body(|v| {
                v["adapter"] = adapter_json(|a| {
                    a["leases"] =
                        json!([{"secret_handle": "t", "version_at_start": 3, "version_at_end": 2}])
                })
            }),
        ),
        (
            "unknown adapter field",
            body(|v| v["adapter"] = adapter_json(|a| a["host_path"] = json!("/root"))),
        ),
    ];
    for (what, bytes) in cases {
        let e = ResourceReceiptV1::decode(&bytes).expect_err(what);
        assert!(
            e.code().as_str().starts_with("receipt_")
                || e.code().as_str().starts_with("json_")
                || e.code().as_str().starts_with("id_")
                || e.code().as_str().starts_with("digest_"),
            "{what}: {}",
            e.code()
        );
    }
    // Not canonical: the same body with a space.
    let mut spaced = body(|_| {});
    spaced.insert(1, b' ');
    assert!(ResourceReceiptV1::decode(&spaced).is_err());
}

#[test]
fn the_fuzz_seed_is_a_valid_body() {
    let seed =
        std::fs::read(crate::repo_root().join("fuzz/seeds/receipt_body/exited")).expect("seed");
    ResourceReceiptV1::decode(&seed).expect("the seed decodes");
}

#[test]
fn the_fuzz_seed_with_an_mcp_member_is_a_valid_body() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bytes = std::fs::read(root.join("fuzz/seeds/receipt_body/exited-mcp")).expect("seed");
    let r = ResourceReceiptV1::decode(&bytes).expect("the seed decodes");
    assert_eq!(r.mcp.as_ref().map(|m| m.allowed), Some(3));
    assert_eq!(r.encode().expect("encodes"), bytes);
    // A head that is not 64 lowercase hex digits is refused.
    let bad = String::from_utf8(bytes)
        .expect("utf-8")
        .replace(&"cd".repeat(32), "CD");
    assert!(ResourceReceiptV1::decode(bad.as_bytes()).is_err());
}
