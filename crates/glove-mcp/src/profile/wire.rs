//! The profile's wire form (what the file holds, strictly decoded) and its
//! validation into the checked [`Profile`] types.

use super::*;

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ProfileWire {
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
    pub(super) fn validate(self) -> Result<Profile, Rejection> {
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
