//! `refinement-eval-v1` end to end: a real gloved with a library bundle
//! store runs matched pairs of sessions whose "harness" is a scripted
//! `/bin/sh -c` program; Glove's evaluator decides each outcome, and the
//! refinement receipts verify offline. Skipped (with a reason) where the
//! sandbox cannot run, failed then under `GLOVE_REQUIRE_SANDBOX=1`.

use super::harness::*;
use super::managed::{sandbox_ok, start, until_ended, Managed, ROOMY};
use glove_bin::control::client::Client;
use glove_types::plan::DecodedPlan;
use glove_types::refinement::{matched_context_digest, refinement_plan_context_digest, Fixture};
use glove_types::Sha256Digest;
use serde_json::{json, Value};
use std::path::PathBuf;

fn canon(v: &Value) -> Vec<u8> {
    glove_types::canon::to_canonical(v).expect("canonical")
}

fn adapter_digest(launch: &Value) -> String {
    let mut obj = launch.clone();
    obj["runtime_id"] = json!("codex");
    Sha256Digest::of_domain("glove.adapter-command.v1", &canon(&obj)).to_hex()
}

/// The launch of a scripted harness: `/bin/sh -c SCRIPT`.
fn scripted(script: &str) -> Value {
    json!({
        "executable_path": "/bin/sh",
        "arguments": ["-c", script],
        "environment": ["PATH=/usr/bin:/bin", "TERM=xterm-256color"],
        "read_only_paths": [],
    })
}

/// The scenarios: one evaluation template each.
const SCRIPTS: &[(&str, &str)] = &[
    // Prints the skill it was given; the candidate also prints a
    // forbidden word in two writes half a second apart (two PTY chunks).
    (
        "eval-pair",
        "cat $HOME/.codex/skills/*/SKILL.md; ls /opt/sage/library-bundles; \
         if [ -e /opt/sage/fixtures ]; then echo fixture-visible; fi; \
         if grep -q candidate $HOME/.codex/skills/*/SKILL.md; then printf 'FORB'; sleep 0.5; printf 'IDDEN\\n'; fi; \
         echo all-done; exit 0",
    ),
    ("eval-silent", "echo nothing-to-see; exit 0"),
    ("eval-exit3", "echo all-done; exit 3"),
    ("eval-slow", "sleep 1; echo all-done; exit 0"),
    ("eval-hang", "echo all-done; sleep 60"),
    ("eval-binary", "printf 'all-done \\377\\n'; exit 0"),
];

fn skill_bundle(name: &str, description: &str) -> Vec<u8> {
    canon(&json!({
        "entries": [{"files": [{"path": "SKILL.md", "text": format!("---\nname: {name}\ndescription: {description}\n---\n\nSay all-done.\n")}], "kind": "skill", "name": name}],
        "format": "glove.library-bundle.v1",
    }))
}

struct Eval {
    m: Managed,
    root: PathBuf,
    base: (Vec<u8>, Sha256Digest),
    candidate: (Vec<u8>, Sha256Digest),
}

impl Eval {
    fn new() -> Eval {
        let mut m = Managed::new(&ROOMY, None);
        let root = m.bundle_root();
        m.edit_policy(|p| {
            let mut templates = Vec::new();
            for (id, script) in SCRIPTS {
                let launch = scripted(script);
                templates.push(json!({
                    "runtime_template_id": id,
                    "runtime_id": "codex",
                    "adapter_command_digest": adapter_digest(&launch),
                    "sandbox_backend": "linux_production",
                    "allowed_path_aliases": [],
                    "allowed_projection_destinations": ["fixtures", "libraries"],
                    "evaluation": "refinement-eval-v1",
                    "launch": launch,
                }));
            }
            p["runtime_templates"]
                .as_array_mut()
                .expect("templates")
                .extend(templates);
            p["library_projection_destinations"]
                .as_array_mut()
                .expect("destinations")
                .push(json!({"alias": "fixtures", "target_path": "/opt/sage/fixtures"}));
            // A short profile for the wall-time stop (the plan lifetime
            // keeps its second of headroom).
            let mut short = p["resource_profiles"][0].clone();
            short["profile_id"] = json!("short");
            short["wall_time_ms"] = json!(2_000);
            p["resource_profiles"]
                .as_array_mut()
                .expect("profiles")
                .push(short);
            // Policy arrays are sorted by their ids.
            let sort = |v: &mut Value, key: &str| {
                v.as_array_mut()
                    .expect("array")
                    .sort_by_key(|x| x[key].as_str().unwrap_or("").to_owned());
            };
            sort(&mut p["runtime_templates"], "runtime_template_id");
            sort(&mut p["library_projection_destinations"], "alias");
            sort(&mut p["resource_profiles"], "profile_id");
        });
        let base = skill_bundle("helper", "the base skill");
        let candidate = skill_bundle("helper", "the candidate skill");
        let (bs, cs) = (Sha256Digest::of(&base), Sha256Digest::of(&candidate));
        write_mode(&root.join(bs.to_hex()), &base, 0o600);
        write_mode(&root.join(cs.to_hex()), &candidate, 0o600);
        Eval {
            m,
            root,
            base: (base, bs),
            candidate: (candidate, cs),
        }
    }

