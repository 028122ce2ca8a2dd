//! `glove run --agent` (issue 30): one command per harness, from the real
//! harness installed from npm (`GLOVE_HARNESSES`) and a key file to a
//! contained turn against the scripted model endpoint
//! (`tests/model_stub/stub.py`, plain HTTP on host loopback; for codex
//! and claude-code also HTTPS as `model.test`, through `--resolve` and a
//! private CA given with `--egress-ca`; the turn itself is in
//! `common/agent_turn.rs`). The turn's
//! shell tool writes, edits and deletes files in a retained workspace;
//! the test checks that the diff shows exactly that, that `glove apply`
//! brings it to the host tree, that the stub saw the real key and the
//! sandbox's environment (dumped by the tool into the workspace) only the
//! placeholder, and that the egress journal and the outcome agree. Codex
//! and claude-code also call a mediated MCP tool in the same run (the
//! stub's `--mcp-tool echo --then-shell`), visible in the audit. The error
//! cases run without a sandbox.

mod common;

use common::agent_turn::{turn, turn_from, Opts, PROMPT};
use common::apply_env::{text, Env};
use std::os::unix::fs::PermissionsExt;

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
        Opts {
            staged: true,
            ..Opts::default()
        },
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

/// Issue 30: a model endpoint over HTTPS, reached by name through the
/// proxy (`--resolve`), which terminates TLS with the session CA, puts the
/// key in, and verifies the stub against the private CA (`--egress-ca`).
#[test]
fn codex_one_command_turn_over_https_comes_back_through_apply() {
    turn_from(
        "codex",
        &[
            "exec",
            "--skip-git-repo-check",
            "-s",
            "danger-full-access",
            PROMPT,
        ],
        Opts {
            https: true,
            ..Opts::default()
        },
    );
}

#[test]
fn claude_code_one_command_turn_over_https_comes_back_through_apply() {
    turn_from(
        "claude-code",
        &["-p", PROMPT, "--allowedTools", "Bash"],
        Opts {
            https: true,
            ..Opts::default()
        },
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
        // --resolve: NAME:IP, for the model host or an --allow host only;
        // a private address for an --allow host needs --allow-private.
        // A plain-http model named `localhost` may not be pointed at a
        // public address: the key would cross the network in the clear.
        (
            vec![
                "--agent",
                "codex",
                "--model",
                "http://localhost:8000",
                "--key-file",
                &good,
                "--resolve",
                "localhost:8.8.8.8",
            ],
            "agent_allow_invalid",
            "NAME:IP",
        ),
        (
            vec![
                "--agent",
                "codex",
                "--model",
                "https://model.test:8443",
                "--key-file",
                &good,
                "--resolve",
                "model.test",
            ],
            "agent_allow_invalid",
            "NAME:IP",
        ),
        (
            vec![
                "--agent",
                "codex",
                "--model",
                "https://model.test:8443",
                "--key-file",
                &good,
                "--resolve",
                "other.test:127.0.0.1",
            ],
            "agent_allow_invalid",
            "NAME:IP",
        ),
        (
            vec![
                "--agent",
                "codex",
                "--model",
                "https://api.example.com",
                "--key-file",
                &good,
                "--allow",
                "npm.test:443",
                "--resolve",
                "npm.test:10.0.0.1",
            ],
            "agent_allow_private",
            "--allow-private",
        ),
        // A model host resolved to loopback is a private endpoint.
        (
            vec![
                "--agent",
                "codex",
                "--model",
                "https://model.test:8443",
                "--key-file",
                &good,
                "--resolve",
                "model.test:127.0.0.1",
                "--allow",
                "1.1.1.1:443",
            ],
            "agent_allow_private",
            "--allow-private",
        ),
        // With --resolve, every --allow name needs one.
        (
            vec![
                "--agent",
                "codex",
                "--model",
                "https://model.test:8443",
                "--key-file",
                &good,
                "--resolve",
                "model.test:8.8.8.8",
                "--allow",
                "npm.test:443",
            ],
            "agent_allow_invalid",
            "--resolve npm.test:IP",
        ),
    ];
    for (args, code, hint) in cases {
        let (c, h) = refused(&args);
        assert_eq!(c, code, "{args:?}");
        assert!(h.contains(hint), "{args:?}: hint {h:?} lacks {hint:?}");
    }
}
