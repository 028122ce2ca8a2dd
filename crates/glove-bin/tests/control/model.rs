//! Model-based test of the real runtime: a real `gloved` with real
//! sandboxes, driven by random sequences of create, start, stop,
//! acknowledge-and-compact, SIGKILL-and-restart and clean restart, checked
//! after every step against a small model:
//!
//! * every session's stage is the model's (a session the store compacted
//!   away must be terminal in the model);
//! * every terminal session not yet acknowledged has exactly one receipt, a
//!   valid typed `resource_v1` body, that says how it ended (stopped, or
//!   recovered from the stage it was in);
//! * each restart opens the store and the receipt journal against their
//!   anchors (`gloved` refuses to start otherwise), and at the end the
//!   receipt journal verifies offline with `glove receipts verify`, anchor
//!   and ack files included.
//!
//! Cases: 8 by default (each starts real sandboxes and restarts `gloved`),
//! `PROPTEST_CASES` for more.

use super::common;
use super::harness::*;
use super::managed::{Limits, Managed};
use glove_bin::control::client::Client;
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestCaseError, TestRunner};
use serde_json::{json, Value};
use std::time::Duration;

const LIMITS: Limits = Limits {
    wall_ms: 60_000,
    output_bytes: 1 << 20,
    cpu_ms: 60_000,
    memory: 256 << 20,
    pids: 64,
    disk: 2 << 20,
};

#[derive(Clone, Copy, Debug)]
enum Op {
    Create,
    Start(usize),
    Stop(usize),
    Ack,
    Crash,
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Create),
        3 => (0usize..8).prop_map(Op::Start),
        2 => (0usize..8).prop_map(Op::Stop),
        1 => Just(Op::Ack),
        1 => Just(Op::Crash),
        1 => Just(Op::Restart),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Created,
    Running,
    /// Exited; `recovered` when a restart ended it.
    Exited,
    /// Failed by recovery after a crash, from the running stage.
    Recovered,
}

impl Stage {
    fn wire(self) -> &'static str {
        match self {
            Stage::Created => "created",
            Stage::Running => "running",
            Stage::Exited => "exited",
            Stage::Recovered => "failed",
        }
    }

    fn terminal(self) -> bool {
        matches!(self, Stage::Exited | Stage::Recovered)
    }
}

struct Model {
    sessions: Vec<(String, Stage)>,
    /// Sessions whose receipt an acknowledgement covered.
    acked: std::collections::BTreeSet<String>,
    acked_seq: u64,
    next: usize,
    /// Receipts the acknowledgements' compactions dropped.
    compacted: u64,
    /// The last head acknowledged: the controller's trusted anchor.
    anchor: String,
}

fn pick(model: &Model, i: usize, stage: Stage) -> Option<usize> {
    let idx: Vec<usize> = (0..model.sessions.len())
        .filter(|k| model.sessions[*k].1 == stage)
        .collect();
    (!idx.is_empty()).then(|| idx[i % idx.len()])
}

