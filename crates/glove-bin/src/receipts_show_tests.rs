//! Rendering of fixed receipt bodies (snapshots) and of bodies that do not
//! decode.

use super::{render, to_json, Item};
use glove_types::ids::{ApplyGrantId, ApplyTargetId, ApplyTransactionId, SessionId};
use glove_types::policy::ResourceLimits;
use glove_types::receipt::{
    AdapterReceipt, ApplyOutcome, ApplyReceiptV1, EgressReceipt, Exit, FailedIn, LimitName,
    McpReceipt, ResourceReceiptV1, RetainedReceipt, Termination, Usage,
};
use glove_types::{Blake3Digest, Sha256Digest};
use serde_json::{json, Value};

const CHAIN: &str = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00";

fn limits() -> ResourceLimits {
    ResourceLimits {
        cpu_time_ms: 60_000,
        memory_bytes: 512 << 20,
        pids: 64,
        wall_time_ms: 120_000,
        disk_bytes: 1 << 30,
        terminal_output_bytes: 1 << 20,
    }
}

fn usage() -> Usage {
    Usage {
        cpu_time_ms: 850,
        peak_memory_bytes: 23 << 20,
        pids_peak: 5,
        wall_time_ms: 4_200,
        disk_bytes: 12_288,
        terminal_bytes: 311,
    }
}

fn exited() -> ResourceReceiptV1 {
    ResourceReceiptV1 {
        session_id: SessionId::new("shell-1").expect("id"),
        plan_content_digest: Sha256Digest::from_bytes([1; 32]),
        controller_plan_digest: Blake3Digest::of(b"plan"),
        launch_binding_digest: Some(Sha256Digest::from_bytes([2; 32])),
        limits: Some(limits()),
        projections: vec![],
        usage: Some(usage()),
        termination: Termination::Exited {
            code: 3,
            limits_reached: vec![],
        },
        recovery: None,
        adapter: None,
        egress: None,
        mcp: None,
        retained: vec![],
    }
}

fn limit_stop() -> ResourceReceiptV1 {
    ResourceReceiptV1 {
        termination: Termination::Limit {
            limit: LimitName::Memory,
            exit: Exit::Signaled { signal: 9 },
            limits_reached: vec![LimitName::Memory, LimitName::TerminalOutput],
        },
        ..exited()
    }
}

fn failure() -> ResourceReceiptV1 {
    ResourceReceiptV1 {
        launch_binding_digest: None,
        limits: None,
        usage: None,
        termination: Termination::Failed {
            code: "session_executable_not_found".into(),
            message: "codex is not in /usr/bin\x1b[2J".into(),
        },
        ..exited()
    }
}

fn everything() -> ResourceReceiptV1 {
    ResourceReceiptV1 {
        session_id: SessionId::new("codex-7").expect("id"),
        adapter: Some(AdapterReceipt {
            runtime: glove_types::policy::NativeRuntime::ALL[0]
                .runtime_id()
                .into(),
            home: "/home/agent".into(),
            managed_environment: vec!["HOME=/home/agent".into()],
            skills_digest: None,
            skills: vec![],
            leases: vec![],
            cpu_rate_millicpus: None,
        }),
        egress: Some(EgressReceipt {
            policy_id: "web".into(),
            connections_allowed: 4,
            connections_refused: 1,
            requests_allowed: 9,
            requests_refused: 2,
            requests_failed: 0,
            connections_closed: 4,
            refusals_unjournaled: 0,
            names_resolved: 3,
            bytes_up: 2_048,
            bytes_down: 5 << 20,
            journal_records: 16,
            journal_head: "ab".repeat(32),
            audit_failed: false,
        }),
        mcp: Some(McpReceipt {
            tool_policy_id: "tools".into(),
            profile_sha256: "cd".repeat(32),
            allowed: 6,
            denied: 1,
            upstream_errors: 0,
            dropped: 0,
            pinned: 0,
            cancelled: 0,
            journal_records: 7,
            journal_head: "ef".repeat(32),
            audit_failed: false,
        }),
        retained: vec![
            RetainedReceipt {
                alias: "workspace".into(),
                image: (2049, 12),
                bytes: 64 << 20,
                baseline_digest: "01".repeat(32),
                final_digest: Some("02".repeat(32)),
                error: None,
            },
            RetainedReceipt {
                alias: "notes".into(),
                image: (2049, 13),
                bytes: 8 << 20,
                baseline_digest: "03".repeat(32),
                final_digest: None,
                error: Some("retained_freeze_failed".into()),
            },
        ],
        ..exited()
    }
}

