//! A real turn of each of the five pinned harnesses against the scripted
//! model endpoint `tests/model_stub/stub.py`: the harness sends its first
//! request, the stub answers with a call of the harness's own shell tool
//! running `echo glove-turn > turn.txt`, the harness runs it and sends the
//! result, the stub answers `done`, and the harness exits 0. The test checks
//! the exit, the file, and that the harness's API key reached the stub in
//! the header its wire format uses.
//!
//! The harnesses run **on the host, uncontained** for now: no `glove exec`,
//! no sandbox, their own user. (The contained version comes with the audited
//! egress proxy, which will stand between the sandbox and this stub.) Each
//! gets a throwaway HOME and working directory in a temp dir and a cleared
//! environment: PATH=/usr/bin:/bin, HOME, its own variables, and proxy
//! variables naming the stub, so side traffic (telemetry, update checks)
//! arrives there as a recorded, refused CONNECT. What keeps that traffic off
//! the network for sure is the stub's `--isolate`: stub and harness share a
//! fresh network namespace holding only loopback, so nothing but 127.0.0.1
//! is reachable — not even the configured DNS resolver. The namespace is all
//! the isolation there is; files and processes are the host's.
//!
//! `.ci/run` installs the harnesses and sets `GLOVE_HARNESSES` to their
//! `node_modules`. Without it (or without python3, or when no network
//! namespace can be made) the test says why and skips, and fails under
//! `GLOVE_REQUIRE_SANDBOX=1`.

#[path = "common/mod.rs"]
mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Inside the stub's own network namespace every port is free.
const PORT: u16 = 48765;
/// Seconds a harness gets for its turn before the stub kills it.
const TIMEOUT: u64 = 180;

/// Where one harness's turn happens.
struct Dirs {
    home: PathBuf,
    work: PathBuf,
}

/// One harness: how to run a turn of it. How it is pointed at the stub
/// (base URL, provider settings, the key's variable and header) and where
/// it keeps its state are its file in `glove_types::harness`.
struct Turn {
    name: &'static str,
    /// Relative to `node_modules`.
    executable: &'static str,
    interpreter: Option<&'static str>,
    /// Arguments after the executable, given the endpoint's.
    args: fn(Vec<String>) -> Vec<String>,
}

fn base_url() -> String {
    format!("http://127.0.0.1:{PORT}")
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// `before`, the endpoint's arguments, then `after`.
fn around(before: &[&str], endpoint: Vec<String>, after: &[&str]) -> Vec<String> {
    strings(before)
        .into_iter()
        .chain(endpoint)
        .chain(strings(after))
        .collect()
}

const PROMPT: &str = "Write the word glove-turn into turn.txt.";

fn codex_args(endpoint: Vec<String>) -> Vec<String> {
    around(
        &["exec", "--skip-git-repo-check", "-s", "danger-full-access"],
        endpoint,
        &[PROMPT],
    )
}

fn claude_args(endpoint: Vec<String>) -> Vec<String> {
    // `--allowedTools` takes several values, so the prompt comes first.
    // (`--dangerously-skip-permissions` is refused as root; allowing Bash
    // is all the turn needs.)
    around(&["-p", PROMPT, "--allowedTools", "Bash"], endpoint, &[])
}

fn opencode_args(endpoint: Vec<String>) -> Vec<String> {
    around(&["run", PROMPT], endpoint, &[])
}

fn pi_args(endpoint: Vec<String>) -> Vec<String> {
    around(&["-p", "--no-session", "--offline"], endpoint, &[PROMPT])
}

fn copilot_args(endpoint: Vec<String>) -> Vec<String> {
    around(&["-p", PROMPT, "--allow-all-tools"], endpoint, &[])
}

/// The harness's variables (besides PATH and HOME): its endpoint
/// settings, the key in its variable, its managed state directories in
/// the throwaway home (made first), and a package cache there.
fn turn_env(t: &Turn, d: &Dirs, key: &str) -> (Vec<String>, Vec<(String, String)>) {
    let h = glove_types::harness::by_id(t.name).expect("a registered harness");
    let url = base_url();
    let settings = (h.model.settings)(&glove_types::harness::Endpoint {
        base_url: &url,
        model: "glove-stub",
    });
    let pair = |e: &str| {
        let (n, v) = e.split_once('=').expect("NAME=value");
        (n.to_owned(), v.to_owned())
    };
    let home = d.home.display().to_string();
    let in_home = |p: &str| p.replacen(glove_types::harness::AGENT_HOME, &home, 1);
    for dir in h.home.directories {
        std::fs::create_dir_all(in_home(dir)).expect("home directory");
    }
    let mut env: Vec<(String, String)> = settings.environment.iter().map(|e| pair(e)).collect();
    env.push((h.model.key_variable.to_owned(), key.to_owned()));
    env.extend(h.home.managed_environment.iter().map(|e| {
        let (n, v) = pair(e);
        (n, in_home(&v))
    }));
    if let Some(c) = &h.staging.package_cache {
        env.push((
            c.variable.to_owned(),
            d.home.join(".pkg-cache").display().to_string(),
        ));
    }
    (settings.arguments, env)
}

const CODEX: Turn = Turn {
    name: "codex",
    executable: "@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex",
    interpreter: None,
    args: codex_args,
};
const CLAUDE: Turn = Turn {
    name: "claude-code",
    executable: "@anthropic-ai/claude-code-linux-x64/claude",
    interpreter: None,
    args: claude_args,
};
const OPENCODE: Turn = Turn {
    name: "opencode",
    executable: "opencode-linux-x64/bin/opencode",
    interpreter: None,
    args: opencode_args,
};
const PI: Turn = Turn {
    name: "pi",
    executable: "@mariozechner/pi-coding-agent/dist/cli.js",
    interpreter: Some("/usr/bin/node"),
    args: pi_args,
};
const COPILOT: Turn = Turn {
    name: "copilot",
    executable: "@github/copilot-linux-x64/copilot",
    interpreter: None,
    args: copilot_args,
};

fn stub() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/model_stub/stub.py")
}

