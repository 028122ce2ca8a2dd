//! Decode + validate throughput for policies and plans, each as a ratio to a
//! plain `serde_json::from_slice::<Value>` of the same bytes measured in the
//! same run (the cost of merely reading the JSON).
//!
//! Run: `cargo bench -p glove-types --bench types`

use glove_types::plan::{admit, DecodedPlan};
use glove_types::policy::{Explanation, ValidatedPolicy, MAX_POLICY_BYTES};
use serde_json::{json, Value};
use std::hint::black_box;
use std::time::{Duration, Instant};

fn per_op(mut f: impl FnMut(), budget: Duration) -> Duration {
    // Warm up, then run for about `budget`.
    for _ in 0..3 {
        f();
    }
    let start = Instant::now();
    let mut n = 0u32;
    while start.elapsed() < budget {
        f();
        n += 1;
    }
    start.elapsed() / n.max(1)
}

fn example(name: &str) -> Vec<u8> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/examples")
        .join(name);
    std::fs::read(p).expect("example")
}

/// A valid policy just under the 1 MiB bound: many templates with long
/// argument lists, digests fixed up through `Explanation`.
fn big_policy() -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(&example("policy.json")).expect("json");
    let base = v["runtime_templates"][0].clone();
    let mut templates = Vec::new();
    let mut i = 0;
    loop {
        let mut t = base.clone();
        t["runtime_template_id"] = json!(format!("tpl-{i:05}"));
        t["launch"]["arguments"] = json!((0..40)
            .map(|k| format!("--flag-{k}={}-{i}", "v".repeat(80)))
            .collect::<Vec<_>>());
        templates.push(t);
        v["runtime_templates"] = json!(templates);
        if serde_json::to_vec(&v).map(|b| b.len()).unwrap_or(0) > MAX_POLICY_BYTES - 40_000 {
            break;
        }
        i += 1;
        if i >= 255 {
            break;
        }
    }
    let x = Explanation::from_json(&serde_json::to_vec(&v).expect("enc")).expect("explain");
    for (k, t) in x.runtime_templates.iter().enumerate() {
        v["runtime_templates"][k]["adapter_command_digest"] =
            json!(t.computed_adapter_command_digest.to_hex());
    }
    let bytes = serde_json::to_vec(&v).expect("enc");
    assert!(ValidatedPolicy::from_json(&bytes).is_ok());
    bytes
}

fn main() {
    let budget = Duration::from_millis(
        std::env::var("GLOVE_BENCH_MS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1500),
    );
    let small = example("policy.json");
    let big = big_policy();
    let plan = example("plan.json");
    let policy = ValidatedPolicy::from_json(&small).expect("policy");

    println!(
        "{:<34} {:>12} {:>12} {:>8}",
        "case", "glove", "baseline", "ratio"
    );
    for (name, bytes) in [
        ("policy decode+validate (example)", &small),
        ("policy decode+validate (~1 MiB)", &big),
    ] {
        let g = per_op(
            || {
                black_box(ValidatedPolicy::from_json(black_box(bytes)).is_ok());
            },
            budget,
        );
        let b = per_op(
            || {
                black_box(serde_json::from_slice::<Value>(black_box(bytes)).is_ok());
            },
            budget,
        );
        report(&format!("{name} {}B", bytes.len()), g, b);
    }
    let g = per_op(
        || {
            let p = DecodedPlan::decode(black_box(&plan)).expect("decode");
            black_box(admit(p, None, &policy, 1_796_000_001_000).is_ok());
        },
        budget,
    );
    let b = per_op(
        || {
            black_box(serde_json::from_slice::<Value>(black_box(&plan)).is_ok());
        },
        budget,
    );
    report("plan decode+admit (example)", g, b);
}

fn report(name: &str, glove: Duration, base: Duration) {
    let ratio = glove.as_secs_f64() / base.as_secs_f64().max(1e-12);
    println!(
        "{name:<34} {:>10.1}us {:>10.1}us {:>7.2}x",
        glove.as_secs_f64() * 1e6,
        base.as_secs_f64() * 1e6,
        ratio
    );
}
