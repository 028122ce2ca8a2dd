//! `glove run --agent` (issue 30): one command per harness, from the real
//! harness installed from npm (`GLOVE_HARNESSES`) and a key file to a
//! contained turn against the scripted model endpoint
//! (`tests/model_stub/stub.py`, plain HTTP on host loopback). The turn's
//! shell tool writes, edits and deletes files in a retained workspace;
//! the test checks that the diff shows exactly that, that `glove apply`
//! brings it to the host tree, that the stub saw the real key and the
//! sandbox's environment (dumped by the tool into the workspace) only the
//! placeholder, and that the egress journal and the outcome agree. Codex
//! and claude-code also call a mediated MCP tool in the same run (the
//! stub's `--mcp-tool echo --then-shell`), visible in the audit. The error
//! cases run without a sandbox.

mod common;

use common::apply_env::{json_of, ready, snapshot, text, Env};
use common::model_stub::Stub;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Mutex;

const PROMPT: &str = "Change the files as the task says.";
/// The turn's shell command: a write (env.txt: the environment of every
/// process in the sandbox it can read, the harness's own included; a
/// harness may scrub its tools' environment), an edit (edit.txt) and a
/// delete (gone.txt), new/added.txt written.
const SCRIPT: &str = "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | sort -u > env.txt && printf 'one\\n2\\n' > edit.txt && rm gone.txt && mkdir -p new && echo fresh > new/added.txt && echo \"read:ok:$PWD\"";

/// One harness at a time: each turn is a few hundred MB of memory.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn stub(dir: &Path, extra: &[&str]) -> Stub {
    let mut args = vec!["--shell-command", SCRIPT];
    args.extend_from_slice(extra);
    common::model_stub::start(dir, &args)
}

fn header<'a>(entry: &'a Value, name: &str) -> Option<&'a str> {
    entry["headers"].as_array()?.iter().find_map(|h| {
        (h[0].as_str()?.eq_ignore_ascii_case(name))
            .then(|| h[1].as_str())
            .flatten()
    })
}

/// Runs glove with the test's stage, apply and state directories.
fn glove(env: &Env, args: &[&str]) -> Output {
    let (stages, apply, trust, state) = (
        env.p("stages"),
        env.p("apply"),
        env.p("trust/policy.json"),
        env.p("state"),
    );
    common::glove_with_env(
        common::As::Caller,
        args,
        None,
        &[
            ("GLOVE_STAGE_DIR", stages.as_os_str()),
            ("GLOVE_APPLY_DIR", apply.as_os_str()),
            ("GLOVE_APPLY_TRUST", trust.as_os_str()),
            ("XDG_STATE_HOME", state.as_os_str()),
        ],
    )
}

