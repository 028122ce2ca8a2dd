// This file is over 600 lines because its two end-to-end tests share the per-harness arguments, environments and the model stub they drive, and are read best together.
//! The contained turn: each pinned harness, staged and run as a managed
//! session through a real gloved, with an egress policy whose one endpoint
//! is the scripted model endpoint (`tests/model_stub/stub.py`, on host
//! loopback) reached through a port mapping inside the sandbox, and whose
//! API key is brokered: the agent holds a placeholder, the proxy puts the
//! real key into the requests to the stub only. The harness does one
//! shell-tool turn (`echo glove-turn > turn.txt && read l < turn.txt && echo "read:$l:$PWD"` in its
//! workspace); the test checks the exit, the tool's result in the next
//! request, the real key at the stub and never in the sandbox, and the
//! egress summary in the receipt: 5/5. `.ci/run` runs this as its own lane.

use super::common;
use super::harness::*;
use super::managed::*;
use serde_json::{json, Value};
use std::io::BufRead;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The loopback port inside the sandbox that reaches the stub.
const MAPPED: u16 = 18000;
const PROMPT: &str = "Write the word glove-turn into turn.txt.";

/// One harness's turn: its one-turn arguments around the ones that point
/// it at the endpoint. Everything else (the endpoint's base URL and
/// provider settings, the key's variable and header) is its file in
/// `glove_types::harness`.
struct Harness {
    runtime: &'static str,
    /// The template's arguments, given the endpoint's.
    args: fn(Vec<String>) -> Vec<String>,
}

impl Harness {
    fn file(&self) -> &'static glove_types::harness::Harness {
        glove_types::harness::by_id(self.runtime).expect("a registered harness")
    }

    /// The template's arguments and variables (besides the stage
    /// report's) for the stub behind the mapped port.
    fn settings(&self) -> glove_types::harness::Settings {
        let url = url();
        let endpoint = glove_types::harness::Endpoint {
            base_url: &url,
            model: "glove-stub",
        };
        let mut s = (self.file().model.settings)(&endpoint);
        s.arguments = (self.args)(std::mem::take(&mut s.arguments));
        s
    }

    /// The brokered credential's variable and header.
    fn key(&self) -> (&'static str, &'static str) {
        let m = &self.file().model;
        (m.key_variable, m.key_header)
    }

    /// The header's value the stub sees for `key`.
    fn header_value(&self, key: &str) -> String {
        self.file().model.key_format.value(key)
    }
}

fn url() -> String {
    format!("http://127.0.0.1:{MAPPED}")
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// `before`, the endpoint's arguments, then `after`.
fn around(before: &[&str], endpoint: Vec<String>, after: &[&str]) -> Vec<String> {
    s(before)
        .into_iter()
        .chain(endpoint)
        .chain(s(after))
        .collect()
}

fn codex_args(endpoint: Vec<String>) -> Vec<String> {
    around(
        &["exec", "--skip-git-repo-check", "-s", "danger-full-access"],
        endpoint,
        &[PROMPT],
    )
}

fn claude_args(endpoint: Vec<String>) -> Vec<String> {
    around(&["-p", PROMPT, "--allowedTools", "Bash"], endpoint, &[])
}

fn opencode_args(endpoint: Vec<String>) -> Vec<String> {
    around(&["run", PROMPT], endpoint, &[])
}

fn copilot_args(endpoint: Vec<String>) -> Vec<String> {
    around(&["-p", PROMPT, "--allow-all-tools"], endpoint, &[])
}

fn pi_args(endpoint: Vec<String>) -> Vec<String> {
    around(&["-p", "--no-session", "--offline"], endpoint, &[PROMPT])
}

const HARNESSES: &[Harness] = &[
    Harness {
        runtime: "claude-code",
        args: claude_args,
    },
    Harness {
        runtime: "codex",
        args: codex_args,
    },
    Harness {
        runtime: "copilot",
        args: copilot_args,
    },
    Harness {
        runtime: "opencode",
        args: opencode_args,
    },
    Harness {
        runtime: "pi",
        args: pi_args,
    },
];

pub(super) fn glove(args: &[&str]) -> Value {
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

pub(super) fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|s| s.as_str().expect("string").to_owned())
        .collect()
}

/// The stub on host loopback; killed on drop.
pub(super) struct Stub {
    child: std::process::Child,
    pub(super) port: u16,
    pub(super) log: PathBuf,
}

