//! The harness files (issue 27): the registry lists exactly the registered
//! harnesses, each one's file covers every item (names and npm layout,
//! staging, private home and managed environment, skills, MCP
//! configuration, model endpoint), and what they generate is what Glove
//! generated before the files existed.

use glove_types::harness::{
    self, ConfigFormat, Endpoint, Harness, KeyFormat, Mcp, McpServer, NativeRuntime, Runs,
    AGENT_HOME,
};
use serde_json::Value;

const IDS: [&str; 5] = ["codex", "claude-code", "pi", "copilot", "opencode"];

fn under_home(p: &str) -> bool {
    p.starts_with(&format!("{AGENT_HOME}/")) && !p.contains("/../") && !p.ends_with('/')
}

fn parent(p: &str) -> &str {
    p.rsplit_once('/').map_or("", |(d, _)| d)
}

fn env_name_ok(n: &str) -> bool {
    n.bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[test]
fn the_registry_lists_exactly_the_five_harnesses_each_in_a_file_of_its_own() {
    let ids: Vec<&str> = harness::all().map(|h| h.id).collect();
    assert_eq!(ids, IDS);
    assert_eq!(NativeRuntime::COUNT, IDS.len());
    for (r, id) in NativeRuntime::ALL.iter().zip(IDS) {
        assert_eq!(r.runtime_id(), id);
        assert_eq!(NativeRuntime::parse(id), Some(*r));
        assert!(std::ptr::eq(
            harness::by_id(id).expect("registered"),
            r.harness()
        ));
        // The wire name is the id.
        assert_eq!(serde_json::to_value(r).expect("json"), Value::from(id));
    }
    assert!(harness::by_id("claude").is_none());
    // One file per registered harness, and nothing else beside mod.rs: a
    // file without its registration (or the reverse) fails here.
    let dir = crate::repo_root().join("crates/glove-types/src/harness");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("harness dir")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .filter(|n| n != "mod.rs")
        .collect();
    files.sort();
    let mut want: Vec<String> = IDS
        .iter()
        .map(|i| format!("{}.rs", i.replace('-', "_")))
        .collect();
    want.sort();
    assert_eq!(files, want);
}

/// Every item of the issue, for one descriptor.
fn covers_every_item(h: &Harness) {
    let id = h.id;
    // Names and detection.
    assert!(
        !h.executable_name.is_empty() && !h.executable_name.contains('/'),
        "{id}"
    );
    assert!(!h.npm.package.is_empty(), "{id}");
    match h.npm.runs {
        Runs::PlatformBinary { package, path } => {
            assert!(!package.is_empty() && !path.is_empty(), "{id}");
            assert!(!path.starts_with('/') && !path.contains(".."), "{id}");
            assert_eq!(h.npm.platform(), Some((package, path)));
        }
        Runs::NodeScript { interpreter } => {
            assert!(interpreter.starts_with('/'), "{id}");
            assert_eq!(h.npm.platform(), None);
        }
    }
    // Staging: the state directories it refuses, the cache, the
    // environment it suggests.
    assert!(!h.staging.user_state.is_empty(), "{id}");
    for d in h.staging.user_state {
        assert!(d.starts_with('.') && !d.contains('/'), "{id}: {d}");
        assert!(harness::is_user_state_directory(d), "{id}: {d}");
    }
    if let Some(c) = &h.staging.package_cache {
        assert!(env_name_ok(c.variable), "{id}");
        assert!(
            !c.directory.is_empty() && !c.directory.contains('/'),
            "{id}"
        );
    }
    for e in h.staging.environment(&h.npm.runs, "/D/store/x") {
        let (n, v) = e.split_once('=').expect("NAME=value");
        assert!(env_name_ok(n) && v.contains("/D/store/x"), "{id}: {e}");
    }
    // The private home and its managed environment.
    let home = &h.home;
    assert!(!home.managed_environment.is_empty(), "{id}");
    let mut sorted = home.managed_environment.to_vec();
    sorted.sort();
    assert_eq!(sorted, home.managed_environment, "{id}: sorted");
    for e in home.managed_environment {
        let (n, v) = e.split_once('=').expect("NAME=value");
        assert!(env_name_ok(n) && under_home(v), "{id}: {e}");
        assert!(harness::manages_variable(n), "{id}: {n}");
        // Where it points is made before the harness starts.
        assert!(home.directories.contains(&v), "{id}: {v}");
    }
    assert!(!home.directories.is_empty(), "{id}");
    for (i, d) in home.directories.iter().enumerate() {
        assert!(under_home(d), "{id}: {d}");
        let p = parent(d);
        assert!(
            p == AGENT_HOME || home.directories[..i].contains(&p),
            "{id}: {d} before its parent"
        );
    }
    assert!(under_home(home.credential_path), "{id}");
    // Skills.
    assert!(under_home(h.skills_directory), "{id}");
    assert!(home.directories.contains(&h.skills_directory), "{id}");
    // The MCP configuration.
    let args = ["mcp-relay", "everything"];
    let servers = [McpServer {
        id: "everything",
        command: "/run/glove/bin/glove",
        args: &args,
    }];
    match &h.mcp {
        Mcp::Files {
            directories,
            format,
            write,
        } => {
            let files = write(&servers);
            assert!(!files.is_empty(), "{id}");
            for d in *directories {
                assert!(under_home(d), "{id}: {d}");
            }
            for (path, text) in &files {
                assert!(under_home(path), "{id}: {path}");
                let p = parent(path);
                assert!(
                    p == AGENT_HOME || directories.contains(&p),
                    "{id}: {path}'s directory is not made"
                );
                let server = match format {
                    ConfigFormat::Toml => {
                        let t: toml::Table = text.parse().expect("TOML");
                        let s = &t["mcp_servers"]["everything"];
                        serde_json::json!({
                            "command": s["command"].as_str(),
                            "args": s["args"].as_array().expect("args").iter()
                                .map(|a| a.as_str()).collect::<Vec<_>>(),
                        })
                    }
                    ConfigFormat::Json => {
                        let v: Value = serde_json::from_str(text).expect("JSON");
                        v["mcpServers"]["everything"].clone()
                    }
                };
                assert_eq!(server["command"], "/run/glove/bin/glove", "{id}: {path}");
                assert_eq!(server["args"], serde_json::json!(args), "{id}: {path}");
            }
        }
        Mcp::NotWritten { reason } => assert!(!reason.is_empty(), "{id}"),
    }
    // The model endpoint: the key's variable and header, and settings that
    // name the base URL and the model, in variables a template may set.
    let m = &h.model;
    assert!(env_name_ok(m.key_variable), "{id}");
    assert!(!harness::manages_variable(m.key_variable), "{id}");
    assert!(
        !m.key_header.is_empty()
            && m.key_header
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'-'),
        "{id}"
    );
    let e = Endpoint {
        base_url: "http://model.test:8443",
        model: "glove-model-x",
    };
    let s = (m.settings)(&e);
    let all: Vec<&String> = s.arguments.iter().chain(&s.environment).collect();
    assert!(
        all.iter().any(|a| a.contains(e.base_url)),
        "{id}: no base URL"
    );
    assert!(all.iter().any(|a| a.contains(e.model)), "{id}: no model");
    for v in &s.environment {
        let (n, _) = v.split_once('=').expect("NAME=value");
        assert!(
            env_name_ok(n)
                && !harness::manages_variable(n)
                && n != "HOME"
                && !n.starts_with("GLOVE_"),
            "{id}: {v} is not a template's to set"
        );
    }
    // The header holds the key.
    assert!(m.key_format.value("sk-k").ends_with("sk-k"), "{id}");
}

