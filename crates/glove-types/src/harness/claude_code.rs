//! Anthropic Claude Code (`@anthropic-ai/claude-code`).
//!
//! What runs is a Bun ELF in the platform package (the install script
//! hard-links it as `bin/claude.exe`). State lives in `CLAUDE_CONFIG_DIR`;
//! MCP servers are the `mcpServers` object of `~/.mcp.json` and
//! `~/.claude.json` and, as `CLAUDE_CONFIG_DIR` moves it,
//! `$CLAUDE_CONFIG_DIR/.claude.json` (all written, the same text). It reads its endpoint
//! from `ANTHROPIC_BASE_URL` and sends the key from `ANTHROPIC_API_KEY` in
//! `x-api-key`. It takes `-p` for one turn.

use super::{
    ConfigFormat, Endpoint, Harness, KeyFormat, Mcp, McpServer, ModelApi, ModelEndpoint, Npm,
    PrivateHome, Runs, Settings, Staging,
};

/// Its MCP configuration files (the same text in each).
/// With `CLAUDE_CONFIG_DIR` set (the private home's managed variable) its
/// global configuration is `$CLAUDE_CONFIG_DIR/.claude.json`: the third.
pub const CONFIGS: [&str; 3] = [
    "/home/agent/.mcp.json",
    "/home/agent/.claude.json",
    "/home/agent/.claude/.claude.json",
];

/// Claude Code.
pub static HARNESS: Harness = Harness {
    id: "claude-code",
    executable_name: "claude",
    npm: Npm {
        package: "@anthropic-ai/claude-code",
        runs: Runs::PlatformBinary {
            package: "@anthropic-ai/claude-code-linux-x64",
            path: "claude",
        },
    },
    staging: Staging {
        user_state: &[".claude"],
        package_cache: None,
    },
    home: PrivateHome {
        managed_environment: &["CLAUDE_CONFIG_DIR=/home/agent/.claude"],
        directories: &["/home/agent/.claude", "/home/agent/.claude/skills"],
        credential_path: "/home/agent/.claude/.credentials.json",
    },
    skills_directory: "/home/agent/.claude/skills",
    mcp: Mcp::Files {
        directories: &["/home/agent/.claude"],
        format: ConfigFormat::Json,
        write: mcp_files,
    },
    model: ModelEndpoint {
        api: ModelApi::AnthropicMessages,
        key_variable: "ANTHROPIC_API_KEY",
        key_header: "x-api-key",
        key_format: KeyFormat::Plain,
        settings: model_settings,
        arguments_at: super::arguments_first,
        vendor: Some(Endpoint {
            base_url: "https://api.anthropic.com",
            model: "claude-sonnet-4-5",
        }),
    },
};

/// `{"mcpServers": {<id>: {"type": "stdio", …}}}`, pretty, with a final
/// newline.
fn mcp_files(servers: &[McpServer<'_>]) -> Vec<(String, String)> {
    let mut map = serde_json::Map::new();
    for s in servers {
        map.insert(
            s.id.to_owned(),
            serde_json::json!({"type": "stdio", "command": s.command, "args": s.args, "env": {}}),
        );
    }
    let text = serde_json::to_string_pretty(&serde_json::json!({ "mcpServers": map }))
        .unwrap_or_default()
        + "\n";
    CONFIGS
        .iter()
        .map(|p| ((*p).to_owned(), text.clone()))
        .collect()
}

/// `ANTHROPIC_BASE_URL` (the origin: it adds `/v1/messages` itself),
/// `ANTHROPIC_MODEL`, and no traffic besides the turn (telemetry, update
/// checks).
fn model_settings(e: &Endpoint<'_>) -> Settings {
    Settings {
        arguments: Vec::new(),
        environment: vec![
            format!("ANTHROPIC_BASE_URL={}", e.base_url),
            format!("ANTHROPIC_MODEL={}", e.model),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1".into(),
        ],
    }
}
