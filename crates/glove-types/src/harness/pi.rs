//! pi coding agent (`@mariozechner/pi-coding-agent`).
//!
//! What runs is the package's `dist/cli.js` under node, so staging copies
//! the package, every package its dependencies reach (as node finds them)
//! and node itself. State lives in `PI_CODING_AGENT_DIR`. pi has no MCP
//! client of its own. It is pointed at an endpoint through its built-in
//! Azure OpenAI Responses provider, which takes its base URL from the
//! environment (a custom provider would need a `models.json` in its
//! managed directory) and sends the key in `api-key`. It takes `--offline`
//! (no update check) and `-p` for one turn.

use super::{
    strings, Endpoint, Harness, KeyFormat, Mcp, ModelApi, ModelEndpoint, Npm, PrivateHome, Runs,
    Settings, Staging,
};

/// pi.
pub static HARNESS: Harness = Harness {
    id: "pi",
    executable_name: "pi",
    npm: Npm {
        package: "@mariozechner/pi-coding-agent",
        runs: Runs::NodeScript {
            interpreter: "/usr/bin/node",
        },
    },
    staging: Staging {
        user_state: &[".pi"],
        package_cache: None,
    },
    home: PrivateHome {
        managed_environment: &["PI_CODING_AGENT_DIR=/home/agent/.pi/agent"],
        directories: &[
            "/home/agent/.pi",
            "/home/agent/.pi/agent",
            "/home/agent/.pi/agent/skills",
        ],
        credential_path: "/home/agent/.pi/agent/auth.json",
    },
    skills_directory: "/home/agent/.pi/agent/skills",
    mcp: Mcp::NotWritten {
        reason: "pi has no MCP client; tools reach it only as skills",
    },
    model: ModelEndpoint {
        api: ModelApi::OpenaiResponses,
        key_variable: "AZURE_OPENAI_API_KEY",
        key_header: "api-key",
        key_format: KeyFormat::Plain,
        settings: model_settings,
        arguments_at: super::arguments_first,
        vendor: None,
    },
};

/// The Azure OpenAI Responses provider at `<base_url>/v1`, with the model
/// (one outside pi's catalogue is taken as a custom model id).
fn model_settings(e: &Endpoint<'_>) -> Settings {
    Settings {
        arguments: strings(&["--provider", "azure-openai-responses", "--model", e.model]),
        environment: vec![format!("AZURE_OPENAI_BASE_URL={}/v1", e.base_url)],
    }
}
