//! The MCP profile: the operator's file that names the upstream servers
//! Glove starts for a session and what the agent may do with each.
//!
//! It is strict JSON ([`glove_types::canon`], `Form::Strict`: no
//! duplicate keys, no floats, integers within ±(2^53−1)), at most
//! [`MAX_PROFILE_BYTES`], and every object refuses unknown members. Any
//! refusal is `mcp_profile_invalid`, located at the offending member.
//!
//! ```json
//! {
//!   "schema_version": 1,
//!   "servers": [{
//!     "server_id": "files",
//!     "command": {
//!       "path": "/usr/bin/node",
//!       "arguments": ["/opt/mcp/server-filesystem/dist/index.js", "/srv/work"],
//!       "environment": ["PATH=/usr/bin:/bin"],
//!       "working_directory": "/srv/work"
//!     },
//!     "tools": [
//!       {"name": "read_text_file",
//!        "arguments": {"path": {"required": true,
//!                               "path": {"roots": ["/srv/work"], "no_symlinks": true}}}},
//!       {"name": "list_directory"}
//!     ],
//!     "resources": ["file:///srv/work/README.md"],
//!     "prompts": [],
//!     "pins": {"tools": {"read_text_file": "<64 hex>"}}
//!   }],
//!   "limits": {"request_timeout_ms": 30000}
//! }
//! ```
//!
//! **servers** (1-[`MAX_SERVERS`]): `server_id` is an identifier
//! (`[a-z0-9._-]`, 1-64 bytes, starting with a letter or digit) that
//! neither contains `__` nor ends with `_`, so a namespaced tool name
//! `<server_id>__<tool>` splits unambiguously at its first `__`.
//!
//! **command**: `path` is an absolute, normal path to the executable;
//! `arguments` (at most 256, each at most 4096 bytes, no NUL) are passed
//! as they are; `environment` (at most 256 `NAME=value` entries, `NAME`
//! matching `[A-Za-z_][A-Za-z0-9_]*`, each name once, no NUL) is the
//! server's **whole** environment — nothing is inherited from Glove;
//! `working_directory` is absolute and normal (`/` allowed).
//!
//! **declare_capabilities** (optional, default none): client capabilities
//! declared to this upstream in `initialize`, among `sampling` and
//! `elicitation`. Some servers list a tool only when the client declares
//! what it needs (server-everything's `trigger-sampling-request`). The
//! requests themselves are still answered with an error
//! (`mcp_request_denied`) and audited, never forwarded. `roots` cannot be
//! declared: server-filesystem replaces its command-line roots with
//! whatever a client with `roots` answers.
//!
//! **tools** (default deny, at most [`MAX_TOOLS`]): each allowed tool by
//! its upstream `name` (1-128 bytes of `[A-Za-z0-9_.-/]`), with
//! `arguments`, a map from argument name to a [rule](crate::rules) (at
//! most 64), and `schema`, an extra JSON schema the whole arguments
//! object must satisfy (the [enforced subset](crate::schema) only). The
//! tool's own `inputSchema` is checked too, and an argument it does not
//! declare at its top level (in `properties`, unless
//! `additionalProperties` allows more) is refused unless the entry has a
//! rule for it. A tool whose `inputSchema` uses, at its top level, a
//! keyword outside the enforced subset (`allOf`, `$ref`, …) is refused
//! (`mcp_schema_refused`) unless the entry says `"lenient_input_schema":
//! true`: the operator then accepts that the mediator checks only what it
//! understands — such a schema's undeclared arguments are refused only
//! against a top-level `properties`, if it has one — and should state the
//! arguments it expects with rules or a `schema` with
//! `"additionalProperties": false`. A tool whose definition carries
//! invisible or control characters is blocked (`mcp_definition_refused`,
//! see [`crate::sanitize::hidden_character`]) unless the entry says
//! `"allow_hidden_characters": true`. Terminal control sequences in a
//! tool's results are rendered harmless (as `glove exec` renders agent
//! output) unless the entry says `"raw_results": true`.
//!
//! **resources**, **prompts** (default deny, at most 256 each): the
//! resource URIs (at most 2048 bytes) and prompt names the agent may
//! read and get. A completion is allowed only for a listed prompt or
//! resource.
//!
//! **pins** (optional): `tools`, a map from tool name to the tool's
//! definition digest ([`crate::pin`]), and `server`, the server digest.
//! When a server has profile pins they are the only pins for it: a tool
//! without one is blocked, and a differing server digest blocks every
//! tool of the server. Without profile pins, digests are recorded at
//! first sight in the pin file.
//!
//! **limits** (optional): `request_timeout_ms` (every forwarded request,
//! 1-600000, default 30000), `startup_timeout_ms` (spawn to a listed
//! tool set, 1-120000, default 10000), `max_tool_pages` (`tools/list`
//! pages followed, 1-64, default 16), `max_tools` (tools accepted from
//! one server, 1-1024, default 256), `max_in_flight` (agent requests
//! handled at once, 1-256, default 32).

use crate::rules::{self, ArgumentRule, PathRule};
use crate::schema;
use glove_types::canon::{self, Form};
use glove_types::codes::mcp::MCP_PROFILE_INVALID;
use glove_types::{Rejection, Sha256Digest};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

mod wire;

use wire::ProfileWire;
pub use wire::{is_server_id, is_tool_name};

/// Largest profile file.
pub const MAX_PROFILE_BYTES: usize = 1 << 20;
/// Most upstream servers.
pub const MAX_SERVERS: usize = 16;
/// Most allowed tools per server.
pub const MAX_TOOLS: usize = 256;
/// Longest tool name.
pub const MAX_TOOL_NAME: usize = 128;
/// The separator of a namespaced tool name, `<server_id>__<tool>`.
pub const NAMESPACE_SEPARATOR: &str = "__";

