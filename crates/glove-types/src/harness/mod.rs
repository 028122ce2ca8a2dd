//! The agent harnesses: one file each, and their registry.
//!
//! Everything Glove knows about one harness is in its file, as a
//! [`Harness`] descriptor (pure data, and pure functions that write the
//! text of its configuration files):
//!
//! * [`Harness::executable_name`] and [`Harness::npm`] — the name
//!   discovery looks for, and how npm lays the harness out (detection and
//!   staging follow it to the file that really runs);
//! * [`Harness::staging`] — what `glove policy stage` copies, the state
//!   directories it refuses to read, and a cache made at stage time;
//! * [`Harness::home`] — the private home's managed environment, its
//!   directories and the credential lease's path;
//! * [`Harness::skills_directory`] — where library skills are expanded;
//! * [`Harness::mcp`] — the MCP configuration it reads, as written for
//!   Glove's relays;
//! * [`Harness::model`] — how it is pointed at a model endpoint: base URL
//!   and provider settings, the variable the key is read from and the
//!   header that carries it (what an egress policy brokers).
//!
//! The crates that do I/O (detection, staging and the managed start in
//! `glove-control`, the MCP relays in `glove-mcp`, `glove run`) read these
//! descriptors; none of them matches on a harness's name.
//!
//! **Adding a harness** is a new file here holding its `HARNESS`, its
//! registration (`pub mod <file>;` and one line in the `native_runtimes!`
//! list below, which makes the [`NativeRuntime`] variant, its place in
//! [`NativeRuntime::ALL`] and its arm in [`NativeRuntime::harness`]), and
//! its npm pin in `harnesses/package.json` (the install `.ci/run` makes).
//! `tests/it/harness.rs` lists the registered harnesses and checks each
//! descriptor covers every item; a sixth id is added to its list.

pub mod claude_code;
pub mod codex;
pub mod copilot;
pub mod opencode;
pub mod pi;

use serde::Serialize;

/// The agent's private home inside the sandbox.
pub const AGENT_HOME: &str = "/home/agent";

/// Everything Glove knows about one agent harness (see the module docs).
#[derive(Debug)]
#[non_exhaustive]
pub struct Harness {
    /// The runtime id templates, plans and receipts name.
    pub id: &'static str,
    /// The executable name looked for in a search directory, and the
    /// staged entry point `D/bin/<name>`.
    pub executable_name: &'static str,
    /// How npm lays it out.
    pub npm: Npm,
    /// What staging copies.
    pub staging: Staging,
    /// The private home: managed environment, directories, credential.
    pub home: PrivateHome,
    /// Where skills are expanded (a `SKILL.md` layout), inside the home.
    pub skills_directory: &'static str,
    /// The MCP configuration it reads.
    pub mcp: Mcp,
    /// How it is pointed at a model endpoint.
    pub model: ModelEndpoint,
}

/// How npm lays a harness out.
#[derive(Debug)]
pub struct Npm {
    /// The npm package (pinned in `harnesses/package.json`).
    pub package: &'static str,
    /// What really runs.
    pub runs: Runs,
}

/// What really runs when the harness's `.bin` entry is called.
#[derive(Debug)]
pub enum Runs {
    /// A native executable in a platform package (the package's own `bin`
    /// entry is a wrapper that finds it).
    PlatformBinary {
        /// The platform package (nested under the package or hoisted
        /// beside it).
        package: &'static str,
        /// The executable's path inside it.
        path: &'static str,
    },
    /// The package's `bin` script, under node.
    NodeScript {
        /// The interpreter staged with it (as `node/bin/node`).
        interpreter: &'static str,
    },
}

impl Npm {
    /// The platform package and the executable's path in it, when a
    /// native executable is what runs.
    pub const fn platform(&self) -> Option<(&'static str, &'static str)> {
        match self.runs {
            Runs::PlatformBinary { package, path } => Some((package, path)),
            Runs::NodeScript { .. } => None,
        }
    }
}

/// What `glove policy stage` copies, and what it refuses to read.
///
/// The closure follows from [`Npm::runs`]: for a platform binary, the
/// platform package (the executable and everything beside it) and the main
/// package's `package.json`; for a node script, the package and every
/// package its dependencies reach, as node finds them, and the
/// interpreter.
#[derive(Debug)]
pub struct Staging {
    /// Directories under the operator's `$HOME` where the harness keeps
    /// its own state: a source inside one is refused
    /// (`stage_source_in_harness_home`).
    pub user_state: &'static [&'static str],
    /// A cache the harness would otherwise unpack on its first start,
    /// made at stage time and staged with it.
    pub package_cache: Option<PackageCache>,
}