impl Drop for Stub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(super) fn stub(dir: &Path, extra: &[&str]) -> Stub {
    let log = dir.join("requests.jsonl");
    let mut child = Command::new("/usr/bin/python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/model_stub/stub.py"))
        .args(extra)
        .args(["--port", "0", "--log"])
        .arg(&log)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut first = String::new();
    let out = child.stdout.take().expect("stdout");
    std::io::BufReader::new(out)
        .read_line(&mut first)
        .expect("the stub's port");
    let port = first.trim().parse().expect("a port");
    Stub { child, port, log }
}

pub(super) fn header<'a>(entry: &'a Value, name: &str) -> Option<&'a str> {
    entry["headers"].as_array()?.iter().find_map(|h| {
        (h[0].as_str()?.eq_ignore_ascii_case(name))
            .then(|| h[1].as_str())
            .flatten()
    })
}

fn real_key(rt: &str) -> String {
    format!("sk-glove-real-{rt}-7d1e")
}

#[test]
fn contained_turns_each_harness_reaches_the_stub_through_the_proxy_with_a_brokered_key() {
    let Some(nm) = common::harnesses() else {
        return;
    };
    if !sandbox_ok() || !common::python_ok() {
        return;
    }
    let lane = Instant::now();
    let m = Managed::new(&ROOMY, None);
    let scratch = super::staged::Scratch::new("turns");
    let d = scratch.path().to_owned();
    let keys = d.join("keys");
    std::fs::create_dir_all(&keys).expect("keys");
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let st = stub(&d, &[]);
    let endpoint = format!("model.test:{}", st.port);
    let staged = super::staged::lease();
    let rd = staged.dir().to_owned();

    let mut templates = Vec::new();
    let mut brokered = Vec::new();
    let mut sources = Vec::new();
    let mut handles = Vec::new();
    for h in HARNESSES {
        let (report, _) = staged.stage(h.runtime, &nm, glove);
        let bin = rd.join("bin").display().to_string();
        let id = format!("{}-turn", h.runtime);
        let mut args: Vec<String> = s(&[
            "policy",
            "generate",
            "--runtime",
            h.runtime,
            "--search-path",
            &bin,
            "--template-id",
            &id,
            "--alias",
            "workspace",
            "--projection-destination",
            "libraries",
        ]);
        let settings = h.settings();
        for a in settings.arguments {
            args.push("--arg".into());
            args.push(a);
        }
        for e in strings(&report["environment"])
            .into_iter()
            .chain(settings.environment)
            .chain(["TERM=xterm-256color".to_owned()])
        {
            args.push("--env".into());
            args.push(e);
        }
        for r in strings(&report["read_only_paths"]) {
            args.push("--ro".into());
            args.push(r);
        }
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        templates.push(glove(&a));
        let handle = format!("{}-key", h.runtime);
        let file = keys.join(&handle);
        std::fs::write(&file, format!("{}\n", real_key(h.runtime))).expect("key");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        // The stub speaks plain HTTP on host loopback.
        brokered.push(
            json!({"secret_handle": handle, "env": h.key().0, "header": h.key().1,
                             "endpoints": [endpoint], "scheme": "http"}),
        );
        sources.push(json!({"secret_handle": handle, "source_path": file.display().to_string()}));
        handles.push(json!(handle));
    }
    let standard = {
        let p: Value = serde_json::from_slice(&example("policy.json")).expect("policy");
        p["resource_profiles"]
            .as_array()
            .expect("profiles")
            .iter()
            .find(|p| p["profile_id"] == "standard")
            .expect("standard")
            .clone()
    };
    let by_runtime: Vec<Value> = templates.clone();
    m.edit_policy(|p| {
        p["runtime_templates"] = Value::Array(templates.clone());
        let mut ids: Vec<Value> = p["egress_policy_ids"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        ids.push(json!("model-stub"));
        ids.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
        p["egress_policy_ids"] = Value::Array(ids);
        let mut eps: Vec<Value> = p["egress_policies"].as_array().cloned().unwrap_or_default();
        eps.push(json!({
            "egress_policy_id": "model-stub",
            "endpoints": [endpoint],
            "allow_private": true,
            "hosts": {"model.test": ["127.0.0.1"]},
            "port_mappings": [{"listen_port": MAPPED, "endpoint": endpoint}],
            "brokered": brokered,
        }));
        eps.sort_by(|a, b| {
            a["egress_policy_id"]
                .as_str()
                .cmp(&b["egress_policy_id"].as_str())
        });
        p["egress_policies"] = Value::Array(eps);
        let mut hs: Vec<Value> = p["secret_handles"].as_array().cloned().unwrap_or_default();
        hs.extend(handles.clone());
        hs.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
        p["secret_handles"] = Value::Array(hs);
        let mut cs: Vec<Value> = p["credential_sources"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        cs.extend(sources.clone());
        cs.sort_by(|a, b| {
            a["secret_handle"]
                .as_str()
                .cmp(&b["secret_handle"].as_str())
        });
        p["credential_sources"] = Value::Array(cs);
    });
    let daemon = m.start();

    let mut passed = Vec::new();
    for (h, t) in HARNESSES.iter().zip(&by_runtime) {
        let started_at = Instant::now();
        let id = t["runtime_template_id"].as_str().expect("id").to_owned();
        let session = format!("turn-{}", h.runtime);
        let plan = template_plan(t, h.runtime, &session, &standard, |v| {
            // The plan names the credential it may use: brokered, not leased.
            v["secret_handles"] = json!([format!("{}-key", h.runtime)]);
            v["egress_policy_ids"] = json!(["model-stub"]);
        });
        let before = std::fs::read_to_string(&st.log)
            .unwrap_or_default()
            .lines()
            .count();
        let mut c = daemon.client();
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
        let (body, _) = receipt_of(&mut c, &session);
        let requests: Vec<Value> = std::fs::read_to_string(&st.log)
            .unwrap_or_default()
            .lines()
            .skip(before)
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        // What each request ended with (the tool's result, after the call).
        let tails: Vec<String> = requests
            .iter()
            .map(|r| {
                let b = &r["body"];
                let last = b["messages"]
                    .as_array()
                    .or_else(|| b["input"].as_array())
                    .and_then(|m| m.last())
                    .map(|m| m.to_string())
                    .unwrap_or_default();
                let last: String = last.chars().take(600).collect();
                format!("{} {} -> {}: {last}", r["method"], r["path"], r["answer"])
            })
            .collect();
        let what = format!(
            "{id}: {ended}\nreceipt {body}\noutput {text}\nrequests:\n  {}",
            tails.join("\n  ")
        );
        assert_eq!(ended["stage"], "exited", "{what}");
        assert_eq!(body["termination"]["exit"]["code"], 0, "{what}");
        let model: Vec<&Value> = requests.iter().filter(|r| r["answer"].is_array()).collect();
        let tool = model
            .iter()
            .position(|r| r["answer"][0] == "tool")
            .unwrap_or_else(|| panic!("no tool call answered\n{what}"));
        // The tool ran in the workspace: its result is in the next request.
        assert!(
            model[tool + 1..]
                .iter()
                .any(|r| r["body"].to_string().contains("read:glove-turn:/workspace")),
            "the tool's result never came back\n{what}"
        );
        let name = h.key().1;
        let key = real_key(h.runtime);
        assert!(
            model
                .iter()
                .all(|r| header(r, name) == Some(h.header_value(&key).as_str())),
            "a model request without the real key in {name}\n{what}"
        );
        assert!(
            !requests
                .iter()
                .any(|r| r.to_string().contains("glove-placeholder")),
            "a placeholder reached the stub\n{what}"
        );
        assert!(
            !text.contains(&key),
            "the real key is in the session's output\n{what}"
        );
        let e = &body["egress"];
        assert_eq!(e["policy_id"], "model-stub", "{what}");
        assert!(e["requests_allowed"].as_u64().unwrap_or(0) >= 2, "{what}");
        // The session's egress journal: the receipt names its head, and its
        // events show the brokered requests (by handle, never the value).
        let journal = m
            .home
            .dir
            .path()
            .join("mat/egress")
            .join(format!("{session}.journal"));
        let spec = glove_egress::ProxyLimits::default().journal_spec();
        let opened = glove_journal::Journal::open(&journal, &spec, None).expect("the journal");
        let head: String = opened
            .into_parts()
            .0
            .anchor()
            .head
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(e["journal_head"], head.as_str(), "{what}");
        let events = glove_egress::read_events(&journal, &spec).expect("events");
        assert_eq!(
            e["journal_records"].as_u64(),
            Some(events.len() as u64),
            "{what}"
        );
        let handle = format!("{}-key", h.runtime);
        assert!(
            events
                .iter()
                .any(|ev| ev.credential.as_ref().map(|c| c.as_str()) == Some(handle.as_str())),
            "no event names the brokered {handle}: {events:?}"
        );
        let raw = std::fs::read(&journal).expect("journal bytes");
        assert!(
            !raw.windows(key.len()).any(|w| w == key.as_bytes()),
            "the real key is in the journal"
        );
        eprintln!(
            "contained turn: {} exit 0 in {:.1} s ({} model requests, egress {} allowed / {} refused)",
            h.runtime,
            started_at.elapsed().as_secs_f64(),
            model.len(),
            e["requests_allowed"],
            e["requests_refused"].as_u64().unwrap_or(0) + e["connections_refused"].as_u64().unwrap_or(0),
        );
        passed.push(h.runtime);
    }
    // The same claude-code template with a plan that names no credential:
    // no placeholder, no key; the stub never sees the real one.
    {
        let (h, t) = (&HARNESSES[0], &by_runtime[0]);
        let session = "turn-unnamed".to_owned();
        let plan = template_plan(t, h.runtime, &session, &standard, |v| {
            v["egress_policy_ids"] = json!(["model-stub"]);
        });
        let before = std::fs::read_to_string(&st.log)
            .unwrap_or_default()
            .lines()
            .count();
        let mut c = daemon.client();
        c.create_session(&plan, None).expect("create");
        let started = start(&mut c, &m, &session);
        assert_eq!(started["stage"], "running", "{started}");
        let _ = c
            .call("attach", json!({"session_id": session}))
            .expect("attach");
        let mut out = Vec::new();
        let ended = until_ended(&mut c, &mut out);
        assert_eq!(ended["stage"], "exited", "{ended}");
        let key = real_key(h.runtime);
        let log = std::fs::read_to_string(&st.log).unwrap_or_default();
        assert!(
            !log.lines().skip(before).any(|l| l.contains(&key)),
            "an unnamed credential was brokered"
        );
    }
    // Issue 26, finding 3: each template's brokered key, named without the
    // egress policy that brokers it (no egress policy, or another one),
    // would fall through to a lease: a copy of the key in the private home.
    // gloved refuses the plan at create, before anything is staged.
    for (h, t) in HARNESSES.iter().zip(&by_runtime) {
        for egress in [json!([]), json!(["no-network"])] {
            let session = format!("lease-{}", h.runtime);
            let plan = template_plan(t, h.runtime, &session, &standard, |v| {
                v["secret_handles"] = json!([format!("{}-key", h.runtime)]);
                v["egress_policy_ids"] = egress.clone();
            });
            let mut c = daemon.client();
            let e = c
                .create_session(&plan, None)
                .expect_err("a brokered key named without its egress policy");
            assert_eq!(
                e.code(),
                "plan_secret_handle_brokered",
                "{}: {e}",
                h.runtime
            );
        }
    }
    eprintln!(
        "contained turns: {}/{} in {:.1} s",
        passed.len(),
        HARNESSES.len(),
        lane.elapsed().as_secs_f64()
    );
}

/// Codex in a managed session whose plan names a tool policy: the
/// configuration gloved seeds makes codex run the relay as its MCP server,
/// the stub (`--mcp-tool echo`) calls the mediated `echo`, and the
/// receipt's `mcp` member commits the audited call.
#[test]
fn a_contained_codex_turn_calls_a_mediated_tool_and_the_receipt_commits_it() {
    let Some(nm) = common::harnesses() else {
        return;
    };
    if !sandbox_ok() || !common::python_ok() {
        return;
    }
    let Some(servers) = std::env::var_os("GLOVE_MCP_SERVERS").map(PathBuf::from) else {
        assert!(
            !required(),
            "GLOVE_REQUIRE_SANDBOX=1 but GLOVE_MCP_SERVERS is not set"
        );
        eprintln!("skipping: GLOVE_MCP_SERVERS is not set");
        return;
    };
    let m = Managed::new(&ROOMY, None);
    let scratch = super::staged::Scratch::new("mcp-turn");
    let d = scratch.path().to_owned();
    let st = stub(&d, &["--mcp-tool", "echo"]);
    let endpoint = format!("model.test:{}", st.port);
    let staged = super::staged::lease();
    let rd = staged.dir().to_owned();
    let (report, _) = staged.stage("codex", &nm, glove);
    let bin = rd.join("bin").display().to_string();
    let mut args: Vec<String> = s(&[
        "policy",
        "generate",
        "--runtime",
        "codex",
        "--search-path",
        &bin,
        "--template-id",
        "codex-mcp",
        "--alias",
        "workspace",
        "--projection-destination",
        "libraries",
    ]);
    let codex = &HARNESSES[1];
    assert_eq!(codex.runtime, "codex");
    let settings = codex.settings();
    for a in settings.arguments {
        args.extend(["--arg".into(), a]);
    }
    for e in strings(&report["environment"])
        .into_iter()
        .chain(settings.environment)
        .chain([
            format!("{}=sk-stub", codex.key().0),
            "TERM=xterm-256color".to_owned(),
        ])
    {
        args.extend(["--env".into(), e]);
    }
    for r in strings(&report["read_only_paths"]) {
        args.extend(["--ro".into(), r]);
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let template = glove(&a);
    let profile = m.home.dir.path().join("mcp-profile.json");
    write_mode(
        &profile,
        json!({"schema_version": 1, "servers": [{
            "server_id": "everything",
            "command": {"path": "/usr/bin/node",
                        "arguments": [servers.join("@modelcontextprotocol/server-everything/dist/index.js"), "stdio"],
                        "environment": ["PATH=/usr/bin:/bin"], "working_directory": "/"},
            "tools": [{"name": "echo"}],
        }]})
        .to_string()
        .as_bytes(),
        0o600,
    );
    let standard = {
        let p: Value = serde_json::from_slice(&example("policy.json")).expect("policy");
        p["resource_profiles"]
            .as_array()
            .expect("profiles")
            .iter()
            .find(|p| p["profile_id"] == "standard")
            .expect("standard")
            .clone()
    };
    m.edit_policy(|p| {
        p["runtime_templates"] = json!([template.clone()]);
        p["egress_policy_ids"] = json!(["model-stub", "no-network"]);
        p["egress_policies"] = json!([{
            "egress_policy_id": "model-stub",
            "endpoints": [endpoint],
            "allow_private": true,
            "hosts": {"model.test": ["127.0.0.1"]},
            "port_mappings": [{"listen_port": MAPPED, "endpoint": endpoint}],
        }]);
        p["tool_policy_ids"] = json!(["mcp-everything"]);
        p["tool_policies"] = json!([{"tool_policy_id": "mcp-everything",
                                     "profile_path": profile.display().to_string()}]);
    });
    let daemon = m.start();
    let session = "turn-codex-mcp";
    let plan = template_plan(&template, "codex", session, &standard, |v| {
        v["runtime_template_id"] = json!("codex-mcp");
        v["egress_policy_ids"] = json!(["model-stub"]);
        v["tool_policy_ids"] = json!(["mcp-everything"]);
    });
    let mut c = daemon.client();
    c.create_session(&plan, None).expect("create");
    let started = start(&mut c, &m, session);
    assert_eq!(started["stage"], "running", "{started}");
    c.call("attach", json!({"session_id": session}))
        .expect("attach");
    let mut out = Vec::new();
    let ended = until_ended(&mut c, &mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let (body, _) = receipt_of(&mut c, session);
    let log = std::fs::read_to_string(&st.log).unwrap_or_default();
    let what = format!("{ended}\nreceipt {body}\noutput {text}");
    assert_eq!(ended["stage"], "exited", "{what}");
    assert_eq!(body["termination"]["exit"]["code"], 0, "{what}");
    assert!(
        log.lines()
            .any(|l| l.contains("function_call_output") && l.contains("Echo: glove-mcp-turn")),
        "the mediated tool's result did not reach the model\n{what}\n{log}"
    );
    let mcp = &body["mcp"];
    assert_eq!(mcp["tool_policy_id"], "mcp-everything", "{what}");
    assert_eq!(mcp["audit_failed"], false, "{what}");
    let journal = m
        .home
        .dir
        .path()
        .join("mat/mcp")
        .join(format!("{session}.journal"));
    let out = Command::new(env!("CARGO_BIN_EXE_glove"))
        .args(["audit", "show", "--json", "--journal"])
        .arg(&journal)
        .args(["--head", mcp["journal_head"].as_str().expect("head")])
        .output()
        .expect("glove audit");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(
        shown["events"]
            .as_array()
            .expect("events")
            .iter()
            .any(|e| e["method"] == "tools/call"
                && e["tool"] == "echo"
                && e["decision"] == "allowed"),
        "{shown}"
    );
    eprintln!("contained turn: codex called the mediated echo through gloved");
}
