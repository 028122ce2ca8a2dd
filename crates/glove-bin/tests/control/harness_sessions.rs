//! The harness lane: the five pinned harnesses from `GLOVE_HARNESSES` are
//! staged with `glove policy stage`, each gets two discovery templates from
//! `glove policy generate` (`--version` and `--help`), the templates go into
//! a policy with the `standard` profile, and a real gloved creates, starts
//! and attaches one managed session per template: 10 sessions, offline,
//! contained, each ending with exit 0 and a receipt naming its runtime.
//! `.ci/run` runs this lane on its own and prints its time.

use super::common;
use super::harness::*;
use super::managed::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Instant;

/// (runtime, npm package, executable name, what `--help` prints).
const HARNESSES: &[(&str, &str, &str, &str)] = &[
    (
        "claude-code",
        "@anthropic-ai/claude-code",
        "claude",
        "Usage",
    ),
    ("codex", "@openai/codex", "codex", "Usage"),
    ("copilot", "@github/copilot", "copilot", "Usage"),
    ("opencode", "opencode-ai", "opencode", "opencode"),
    ("pi", "@mariozechner/pi-coding-agent", "pi", "Usage"),
];

fn glove(args: &[&str]) -> Value {
    let out = common::glove(common::As::Caller, args, None);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "{args:?}: no JSON: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(out.status.success(), "{args:?}: {v}");
    v
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|s| s.as_str().expect("string").to_owned())
        .collect()
}

/// One `runtime_templates[]` entry from `glove policy generate`.
fn template(rt: &str, id: &str, bin: &Path, report: &Value, arg: &str) -> Value {
    let bin = bin.display().to_string();
    let mut args = vec![
        "policy",
        "generate",
        "--runtime",
        rt,
        "--search-path",
        &bin,
        "--template-id",
        id,
        "--arg",
        arg,
        "--alias",
        "workspace",
        "--projection-destination",
        "libraries",
    ];
    let env = strings(&report["environment"]);
    let ro = strings(&report["read_only_paths"]);
    let term = "TERM=xterm-256color".to_owned();
    for e in env.iter().chain([&term]) {
        args.extend(["--env", e]);
    }
    for r in &ro {
        args.extend(["--ro", r]);
    }
    glove(&args)
}

#[test]
fn harness_sessions_each_pinned_harness_staged_generated_and_run_managed() {
    let Some(nm) = common::harnesses() else {
        return;
    };
    if !sandbox_ok() {
        return;
    }
    let lane = Instant::now();
    let pins = common::harness_pins();
    let m = Managed::new(&ROOMY, None);
    let staged = super::staged::lease();
    let rd = staged.dir().to_owned();

    // Stage and generate.
    let mut templates = Vec::new();
    for (rt, package, _, _) in HARNESSES {
        let (report, took) = staged.stage(rt, &nm, glove);
        assert_eq!(report["version"], pins[*package], "{rt}: {report}");
        match took {
            Some(t) => eprintln!("lane: staged {rt} in {t:.1} s"),
            None => eprintln!("lane: {rt} already staged by another test"),
        }
        for (suffix, arg) in [("version", "--version"), ("help", "--help")] {
            let id = format!("{rt}-{suffix}");
            templates.push(template(rt, &id, &rd.join("bin"), &report, arg));
        }
    }
    templates.sort_by(|a, b| {
        a["runtime_template_id"]
            .as_str()
            .cmp(&b["runtime_template_id"].as_str())
    });
    let standard = {
        let p: Value = serde_json::from_slice(&example("policy.json")).expect("policy");
        p["resource_profiles"]
            .as_array()
            .expect("profiles")
            .iter()
            .find(|p| p["profile_id"] == "standard")
            .expect("the example's standard profile")
            .clone()
    };
    let by_id: Vec<(String, Value)> = templates
        .iter()
        .map(|t| {
            (
                t["runtime_template_id"].as_str().expect("id").to_owned(),
                t.clone(),
            )
        })
        .collect();
    m.edit_policy(|p| p["runtime_templates"] = Value::Array(templates.clone()));
    let d_ = m.start();
    let caps = d_.client().capabilities().expect("caps");
    assert_eq!(caps["agent_runtime_adapter_schema_version"], 1, "{caps}");

    // One managed session per template.
    let mut ran = 0;
    for (id, t) in &by_id {
        let started_at = Instant::now();
        let rt = t["runtime_id"].as_str().expect("runtime").to_owned();
        let (_, package, _, help_word) = HARNESSES.iter().find(|h| h.0 == rt).expect("a harness");
        let session = format!("lane-{id}");
        let plan = template_plan(t, &rt, &session, &standard, |v| {
            v["runtime_template_id"] = json!(id);
        });
        let mut c = d_.client();
        c.create_session(&plan, None).expect("create");
        let started = start(&mut c, &m, &session);
        assert_eq!(started["stage"], "running", "{id}: {started}");
        let att = c
            .call("attach", json!({"session_id": session}))
            .expect("attach");
        let mut out: Vec<u8> = att["transcript"]
            .as_array()
            .expect("transcript")
            .iter()
            .flat_map(|ch| unhex(ch["data_hex"].as_str().unwrap_or("")))
            .collect();
        let ended = until_ended(&mut c, &mut out);
        let text = String::from_utf8_lossy(&out).into_owned();
        assert_eq!(ended["stage"], "exited", "{id}: {ended} {text}");
        let (body, _) = receipt_of(&mut c, &session);
        assert_eq!(
            body["termination"]["exit"]["code"], 0,
            "{id}: {body} {text}"
        );
        assert_eq!(body["adapter"]["runtime"], rt.as_str(), "{id}: {body}");
        assert_eq!(body["adapter"]["home"], "/home/agent");
        assert_eq!(body["adapter"]["cpu_rate_millicpus"], 1500, "{id}: {body}");
        let want = if id.ends_with("-version") {
            pins[*package].as_str().expect("pin").to_owned()
        } else {
            (*help_word).to_owned()
        };
        assert!(text.contains(&want), "{id} printed no {want:?}: {text}");
        eprintln!(
            "lane: {id} ran in {:.1} s ({} bytes of output, peak {} MiB)",
            started_at.elapsed().as_secs_f64(),
            out.len(),
            body["usage"]["peak_memory_bytes"].as_u64().unwrap_or(0) >> 20
        );
        ran += 1;
    }
    assert_eq!(ran, 10);
    eprintln!(
        "lane: 5/5 harnesses, 10 managed sessions, {:.1} s in all",
        lane.elapsed().as_secs_f64()
    );
}