/// A package cache made at stage time (see [`Staging::package_cache`]).
#[derive(Debug)]
pub struct PackageCache {
    /// The variable that points a session at the staged cache.
    pub variable: &'static str,
    /// The cache's directory in the closure.
    pub directory: &'static str,
    /// How it is produced (the I/O is in `glove-control`'s staging).
    pub producer: CacheProducer,
}

/// How a package cache is produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheProducer {
    /// The staged copy runs its own extract-only mode inside a Glove
    /// sandbox and writes the cache to stdout as a ustar stream, which
    /// Glove unpacks itself (`glove_control::stage::copilot`).
    CopilotExtractOnly,
}

impl Staging {
    /// The environment a template running the closure stored at `store`
    /// needs (what `glove policy stage` suggests to `generate`): the staged
    /// interpreter first on `PATH` (a node script), then the package
    /// cache's variable.
    pub fn environment(&self, runs: &Runs, store: &str) -> Vec<String> {
        let mut out = Vec::new();
        if let Runs::NodeScript { .. } = runs {
            out.push(format!("PATH={store}/node/bin:/usr/bin:/bin"));
        }
        if let Some(c) = &self.package_cache {
            out.push(format!("{}={store}/{}", c.variable, c.directory));
        }
        out
    }
}

/// The private home a managed session gets for the harness.
#[derive(Debug)]
pub struct PrivateHome {
    /// The environment the adapter manages besides `HOME`: where the
    /// harness keeps its state, always inside the private home. Sorted
    /// `NAME=value` entries; template environments cannot set these names.
    pub managed_environment: &'static [&'static str],
    /// The directories the home starts with (parents first): the managed
    /// state directories and the skill directory.
    pub directories: &'static [&'static str],
    /// Where the harness keeps its login token: the exact path a
    /// credential lease is placed at (a file of the agent's own).
    pub credential_path: &'static str,
}

/// One MCP server as a harness configuration names it: a stdio command.
#[derive(Clone, Copy, Debug)]
pub struct McpServer<'a> {
    /// The server id (the profile's; plain ASCII).
    pub id: &'a str,
    /// The command (Glove's relay inside the sandbox).
    pub command: &'a str,
    /// Its arguments.
    pub args: &'a [&'a str],
}

/// The format of a configuration file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigFormat {
    /// TOML.
    Toml,
    /// JSON.
    Json,
}

/// The MCP configuration a harness reads, as Glove writes it.
#[derive(Debug)]
pub enum Mcp {
    /// Glove writes these files into the private home.
    Files {
        /// Directories the files need, made in the home first.
        directories: &'static [&'static str],
        /// The files' format.
        format: ConfigFormat,
        /// The files (absolute path in the home, text) naming `servers`.
        write: fn(servers: &[McpServer<'_>]) -> Vec<(String, String)>,
    },
    /// Glove writes nothing for this harness (yet); the reason says why.
    NotWritten {
        /// Why, for a reader.
        reason: &'static str,
    },
}

/// The wire API a harness speaks to its model endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelApi {
    /// OpenAI Responses (`POST /v1/responses`).
    OpenaiResponses,
    /// OpenAI Chat Completions (`POST /v1/chat/completions`).
    OpenaiChatCompletions,
    /// Anthropic Messages (`POST /v1/messages`).
    AnthropicMessages,
}

/// How a header's value carries the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyFormat {
    /// `Bearer <key>`.
    Bearer,
    /// The key itself.
    Plain,
}

impl KeyFormat {
    /// The header value for `key`.
    pub fn value(self, key: &str) -> String {
        match self {
            Self::Bearer => format!("Bearer {key}"),
            Self::Plain => key.to_owned(),
        }
    }
}

/// A model endpoint to point a harness at.
#[derive(Clone, Copy, Debug)]
pub struct Endpoint<'a> {
    /// The endpoint's origin as the sandbox reaches it (`http://host:port`,
    /// no path): each harness adds the path prefix its API wants.
    pub base_url: &'a str,
    /// The model to ask for (a harness whose provider takes only its own
    /// catalogue says so in its file).
    pub model: &'a str,
}

/// Template arguments and environment entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// Arguments, in order (placed before the prompt).
    pub arguments: Vec<String>,
    /// `NAME=value` entries.
    pub environment: Vec<String>,
}

