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

use serde_json::{json, Value};
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

/// One harness: how to run a turn of it and where its key goes.
struct Turn {
    name: &'static str,
    /// Relative to `node_modules`.
    executable: &'static str,
    interpreter: Option<&'static str>,
    /// Arguments after the executable.
    args: fn() -> Vec<String>,
    /// Its variables (besides PATH and HOME); may write config files.
    env: fn(&Dirs, &str) -> Vec<(String, String)>,
    /// The request header carrying the key, and its value for `key`.
    header: (&'static str, fn(&str) -> String),
}

fn base_url() -> String {
    format!("http://127.0.0.1:{PORT}")
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

fn plain(key: &str) -> String {
    key.to_string()
}

const PROMPT: &str = "Write the word glove-turn into turn.txt.";

fn codex_args() -> Vec<String> {
    // `OPENAI_BASE_URL` is not read by this codex: the built-in provider
    // goes to api.openai.com (first over WebSocket). A provider of our own
    // is what points it here.
    let provider = format!(
        "model_providers.glove={{name=\"glove\",base_url=\"{}/v1\",\
         env_key=\"OPENAI_API_KEY\",wire_api=\"responses\"}}",
        base_url()
    );
    strings(&[
        "exec",
        "--skip-git-repo-check",
        "-s",
        "danger-full-access",
        "-m",
        "glove-stub",
        "-c",
        &provider,
        "-c",
        "model_provider=glove",
        PROMPT,
    ])
}

fn codex_env(_: &Dirs, key: &str) -> Vec<(String, String)> {
    vec![("OPENAI_API_KEY".into(), key.into())]
}

fn claude_args() -> Vec<String> {
    // `--allowedTools` takes several values, so the prompt comes first.
    // (`--dangerously-skip-permissions` is refused as root; allowing Bash
    // is all the turn needs.)
    strings(&["-p", PROMPT, "--allowedTools", "Bash"])
}

fn claude_env(d: &Dirs, key: &str) -> Vec<(String, String)> {
    vec![
        ("ANTHROPIC_BASE_URL".into(), base_url()),
        ("ANTHROPIC_API_KEY".into(), key.into()),
        (
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
            "1".into(),
        ),
        (
            "CLAUDE_CONFIG_DIR".into(),
            d.home.join(".claude").display().to_string(),
        ),
    ]
}

fn opencode_args() -> Vec<String> {
    strings(&["run", PROMPT])
}

fn opencode_env(d: &Dirs, key: &str) -> Vec<(String, String)> {
    let config = json!({
        "$schema": "https://opencode.ai/config.json",
        "provider": {"glove": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Glove stub",
            "options": {"baseURL": format!("{}/v1", base_url()), "apiKey": "{env:GLOVE_MODEL_KEY}"},
            "models": {"glove-stub": {"name": "glove-stub", "tool_call": true}},
        }},
        "model": "glove/glove-stub",
        "permission": {"bash": "allow", "edit": "allow"},
        "autoupdate": false,
        "share": "disabled",
    });
    let xdg = |v: &str, p: &str| (v.to_string(), d.home.join(p).display().to_string());
    vec![
        ("OPENCODE_CONFIG_CONTENT".into(), config.to_string()),
        ("GLOVE_MODEL_KEY".into(), key.into()),
        ("OPENCODE_DISABLE_MODELS_FETCH".into(), "1".into()),
        xdg("XDG_CONFIG_HOME", ".config"),
        xdg("XDG_DATA_HOME", ".local/share"),
        xdg("XDG_CACHE_HOME", ".cache"),
        xdg("XDG_STATE_HOME", ".local/state"),
    ]
}

fn pi_args() -> Vec<String> {
    strings(&[
        "-p",
        "--no-session",
        "--offline",
        "--provider",
        "glove",
        "--model",
        "glove-stub",
        PROMPT,
    ])
}

fn pi_env(d: &Dirs, key: &str) -> Vec<(String, String)> {
    let dir = d.home.join(".pi/agent");
    std::fs::create_dir_all(&dir).expect("pi dir");
    // `apiKey` names the variable holding the key.
    let models = json!({"providers": {"glove": {
        "baseUrl": format!("{}/v1", base_url()),
        "api": "openai-completions",
        "apiKey": "GLOVE_MODEL_KEY",
        "models": [{"id": "glove-stub"}],
    }}});
    std::fs::write(dir.join("models.json"), models.to_string()).expect("models.json");
    vec![
        ("PI_CODING_AGENT_DIR".into(), dir.display().to_string()),
        ("GLOVE_MODEL_KEY".into(), key.into()),
    ]
}

fn copilot_args() -> Vec<String> {
    strings(&["-p", PROMPT, "--allow-all-tools"])
}

fn copilot_env(d: &Dirs, key: &str) -> Vec<(String, String)> {
    vec![
        (
            "COPILOT_PKG_CACHE_HOME".into(),
            d.home.join(".copilot-pkg").display().to_string(),
        ),
        (
            "COPILOT_PROVIDER_BASE_URL".into(),
            format!("{}/v1", base_url()),
        ),
        ("COPILOT_PROVIDER_TYPE".into(), "openai".into()),
        ("COPILOT_PROVIDER_API_KEY".into(), key.into()),
        ("COPILOT_MODEL".into(), "glove-stub".into()),
        // No GitHub sign-in, telemetry or update check.
        ("COPILOT_OFFLINE".into(), "true".into()),
    ]
}

const CODEX: Turn = Turn {
    name: "codex",
    executable: "@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex",
    interpreter: None,
    args: codex_args,
    env: codex_env,
    header: ("authorization", bearer),
};
const CLAUDE: Turn = Turn {
    name: "claude-code",
    executable: "@anthropic-ai/claude-code-linux-x64/claude",
    interpreter: None,
    args: claude_args,
    env: claude_env,
    header: ("x-api-key", plain),
};
const OPENCODE: Turn = Turn {
    name: "opencode",
    executable: "opencode-linux-x64/bin/opencode",
    interpreter: None,
    args: opencode_args,
    env: opencode_env,
    header: ("authorization", bearer),
};
const PI: Turn = Turn {
    name: "pi",
    executable: "@mariozechner/pi-coding-agent/dist/cli.js",
    interpreter: Some("/usr/bin/node"),
    args: pi_args,
    env: pi_env,
    header: ("authorization", bearer),
};
const COPILOT: Turn = Turn {
    name: "copilot",
    executable: "@github/copilot-linux-x64/copilot",
    interpreter: None,
    args: copilot_args,
    env: copilot_env,
    header: ("authorization", bearer),
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
        .args((t.args)())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &dirs.home)
        .envs((t.env)(&dirs, &key));
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

    let (name, value) = t.header;
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