#[test]
fn each_harness_file_covers_every_item() {
    for h in harness::all() {
        covers_every_item(h);
    }
}

#[test]
fn each_npm_package_is_pinned_where_ci_installs_the_harnesses() {
    let pins: Value = serde_json::from_slice(
        &std::fs::read(crate::repo_root().join("harnesses/package.json")).expect("pins"),
    )
    .expect("json");
    let deps = pins["dependencies"].as_object().expect("dependencies");
    for h in harness::all() {
        let v = deps[h.npm.package].as_str().unwrap_or_default();
        assert!(
            !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit() || b == b'.'),
            "{}: {} is not pinned to an exact version",
            h.id,
            h.npm.package
        );
    }
    assert_eq!(deps.len(), NativeRuntime::COUNT, "a pin without a harness");
}

/// What Glove generated before the harness files (issue 27), byte for
/// byte: the names, the npm layout, the private home, and the environment
/// staging suggests.
#[test]
fn the_descriptors_hold_what_glove_used_before() {
    type Row = (
        &'static str,
        &'static str,
        &'static str,
        Option<(&'static str, &'static str)>,
    );
    let layouts: [Row; 5] = [
        (
            "codex",
            "codex",
            "@openai/codex",
            Some((
                "@openai/codex-linux-x64",
                "vendor/x86_64-unknown-linux-musl/bin/codex",
            )),
        ),
        (
            "claude-code",
            "claude",
            "@anthropic-ai/claude-code",
            Some(("@anthropic-ai/claude-code-linux-x64", "claude")),
        ),
        ("pi", "pi", "@mariozechner/pi-coding-agent", None),
        (
            "copilot",
            "copilot",
            "@github/copilot",
            Some(("@github/copilot-linux-x64", "copilot")),
        ),
        (
            "opencode",
            "opencode",
            "opencode-ai",
            Some(("opencode-linux-x64", "bin/opencode")),
        ),
    ];
    for (id, name, package, platform) in layouts {
        let h = harness::by_id(id).expect("registered");
        assert_eq!(
            (h.executable_name, h.npm.package, h.npm.platform()),
            (name, package, platform)
        );
    }
    let r = |id| NativeRuntime::parse(id).expect("registered");
    /// Runtime, managed environment, directories, skills, credential.
    type Home = (
        &'static str,
        &'static [&'static str],
        &'static [&'static str],
        &'static str,
        &'static str,
    );
    let home: [Home; 5] = [
        (
            "codex",
            &["CODEX_HOME=/home/agent/.codex"],
            &["/home/agent/.codex", "/home/agent/.codex/skills"],
            "/home/agent/.codex/skills",
            "/home/agent/.codex/auth.json",
        ),
        (
            "claude-code",
            &["CLAUDE_CONFIG_DIR=/home/agent/.claude"],
            &["/home/agent/.claude", "/home/agent/.claude/skills"],
            "/home/agent/.claude/skills",
            "/home/agent/.claude/.credentials.json",
        ),
        (
            "pi",
            &["PI_CODING_AGENT_DIR=/home/agent/.pi/agent"],
            &[
                "/home/agent/.pi",
                "/home/agent/.pi/agent",
                "/home/agent/.pi/agent/skills",
            ],
            "/home/agent/.pi/agent/skills",
            "/home/agent/.pi/agent/auth.json",
        ),
        (
            "copilot",
            &["COPILOT_HOME=/home/agent/.copilot"],
            &["/home/agent/.copilot", "/home/agent/.copilot/skills"],
            "/home/agent/.copilot/skills",
            "/home/agent/.copilot/config.json",
        ),
        (
            "opencode",
            &[
                "XDG_CACHE_HOME=/home/agent/.cache",
                "XDG_CONFIG_HOME=/home/agent/.config",
                "XDG_DATA_HOME=/home/agent/.local/share",
                "XDG_STATE_HOME=/home/agent/.local/state",
            ],
            &[
                "/home/agent/.cache",
                "/home/agent/.config",
                "/home/agent/.config/opencode",
                "/home/agent/.config/opencode/skills",
                "/home/agent/.local",
                "/home/agent/.local/share",
                "/home/agent/.local/state",
            ],
            "/home/agent/.config/opencode/skills",
            "/home/agent/.local/share/opencode/auth.json",
        ),
    ];
    for (id, env, dirs, skills, credential) in home {
        let n = r(id);
        assert_eq!(n.managed_environment(), env, "{id}");
        assert_eq!(n.home_directories(), dirs, "{id}");
        assert_eq!(n.skill_directory(), skills, "{id}");
        assert_eq!(n.credential_path(), credential, "{id}");
    }
    // The names a template may not set: before the harness files, one
    // list in the policy validator.
    for n in [
        "CLAUDE_CONFIG_DIR",
        "CODEX_HOME",
        "COPILOT_HOME",
        "PI_CODING_AGENT_DIR",
        "XDG_CACHE_HOME",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_STATE_HOME",
    ] {
        assert!(harness::manages_variable(n), "{n}");
    }
    assert!(!harness::manages_variable("PATH"));
    assert!(!harness::manages_variable("XDG"));
    // The harness homes staging never reads.
    for d in [".codex", ".claude", ".pi", ".copilot", ".opencode"] {
        assert!(harness::is_user_state_directory(d), "{d}");
    }
    assert!(!harness::is_user_state_directory(".cache"));
    // What staging suggests for `generate --env`.
    let store = "/opt/glove-harnesses/store/abc";
    let env: Vec<(&str, Vec<String>)> = harness::all()
        .map(|h| (h.id, h.staging.environment(&h.npm.runs, store)))
        .collect();
    assert_eq!(
        env,
        [
            ("codex", vec![]),
            ("claude-code", vec![]),
            (
                "pi",
                vec!["PATH=/opt/glove-harnesses/store/abc/node/bin:/usr/bin:/bin".to_owned()]
            ),
            (
                "copilot",
                vec!["COPILOT_PKG_CACHE_HOME=/opt/glove-harnesses/store/abc/pkg-cache".to_owned()]
            ),
            ("opencode", vec![]),
        ]
    );
}