/// The harness tree, python3, and a network namespace for the stub; or why not.
fn prerequisites() -> Option<PathBuf> {
    let nm = common::harnesses()?;
    if !common::need(
        Path::new("/usr/bin/python3").exists(),
        "/usr/bin/python3 is missing (the model stub needs it)",
    ) {
        return None;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new("/usr/bin/python3")
        .arg(stub())
        .args(["--isolate", "--log"])
        .arg(dir.path().join("log"))
        .args(["--", "/bin/true"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .output()
        .expect("python3");
    common::need(
        out.status.success(),
        &format!(
            "the model stub cannot make its own network namespace here: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    )
    .then_some(nm)
}

fn header<'a>(entry: &'a Value, name: &str) -> Option<&'a str> {
    entry["headers"].as_array()?.iter().find_map(|h| {
        (h[0].as_str()?.eq_ignore_ascii_case(name))
            .then(|| h[1].as_str())
            .flatten()
    })
}

fn turn(t: &Turn) {
    let Some(nm) = prerequisites() else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let dirs = Dirs {
        home: tmp.path().join("home"),
        work: tmp.path().join("work"),
    };
    std::fs::create_dir_all(&dirs.home).expect("home");
    std::fs::create_dir_all(&dirs.work).expect("work");
    let log = tmp.path().join("requests.jsonl");
    let key = format!("sk-glove-test-{}", t.name);
    let (endpoint_args, env) = turn_env(t, &dirs, &key);
    let exe = nm.join(t.executable);
    assert!(exe.is_file(), "{}: no {}", t.name, exe.display());

    let proxy = base_url();
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.arg(stub())
        .args(["--isolate", "--port", &PORT.to_string(), "--log"])
        .arg(&log)
        .args(["--timeout", &TIMEOUT.to_string(), "--"]);
    if let Some(i) = t.interpreter {
        cmd.arg(i);
    }
    cmd.arg(&exe)
        .args((t.args)(endpoint_args))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &dirs.home)
        .envs(env);
    for v in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        cmd.env(v, &proxy);
    }
    for v in ["NO_PROXY", "no_proxy"] {
        cmd.env(v, "127.0.0.1,localhost");
    }
    let started = Instant::now();
    let out = cmd
        .current_dir(&dirs.work)
        .stdin(Stdio::null())
        .output()
        .expect("python3");
    let took = started.elapsed();

    let requests: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let summary: Vec<String> = requests
        .iter()
        .map(|r| {
            format!(
                "{} {} -> {}",
                r["method"].as_str().unwrap_or("?"),
                r["path"].as_str().unwrap_or("?"),
                r["answer"]
            )
        })
        .collect();
    let what = format!(
        "{}: exit {:?} after {took:.1?}\nrequests:\n  {}\nstdout:\n{}\nstderr:\n{}",
        t.name,
        out.status.code(),
        summary.join("\n  "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{what}");
    let turn_txt = std::fs::read_to_string(dirs.work.join("turn.txt")).unwrap_or_default();
    assert_eq!(turn_txt.trim(), "glove-turn", "{what}");

    let m = &glove_types::harness::by_id(t.name)
        .expect("a registered harness")
        .model;
    let (name, value) = (m.key_header, |k: &str| m.key_format.value(k));
    let model_requests: Vec<&Value> = requests.iter().filter(|r| r["answer"].is_array()).collect();
    let tool = model_requests
        .iter()
        .position(|r| r["answer"][0] == "tool")
        .unwrap_or_else(|| panic!("no request was answered with the tool call\n{what}"));
    assert!(
        model_requests[tool + 1..]
            .iter()
            .any(|r| r["answer"][0] == "text"),
        "no request after the tool call carried its result\n{what}"
    );
    assert!(
        model_requests
            .iter()
            .all(|r| header(r, name) == Some(value(&key).as_str())),
        "a model request without `{name}: {}`\n{what}",
        value(&key)
    );
    eprintln!(
        "model turn: {} exit 0 in {:.2} s ({} requests, {} to the model)",
        t.name,
        took.as_secs_f64(),
        requests.len(),
        model_requests.len()
    );
    assert!(took < Duration::from_secs(TIMEOUT));
}

#[test]
fn codex_runs_a_shell_tool_turn_against_the_stub() {
    turn(&CODEX);
}

#[test]
fn claude_code_runs_a_shell_tool_turn_against_the_stub() {
    turn(&CLAUDE);
}

#[test]
fn opencode_runs_a_shell_tool_turn_against_the_stub() {
    turn(&OPENCODE);
}

#[test]
fn pi_runs_a_shell_tool_turn_against_the_stub() {
    turn(&PI);
}

#[test]
fn copilot_runs_a_shell_tool_turn_against_the_stub() {
    turn(&COPILOT);
}
