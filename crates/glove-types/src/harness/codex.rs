//! OpenAI Codex (`@openai/codex`).
//!
//! What runs is a static musl ELF in the platform package; the package's
//! own `bin` entry is a node wrapper that stays resident. State lives in
//! `CODEX_HOME`; MCP servers are `[mcp_servers.<id>]` tables of its
//! `config.toml`. This codex does not read `OPENAI_BASE_URL` (its built-in
//! provider goes to api.openai.com, first over WebSocket): a provider of
//! Glove's own, given with `-c`, points it at an endpoint. Inside a
//! sandbox it runs its tools only with `-s danger-full-access` (its
//! bubblewrap cannot nest).

use super::{
    strings, toml_string, ConfigFormat, Endpoint, Harness, KeyFormat, Mcp, McpServer, ModelApi,
    ModelEndpoint, Npm, PrivateHome, Runs, Settings, Staging,
};

/// Its MCP configuration file.
pub const CONFIG: &str = "/home/agent/.codex/config.toml";
/// The variable its provider reads the key from.
pub const KEY_VARIABLE: &str = "OPENAI_API_KEY";

/// Codex.
pub static HARNESS: Harness = Harness {
    id: "codex",
    executable_name: "codex",
    npm: Npm {
        package: "@openai/codex",
        runs: Runs::PlatformBinary {
            package: "@openai/codex-linux-x64",
            path: "vendor/x86_64-unknown-linux-musl/bin/codex",
        },
    },
    staging: Staging {
        user_state: &[".codex"],
        package_cache: None,
    },
    home: PrivateHome {
        managed_environment: &["CODEX_HOME=/home/agent/.codex"],
        directories: &["/home/agent/.codex", "/home/agent/.codex/skills"],
        credential_path: "/home/agent/.codex/auth.json",
    },
    skills_directory: "/home/agent/.codex/skills",
    mcp: Mcp::Files {
        directories: &["/home/agent/.codex"],
        format: ConfigFormat::Toml,
        write: mcp_files,
    },
    model: ModelEndpoint {
        api: ModelApi::OpenaiResponses,
        key_variable: KEY_VARIABLE,
        key_header: "authorization",
        key_format: KeyFormat::Bearer,
        settings: model_settings,
        arguments_at: codex_arguments_at,
        vendor: Some(Endpoint {
            base_url: "https://api.openai.com",
            model: "gpt-5-codex",
        }),
    },
};

/// `config.toml` with one `[mcp_servers.<id>]` table per server.
fn mcp_files(servers: &[McpServer<'_>]) -> Vec<(String, String)> {
    let mut text = String::from(
        "# Written by glove run: each MCP server is Glove's mediator, reached through a relay.\n",
    );
    for s in servers {
        text.push_str(&format!(
            "\n[mcp_servers.{}]\ncommand = {}\nargs = [{}]\nstartup_timeout_sec = 60\n",
            toml_string(s.id),
            toml_string(s.command),
            s.args
                .iter()
                .map(|a| toml_string(a))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    vec![(CONFIG.to_owned(), text)]
}

/// A provider `glove` at `<base_url>/v1` speaking the Responses API with
/// the key from [`KEY_VARIABLE`], chosen with the model.
fn model_settings(e: &Endpoint<'_>) -> Settings {
    let provider = format!(
        "model_providers.glove={{name=\"glove\",base_url={},env_key={},wire_api=\"responses\"}}",
        toml_string(&format!("{}/v1", e.base_url)),
        toml_string(KEY_VARIABLE),
    );
    Settings {
        arguments: strings(&["-m", e.model, "-c", &provider, "-c", "model_provider=glove"]),
        environment: Vec::new(),
    }
}

/// After `exec` (its one-turn mode, whose options are its own), else
/// first.
fn codex_arguments_at(args: &[String]) -> usize {
    match args.first().map(String::as_str) {
        Some("exec" | "e") => 1,
        _ => 0,
    }
}