fn applied() -> ApplyReceiptV1 {
    ApplyReceiptV1 {
        transaction_id: ApplyTransactionId::new("t-1").expect("id"),
        session_id: SessionId::new("codex-7").expect("id"),
        target: ApplyTargetId::new("workspace").expect("id"),
        grant_id: ApplyGrantId::new("g-1").expect("id"),
        authorization_digest: Sha256Digest::from_bytes([4; 32]),
        baseline_digest: Sha256Digest::from_bytes([1; 32]),
        manifest_digest: Sha256Digest::from_bytes([2; 32]),
        outcome: ApplyOutcome::Applied,
        recovered: false,
    }
}

fn apply_failed() -> ApplyReceiptV1 {
    ApplyReceiptV1 {
        transaction_id: ApplyTransactionId::new("t-2").expect("id"),
        outcome: ApplyOutcome::Failed {
            code: "apply_source_changed".into(),
            failed_in: FailedIn::Prepared,
        },
        recovered: true,
        ..applied()
    }
}

/// A page item as `receipts_page` delivers it, around `body`.
fn item(seq: u64, kind: &str, body: &[u8]) -> Value {
    let body = std::str::from_utf8(body).expect("utf-8");
    let envelope = format!(
        r#"{{"body":{body},"body_mac":"{}","chain":"{CHAIN}","receipt_kind":"{kind}","seq":{seq}}}"#,
        "00".repeat(32)
    );
    json!({"seq": seq, "kind": kind, "chain": CHAIN, "envelope": envelope})
}

fn resource(seq: u64, r: &ResourceReceiptV1) -> Value {
    item(seq, "resource_v1", &r.encode().expect("encodes"))
}

fn apply(seq: u64, r: &ApplyReceiptV1) -> Value {
    item(seq, "apply_v1", &r.encode().expect("encodes"))
}

fn shown(items: &[Value]) -> String {
    let items: Vec<Item> = items.iter().map(Item::of).collect();
    render(&json!(format!("9:{CHAIN}")), &items, None)
}

#[test]
fn an_exited_session() {
    insta::assert_snapshot!(shown(&[resource(1, &exited())]));
}

#[test]
fn a_limit_stop() {
    insta::assert_snapshot!(shown(&[resource(2, &limit_stop())]));
}

#[test]
fn a_failure_with_its_message_escaped() {
    insta::assert_snapshot!(shown(&[resource(3, &failure())]));
}

#[test]
fn egress_mcp_and_retained_stages() {
    insta::assert_snapshot!(shown(&[resource(4, &everything())]));
}

#[test]
fn an_applied_and_a_failed_apply() {
    insta::assert_snapshot!(shown(&[apply(5, &applied()), apply(6, &apply_failed())]));
}

#[test]
fn undecodable_and_inconsistent_receipts_are_shown_as_such() {
    let mut moved = resource(8, &exited());
    moved["chain"] = json!("11".repeat(32));
    let items = [
        item(7, "resource_v1", br#"{"receipt_kind":"resource_v1"}"#),
        moved,
        json!({"seq": 9, "kind": "apply_v1", "chain": CHAIN, "envelope": "not json"}),
        item(10, "refinement_v1", br#"{"receipt_kind":"refinement_v1"}"#),
        json!({}),
    ];
    insta::assert_snapshot!(shown(&items));
}

#[test]
fn json_gives_each_body_as_an_object() {
    let items: Vec<Item> = [
        resource(1, &exited()),
        apply(2, &apply_failed()),
        item(3, "apply_v1", br#"{"receipt_kind":"apply_v1"}"#),
    ]
    .iter()
    .map(Item::of)
    .collect();
    let v = to_json(&json!("3:x"), &items);
    assert_eq!(v["head"], "3:x");
    let r = &v["receipts"];
    assert_eq!(r[0]["body"]["session_id"], "shell-1");
    assert_eq!(r[0]["body"]["termination"]["exit"]["code"], 3);
    assert_eq!(r[0]["decoded"], true);
    assert_eq!(r[0]["chained"], true);
    assert_eq!(r[0]["mac_checked"], false);
    assert_eq!(r[1]["body"]["outcome"], "failed");
    assert_eq!(r[2]["decoded"], false);
    assert_eq!(r[2]["body_error"]["code"], "json_missing_field");
    assert!(r[2]["body"].is_object());
}

#[test]
fn a_refinement_receipt_shows_its_outcome_then_its_resource_receipt() {
    let passed = include_bytes!("../../../fuzz/seeds/receipt_refinement/passed");
    let not_run = include_bytes!("../../../fuzz/seeds/receipt_refinement/not_run");
    let items = [
        item(1, "refinement_v1", passed),
        item(2, "refinement_v1", not_run),
    ];
    let text = shown(&items);
    assert!(text.contains("PASSED"), "{text}");
    assert!(
        text.contains("no outcome: the evaluation did not complete"),
        "{text}"
    );
    assert!(text.contains("evaluator INCOMPLETE"), "{text}");
    insta::assert_snapshot!(text);
}