    fn profile(&self, id: &str) -> Value {
        let policy: Value = serde_json::from_slice(
            &std::fs::read(self.m.home.dir.path().join("managed-policy.json")).expect("policy"),
        )
        .expect("json");
        policy["resource_profiles"]
            .as_array()
            .expect("profiles")
            .iter()
            .find(|p| p["profile_id"] == id)
            .expect("profile")
            .clone()
    }
}

fn commitment(id: &str, sha: &Sha256Digest, dest: &str) -> Value {
    json!({"destination_alias": dest, "projection_id": id, "sha256": sha.to_hex()})
}

/// One side of a pair: its plan and its fixture (written to the store).
struct Side {
    plan: String,
    matched: String,
}

#[derive(Clone)]
struct Expect {
    termination: &'static str,
    exit_code: i64,
    max_wall_latency_ms: Option<u64>,
    required: Vec<&'static str>,
    forbidden: Vec<&'static str>,
}

fn expect_ok() -> Expect {
    Expect {
        termination: "exited",
        exit_code: 0,
        max_wall_latency_ms: None,
        required: vec!["all-done"],
        // The pair's script prints `fixture-visible` if the fixture's
        // destination exists inside the sandbox.
        forbidden: vec!["FORBIDDEN", "fixture-visible"],
    }
}

fn fixture_json(session: &str, variant: &str, e: &Eval, selected: &Value, x: &Expect) -> Value {
    let mut expect = json!({
        "termination": x.termination,
        "exit_code": x.exit_code,
        "required_literals": x.required,
        "forbidden_literals": x.forbidden,
    });
    if let Some(ms) = x.max_wall_latency_ms {
        expect["max_wall_latency_ms"] = json!(ms);
    }
    json!({
        "schema": "glove.refinement-eval-fixture-v1",
        "evaluation_run_id": "run-1",
        "matched_pair_id": "pair-1",
        "session_id": session,
        "variant": variant,
        "proposal_digest": Sha256Digest::of(b"proposal").to_hex(),
        "base_projection_digest": e.base.1.to_hex(),
        "candidate_projection_digest": e.candidate.1.to_hex(),
        "fixture_digest": Sha256Digest::of(b"fixture").to_hex(),
        "dataset_digest": Sha256Digest::of(b"dataset").to_hex(),
        "fixture_id": "fixture-1",
        "dataset_ref": "datasets/smoke@1",
        "seed": 7,
        "model_identity": "scripted",
        "harness": "sh",
        "selected_projection": selected,
        "expect": expect,
    })
}

/// Writes the fixture of `session` and returns its plan: `variant` of the
/// pair on `template` with `profile`.
fn side(
    e: &Eval,
    session: &str,
    variant: &str,
    template: &str,
    profile: &str,
    x: &Expect,
    tamper: impl FnOnce(&mut Value),
) -> Side {
    let base = commitment("skill-base", &e.base.1, "libraries");
    let candidate = commitment("skill-candidate", &e.candidate.1, "libraries");
    let selected = if variant == "base" { &base } else { &candidate };
    let mut fixture = fixture_json(session, variant, e, selected, x);
    tamper(&mut fixture);
    let fixture_bytes = canon(&fixture);
    let fixture_sha = Sha256Digest::of(&fixture_bytes);
    write_mode(&e.root.join(fixture_sha.to_hex()), &fixture_bytes, 0o600);
    let fixture_ref = commitment("fixture", &fixture_sha, "fixtures");
    let launch = scripted(
        SCRIPTS
            .iter()
            .find(|(id, _)| *id == template)
            .expect("template")
            .1,
    );
    let prof = e.profile(profile);
    let mut projections = vec![fixture_ref.clone(), selected.clone()];
    projections.sort_by_key(|p| p["projection_id"].as_str().unwrap_or("").to_owned());
    let zero = "0".repeat(64);
    let mut v: Value = serde_json::from_str(&e.m.plan(&ROOMY, session)).expect("plan");
    v["runtime_template_id"] = json!(template);
    v["adapter_command_digest"] = json!(adapter_digest(&launch));
    v["resource_profile"] = json!({
        "profile_id": profile,
        "cpu_time_ms": prof["cpu_time_ms"], "memory_bytes": prof["memory_bytes"],
        "pids": prof["pids"], "wall_time_ms": prof["wall_time_ms"],
        "disk_bytes": prof["disk_bytes"], "terminal_output_bytes": prof["terminal_output_bytes"],
    });
    v["path_grants"] = json!([]);
    v["library_projections"] = json!(projections);
    v["refinement"] = json!({
        "base": base, "candidate": candidate, "fixture": fixture_ref,
        "matched_context_digest": zero, "variant": variant,
    });
    // The matched context: the plan's context (which leaves the binding's
    // own digest out) with the fixture's.
    let draft = DecodedPlan::decode(&canon(&v)).expect("draft plan decodes");
    let plan_ctx = refinement_plan_context_digest(&draft).expect("plan context");
    let fixture_ctx = match Fixture::decode(&fixture_bytes) {
        Ok(f) => f.context_digest(),
        Err(_) => Sha256Digest::of(b"undecodable"),
    };
    let matched = matched_context_digest(&plan_ctx, &fixture_ctx).to_hex();
    v["refinement"]["matched_context_digest"] = json!(matched);
    Side {
        plan: String::from_utf8(canon(&v)).expect("utf-8"),
        matched,
    }
}