/// The model endpoint settings, as the contained turns used them before
/// they moved into the harness files (codex's provider byte for byte), and
/// the header each harness puts the key in.
#[test]
fn the_model_endpoint_settings_point_each_harness_at_the_endpoint() {
    let e = Endpoint {
        base_url: "http://127.0.0.1:18000",
        model: "glove-stub",
    };
    let codex = (harness::codex::HARNESS.model.settings)(&e);
    assert_eq!(
        codex.arguments,
        [
            "-m",
            "glove-stub",
            "-c",
            "model_providers.glove={name=\"glove\",base_url=\"http://127.0.0.1:18000/v1\",env_key=\"OPENAI_API_KEY\",wire_api=\"responses\"}",
            "-c",
            "model_provider=glove",
        ]
    );
    assert!(codex.environment.is_empty());
    let copilot = (harness::copilot::HARNESS.model.settings)(&e);
    assert_eq!(
        copilot.environment,
        [
            "COPILOT_PROVIDER_BASE_URL=http://127.0.0.1:18000/v1",
            "COPILOT_PROVIDER_TYPE=openai",
            "COPILOT_MODEL=glove-stub",
            "COPILOT_OFFLINE=true",
        ]
    );
    let opencode = (harness::opencode::HARNESS.model.settings)(&e);
    let config: Value = serde_json::from_str(
        opencode.environment[0]
            .strip_prefix("OPENCODE_CONFIG_CONTENT=")
            .expect("config"),
    )
    .expect("json");
    assert_eq!(
        config["provider"]["glove"]["options"],
        serde_json::json!({"baseURL": "http://127.0.0.1:18000/v1", "apiKey": "{env:GLOVE_MODEL_KEY}"})
    );
    assert_eq!(config["model"], "glove/glove-stub");
    let keys: Vec<(&str, &str, &str, String)> = harness::all()
        .map(|h| {
            let m = &h.model;
            (h.id, m.key_variable, m.key_header, m.key_format.value("k"))
        })
        .collect();
    assert_eq!(
        keys,
        [
            (
                "codex",
                "OPENAI_API_KEY",
                "authorization",
                "Bearer k".to_owned()
            ),
            (
                "claude-code",
                "ANTHROPIC_API_KEY",
                "x-api-key",
                "k".to_owned()
            ),
            ("pi", "AZURE_OPENAI_API_KEY", "api-key", "k".to_owned()),
            (
                "copilot",
                "COPILOT_PROVIDER_API_KEY",
                "authorization",
                "Bearer k".to_owned()
            ),
            (
                "opencode",
                "GLOVE_MODEL_KEY",
                "authorization",
                "Bearer k".to_owned()
            ),
        ]
    );
    assert_eq!(KeyFormat::Bearer.value("sk"), "Bearer sk");
}