/// How a harness is pointed at a model endpoint with a brokered key.
#[derive(Debug)]
pub struct ModelEndpoint {
    /// The API it speaks there.
    pub api: ModelApi,
    /// The variable it reads the key from (in a session with a brokered
    /// key: the placeholder).
    pub key_variable: &'static str,
    /// The request header that carries the key (lowercase), which the
    /// egress proxy's broker rewrites.
    pub key_header: &'static str,
    /// How the header's value holds the key.
    pub key_format: KeyFormat,
    /// The template arguments and environment that point it at an
    /// endpoint (base URL, provider settings, the variable above).
    pub settings: fn(&Endpoint<'_>) -> Settings,
    /// Where, among the operator's own arguments for it, the endpoint's
    /// arguments go (`glove run --agent`): an index into them (a harness
    /// whose one-turn mode is a subcommand takes its options after it).
    pub arguments_at: fn(&[String]) -> usize,
    /// The vendor's own endpoint and a model there, used when no
    /// endpoint is given (`None`: the harness has no vendor default Glove
    /// can point it at; an endpoint must be given).
    pub vendor: Option<Endpoint<'static>>,
}

/// The endpoint's arguments go first (see [`ModelEndpoint::arguments_at`]).
pub fn arguments_first(_: &[String]) -> usize {
    0
}

macro_rules! native_runtimes {
    ($( $(#[$m:meta])* $v:ident => $file:ident ),+ $(,)?) => {
        /// The registered harnesses (native runtimes with a built-in
        /// discovery surface), each described by its file.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
        #[serde(rename_all = "kebab-case")]
        pub enum NativeRuntime {
            $( $(#[$m])* $v ),+
        }

        impl NativeRuntime {
            /// How many harnesses are registered.
            pub const COUNT: usize = [ $( stringify!($v) ),+ ].len();

            /// Every registered harness, in registry order.
            pub const ALL: [NativeRuntime; Self::COUNT] = [ $( Self::$v ),+ ];

            /// Its descriptor.
            pub const fn harness(self) -> &'static Harness {
                match self { $( Self::$v => &$file::HARNESS ),+ }
            }
        }
    };
}

// The registration: one line per harness (its variant and its file).
native_runtimes! {
    /// OpenAI Codex (`codex`).
    Codex => codex,
    /// Anthropic Claude Code (`claude`).
    ClaudeCode => claude_code,
    /// pi coding agent (`pi`).
    Pi => pi,
    /// GitHub Copilot CLI (`copilot`).
    Copilot => copilot,
    /// opencode (`opencode`).
    Opencode => opencode,
}

impl NativeRuntime {
    /// Parses a runtime id.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|r| r.runtime_id() == s)
    }

    /// The runtime id.
    pub const fn runtime_id(self) -> &'static str {
        self.harness().id
    }

    /// The executable name discovery looks for.
    pub const fn executable_name(self) -> &'static str {
        self.harness().executable_name
    }

    /// The adapter's skill directory inside the private home.
    pub const fn skill_directory(self) -> &'static str {
        self.harness().skills_directory
    }

    /// The environment the adapter manages (besides `HOME`): where the
    /// harness keeps its state, always inside the private home. Template
    /// environments cannot set these names.
    pub const fn managed_environment(self) -> &'static [&'static str] {
        self.harness().home.managed_environment
    }

    /// The directories the private home starts with (parents first): the
    /// managed state directories and the skill directory.
    pub const fn home_directories(self) -> &'static [&'static str] {
        self.harness().home.directories
    }

    /// Where the adapter keeps its login token: the exact path a
    /// credential lease is placed at (a file of the agent's own).
    pub const fn credential_path(self) -> &'static str {
        self.harness().home.credential_path
    }
}

/// Every registered harness's descriptor, in registry order.
pub fn all() -> impl Iterator<Item = &'static Harness> {
    NativeRuntime::ALL.iter().map(|r| r.harness())
}

/// The descriptor of a runtime id.
pub fn by_id(id: &str) -> Option<&'static Harness> {
    NativeRuntime::parse(id).map(NativeRuntime::harness)
}

/// Whether any harness's private home manages the variable `name`.
pub fn manages_variable(name: &str) -> bool {
    all().any(|h| {
        h.home
            .managed_environment
            .iter()
            .any(|e| e.split_once('=').is_some_and(|(n, _)| n == name))
    })
}

/// Whether `name` (a directory directly under `$HOME`) is any harness's
/// own state directory, which staging never reads.
pub fn is_user_state_directory(name: &str) -> bool {
    all().any(|h| h.staging.user_state.contains(&name))
}

/// The MCP configurations of every harness that reads one, naming
/// `servers`: the directories to make first, and the files (absolute path,
/// text), in registry order. A session gets all of them, whichever harness
/// it runs (the harness may be an arbitrary executable).
pub fn mcp_configurations(servers: &[McpServer<'_>]) -> (Vec<&'static str>, Vec<(String, String)>) {
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    for h in all() {
        if let Mcp::Files {
            directories, write, ..
        } = &h.mcp
        {
            dirs.extend_from_slice(directories);
            files.extend(write(servers));
        }
    }
    (dirs, files)
}

/// A string as a TOML basic string. For the plain ASCII ids and paths the
/// configurations hold (no quotes, backslashes or control characters)
/// JSON's escaping is valid TOML basic-string escaping.
pub(crate) fn toml_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// The arguments as strings.
pub(crate) fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}