/// Creates and starts `session`; the client that did.
fn started(e: &Eval, d: &Daemon, session: &str, plan: &str) -> Client {
    let mut c = d.client();
    c.create_session(plan, None).expect("create");
    start(&mut c, &e.m, session);
    c
}

/// Creates, starts and waits for `session`; its receipt body.
fn run(e: &Eval, d: &Daemon, session: &str, plan: &str) -> Value {
    let mut c = started(e, d, session, plan);
    c.call("attach", json!({"session_id": session}))
        .expect("attach");
    let mut out = Vec::new();
    let ended = until_ended(&mut c, &mut out);
    assert_ne!(ended["stage"], "unrecorded", "{session}: {ended}");
    refinement_receipt(&mut c, session)
}

/// The one receipt naming `session`, which must be a refinement receipt.
fn refinement_receipt(c: &mut Client, session: &str) -> Value {
    let page = c.receipts_page(0, None).expect("page");
    let mut found = Vec::new();
    for r in page["receipts"].as_array().expect("receipts") {
        let env: Value =
            serde_json::from_str(r["envelope"].as_str().expect("envelope")).expect("json");
        if env["body"]["session_id"] == session {
            assert_eq!(r["kind"], "refinement_v1", "{env}");
            let bytes = canon(&env["body"]);
            glove_types::receipt::RefinementReceiptV1::decode(&bytes).expect("typed receipt");
            found.push(env["body"].clone());
        }
    }
    assert_eq!(
        found.len(),
        1,
        "exactly one receipt for {session}: {found:?}"
    );
    found.remove(0)
}

