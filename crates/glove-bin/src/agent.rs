//! `glove run --agent NAME`: one command from a harness and a key to a
//! contained turn whose work comes back (docs/quickstart.md).
//!
//! The preset reads the harness's file (`glove_types::harness`) and fills
//! in what `glove exec` and `glove run` take: the harness found
//! ([`find`]), its private home and managed environment, its provider
//! pointed at the model endpoint through the session's egress proxy with
//! the key brokered ([`model`]: the sandbox holds a per-session
//! placeholder only), the MCP profile's servers mediated as `glove run`
//! mediates them, and `--workspace` retained. The session is then the one
//! assembly's, as for `glove exec`; at the end the outcome, the egress and
//! MCP counts, the workspace's `glove diff --stat` and the `glove apply`
//! command are printed on standard error.

mod find;
pub(crate) mod model;

use crate::report::print_json;
use glove_control::assembly::egress::EgressInput;
use glove_types::codes::cli::{AGENT_KEY_MISSING, AGENT_UNKNOWN};
use glove_types::{ErrorCode, Rejection};
use std::path::PathBuf;

/// The flags of `glove run` that make it run an agent preset.
#[derive(Debug, Default, clap::Args)]
pub struct AgentArgs {
    /// Run this agent harness as a preset: codex, claude-code, pi, copilot
    /// or opencode (the arguments after `--` are the harness's own).
    #[arg(long, value_name = "NAME", conflicts_with = "egress")]
    pub agent: Option<String>,
    /// The model endpoint's origin, `http://HOST:PORT` (plain HTTP, for a
    /// loopback or trusted endpoint) or `https://HOST[:PORT]` [default:
    /// the harness's vendor].
    #[arg(long, value_name = "URL", requires = "agent")]
    pub model: Option<String>,
    /// The model to ask for [default: the vendor's, else `default`].
    #[arg(long, value_name = "NAME", requires = "agent")]
    pub model_name: Option<String>,
    /// The API key, in a file of yours of mode 0600; brokered by the
    /// egress proxy (the sandbox sees a placeholder).
    #[arg(
        long,
        value_name = "FILE",
        requires = "agent",
        conflicts_with = "key_env"
    )]
    pub key_file: Option<PathBuf>,
    /// The API key, in this variable of glove's own environment.
    #[arg(long, value_name = "VAR", requires = "agent")]
    pub key_env: Option<String>,
    /// Also let the agent reach HOST:PORT through the proxy (repeatable).
    #[arg(long, value_name = "HOST:PORT", requires = "agent")]
    pub allow: Vec<String>,
    /// Let --allow name loopback, private and link-local addresses.
    #[arg(long, requires = "agent")]
    pub allow_private: bool,
    /// The proxy resolves NAME (the --model host or an --allow host) to
    /// IP, and, once given, resolves names through --resolve only
    /// (repeatable): e.g. an HTTPS test endpoint on loopback, reached by
    /// name through the proxy.
    #[arg(long, value_name = "NAME:IP", requires = "agent")]
    pub resolve: Vec<String>,
    /// The directory holding the harness's executable (an npm `bin`
    /// directory, or `node_modules`) [default: the copy `glove setup`
    /// staged, else the usual npm install locations].
    #[arg(long, value_name = "DIR", requires = "agent")]
    pub harness_path: Option<PathBuf>,
}

/// A refusal of the preset: a code, a message and a one-line hint.
#[derive(Debug)]
pub(crate) struct AgentError {
    code: ErrorCode,
    message: String,
    hint: String,
}

impl AgentError {
    pub(crate) fn new(code: ErrorCode, message: String, hint: impl Into<String>) -> Self {
        AgentError {
            code,
            message,
            hint: hint.into(),
        }
    }

    /// As a rejection (the hint appended to the message).
    pub(crate) fn rejection(&self) -> Rejection {
        if self.hint.is_empty() {
            return Rejection::new(self.code, self.message.clone());
        }
        Rejection::new(self.code, format!("{}; hint: {}", self.message, self.hint))
    }

    fn from_rejection(r: &Rejection) -> Self {
        AgentError::new(r.code(), r.message().to_owned(), "")
    }

    /// Prints it (two lines, or one JSON object) and returns the exit
    /// status of a launch that did not happen.
    fn fail(&self, json: bool) -> i32 {
        if json {
            print_json(&serde_json::json!({
                "code": self.code.as_str(),
                "message": self.message,
                "hint": self.hint,
            }));
        } else {
            eprintln!("error[{}]: {}", self.code, self.message);
            if !self.hint.is_empty() {
                eprintln!("hint: {}", self.hint);
            }
        }
        crate::exec::EXIT_LAUNCH_FAILED
    }
}

/// A key read from a variable, kept for the proxy in a private file until
/// the proxy has read it (removed on drop).
pub(crate) struct TempKey {
    path: PathBuf,
}

