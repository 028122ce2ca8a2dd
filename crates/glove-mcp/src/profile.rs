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

// ----- wire form -----

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileWire {
    schema_version: u32,
    servers: Vec<ServerWire>,
    #[serde(default)]
    limits: Option<LimitsWire>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerWire {
    server_id: String,
    command: CommandWire,
    #[serde(default)]
    declare_capabilities: Vec<String>,
    #[serde(default)]
    tools: Vec<ToolWire>,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    prompts: Vec<String>,
    #[serde(default)]
    pins: Option<PinsWire>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CommandWire {
    path: String,
    #[serde(default)]
    arguments: Vec<String>,
    #[serde(default)]
    environment: Vec<String>,
    working_directory: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolWire {
    name: String,
    #[serde(default)]
    arguments: BTreeMap<String, RuleWire>,
    #[serde(default, deserialize_with = "present")]
    schema: Option<Value>,
    #[serde(default)]
    lenient_input_schema: bool,
    #[serde(default)]
    allow_hidden_characters: bool,
    #[serde(default)]
    raw_results: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleWire {
    #[serde(default)]
    required: bool,
    #[serde(default, deserialize_with = "present")]
    equals: Option<Value>,
    #[serde(default)]
    one_of: Option<Vec<Value>>,
    #[serde(default)]
    prefix: Option<String>,
    #[serde(default)]
    pattern: Option<String>,
    #[serde(default)]
    range: Option<BoundsWire<i64>>,
    #[serde(default)]
    length: Option<BoundsWire<u64>>,
    #[serde(default)]
    path: Option<PathWire>,
    #[serde(default)]
    items: Option<Box<RuleWire>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BoundsWire<T> {
    #[serde(default)]
    min: Option<T>,
    #[serde(default)]
    max: Option<T>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PathWire {
    roots: Vec<String>,
    #[serde(default)]
    no_symlinks: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PinsWire {
    #[serde(default)]
    server: Option<String>,
    #[serde(default)]
    tools: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsWire {
    #[serde(default)]
    request_timeout_ms: Option<u64>,
    #[serde(default)]
    startup_timeout_ms: Option<u64>,
    #[serde(default)]
    max_tool_pages: Option<u64>,
    #[serde(default)]
    max_tools: Option<u64>,
    #[serde(default)]
    max_in_flight: Option<u64>,
}

fn bad(m: impl Into<String>) -> Rejection {
    Rejection::new(MCP_PROFILE_INVALID, m)
}

/// Whether `s` is a server id (see the module docs).
pub fn is_server_id(s: &str) -> bool {
    glove_types::ids::check_id(s).is_ok() && !s.contains(NAMESPACE_SEPARATOR) && !s.ends_with('_')
}

/// Whether `s` is a tool name the mediator handles: 1-128 bytes of
/// `[A-Za-z0-9_.-/]`.
pub fn is_tool_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_TOOL_NAME
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'/'))
}

fn bounded<T>(v: &[T], max: usize, what: &str) -> Result<(), Rejection> {
    if v.len() > max {
        return Err(bad(format!("at most {max} {what}")));
    }
    Ok(())
}

fn abs_path(p: &str, allow_root: bool) -> Result<(), Rejection> {
    if p == "/" && allow_root {
        return Ok(());
    }
    glove_types::paths::check_canonical(p).map_err(|r| bad(r.message().to_owned()))
}

fn text(s: &str, max: usize) -> Result<(), Rejection> {
    if s.len() > max || s.contains('\0') {
        return Err(bad(format!("at most {max} bytes, no NUL")));
    }
    Ok(())
}

fn limit(v: Option<u64>, min: u64, max: u64, default: u64, at: &str) -> Result<u64, Rejection> {
    match v {
        None => Ok(default),
        Some(x) if (min..=max).contains(&x) => Ok(x),
        Some(_) => Err(bad(format!("must be {min}-{max}")).at(at)),
    }
}

impl ProfileWire {
    fn validate(self) -> Result<Profile, Rejection> {
        if self.schema_version != 1 {
            return Err(bad("only schema_version 1 is known").at("schema_version"));
        }
        if self.servers.is_empty() || self.servers.len() > MAX_SERVERS {
            return Err(bad(format!("1-{MAX_SERVERS} servers")).at("servers"));
        }
        let d = Limits::default();
        let limits = match self.limits {
            None => d,
            Some(l) => {
                let ms = |x: u64| Duration::from_millis(x);
                let us = |x: u64| usize::try_from(x).unwrap_or(usize::MAX);
                Limits {
                    request_timeout: ms(limit(
                        l.request_timeout_ms,
                        1,
                        600_000,
                        30_000,
                        "limits.request_timeout_ms",
                    )?),
                    startup_timeout: ms(limit(
                        l.startup_timeout_ms,
                        1,
                        120_000,
                        10_000,
                        "limits.startup_timeout_ms",
                    )?),
                    max_tool_pages: us(limit(
                        l.max_tool_pages,
                        1,
                        64,
                        16,
                        "limits.max_tool_pages",
                    )?),
                    max_tools: us(limit(l.max_tools, 1, 1024, 256, "limits.max_tools")?),
                    max_in_flight: us(limit(l.max_in_flight, 1, 256, 32, "limits.max_in_flight")?),
                }
            }
        };
        let mut servers: Vec<ServerProfile> = Vec::with_capacity(self.servers.len());
        for (i, s) in self.servers.into_iter().enumerate() {
            let at = format!("servers[{i}]");
            let s = s.validate().map_err(|r| r.at(&at))?;
            if servers.iter().any(|o| o.id == s.id) {
                return Err(bad("server_id repeated").at(format!("{at}.server_id")));
            }
            servers.push(s);
        }
        Ok(Profile { servers, limits })
    }
}

impl ServerWire {
    fn validate(self) -> Result<ServerProfile, Rejection> {
        if !is_server_id(&self.server_id) {
            return Err(bad(
                "a server_id is 1-64 bytes of [a-z0-9._-], starts with a letter or digit, has no `__` and does not end with `_`",
            )
            .at("server_id"));
        }
        let command = self.command.validate().map_err(|r| r.at("command"))?;
        let (mut sampling, mut elicitation) = (false, false);
        for c in &self.declare_capabilities {
            let seen = match c.as_str() {
                "sampling" => std::mem::replace(&mut sampling, true),
                "elicitation" => std::mem::replace(&mut elicitation, true),
                "roots" => {
                    return Err(bad(
                        "`roots` is never declared: server-filesystem would take the client's roots over its own",
                    )
                    .at("declare_capabilities"))
                }
                _ => {
                    return Err(bad("only `sampling` and `elicitation` can be declared")
                        .at("declare_capabilities"))
                }
            };
            if seen {
                return Err(bad("a capability is listed twice").at("declare_capabilities"));
            }
        }
        bounded(&self.tools, MAX_TOOLS, "tools").map_err(|r| r.at("tools"))?;
        let mut tools = BTreeMap::new();
        for (i, t) in self.tools.into_iter().enumerate() {
            let at = format!("tools[{i}]");
            if !is_tool_name(&t.name) {
                return Err(
                    bad("a tool name is 1-128 bytes of [A-Za-z0-9_.-/]").at(format!("{at}.name"))
                );
            }
            let name = t.name.clone();
            let policy = t.validate().map_err(|r| r.at(&at))?;
            if tools.insert(name, policy).is_some() {
                return Err(bad("tool listed twice").at(format!("{at}.name")));
            }
        }
        let listed = |v: Vec<String>, at: &str, max_len: usize| {
            bounded(&v, MAX_LISTED, "entries").map_err(|r| r.at(at))?;
            let mut set = BTreeSet::new();
            for (i, x) in v.into_iter().enumerate() {
                if x.is_empty() || x.len() > max_len || x.chars().any(char::is_control) {
                    return Err(bad(format!("1-{max_len} bytes, no control characters"))
                        .at(format!("{at}[{i}]")));
                }
                if !set.insert(x) {
                    return Err(bad("listed twice").at(format!("{at}[{i}]")));
                }
            }
            Ok(set)
        };
        let resources = listed(self.resources, "resources", MAX_URI)?;
        let prompts = listed(self.prompts, "prompts", MAX_TOOL_NAME)?;
        let pins = match self.pins {
            None => None,
            Some(p) => {
                let digest = |s: &str, at: String| {
                    Sha256Digest::parse(s).map_err(|r| bad(r.message().to_owned()).at(at))
                };
                let server = match &p.server {
                    None => None,
                    Some(s) => Some(digest(s, "pins.server".into())?),
                };
                if p.tools.len() > MAX_TOOLS {
                    return Err(bad(format!("at most {MAX_TOOLS} tool pins")).at("pins.tools"));
                }
                let mut tools = BTreeMap::new();
                for (name, d) in &p.tools {
                    if !is_tool_name(name) {
                        return Err(bad("not a tool name").at(format!("pins.tools.{name}")));
                    }
                    tools.insert(name.clone(), digest(d, format!("pins.tools.{name}"))?);
                }
                Some(ProfilePins { server, tools })
            }
        };
        Ok(ServerProfile {
            id: self.server_id,
            command,
            sampling,
            elicitation,
            tools,
            resources,
            prompts,
            pins,
        })
    }
}

impl CommandWire {
    fn validate(self) -> Result<Command, Rejection> {
        abs_path(&self.path, false).map_err(|r| r.at("path"))?;
        abs_path(&self.working_directory, true).map_err(|r| r.at("working_directory"))?;
        bounded(&self.arguments, MAX_ARGS, "arguments").map_err(|r| r.at("arguments"))?;
        for (i, a) in self.arguments.iter().enumerate() {
            text(a, MAX_ARG_BYTES).map_err(|r| r.at(format!("arguments[{i}]")))?;
        }
        bounded(&self.environment, MAX_ENV, "variables").map_err(|r| r.at("environment"))?;
        let mut env: Vec<(String, String)> = Vec::with_capacity(self.environment.len());
        for (i, e) in self.environment.iter().enumerate() {
            let at = format!("environment[{i}]");
            text(e, MAX_ENV_BYTES).map_err(|r| r.at(&at))?;
            let Some((name, value)) = e.split_once('=') else {
                return Err(bad("a variable is NAME=value").at(at));
            };
            let mut b = name.bytes();
            let name_ok = b
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
                && b.all(|c| c.is_ascii_alphanumeric() || c == b'_');
            if !name_ok {
                return Err(bad("a variable name is [A-Za-z_][A-Za-z0-9_]*").at(at));
            }
            if env.iter().any(|(n, _)| n == name) {
                return Err(bad("a variable is set twice").at(at));
            }
            env.push((name.to_owned(), value.to_owned()));
        }
        Ok(Command {
            path: self.path,
            arguments: self.arguments,
            environment: env,
            working_directory: self.working_directory,
        })
    }
}

impl ToolWire {
    fn validate(self) -> Result<ToolPolicy, Rejection> {
        if self.arguments.len() > MAX_RULES {
            return Err(bad(format!("at most {MAX_RULES} argument rules")).at("arguments"));
        }
        let mut arguments = BTreeMap::new();
        for (name, r) in self.arguments {
            let at = format!("arguments.{name}");
            if name.is_empty() || name.len() > MAX_TOOL_NAME {
                return Err(bad("an argument name is 1-128 bytes").at(at));
            }
            arguments.insert(name, r.validate(0).map_err(|e| e.at(&at))?);
        }
        if let Some(s) = &self.schema {
            schema::check_definition(s).map_err(|m| bad(m).at("schema"))?;
        }
        Ok(ToolPolicy {
            arguments,
            schema: self.schema,
            lenient_input_schema: self.lenient_input_schema,
            allow_hidden_characters: self.allow_hidden_characters,
            raw_results: self.raw_results,
        })
    }
}

impl RuleWire {
    fn validate(self, depth: usize) -> Result<ArgumentRule, Rejection> {
        if depth > rules::MAX_ITEMS_DEPTH {
            return Err(bad("`items` nested too deep"));
        }
        let stated = self.equals.is_some()
            || self.one_of.is_some()
            || self.prefix.is_some()
            || self.pattern.is_some()
            || self.range.is_some()
            || self.length.is_some()
            || self.path.is_some()
            || self.items.is_some();
        if !stated && !self.required {
            return Err(bad("a rule states at least one constraint"));
        }
        if let Some(o) = &self.one_of {
            if o.is_empty() || o.len() > rules::MAX_ONE_OF {
                return Err(bad(format!("1-{} values", rules::MAX_ONE_OF)).at("one_of"));
            }
        }
        if let Some(p) = &self.prefix {
            text(p, MAX_STRING).map_err(|r| r.at("prefix"))?;
        }
        let pattern = match &self.pattern {
            None => None,
            Some(p) => Some(rules::compile_pattern(p).map_err(|m| bad(m).at("pattern"))?),
        };
        let range = match self.range {
            None => None,
            Some(b) => {
                if let (Some(lo), Some(hi)) = (b.min, b.max) {
                    if lo > hi {
                        return Err(bad("min above max").at("range"));
                    }
                }
                if b.min.is_none() && b.max.is_none() {
                    return Err(bad("a range states min or max").at("range"));
                }
                Some((b.min, b.max))
            }
        };
        let length = match self.length {
            None => None,
            Some(b) => {
                if let (Some(lo), Some(hi)) = (b.min, b.max) {
                    if lo > hi {
                        return Err(bad("min above max").at("length"));
                    }
                }
                if b.min.is_none() && b.max.is_none() {
                    return Err(bad("a length states min or max").at("length"));
                }
                Some((b.min, b.max))
            }
        };
        let path = match self.path {
            None => None,
            Some(p) => {
                if p.roots.is_empty() || p.roots.len() > rules::MAX_ROOTS {
                    return Err(bad(format!("1-{} roots", rules::MAX_ROOTS)).at("path.roots"));
                }
                for (i, r) in p.roots.iter().enumerate() {
                    abs_path(r, true).map_err(|e| e.at(format!("path.roots[{i}]")))?;
                }
                Some(PathRule {
                    roots: p.roots,
                    no_symlinks: p.no_symlinks,
                })
            }
        };
        let items = match self.items {
            None => None,
            Some(i) => Some(Box::new(i.validate(depth + 1).map_err(|r| r.at("items"))?)),
        };
        Ok(ArgumentRule {
            required: self.required,
            equals: self.equals,
            one_of: self.one_of,
            prefix: self.prefix,
            pattern,
            range,
            length,
            path,
            items,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"schema_version":1,"servers":[{"server_id":"files",
      "command":{"path":"/usr/bin/node","arguments":["x.js","/srv"],"environment":["PATH=/usr/bin"],"working_directory":"/"},
      "declare_capabilities":["sampling"],
      "tools":[{"name":"read_text_file","arguments":{"path":{"required":true,"path":{"roots":["/srv"],"no_symlinks":true}}}},
               {"name":"echo","arguments":{"message":{"pattern":"[a-z ]*","length":{"max":10}}},"schema":{"type":"object"}}],
      "resources":["file:///srv/a"],"pins":{"tools":{"echo":"0000000000000000000000000000000000000000000000000000000000000000"}}}],
      "limits":{"request_timeout_ms":500}}"#;

    fn code_at(s: &str) -> String {
        match Profile::decode(s.as_bytes()) {
            Ok(_) => panic!("accepted"),
            Err(r) => {
                assert_eq!(r.code().as_str(), "mcp_profile_invalid");
                r.location().to_owned()
            }
        }
    }

    #[test]
    fn decodes_a_good_profile() {
        let p = Profile::decode(GOOD.as_bytes()).expect("valid");
        let s = &p.servers()[0];
        assert_eq!(s.id(), "files");
        assert!(s.declares_sampling() && !s.declares_elicitation());
        assert_eq!(s.tools().len(), 2);
        assert_eq!(s.path_roots(), vec!["/srv".to_owned()]);
        assert_eq!(p.limits().request_timeout, Duration::from_millis(500));
        assert!(!s.tools()["echo"].lenient_input_schema());
        let lenient = GOOD.replacen(
            r#"{"name":"echo","#,
            r#"{"name":"echo","lenient_input_schema":true,"#,
            1,
        );
        let p = Profile::decode(lenient.as_bytes()).expect("valid");
        assert!(p.servers()[0].tools()["echo"].lenient_input_schema());
        assert!(!p.servers()[0].tools()["echo"].allow_hidden_characters());
        assert!(!p.servers()[0].tools()["echo"].raw_results());
        let open = GOOD.replacen(
            r#"{"name":"echo","#,
            r#"{"name":"echo","allow_hidden_characters":true,"raw_results":true,"#,
            1,
        );
        let p = Profile::decode(open.as_bytes()).expect("valid");
        assert!(p.servers()[0].tools()["echo"].allow_hidden_characters());
        assert!(p.servers()[0].tools()["echo"].raw_results());
    }

    #[test]
    fn refusals_are_located() {
        let sub = |a: &str, b: &str| code_at(&GOOD.replacen(a, b, 1));
        assert_eq!(sub(r#""files""#, r#""a__b""#), "servers[0].server_id");
        assert_eq!(sub(r#""files""#, r#""a_""#), "servers[0].server_id");
        assert_eq!(sub("/usr/bin/node", "node"), "servers[0].command.path");
        assert_eq!(
            sub("PATH=/usr/bin", "1X=y"),
            "servers[0].command.environment[0]"
        );
        assert_eq!(
            sub(r#""sampling""#, r#""roots""#),
            "servers[0].declare_capabilities"
        );
        assert_eq!(
            sub("[a-z ]*", "("),
            "servers[0].tools[1].arguments.message.pattern"
        );
        assert_eq!(
            sub(r#"{"type":"object"}"#, r#"{"format":"uri"}"#),
            "servers[0].tools[1].schema"
        );
        assert_eq!(sub("500", "0"), "limits.request_timeout_ms");
        assert_eq!(
            sub(r#""roots":["/srv"]"#, r#""roots":["/srv/../etc"]"#),
            "servers[0].tools[0].arguments.path.path.roots[0]"
        );
        // Duplicate keys are refused by the strict decoder.
        sub(
            r#""schema_version":1"#,
            r#""schema_version":1,"schema_version":1"#,
        );
        sub(r#""no_symlinks":true"#, r#""no_symlinks":true,"x":1"#);
    }
}