fn mcp_profile(env: &Env) -> Option<PathBuf> {
    let servers = PathBuf::from(std::env::var_os("GLOVE_MCP_SERVERS")?);
    let profile = env.p("mcp-profile.json");
    let v = serde_json::json!({"schema_version": 1, "servers": [{
        "server_id": "everything",
        "command": {"path": "/usr/bin/node",
                    "arguments": [servers.join("@modelcontextprotocol/server-everything/dist/index.js"), "stdio"],
                    "environment": ["PATH=/usr/bin:/bin"], "working_directory": "/"},
        "tools": [{"name": "echo"}],
    }]});
    std::fs::write(&profile, v.to_string()).expect("profile");
    std::fs::set_permissions(&profile, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    Some(profile)
}

/// One `glove run --agent` turn of `agent` with its one-turn `args`, and
/// every check of the issue; the harness given with `--harness-path`.
fn turn(agent: &str, args: &[&str], mcp: bool) {
    turn_from(agent, args, mcp, false)
}

/// [`turn`], the harness found where it is (`staged`: the copy `glove
/// policy stage` made in the state directory `glove setup` uses, found
/// with no `--harness-path`).
fn turn_from(agent: &str, args: &[&str], mcp: bool, staged: bool) {
    let Some(nm) = common::harnesses() else {
        return;
    };
    if !ready() || !common::python_ok() {
        return;
    }
    if mcp
        && !common::need(
            std::env::var_os("GLOVE_MCP_SERVERS").is_some(),
            "GLOVE_MCP_SERVERS is not set",
        )
    {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let h = glove_types::harness::by_id(agent).expect("a registered harness");
    let env = Env::new();
    env.write("edit.txt", "one\ntwo\n");
    env.write("gone.txt", "bye\n");
    env.write("keep.txt", "k\n");
    let before = snapshot(&env.src());
    let owner_key = env.key("owner.key", true);
    let real = format!("sk-glove-real-{agent}-51c3");
    let key = env.p("model.key");
    std::fs::write(&key, format!("{real}\n")).expect("key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let mut stub_args: Vec<String> = Vec::new();
    if mcp {
        stub_args.extend(["--mcp-tool", "echo", "--then-shell"].map(String::from));
    }
    let stub_refs: Vec<&str> = stub_args.iter().map(String::as_str).collect();
    let st = stub(env.dir.path(), &stub_refs);
    let url = format!("http://127.0.0.1:{}", st.port);
    let (src, key_s, nm_s) = (
        env.src().display().to_string(),
        key.display().to_string(),
        nm.display().to_string(),
    );
    if staged {
        let root = env.p("state/glove/harnesses").display().to_string();
        let out = glove(
            &env,
            &[
                "policy",
                "stage",
                "--runtime",
                agent,
                "--source",
                &nm_s,
                "--directory",
                &root,
                "--yes",
                "--json",
            ],
        );
        assert_eq!(out.status.code(), Some(0), "stage: {}", text(&out.stderr));
    }
    let mut cmd: Vec<String> = [
        "run",
        "--agent",
        agent,
        "--model",
        &url,
        "--model-name",
        "glove-stub",
        "--key-file",
        &key_s,
        "--workspace",
        &src,
        "--disk",
        "2G",
        "--memory",
        "3G",
        "--pids",
        "1024",
        "--wall-ms",
        "300000",
        "--cpu-ms",
        "600000",
        "--json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if !staged {
        cmd.extend(["--harness-path".into(), nm_s.clone()]);
    }
    let profile = if mcp { mcp_profile(&env) } else { None };
    if let Some(p) = &profile {
        cmd.extend(["--profile".into(), p.display().to_string()]);
    }
    cmd.push("--".into());
    cmd.extend(args.iter().map(|s| s.to_string()));
    let a: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let out = glove(&env, &a);
    let stdout = text(&out.stdout);
    let log = std::fs::read_to_string(&st.log).unwrap_or_default();
    let requests: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let summary: Vec<String> = requests
        .iter()
        .map(|r| format!("{} {} -> {}", r["method"], r["path"], r["answer"]))
        .collect();
    let what = format!(
        "{agent}: exit {:?}\nstdout:\n{stdout}\nstderr:\n{}\nrequests:\n  {}",
        out.status.code(),
        text(&out.stderr),
        summary.join("\n  ")
    );
    assert_eq!(out.status.code(), Some(0), "{what}");
    assert!(
        text(&out.stderr).contains("preparing the sandbox"),
        "no status line\n{what}"
    );
    if staged {
        assert!(
            text(&out.stderr).contains("(staged, "),
            "not the staged copy\n{what}"
        );
    }
    let outcome: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: no outcome line\n{what}"));

    // The stub saw the real key in every model request, never a placeholder.
    let model: Vec<&Value> = requests.iter().filter(|r| r["answer"].is_array()).collect();
    assert!(model.len() >= 2, "{what}");
    let want = h.model.key_format.value(&real);
    assert!(
        model
            .iter()
            .all(|r| header(r, h.model.key_header) == Some(want.as_str())),
        "a model request without the real key\n{what}"
    );
    assert!(!log.contains("glove-placeholder-"), "{what}");
    assert!(
        !stdout.contains(&real),
        "the real key in the output\n{what}"
    );

    // The diff shows exactly the turn's changes.
    let session = outcome["workspace"]["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no workspace\n{what}"))
        .to_owned();
    let d = json_of(&glove(&env, &["diff", &session, "--json"]));
    let mut changes: Vec<(String, String)> = d["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap_or("").to_owned(),
                c["change"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    changes.sort();
    let expected: Vec<(String, String)> = [
        ("edit.txt", "modified"),
        ("env.txt", "added"),
        ("gone.txt", "removed"),
        ("new", "added"),
        ("new/added.txt", "added"),
    ]
    .iter()
    .map(|(p, c)| (p.to_string(), c.to_string()))
    .collect();
    assert_eq!(changes, expected, "{d}\n{what}");
    assert_eq!(
        snapshot(&env.src()),
        before,
        "the source changed before apply"
    );

    // glove apply brings it to the host tree.
    let applied = glove(
        &env,
        &["apply", &session, "--yes", "--json", "--key", &owner_key],
    );
    assert_eq!(applied.status.code(), Some(0), "{}", text(&applied.stderr));
    let src_p = env.src();
    let read = |p: &str| std::fs::read_to_string(src_p.join(p)).unwrap_or_default();
    assert_eq!(read("edit.txt"), "one\n2\n");
    assert_eq!(read("new/added.txt"), "fresh\n");
    assert_eq!(read("keep.txt"), "k\n");
    assert!(!src_p.join("gone.txt").exists());
    // The sandbox's environment held the placeholder, never the key.
    let seen_env = read("env.txt");
    let line = format!("{}=glove-placeholder-", h.model.key_variable);
    assert!(seen_env.lines().any(|l| l.starts_with(&line)), "{seen_env}");
    assert!(!seen_env.contains(&real), "{seen_env}");

    // The egress journal and the outcome agree.
    let e = &outcome["egress"];
    let journal = e["journal"].as_str().expect("journal");
    let shown = json_of(&glove(
        &env,
        &["egress", "show", "--journal", journal, "--json"],
    ));
    assert_eq!(shown["head"], e["journal_head"], "{shown}\n{e}");
    assert_eq!(shown["records"], e["journal_records"], "{shown}\n{e}");
    let events = shown["events"].as_array().expect("events");
    let allowed_requests = events
        .iter()
        .filter(|ev| ev["kind"] == "request" && ev["phase"] != "end" && ev["decision"] == "allowed")
        .count() as u64;
    assert_eq!(
        e["requests_allowed"].as_u64(),
        Some(allowed_requests),
        "{shown}\n{e}"
    );
    // Every request the stub saw was an allowed decision, each model
    // request with the key brokered (named by its handle).
    assert_eq!(allowed_requests, requests.len() as u64, "{shown}\n{what}");
    let brokered = events
        .iter()
        .filter(|ev| ev["phase"] != "end" && ev["credential"] == "agent-model-key")
        .count();
    assert!(brokered >= model.len(), "{shown}\n{what}");
    let raw = std::fs::read(journal).expect("journal bytes");
    assert!(!raw.windows(real.len()).any(|w| w == real.as_bytes()));

    if mcp {
        let m = &outcome["mcp"];
        assert!(m["allowed"].as_u64().unwrap_or(0) >= 1, "{m}\n{what}");
        let audit = glove(
            &env,
            &[
                "audit",
                "show",
                "--json",
                "--journal",
                m["journal"].as_str().expect("journal"),
                "--head",
                m["journal_head"].as_str().expect("head"),
            ],
        );
        let shown = json_of(&audit);
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
        assert!(log.contains("glove-mcp-turn"), "{what}");
    }
    eprintln!(
        "glove run --agent {agent}: exit 0, {} model requests, egress {} allowed{}",
        model.len(),
        e["requests_allowed"],
        if mcp { ", a mediated MCP call" } else { "" }
    );
}

#[test]
fn codex_one_command_turn_with_a_mediated_tool_comes_back_through_apply() {
    turn(
        "codex",
        &[
            "exec",
            "--skip-git-repo-check",
            "-s",
            "danger-full-access",
            PROMPT,
        ],
        true,
    );
}

#[test]
fn claude_code_one_command_turn_with_a_mediated_tool_comes_back_through_apply() {
    turn(
        "claude-code",
        &[
            "-p",
            PROMPT,
            "--allowedTools",
            "Bash",
            "mcp__everything__echo",
        ],
        true,
    );
}

#[test]
fn opencode_one_command_turn_comes_back_through_apply() {
    turn("opencode", &["run", PROMPT], false);
}

#[test]
fn pi_one_command_turn_comes_back_through_apply() {
    turn("pi", &["-p", "--no-session", "--offline", PROMPT], false);
}

/// pi is a node script: staged, it runs under the node staged with it.
#[test]
fn pi_staged_by_setup_is_found_without_a_harness_path() {
    turn_from(
        "pi",
        &["-p", "--no-session", "--offline", PROMPT],
        false,
        true,
    );
}

#[test]
fn copilot_one_command_turn_comes_back_through_apply() {
    turn(
        "copilot",
        &["-p", PROMPT, "--allow-all-tools", "--allow-all-paths"],
        false,
    );
}

/// Runs `glove run --agent …` where nothing can be found or read; the
/// code and the hint.
fn refused(args: &[&str]) -> (String, String) {
    let env = Env::new();
    let empty = env.p("empty");
    std::fs::create_dir(&empty).expect("empty");
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    let out = common::glove_with_env(
        common::As::Caller,
        &all,
        None,
        &[
            ("HOME", empty.as_os_str()),
            ("XDG_STATE_HOME", empty.as_os_str()),
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(125),
        "{args:?}: {}",
        text(&out.stderr)
    );
    let err = text(&out.stderr);
    let code = err
        .lines()
        .find_map(|l| l.strip_prefix("error[")?.split(']').next())
        .unwrap_or_else(|| panic!("{args:?}: no code: {err}"))
        .to_owned();
    let hint = err
        .lines()
        .find_map(|l| l.strip_prefix("hint: "))
        .unwrap_or_else(|| panic!("{args:?}: no hint: {err}"))
        .to_owned();
    (code, hint)
}

#[test]
fn each_refusal_has_a_code_and_a_one_line_hint() {
    let env = Env::new();
    let key = env.p("k");
    std::fs::write(&key, "sk-x").expect("key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let loose = key.display().to_string();
    let good = env.p("good");
    std::fs::write(&good, "sk-x").expect("key");
    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let good = good.display().to_string();
    let nowhere = env.p("nowhere").display().to_string();
    let missing = env.p("missing.key").display().to_string();
    let url = "http://127.0.0.1:9";
    let cases: Vec<(Vec<&str>, &str, &str)> = vec![
        (vec!["--agent", "nope", "--", "x"], "agent_unknown", "codex"),
        (
            vec![
                "--agent",
                "codex",
                "--model",
                url,
                "--key-file",
                &good,
                "--harness-path",
                &nowhere,
            ],
            "agent_not_installed",
            "npm install -g @openai/codex",
        ),
        (
            vec!["--agent", "codex", "--model", url, "--key-file", &loose],
            "agent_key_file_loose",
            "chmod 600",
        ),
        (
            vec!["--agent", "codex", "--model", url, "--key-file", &missing],
            "agent_key_missing",
            "0600",
        ),
        (
            vec![
                "--agent",
                "codex",
                "--model",
                url,
                "--key-env",
                "GLOVE_TEST_NO_SUCH_VAR",
            ],
            "agent_key_missing",
            "export GLOVE_TEST_NO_SUCH_VAR",
        ),
        (
            vec![
                "--agent",
                "codex",
                "--model",
                "api.openai.com",
                "--key-file",
                &good,
            ],
            "agent_model_url_invalid",
            "--model http",
        ),
        (
            vec![
                "--agent",
                "codex",
                "--model",
                "http://h/v1/x",
                "--key-file",
                &good,
            ],
            "agent_model_url_invalid",
            "origin",
        ),
        (
            vec!["--agent", "pi", "--key-file", &good],
            "agent_model_url_invalid",
            "--model URL",
        ),
        // Plain HTTP only to this machine or a private network: the key
        // would cross the internet in the clear.
        (
            vec![
                "--agent",
                "codex",
                "--model",
                "http://api.example.com",
                "--key-file",
                &good,
            ],
            "agent_model_url_invalid",
            "use https://",
        ),
        // A private model endpoint opens private addresses to the session:
        // other hosts beside it need the operator's word.
        (
            vec![
                "--agent",
                "codex",
                "--model",
                url,
                "--allow",
                "example.com:443",
                "--key-file",
                &good,
            ],
            "agent_allow_private",
            "--allow-private",
        ),
        (
            vec![
                "--agent",
                "codex",
                "--model",
                url,
                "--key-file",
                &good,
                "--allow",
                "192.168.1.5:22",
            ],
            "agent_allow_private",
            "--allow-private",
        ),
        (
            vec![
                "--agent",
                "codex",
                "--model",
                url,
                "--key-file",
                &good,
                "--allow",
                "example.com",
            ],
            "agent_allow_invalid",
            "HOST:PORT",
        ),
    ];
    for (args, code, hint) in cases {
        let (c, h) = refused(&args);
        assert_eq!(c, code, "{args:?}");
        assert!(h.contains(hint), "{args:?}: hint {h:?} lacks {hint:?}");
    }
}