const MAX_ARGS: usize = 256;
const MAX_ARG_BYTES: usize = 4096;
const MAX_ENV: usize = 256;
const MAX_ENV_BYTES: usize = 8192;
const MAX_RULES: usize = 64;
const MAX_LISTED: usize = 256;
const MAX_URI: usize = 2048;
const MAX_STRING: usize = 4096;

/// A validated profile (see the module docs). Only [`Profile::decode`]
/// makes one.
#[derive(Clone, Debug)]
pub struct Profile {
    servers: Vec<ServerProfile>,
    limits: Limits,
}

/// One upstream server's entry.
#[derive(Clone, Debug)]
pub struct ServerProfile {
    id: String,
    command: Command,
    sampling: bool,
    elicitation: bool,
    tools: BTreeMap<String, ToolPolicy>,
    resources: BTreeSet<String>,
    prompts: BTreeSet<String>,
    pins: Option<ProfilePins>,
}

/// How to start a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// The executable (absolute).
    pub path: String,
    /// Its arguments.
    pub arguments: Vec<String>,
    /// Its whole environment, `(name, value)`.
    pub environment: Vec<(String, String)>,
    /// Its working directory (absolute).
    pub working_directory: String,
}

/// What an allowed tool's calls must satisfy.
#[derive(Clone, Debug)]
pub struct ToolPolicy {
    pub(crate) arguments: BTreeMap<String, ArgumentRule>,
    pub(crate) schema: Option<Value>,
    pub(crate) lenient_input_schema: bool,
    pub(crate) allow_hidden_characters: bool,
    pub(crate) raw_results: bool,
}

/// Pins stated in the profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfilePins {
    /// The server digest, if pinned.
    pub server: Option<Sha256Digest>,
    /// Tool digests by upstream tool name.
    pub tools: BTreeMap<String, Sha256Digest>,
}

/// Time and count bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Deadline of every forwarded request.
    pub request_timeout: Duration,
    /// Deadline from spawn to a listed tool set.
    pub startup_timeout: Duration,
    /// Most `tools/list` pages followed.
    pub max_tool_pages: usize,
    /// Most tools accepted from one server.
    pub max_tools: usize,
    /// Most agent requests handled at once.
    pub max_in_flight: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            request_timeout: Duration::from_millis(30_000),
            startup_timeout: Duration::from_millis(10_000),
            max_tool_pages: 16,
            max_tools: 256,
            max_in_flight: 32,
        }
    }
}

impl Profile {
    /// Decodes and validates a profile file's bytes.
    pub fn decode(bytes: &[u8]) -> Result<Profile, Rejection> {
        let w: ProfileWire =
            canon::decode(bytes, MAX_PROFILE_BYTES, Form::Strict).map_err(|r| {
                Rejection::new(
                    MCP_PROFILE_INVALID,
                    format!("{}: {}", r.code(), r.message()),
                )
                .at(r.location())
            })?;
        w.validate()
    }

    /// The servers, in file order.
    pub fn servers(&self) -> &[ServerProfile] {
        &self.servers
    }

    /// One server by id.
    pub fn server(&self, id: &str) -> Option<&ServerProfile> {
        self.servers.iter().find(|s| s.id == id)
    }

    /// The limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }
}

impl ServerProfile {
    /// The server id.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// How to start it.
    pub fn command(&self) -> &Command {
        &self.command
    }
    /// Whether `sampling` is declared to it.
    pub fn declares_sampling(&self) -> bool {
        self.sampling
    }
    /// Whether `elicitation` is declared to it.
    pub fn declares_elicitation(&self) -> bool {
        self.elicitation
    }
    /// The allowed tools' policies, by upstream name.
    pub fn tools(&self) -> &BTreeMap<String, ToolPolicy> {
        &self.tools
    }
    /// The listed resource URIs.
    pub fn resources(&self) -> &BTreeSet<String> {
        &self.resources
    }
    /// The listed prompt names.
    pub fn prompts(&self) -> &BTreeSet<String> {
        &self.prompts
    }
    /// The profile's pins, if any.
    pub fn pins(&self) -> Option<&ProfilePins> {
        self.pins.as_ref()
    }
    /// Every root named by a path rule of this server (for removing host
    /// paths from its error messages: paths under these are kept).
    pub fn path_roots(&self) -> Vec<String> {
        let mut out = Vec::new();
        for t in self.tools.values() {
            for r in t.arguments.values() {
                r.path_roots(&mut out);
            }
        }
        out.sort();
        out.dedup();
        out
    }
}

impl ToolPolicy {
    /// The argument rules.
    pub fn arguments(&self) -> &BTreeMap<String, ArgumentRule> {
        &self.arguments
    }
    /// The extra schema.
    pub fn schema(&self) -> Option<&Value> {
        self.schema.as_ref()
    }
    /// Whether calls are allowed although the tool's `inputSchema` uses
    /// keywords outside the enforced subset at its top level.
    pub fn lenient_input_schema(&self) -> bool {
        self.lenient_input_schema
    }
    /// Whether the tool's definition may carry invisible or control
    /// characters ([`crate::sanitize::hidden_character`]).
    pub fn allow_hidden_characters(&self) -> bool {
        self.allow_hidden_characters
    }
    /// Whether the tool's results reach the agent with their terminal
    /// control sequences as they are.
    pub fn raw_results(&self) -> bool {
        self.raw_results
    }
}

#[cfg(test)]
mod tests;
