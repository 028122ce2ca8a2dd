//! opencode (`opencode-ai`).
//!
//! What runs is a Bun ELF in the platform package. It keeps its state in
//! the XDG directories, so the private home manages all four. Glove
//! writes no MCP configuration for it (yet). Its configuration, a
//! provider included, can be given whole in `OPENCODE_CONFIG_CONTENT`,
//! where `{env:NAME}` reads a variable; `OPENCODE_DISABLE_MODELS_FETCH`
//! keeps it from fetching the model catalogue. It takes `run` for one
//! turn.

use super::{
    Endpoint, Harness, KeyFormat, Mcp, ModelApi, ModelEndpoint, Npm, PrivateHome, Runs, Settings,
    Staging,
};

/// The variable its provider configuration reads the key from.
pub const KEY_VARIABLE: &str = "GLOVE_MODEL_KEY";

/// opencode.
pub static HARNESS: Harness = Harness {
    id: "opencode",
    executable_name: "opencode",
    npm: Npm {
        package: "opencode-ai",
        runs: Runs::PlatformBinary {
            package: "opencode-linux-x64",
            path: "bin/opencode",
        },
    },
    staging: Staging {
        user_state: &[".opencode"],
        package_cache: None,
    },
    home: PrivateHome {
        managed_environment: &[
            "XDG_CACHE_HOME=/home/agent/.cache",
            "XDG_CONFIG_HOME=/home/agent/.config",
            "XDG_DATA_HOME=/home/agent/.local/share",
            "XDG_STATE_HOME=/home/agent/.local/state",
        ],
        directories: &[
            "/home/agent/.cache",
            "/home/agent/.config",
            "/home/agent/.config/opencode",
            "/home/agent/.config/opencode/skills",
            "/home/agent/.local",
            "/home/agent/.local/share",
            "/home/agent/.local/state",
        ],
        credential_path: "/home/agent/.local/share/opencode/auth.json",
    },
    skills_directory: "/home/agent/.config/opencode/skills",
    mcp: Mcp::NotWritten {
        reason: "opencode reads the `mcp` member of its configuration; Glove does not write it yet",
    },
    model: ModelEndpoint {
        api: ModelApi::OpenaiChatCompletions,
        key_variable: KEY_VARIABLE,
        key_header: "authorization",
        key_format: KeyFormat::Bearer,
        settings: model_settings,
        arguments_at: opencode_arguments_at,
        vendor: Some(Endpoint {
            base_url: "https://api.openai.com",
            model: "gpt-5",
        }),
    },
};

/// A provider `glove` (`@ai-sdk/openai-compatible`) at `<base_url>/v1`
/// with the key from [`KEY_VARIABLE`], the model chosen, its shell and
/// edit tools allowed (outside the working directory too: the sandbox is
/// the boundary, and its own check refuses a tool that reads `/proc`), no autoupdate and no sharing.
fn model_settings(e: &Endpoint<'_>) -> Settings {
    let config = serde_json::json!({
        "$schema": "https://opencode.ai/config.json",
        "provider": {"glove": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Glove",
            "options": {"baseURL": format!("{}/v1", e.base_url), "apiKey": format!("{{env:{KEY_VARIABLE}}}")},
            "models": {e.model: {"name": e.model, "tool_call": true}},
        }},
        "model": format!("glove/{}", e.model),
        "permission": {"bash": "allow", "edit": "allow", "external_directory": "allow"},
        "autoupdate": false,
        "share": "disabled",
    });
    Settings {
        arguments: Vec::new(),
        environment: vec![
            format!("OPENCODE_CONFIG_CONTENT={config}"),
            "OPENCODE_DISABLE_MODELS_FETCH=1".into(),
        ],
    }
}

/// After `run` (its one-turn mode), else first. Its endpoint arguments are
/// none today (the provider is in its environment); the place is kept
/// for when a flag is needed.
fn opencode_arguments_at(args: &[String]) -> usize {
    match args.first().map(String::as_str) {
        Some("run") => 1,
        _ => 0,
    }
}