impl Drop for TempKey {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Writes the value of `var` to a new file of mode 0600 in a private
/// directory of glove's state.
fn key_from_env(var: &str, session: &str) -> Result<TempKey, AgentError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt;
    let missing = |m: String| {
        AgentError::new(
            AGENT_KEY_MISSING,
            m,
            format!("export {var}=… first, or give --key-file FILE"),
        )
    };
    let value = std::env::var(var).map_err(|_| missing(format!("--key-env {var}: not set")))?;
    if value.trim().is_empty() {
        return Err(missing(format!("--key-env {var}: empty")));
    }
    let base = crate::report::state_home()
        .ok_or_else(|| missing("neither XDG_STATE_HOME nor HOME is set".into()))?
        .join("glove/agent-keys");
    glove_control::assembly::egress::journal_dir(&base)
        .map_err(|e| AgentError::from_rejection(&e.local()))?;
    // Keys a killed run left behind (nothing reads them once the proxy
    // that needed them is gone) go first: older than a day.
    let day = std::time::Duration::from_secs(86_400);
    for e in std::fs::read_dir(&base).into_iter().flatten().flatten() {
        let old = e
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > day);
        if old && e.file_name().to_string_lossy().ends_with(".key") {
            let _ = std::fs::remove_file(e.path());
        }
    }
    let path = base.join(format!("{session}.key"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| missing(format!("{}: {e}", path.display())))?;
    let key = TempKey { path };
    f.write_all(value.trim_end_matches('\n').as_bytes())
        .map_err(|e| missing(format!("{}: {e}", key.path.display())))?;
    Ok(key)
}

/// What the preset hands to the one assembly beside the flags.
pub(crate) struct Preset {
    /// The egress part's input (the proxy, the brokered key).
    pub(crate) egress: Option<EgressInput>,
    /// The private home's directories.
    pub(crate) home_dirs: Vec<String>,
    /// A key file of glove's own, removed once the proxy has read it.
    pub(crate) temp_key: Option<TempKey>,
    /// The harness's id, for the end of the run.
    pub(crate) id: &'static str,
}

/// Runs `glove run --agent …`.
pub fn run(mut a: crate::run::RunArgs) -> i32 {
    glove_sandbox::launch::trace_mark("agent start");
    let json = a.exec.json;
    let session_id = match glove_control::assembly::local::session_id("agent") {
        Ok(id) => id,
        Err(r) => return AgentError::from_rejection(&r).fail(json),
    };
    let mcp = match &a.profile {
        Some(_) => match crate::run::mcp_input(&a, &session_id) {
            Ok(m) => Some(m),
            Err(r) => return AgentError::from_rejection(&r).fail(json),
        },
        None => None,
    };
    let preset = match prepare(&mut a, session_id.as_str()) {
        Ok(p) => p,
        Err(e) => return e.fail(json),
    };
    crate::exec::run_preset(a.exec, session_id, mcp, preset)
}