fn failed(body: &Value) -> Vec<String> {
    body["outcome"]["failed_assertions"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn verify_offline(e: &Eval) -> Value {
    let zero = format!("0:{}", "0".repeat(64));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_glove"))
        .args(["receipts", "verify", "--json", "--file"])
        .arg(e.m.home.state.join("receipts.journal"))
        .arg("--key-file")
        .arg(&e.m.home.key)
        .args(["--anchor", zero.as_str()])
        .output()
        .expect("run glove");
    let v: Value = serde_json::from_slice(&out.stdout).expect("verify json");
    assert_eq!(v["valid"], true, "{v}");
    v
}

#[test]
fn a_matched_pair_is_judged_by_glove_and_both_receipts_verify_offline() {
    if !sandbox_ok() {
        return;
    }
    let e = Eval::new();
    let d = e.m.start();
    let caps = d.client().call("capabilities", json!({})).expect("caps");
    assert_eq!(
        caps["refinement_evaluation_protocol_schema_version"], 1,
        "{caps}"
    );
    let b = side(
        &e,
        "pair-base",
        "base",
        "eval-pair",
        "small",
        &expect_ok(),
        |_| {},
    );
    let c = side(
        &e,
        "pair-cand",
        "candidate",
        "eval-pair",
        "small",
        &expect_ok(),
        |_| {},
    );
    assert_eq!(b.matched, c.matched, "a matched pair shares its context");
    let base = run(&e, &d, "pair-base", &b.plan);
    assert_eq!(base["outcome"]["passed"], true, "{base}");
    assert_eq!(base["evaluator"]["evidence"], "valid");
    assert_eq!(base["variant"], "base");
    let cand = run(&e, &d, "pair-cand", &c.plan);
    assert_eq!(cand["outcome"]["passed"], false, "{cand}");
    assert_eq!(failed(&cand), ["forbidden_literal:0"], "{cand}");
    assert_eq!(
        base["matched_context_digest"],
        cand["matched_context_digest"]
    );
    assert_ne!(base["raw_pty_sha256"], cand["raw_pty_sha256"]);
    // The fixture was the supervisor's: never mounted; the skill was.
    assert_eq!(base["fixture"]["projection_id"], "fixture");
    let mounted: Vec<&str> = base["resource"]["projections"]
        .as_array()
        .expect("projections")
        .iter()
        .filter_map(|p| p["projection_id"].as_str())
        .collect();
    assert_eq!(mounted, ["skill-base"], "{base}");
    let (status, log) = d.stop();
    assert!(status.success(), "gloved stopped badly: {log}");
    let v = verify_offline(&e);
    let kinds = v.to_string();
    assert!(kinds.contains("refinement_v1"), "{v}");
}

#[test]
fn each_failed_assertion_is_named_and_a_resource_stop_overrides() {
    if !sandbox_ok() {
        return;
    }
    let e = Eval::new();
    let d = e.m.start();
    let missing = Expect {
        required: vec!["all-done", "never-printed"],
        ..expect_ok()
    };
    let slow = Expect {
        max_wall_latency_ms: Some(100),
        ..expect_ok()
    };
    // Everything the hanging script is expected to do holds — it printed
    // the literal and was killed — but the wall-time limit stopped it.
    let killed = Expect {
        termination: "signaled",
        exit_code: 9,
        ..expect_ok()
    };
    let cases: [(&str, &str, &str, Expect, &[&str]); 5] = [
        (
            "miss",
            "eval-silent",
            "small",
            missing,
            &["required_literal:0", "required_literal:1"],
        ),
        ("exit", "eval-exit3", "small", expect_ok(), &["exit_code"]),
        ("slow", "eval-slow", "small", slow, &["wall_latency"]),
        ("hang", "eval-hang", "short", killed, &["resource_stop"]),
        ("bin", "eval-binary", "small", expect_ok(), &["utf8"]),
    ];
    for (session, template, profile, x, want) in cases {
        let s = side(&e, session, "base", template, profile, &x, |_| {});
        let body = run(&e, &d, session, &s.plan);
        assert_eq!(body["outcome"]["passed"], false, "{session}: {body}");
        assert_eq!(failed(&body), want, "{session}: {body}");
        let evidence = if session == "bin" { "invalid" } else { "valid" };
        assert_eq!(body["evaluator"]["evidence"], evidence, "{session}: {body}");
        assert_eq!(body["evaluator"]["complete"], true, "{session}: {body}");
    }
    let (status, log) = d.stop();
    assert!(status.success(), "gloved stopped badly: {log}");
    verify_offline(&e);
}

/// Creates `session` and asks for its start, which must be refused with
/// `code`; the session stays created.
fn refused(e: &Eval, d: &Daemon, session: &str, plan: &str, code: &str) {
    let mut c = d.client();
    c.create_session(plan, None).expect("create");
    let auth = e.m.authorize(session, NOW_MS);
    let err = c
        .call(
            "start_session",
            json!({"session_id": session, "authorization": auth}),
        )
        .expect_err("refused");
    let text = format!("{err:?}");
    assert!(text.contains(code), "{session}: want {code}, got {text}");
    assert_eq!(
        c.session_status(session).expect("status")["stage"],
        "created",
        "{session}"
    );
}

/// A change made to a fixture.
type Tamper = fn(&mut Value);

#[test]
fn a_fixture_that_does_not_match_its_plan_is_refused_before_launch() {
    if !sandbox_ok() {
        return;
    }
    let e = Eval::new();
    let d = e.m.start();
    let ok = expect_ok();
    let cases: [(&str, Tamper, &str); 4] = [
        (
            "other-session",
            |f| f["session_id"] = json!("someone-else"),
            "refinement_fixture_mismatch",
        ),
        (
            "other-variant",
            |f| f["variant"] = json!("candidate"),
            "refinement_fixture_mismatch",
        ),
        (
            "other-context",
            |f| f["seed"] = json!(8),
            "refinement_matched_context_mismatch",
        ),
        (
            "unknown-field",
            |f| f["verdict"] = json!("passed"),
            "json_unknown_field",
        ),
    ];
    for (session, tamper, code) in cases {
        // The matched context is computed before the tamper for the seed
        // case: that is the mismatch.
        let s = if session == "other-context" {
            let s = side(&e, session, "base", "eval-pair", "small", &ok, |_| {});
            let mut f = fixture_json(
                session,
                "base",
                &e,
                &commitment("skill-base", &e.base.1, "libraries"),
                &ok,
            );
            tamper(&mut f);
            // Same projection id, another fixture file: a new plan.
            let bytes = canon(&f);
            let sha = Sha256Digest::of(&bytes);
            write_mode(&e.root.join(sha.to_hex()), &bytes, 0o600);
            let mut v: Value = serde_json::from_str(&s.plan).expect("plan");
            v["refinement"]["fixture"]["sha256"] = json!(sha.to_hex());
            for p in v["library_projections"]
                .as_array_mut()
                .expect("projections")
            {
                if p["projection_id"] == "fixture" {
                    p["sha256"] = json!(sha.to_hex());
                }
            }
            Side {
                plan: String::from_utf8(canon(&v)).expect("utf-8"),
                matched: s.matched,
            }
        } else {
            side(&e, session, "base", "eval-pair", "small", &ok, tamper)
        };
        refused(&e, &d, session, &s.plan, code);
    }
    // A plan for an evaluation template without its binding is refused at
    // creation.
    let s = side(&e, "unbound", "base", "eval-pair", "small", &ok, |_| {});
    let mut v: Value = serde_json::from_str(&s.plan).expect("plan");
    v.as_object_mut().expect("object").remove("refinement");
    let err = d
        .client()
        .create_session(&String::from_utf8(canon(&v)).expect("utf-8"), None)
        .expect_err("refused");
    assert!(
        format!("{err:?}").contains("refinement_binding_missing"),
        "{err:?}"
    );
}

#[test]
fn sigkilled_gloved_during_an_evaluation_reconciles_one_refinement_receipt() {
    if !sandbox_ok() {
        return;
    }
    let e = Eval::new();
    let mut d = e.m.start();
    let s = side(
        &e,
        "crash",
        "base",
        "eval-hang",
        "small",
        &expect_ok(),
        |_| {},
    );
    let c = started(&e, &d, "crash", &s.plan);
    d.child.kill().expect("SIGKILL gloved");
    d.child.wait().expect("wait");
    drop(c);
    let d = e.m.start();
    let mut c = d.client();
    assert_eq!(
        c.session_status("crash").expect("status")["stage"],
        "failed"
    );
    let body = refinement_receipt(&mut c, "crash");
    assert_eq!(body["outcome"], Value::Null, "{body}");
    assert_eq!(body["evaluator"]["complete"], false);
    assert_eq!(body["resource"]["recovered"], true, "{body}");
    let (status, log) = d.stop();
    assert!(status.success(), "{log}");
    // A second restart reconciles nothing more: still one receipt.
    let d = e.m.start();
    refinement_receipt(&mut d.client(), "crash");
    let (status, log) = d.stop();
    assert!(status.success(), "{log}");
    verify_offline(&e);
}

#[test]
fn an_evaluation_takes_no_input_and_a_stop_fails_it() {
    if !sandbox_ok() {
        return;
    }
    let e = Eval::new();
    let d = e.m.start();
    let s = side(
        &e,
        "stopped",
        "base",
        "eval-hang",
        "small",
        &expect_ok(),
        |_| {},
    );
    let mut c = started(&e, &d, "stopped", &s.plan);
    c.call("attach", json!({"session_id": "stopped"}))
        .expect("attach");
    // Typed text would be echoed into the judged stream; a signal would
    // choose the termination; a resize would change line wrapping.
    for (method, params) in [
        (
            "write_stdin",
            json!({"session_id": "stopped", "data": "all-done\n"}),
        ),
        ("signal", json!({"session_id": "stopped", "signal": "TERM"})),
        (
            "resize",
            json!({"session_id": "stopped", "rows": 10, "cols": 20}),
        ),
    ] {
        let err = c.call(method, params).expect_err("refused");
        assert!(
            format!("{err:?}").contains("refinement_session_not_interactive"),
            "{method}: {err:?}"
        );
    }
    let mut out = Vec::new();
    c.call(
        "stop_session",
        json!({"session_id": "stopped", "grace_ms": 500}),
    )
    .expect("stop");
    until_ended(&mut c, &mut out);
    let body = refinement_receipt(&mut c, "stopped");
    // Printed and exited after TERM, perhaps: a stop fails the run anyway.
    assert_eq!(body["outcome"]["passed"], false, "{body}");
    assert!(
        failed(&body).contains(&"resource_stop".to_owned()),
        "{body}"
    );
    let (status, log) = d.stop();
    assert!(status.success(), "{log}");
}
