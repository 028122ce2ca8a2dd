//! GitHub Copilot CLI (`@github/copilot`).
//!
//! What runs is a Node single-executable ELF in the platform package. On
//! a start that finds no complete cache in
//! `$COPILOT_PKG_CACHE_HOME/pkg/linux-x64/<version>/` it unpacks about
//! 235 MB of its embedded JavaScript there first, so staging makes that
//! cache once ([`CacheProducer::CopilotExtractOnly`]: the staged copy's
//! own extract-only mode, run inside a Glove sandbox; the I/O is
//! `glove_control::stage::copilot`) and a session uses it read-only.
//! State lives in `COPILOT_HOME`. Glove writes no MCP configuration for it
//! (yet). Its bring-your-own-key provider settings are environment
//! variables; `COPILOT_OFFLINE` keeps it from GitHub sign-in, telemetry
//! and update checks. It takes `-p` for one turn.

use super::{
    CacheProducer, Endpoint, Harness, KeyFormat, Mcp, ModelApi, ModelEndpoint, Npm, PackageCache,
    PrivateHome, Runs, Settings, Staging,
};

/// The package cache's directory in the closure.
pub const PACKAGE_CACHE_DIR: &str = "pkg-cache";
/// The variable that points copilot at its package cache.
pub const PACKAGE_CACHE_VARIABLE: &str = "COPILOT_PKG_CACHE_HOME";

/// Copilot.
pub static HARNESS: Harness = Harness {
    id: "copilot",
    executable_name: "copilot",
    npm: Npm {
        package: "@github/copilot",
        runs: Runs::PlatformBinary {
            package: "@github/copilot-linux-x64",
            path: "copilot",
        },
    },
    staging: Staging {
        user_state: &[".copilot"],
        package_cache: Some(PackageCache {
            variable: PACKAGE_CACHE_VARIABLE,
            directory: PACKAGE_CACHE_DIR,
            producer: CacheProducer::CopilotExtractOnly,
        }),
    },
    home: PrivateHome {
        managed_environment: &["COPILOT_HOME=/home/agent/.copilot"],
        directories: &["/home/agent/.copilot", "/home/agent/.copilot/skills"],
        credential_path: "/home/agent/.copilot/config.json",
    },
    skills_directory: "/home/agent/.copilot/skills",
    mcp: Mcp::NotWritten {
        reason: "copilot reads $COPILOT_HOME/mcp-config.json; Glove does not write it yet",
    },
    model: ModelEndpoint {
        api: ModelApi::OpenaiChatCompletions,
        key_variable: "COPILOT_PROVIDER_API_KEY",
        key_header: "authorization",
        key_format: KeyFormat::Bearer,
        settings: model_settings,
        arguments_at: super::arguments_first,
        vendor: Some(Endpoint {
            base_url: "https://api.openai.com",
            model: "gpt-5",
        }),
    },
};

/// An OpenAI-compatible provider at `<base_url>/v1`, the model, and no
/// GitHub traffic.
fn model_settings(e: &Endpoint<'_>) -> Settings {
    Settings {
        arguments: Vec::new(),
        environment: vec![
            format!("COPILOT_PROVIDER_BASE_URL={}/v1", e.base_url),
            "COPILOT_PROVIDER_TYPE=openai".into(),
            format!("COPILOT_MODEL={}", e.model),
            "COPILOT_OFFLINE=true".into(),
        ],
    }
}