/// Reads the preset's flags and changes the exec flags: the command, the
/// binds, the environment; returns the rest.
fn prepare(a: &mut crate::run::RunArgs, session: &str) -> Result<Preset, AgentError> {
    let g = &a.agent;
    let name = g.agent.as_deref().unwrap_or_default();
    let Some(h) = glove_types::harness::by_id(name) else {
        let known: Vec<&str> = glove_types::harness::all().map(|h| h.id).collect();
        return Err(AgentError::new(
            AGENT_UNKNOWN,
            format!("--agent {name:?} is not a harness Glove knows"),
            format!("one of: {}", known.join(", ")),
        ));
    };
    let model = model::resolve(h, g.model.as_deref(), g.model_name.as_deref())?;
    let allow = model::allows(&g.allow, g.allow_private)?;
    let resolved = model::resolves(&g.resolve, &model, &allow, g.allow_private)?;
    // A private model endpoint lets the whole session's egress reach
    // private addresses (the proxy decides that per policy): other hosts
    // next to it need the operator to say so.
    if model.is_private(&resolved) && !allow.is_empty() && !g.allow_private {
        return Err(AgentError::new(
            glove_types::codes::cli::AGENT_ALLOW_PRIVATE,
            "with a private --model endpoint, every --allow host may reach private addresses too"
                .into(),
            "add --allow-private to accept that, or give a public model endpoint",
        ));
    }
    let (key_path, temp_key) = match (&g.key_file, &g.key_env) {
        (Some(f), _) => (model::key_file(f)?, None),
        (None, Some(v)) => {
            let t = key_from_env(v, session)?;
            (t.path.clone(), Some(t))
        }
        (None, None) => {
            return Err(AgentError::new(
                AGENT_KEY_MISSING,
                "no API key given".into(),
                "give --key-file FILE (mode 0600) or --key-env VAR",
            ))
        }
    };
    glove_sandbox::launch::trace_mark("agent: find");
    let found = find::locate(h, g.harness_path.as_deref())?;
    glove_sandbox::launch::trace_mark("agent: found");
    exposes_nothing_private(&found.ro_binds, &key_path)?;
    let settings =
        model::egress_settings(h, &model, &allow, g.allow_private, &resolved, &key_path)?;
    let extra_roots = crate::egress::read_extra_roots(&a.exec.egress_ca)
        .map_err(|r| AgentError::from_rejection(&r))?;
    let journal = crate::egress::default_journal_dir()
        .map_err(|r| AgentError::from_rejection(&r))?
        .join(format!("{session}.journal"));

    // The harness's command: its own arguments with the endpoint's placed
    // where it takes them.
    let endpoint = (h.model.settings)(&glove_types::harness::Endpoint {
        base_url: &model.base_url,
        model: &model.name,
    });
    let user = std::mem::take(&mut a.exec.command);
    let at = (h.model.arguments_at)(&user).min(user.len());
    let mut command = found.command.clone();
    command.extend_from_slice(&user[..at]);
    command.extend(endpoint.arguments);
    command.extend_from_slice(&user[at..]);
    a.exec.command = command;
    a.exec.ro_bind.extend(found.ro_binds.iter().cloned());

    // The environment: the private home's managed variables, what the
    // staged closure needs, the provider's settings; the operator's own
    // --env entries last (they win).
    let mut env: Vec<String> = h
        .home
        .managed_environment
        .iter()
        .map(|e| (*e).to_owned())
        .collect();
    env.extend(found.env.iter().cloned());
    env.extend(endpoint.environment);
    if let Ok(t) = std::env::var("TERM") {
        env.push(format!("TERM={t}"));
    }
    let mut merged: Vec<String> = Vec::new();
    for e in env.into_iter().chain(std::mem::take(&mut a.exec.env)) {
        let n = e.split('=').next().unwrap_or_default().to_owned();
        merged.retain(|x| x.split('=').next() != Some(n.as_str()));
        merged.push(e);
    }
    a.exec.env = merged;

    // A terminal for the harness's own UI when glove has one and no
    // one-turn mode was asked for in JSON.
    if !a.exec.json && !a.exec.pty && user.is_empty() {
        use std::io::IsTerminal;
        a.exec.pty = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    }

    let mut parts = vec![format!(
        "glove: {} {} ({})",
        h.id, found.version, found.from
    )];
    parts.push(format!(
        "model {} ({}) through the egress proxy, key brokered",
        model.shown, model.name
    ));
    if let Some(p) = &a.profile {
        parts.push(format!("MCP profile {}", p.display()));
    }
    if let Some(w) = &a.exec.workspace {
        parts.push(format!("workspace {} retained", w.display()));
    }
    eprintln!("{}; preparing the sandbox", parts.join("; "));

    Ok(Preset {
        egress: Some(EgressInput {
            settings,
            extra_roots,
            journal,
        }),
        home_dirs: h.home.directories.iter().map(|d| (*d).to_owned()).collect(),
        temp_key,
        id: h.id,
    })
}

/// The end of an agent's run, for a person (standard error): its exit,
/// and the workspace's change summary with the command that takes it.
pub(crate) fn report_end(id: &str, status: i32, workspace: Option<&serde_json::Value>) {
    eprintln!("glove: {id} ended with exit status {status}");
    let Some(w) = workspace else {
        return;
    };
    let Some(session) = w["session_id"].as_str() else {
        return;
    };
    if w["changed"] != true {
        eprintln!("glove: the workspace is unchanged");
        return;
    }
    match crate::diff::stat_text(session) {
        Ok(text) => {
            eprintln!("glove diff --stat {session}:");
            eprint!("{text}");
        }
        Err(r) => eprintln!(
            "glove: the workspace's diff: {}",
            crate::report::error_line(&r)
        ),
    }
    eprintln!("glove: take the changes with `glove apply {session}`");
}

/// Refuses a harness mount that would show the agent the key file, Glove's
/// own configuration or state, or a whole home directory (the sandbox may
/// run as the operator's own uid, which can read them).
fn exposes_nothing_private(binds: &[String], key: &std::path::Path) -> Result<(), AgentError> {
    let layout = crate::layout::Layout::current();
    let mut private: Vec<PathBuf> = vec![key.to_path_buf()];
    if let Some(l) = &layout {
        private.extend([l.config.clone(), l.state.clone()]);
    }
    let home = layout.as_ref().and_then(|l| l.home.clone());
    for b in binds {
        let b = std::path::Path::new(b);
        let holds = private.iter().find(|p| p.starts_with(b));
        let is_home = home.as_ref().is_some_and(|h| h.starts_with(b));
        if let Some(p) = holds
            .map(|p| p.display().to_string())
            .or_else(|| is_home.then(|| "the home directory".to_owned()))
        {
            return Err(AgentError::new(
                glove_types::codes::cli::AGENT_UNSAFE_INSTALL,
                format!(
                    "the harness at {} would be mounted with {p} inside it",
                    b.display()
                ),
                "install the harness with npm, or stage it with `glove policy stage`, outside your home and Glove's directories",
            ));
        }
    }
    Ok(())
}