fn wait_stage(c: &mut Client, id: &str, stage: &str) -> Result<(), TestCaseError> {
    for _ in 0..1500 {
        let s = c.session_status(id).expect("status");
        if s["stage"] == stage {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(TestCaseError::fail(format!("{id} never reached {stage}")))
}

/// Checks every session and receipt against the model.
fn check(c: &mut Client, model: &Model) -> Result<(), TestCaseError> {
    for (id, stage) in &model.sessions {
        match c.session_status(id) {
            Ok(s) => prop_assert_eq!(s["stage"].as_str(), Some(stage.wire()), "{}", id),
            // Compacted away: only ever a terminal session.
            Err(e) => {
                prop_assert_eq!(e.code(), "store_session_not_found", "{}", id);
                prop_assert!(stage.terminal(), "{} compacted while {:?}", id, stage);
            }
        }
    }
    let page = c.receipts_page(model.acked_seq, Some(1024)).expect("page");
    let mut seen = std::collections::BTreeMap::new();
    for r in page["receipts"].as_array().expect("receipts") {
        let env: Value =
            serde_json::from_str(r["envelope"].as_str().expect("envelope")).expect("json");
        let body = &env["body"];
        let bytes = glove_types::canon::to_canonical(body).expect("canonical");
        glove_types::receipt::ResourceReceiptV1::decode(&bytes).expect("typed receipt");
        let id = body["session_id"].as_str().expect("id").to_owned();
        prop_assert!(
            seen.insert(id.clone(), body.clone()).is_none(),
            "two receipts for {}",
            id
        );
    }
    for (id, stage) in &model.sessions {
        let body = seen.get(id);
        if !stage.terminal() {
            prop_assert!(body.is_none(), "{} has a receipt while {:?}", id, stage);
            continue;
        }
        if model.acked.contains(id) {
            continue;
        }
        let body = body.ok_or_else(|| TestCaseError::fail(format!("no receipt for {id}")))?;
        match stage {
            Stage::Exited => {
                prop_assert_eq!(&body["termination"]["reason"], "stopped", "{}", id);
                prop_assert_eq!(&body["recovered"], false);
            }
            Stage::Recovered => {
                prop_assert_eq!(&body["recovered"], true, "{}", id);
                prop_assert_eq!(&body["recovery"]["stage"], "running");
                prop_assert_eq!(
                    &body["termination"]["code"],
                    "lifecycle_recovery_running_interrupted"
                );
            }
            _ => unreachable!(),
        }
    }
    prop_assert_eq!(
        seen.len(),
        model
            .sessions
            .iter()
            .filter(|(id, s)| s.terminal() && !model.acked.contains(id))
            .count(),
        "receipts beyond the model's"
    );
    Ok(())
}

fn run(m: &Managed, ops: &[Op]) -> Result<u64, TestCaseError> {
    let mut d = m.start();
    let mut model = Model {
        sessions: vec![],
        acked: Default::default(),
        acked_seq: 0,
        next: 0,
        compacted: 0,
        anchor: "0:0000000000000000000000000000000000000000000000000000000000000000".into(),
    };
    for op in ops {
        let mut c = d.client();
        match *op {
            Op::Create => {
                let id = format!("model-{}", model.next);
                model.next += 1;
                c.create_session(&m.plan(&LIMITS, &id), None)
                    .expect("create");
                model.sessions.push((id, Stage::Created));
            }
            Op::Start(i) => {
                let Some(k) = pick(&model, i, Stage::Created) else {
                    continue;
                };
                let id = model.sessions[k].0.clone();
                let auth = m.authorize(&id, NOW_MS);
                let v = c
                    .call(
                        "start_session",
                        json!({"session_id": id, "authorization": auth}),
                    )
                    .expect("start");
                prop_assert_eq!(&v["stage"], "running");
                model.sessions[k].1 = Stage::Running;
            }
            Op::Stop(i) => {
                let Some(k) = pick(&model, i, Stage::Running) else {
                    continue;
                };
                let id = model.sessions[k].0.clone();
                c.call("stop_session", json!({"session_id": id, "grace_ms": 50}))
                    .expect("stop");
                wait_stage(&mut c, &id, "exited")?;
                model.sessions[k].1 = Stage::Exited;
            }
            Op::Ack => {
                let page = c.receipts_page(model.acked_seq, Some(1024)).expect("page");
                let head = page["head"].as_str().expect("head").to_owned();
                for r in page["receipts"].as_array().expect("receipts") {
                    let env: Value =
                        serde_json::from_str(r["envelope"].as_str().expect("envelope"))
                            .expect("json");
                    model
                        .acked
                        .insert(env["body"]["session_id"].as_str().expect("id").into());
                }
                let ack = c.receipts_ack(&head).expect("ack");
                model.anchor = head.clone();
                model.compacted += ack["compacted"].as_u64().unwrap_or(0);
                model.acked_seq = head
                    .split(':')
                    .next()
                    .and_then(|s| s.parse().ok())
                    .expect("head seq");
            }
            Op::Crash => {
                drop(c);
                d.child.kill().expect("SIGKILL gloved");
                d.child.wait().expect("wait");
                d = m.start();
                for s in &mut model.sessions {
                    if s.1 == Stage::Running {
                        s.1 = Stage::Recovered;
                    }
                }
            }
            Op::Restart => {
                drop(c);
                let (status, log) = d.stop();
                prop_assert!(status.success(), "gloved stopped badly: {}", log);
                d = m.start();
                for s in &mut model.sessions {
                    if s.1 == Stage::Running {
                        s.1 = Stage::Exited;
                    }
                }
            }
        }
        check(&mut d.client(), &model)?;
    }
    eprintln!(
        "model: {} ops, {} sessions, stages {:?}",
        ops.len(),
        model.sessions.len(),
        model.sessions.iter().map(|s| s.1).collect::<Vec<_>>()
    );
    let (status, log) = d.stop();
    prop_assert!(status.success(), "gloved stopped badly: {}", log);
    // The receipt journal verifies offline, with its anchor and ack files,
    // from the last head the controller acknowledged (a compacted journal
    // starts there).
    let journal = m.home.state.join("receipts.journal");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_glove"))
        .args(["receipts", "verify", "--json", "--file"])
        .arg(&journal)
        .arg("--key-file")
        .arg(&m.home.key)
        .args(["--anchor", model.anchor.as_str()])
        .output()
        .expect("run glove");
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    prop_assert_eq!(&v["valid"], true, "{}", v);
    prop_assert_eq!(&v["anchor_file_checked"], true);
    Ok(model.compacted)
}

/// A managed home whose receipt journal holds 64 records, so that
/// acknowledging a handful of receipts compacts it.
fn small_home() -> Managed {
    let mut m = Managed::new(&LIMITS, None);
    m.extra
        .extend(["--receipt-journal-max-records".into(), "64".into()]);
    m
}

#[test]
fn the_runtime_agrees_with_its_model_across_crashes_restarts_and_compaction() {
    if !common::sandbox_ok(common::As::Caller) {
        return;
    }
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let mut runner = TestRunner::new(RunnerConfig {
        cases,
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    runner
        .run(&prop::collection::vec(op(), 4..24), |ops| {
            run(&small_home(), &ops).map(|_| ())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

/// One fixed sequence that surely compacts the receipt journal, then
/// crashes and restarts over the compacted file.
#[test]
fn the_runtime_agrees_with_its_model_over_a_compacted_receipt_journal() {
    if !common::sandbox_ok(common::As::Caller) {
        return;
    }
    let mut ops = Vec::new();
    for i in 0..10 {
        ops.extend([Op::Create, Op::Start(0), Op::Stop(i)]);
    }
    ops.extend([
        Op::Ack,
        Op::Create,
        Op::Start(0),
        Op::Crash,
        Op::Ack,
        Op::Restart,
    ]);
    let compacted = run(&small_home(), &ops).unwrap_or_else(|e| panic!("{e}"));
    assert!(compacted > 0, "the receipt journal was compacted");
}
