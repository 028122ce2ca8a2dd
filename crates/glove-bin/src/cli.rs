//! The `glove` command line.

use crate::report::{error_json, error_line, print_json, EXIT_OK, EXIT_REJECTED};
use crate::{explain, protected};
use clap::{Args, Parser, Subcommand};
use glove_types::codes::file::{FILE_IO, FILE_NOT_FOUND, FILE_TOO_LARGE};
use glove_types::plan::{admit, DecodedPlan, MAX_PLAN_BYTES};
use glove_types::policy::{Explanation, ValidatedPolicy};
use glove_types::{Blake3Digest, Rejection};
use serde_json::json;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The one-line description of `glove` (shared by [`Cli`] and [`ExecCli`]).
const ABOUT: &str = "Run AI coding agents in a Linux sandbox under operator-owned policy, with authenticated receipts";

/// Glove runs AI coding agents inside a Linux sandbox under operator-owned
/// policy and keeps authenticated receipts of what each session used.
#[derive(Debug, Parser)]
#[command(
    name = "glove",
    version,
    about = ABOUT
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Make what a managed service needs: directories, keys, a starter
    /// policy and gloved's config file (docs/operations.md).
    Setup(crate::setup::SetupArgs),
    /// Check and explain a session policy.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Write, format and check controller plans.
    #[command(subcommand)]
    Plan(PlanCommand),
    /// Run one command inside the sandbox with the built-in default profile.
    Exec(crate::exec::ExecArgs),
    /// Run one command inside the sandbox as `exec` does, with its MCP tool
    /// calls mediated under an MCP profile (docs/mcp.md); with --agent, a
    /// coding agent with its model endpoint, a brokered key and a retained
    /// workspace (docs/quickstart.md).
    Run(Box<crate::run::RunCommand>),
    /// Check or show an MCP audit journal.
    #[command(subcommand)]
    Audit(crate::audit::AuditCommand),
    /// Inside the sandbox of `glove run`: the stdio MCP server a harness
    /// runs for one upstream (relays to Glove's mediator).
    #[command(name = "mcp-relay", hide = true)]
    McpRelay {
        /// The upstream server's id.
        server: String,
    },
    /// The upstream of `glove run demo`: a small stdio MCP server.
    #[command(name = "mcp-demo-server", hide = true)]
    McpDemoServer {
        /// The directory its tools are about.
        #[arg(long)]
        root: std::path::PathBuf,
    },
    /// Inside the sandbox of `glove run demo`: the scripted agent.
    #[command(name = "mcp-demo-agent", hide = true)]
    McpDemoAgent {
        /// The directory the demo's files are in (a host path).
        #[arg(long)]
        root: String,
        /// Print to standard error (standard output is the outcome
        /// record's).
        #[arg(long)]
        to_stderr: bool,
    },
    /// Show what the running gloved service advertises.
    Capabilities(crate::control::client_cli::CapabilitiesArgs),
    /// Validate plans, create sessions and show their status through gloved.
    #[command(subcommand)]
    Session(crate::control::client_cli::SessionCommand),
    /// Page and acknowledge receipts through gloved.
    #[command(subcommand)]
    Receipts(crate::control::client_cli::ReceiptsCommand),
    /// Read a session's egress journal.
    #[command(subcommand)]
    Egress(crate::egress::EgressCommand),
    /// Bring a retained stage's changes into its source; make the owner's apply key and sign authorizations (docs/apply.md).
    ///
    /// `glove apply keygen` and `glove apply sign`; `glove apply SESSION`
    /// (applying a retained stage) is not available yet.
    Apply(crate::apply::ApplyCommand),
    /// Run the whole managed-session flow (gloved, create, authorize, start,
    /// attach, a shell saying hello, receipt) in a temporary directory.
    Demo,
    /// Show what an agent changed in a retained workspace (docs/apply.md).
    Diff(crate::diff::DiffArgs),
    /// List and remove retained stages.
    #[command(subcommand)]
    Stages(crate::diff::StagesCommand),
    /// Install and drive gloved as a systemd service (a user unit; a system
    /// unit for root).
    #[command(subcommand)]
    Daemon(crate::daemon::DaemonCommand),
    /// Expose a project to managed sessions: ask the running gloved (owner
    /// socket) for an exposure beneath a root of its exposure policy.
    Init(crate::init::InitArgs),
    /// List or revoke path exposures (docs/operations.md).
    #[command(subcommand)]
    Exposures(crate::init::ExposuresCommand),
}

/// `glove policy …`
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Validate a policy file (read as a protected file); exit 0 when valid.
    Validate(PolicyFile),
    /// Show what a policy allows, per runtime template.
    Explain(PolicyFile),
    /// Find the agent harnesses (codex, claude-code, pi, copilot, opencode)
    /// in a search directory: the file that really runs, its version, and
    /// whether the directories are safe to launch from.
    Detect(DetectArgs),
    /// Print one strict `runtime_templates[]` entry, its adapter command
    /// digest computed, for a pinned executable or explicit search paths.
    Generate(Box<GenerateArgs>),
    /// Copy a harness's closure from an npm install into a protected
    /// directory, content-addressed (`D/store/<digest>`), and link its
    /// entry point `D/bin/<name>` (never overwriting one).
    Stage(StageArgs),
}

/// Arguments of `glove policy stage`.
#[derive(Debug, Args)]
pub struct StageArgs {
    /// The runtime id (`codex`, `claude-code`, `pi`, `copilot`, `opencode`).
    #[arg(long, value_name = "ID")]
    pub runtime: String,
    /// The npm install: its `node_modules` directory, a `.bin` entry, or the
    /// real executable (absolute).
    #[arg(long, value_name = "PATH")]
    pub source: PathBuf,
    /// The protected directory to stage into (absolute; created 0755 if
    /// missing; it and its ancestors must be owned by root or you and
    /// writable by nobody else).
    #[arg(long, value_name = "DIR")]
    pub directory: PathBuf,
    /// Show what would be copied (files, bytes, digest, entry point) and
    /// write nothing.
    #[arg(long, conflicts_with = "yes")]
    pub dry_run: bool,
    /// Stage.
    #[arg(long)]
    pub yes: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `glove policy generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// The runtime id (`codex`, `claude-code`, `pi`, `copilot`, `opencode`,
    /// or another id with `--executable`).
    #[arg(long, value_name = "ID")]
    pub runtime: String,
    /// The pinned executable (canonicalized; it must exist).
    #[arg(long, value_name = "FILE", conflicts_with = "search_path")]
    pub executable: Option<PathBuf>,
    /// A discovery directory, in search order (repeatable; canonicalized;
    /// the runtime's executable must be in one of them).
    #[arg(long, value_name = "DIR", required_unless_present = "executable")]
    pub search_path: Vec<PathBuf>,
    /// The template id.
    #[arg(long, value_name = "ID")]
    pub template_id: String,
    /// An argument (repeatable, kept in order).
    #[arg(long = "arg", value_name = "ARG", allow_hyphen_values = true)]
    pub arguments: Vec<String>,
    /// An environment entry NAME=value (repeatable).
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub environment: Vec<String>,
    /// A read-only dependency path (repeatable).
    #[arg(long = "ro", value_name = "PATH")]
    pub read_only_paths: Vec<PathBuf>,
    /// A path alias the template allows (repeatable).
    #[arg(long = "alias", value_name = "ALIAS")]
    pub aliases: Vec<String>,
    /// A library projection destination the template allows (repeatable).
    #[arg(long = "projection-destination", value_name = "ALIAS")]
    pub destinations: Vec<String>,
    /// The sandbox backend.
    #[arg(long, value_name = "BACKEND", default_value = "linux_production")]
    pub sandbox_backend: String,
    /// A model endpoint preset (the same as `glove run --agent`'s).
    #[command(flatten)]
    pub model: crate::generate_cmd::ModelPreset,
}

/// Arguments of `glove policy detect`.
#[derive(Debug, Args)]
pub struct DetectArgs {
    /// The directory to inspect (absolute; an npm `bin` directory, say).
    #[arg(long, value_name = "DIR")]
    pub search_path: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// A policy file argument.
#[derive(Debug, Args)]
pub struct PolicyFile {
    /// The policy file: regular, owned by you, mode 0600, one link, at most 1 MiB.
    #[arg(long, value_name = "FILE")]
    pub file: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `glove plan …`
#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// Admit or reject a plan against a policy; prints the plan digests.
    Check(PlanCheck),
    /// Write a plan from a policy: a template, a profile, path grants,
    /// projections and secrets; admitted against the policy before it is
    /// written.
    New(Box<crate::plan_new::PlanNew>),
    /// Print (or rewrite with --in-place) a hand-edited plan in canonical
    /// form.
    Fmt(crate::plan_new::PlanFmt),
}

/// Arguments of `glove plan check`.
#[derive(Debug, Args)]
pub struct PlanCheck {
    /// The policy file (protected, as for `policy validate`).
    #[arg(long, value_name = "FILE")]
    pub policy: PathBuf,
    /// The plan file: canonical JSON, at most 64 KiB.
    #[arg(long, value_name = "FILE")]
    pub plan: PathBuf,
    /// The time to check expiry against, in Unix milliseconds (default: now).
    #[arg(long, value_name = "MS")]
    pub now: Option<u64>,
    /// The controller's BLAKE3 plan digest, verified when given.
    #[arg(long, value_name = "HEX")]
    pub controller_digest: Option<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The command line with `exec` as its only command: `glove exec` is
/// parsed with it, which builds one command's arguments instead of every
/// command's (a tenth of a millisecond of each sandbox launch). The name,
/// version and texts are those of [`Cli`], so `glove exec` reads, helps and
/// fails exactly alike (a test compares them).
#[derive(Debug, Parser)]
#[command(
    name = "glove",
    version,
    about = ABOUT
)]
pub struct ExecCli {
    /// What to do.
    #[command(subcommand)]
    pub command: ExecOnly,
}

/// The one command of [`ExecCli`].
#[derive(Debug, Subcommand)]
pub enum ExecOnly {
    /// Run one command inside the sandbox with the built-in default profile.
    Exec(crate::exec::ExecArgs),
}

/// Makes a closed standard output (`glove … | head`) end the process as a
/// broken pipe ends a C program (status 128 + SIGPIPE, silently), instead
/// of a panic: `println!` panics when its write fails. Every other panic
/// goes to the default hook.
fn quiet_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let text = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if text.starts_with("failed printing to std") && text.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}

/// Parses the process's arguments (with the `exec` fast path) and runs.
pub fn main() -> i32 {
    quiet_broken_pipe();
    let mut args = std::env::args_os();
    if args.nth(1).is_some_and(|a| a == "exec") {
        let ExecCli {
            command: ExecOnly::Exec(a),
        } = ExecCli::parse();
        return crate::exec::run(a);
    }
    run(Cli::parse())
}

/// Runs a parsed command and returns the exit status.
pub fn run(cli: Cli) -> i32 {
    match cli.command {
        Command::Setup(a) => crate::setup::run(&a),
        Command::Policy(PolicyCommand::Validate(a)) => policy_validate(&a),
        Command::Policy(PolicyCommand::Explain(a)) => policy_explain(&a),
        Command::Policy(PolicyCommand::Detect(a)) => policy_detect(&a),
        Command::Policy(PolicyCommand::Generate(a)) => crate::generate_cmd::policy_generate(&a),
        Command::Policy(PolicyCommand::Stage(a)) => crate::stage::run(&a),
        Command::Plan(PlanCommand::Check(a)) => plan_check(&a),
        Command::Plan(PlanCommand::New(a)) => crate::plan_new::plan_new(&a),
        Command::Plan(PlanCommand::Fmt(a)) => crate::plan_new::plan_fmt(&a),
        Command::Exec(a) => crate::exec::run(a),
        Command::Run(c) => crate::run::command(*c),
        Command::Audit(c) => crate::audit::command(&c),
        Command::McpRelay { server } => glove_mcp::relay::run(&server),
        Command::McpDemoServer { root } => glove_mcp::demo::server(&root),
        Command::McpDemoAgent { root, to_stderr } => glove_mcp::demo::agent(&root, to_stderr),
        Command::Capabilities(a) => crate::control::client_cli::capabilities(&a),
        Command::Session(c) => crate::control::client_cli::session(&c),
        Command::Receipts(c) => crate::control::client_cli::receipts(&c),
        Command::Egress(c) => crate::egress::command(&c),
        Command::Apply(c) => crate::apply::command(&c),
        Command::Demo => crate::demo::run(),
        Command::Diff(a) => crate::diff::diff(&a),
        Command::Stages(c) => crate::diff::stages_command(&c),
        Command::Daemon(c) => crate::daemon::command(&c),
        Command::Init(a) => crate::init::init(&a),
        Command::Exposures(c) => crate::init::command(&c),
    }
}

pub(crate) fn fail(e: &Rejection, json: bool, extra: Option<(&str, serde_json::Value)>) -> i32 {
    if json {
        let mut v = error_json(e);
        if let (Some((k, x)), Some(m)) = (extra, v.as_object_mut()) {
            m.insert(k.to_owned(), x);
        }
        print_json(&v);
    } else {
        eprintln!("{}", error_line(e));
    }
    EXIT_REJECTED
}

fn policy_detect(a: &DetectArgs) -> i32 {
    let d = match glove_control::harness::detect(&a.search_path) {
        Ok(d) => d,
        Err(e) => return fail(&e, a.json, None),
    };
    if a.json {
        print_json(&d);
        return EXIT_OK;
    }
    let safe = d["search_path_safe"] == true;
    println!(
        "{}: {}",
        d["search_path"].as_str().unwrap_or(""),
        if safe {
            "safe to launch from"
        } else {
            "NOT safe to launch from"
        }
    );
    for p in d["search_path_problems"].as_array().into_iter().flatten() {
        println!("  - {}", p.as_str().unwrap_or(""));
    }
    for r in d["runtimes"].as_array().into_iter().flatten() {
        let name = r["runtime"].as_str().unwrap_or("");
        if r["installed"] != true {
            println!("{name:<12} not installed");
            continue;
        }
        println!(
            "{name:<12} {} {}",
            r["version"].as_str().unwrap_or("(version unknown)"),
            r["executable"].as_str().unwrap_or("(no executable found)")
        );
        if let Some(i) = r["interpreter"].as_str() {
            println!("{:<12} runs under: {i}", "");
        }
        for p in r["problems"].as_array().into_iter().flatten() {
            println!("{:<12} - {}", "", p.as_str().unwrap_or(""));
        }
        if r["executable_safe"] != true {
            for p in r["executable_problems"].as_array().into_iter().flatten() {
                println!("{:<12} - {}", "", p.as_str().unwrap_or(""));
            }
        }
    }
    EXIT_OK
}

fn policy_validate(a: &PolicyFile) -> i32 {
    let result = protected::read(&a.file, protected::Requirements::POLICY)
        .and_then(|b| ValidatedPolicy::from_json(&b));
    match (result, a.json) {
        (Ok(_), true) => {
            print_json(&json!({"valid": true, "code": null, "message": null}));
            EXIT_OK
        }
        (Ok(p), false) => {
            println!(
                "policy is valid: revision {}, {} runtime template(s)",
                p.revision(),
                p.runtime_templates().len()
            );
            EXIT_OK
        }
        (Err(e), true) => {
            print_json(&json!({
                "valid": false,
                "code": e.code().as_str(),
                "location": e.location(),
                "message": e.message(),
            }));
            EXIT_REJECTED
        }
        (Err(e), false) => fail(&e, false, None),
    }
}

fn policy_explain(a: &PolicyFile) -> i32 {
    let result = protected::read(&a.file, protected::Requirements::POLICY)
        .and_then(|b| Explanation::from_json(&b));
    match result {
        Ok(x) => {
            if a.json {
                match serde_json::to_value(&x) {
                    Ok(v) => print_json(&v),
                    Err(e) => {
                        eprintln!("error[{}]: {e}", FILE_IO);
                        return EXIT_REJECTED;
                    }
                }
            } else {
                print!("{}", explain::render(&x));
            }
            if x.valid {
                EXIT_OK
            } else {
                EXIT_REJECTED
            }
        }
        Err(e) => fail(&e, a.json, None),
    }
}

pub(crate) fn read_bounded(path: &Path, max: usize) -> Result<Vec<u8>, Rejection> {
    let shown = path.display();
    let file = std::fs::File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            Rejection::new(FILE_NOT_FOUND, format!("{shown} does not exist"))
        }
        _ => Rejection::new(FILE_IO, format!("cannot open {shown}: {e}")),
    })?;
    let mut buf = Vec::new();
    file.take(max as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Rejection::new(FILE_IO, format!("cannot read {shown}: {e}")))?;
    if buf.len() > max {
        return Err(Rejection::new(
            FILE_TOO_LARGE,
            format!("{shown} is larger than {max} bytes"),
        ));
    }
    Ok(buf)
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn plan_check(a: &PlanCheck) -> i32 {
    let result = (|| {
        let policy = ValidatedPolicy::from_json(&protected::read(
            &a.policy,
            protected::Requirements::POLICY,
        )?)?;
        let supplied = a
            .controller_digest
            .as_deref()
            .map(Blake3Digest::parse)
            .transpose()
            .map_err(|e| e.at("--controller-digest"))?;
        let plan = DecodedPlan::decode(&read_bounded(&a.plan, MAX_PLAN_BYTES)?)?;
        admit(
            plan,
            supplied.as_ref(),
            &policy,
            a.now.unwrap_or_else(now_ms),
        )
    })();
    match result {
        Ok(p) => {
            if a.json {
                print_json(&json!({
                    "admitted": true,
                    "session_id": p.plan().session_id(),
                    "plan_content_digest": p.plan_content_digest(),
                    "controller_plan_digest": p.controller_plan_digest(),
                    "plan_context_digest": p.plan_context_digest(),
                }));
            } else {
                println!("plan admitted: session {}", p.plan().session_id());
                println!("  plan_content_digest     {}", p.plan_content_digest());
                println!("  controller_plan_digest  {}", p.controller_plan_digest());
                println!("  plan_context_digest     {}", p.plan_context_digest());
            }
            EXIT_OK
        }
        Err(e) => fail(&e, a.json, Some(("admitted", json!(false)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `glove exec` parsed by the fast path reads, helps and fails exactly
    /// like the full command line.
    #[test]
    fn the_exec_fast_path_parses_like_the_full_command_line() {
        let cases: &[&[&str]] = &[
            &["glove", "exec", "--help"],
            &["glove", "exec", "-h"],
            &["glove", "exec"],
            &["glove", "exec", "--bogus", "--", "/bin/true"],
            &["glove", "exec", "--memory", "lots", "--", "/bin/true"],
            &["glove", "exec", "--version"],
            &[
                "glove", "exec", "--pty", "--json", "--memory", "64M", "--", "/bin/sh", "-c", "x",
            ],
            &[
                "glove",
                "exec",
                "--env",
                "A=b",
                "--ro-bind",
                "/usr",
                "--",
                "true",
            ],
        ];
        for args in cases {
            let full = Cli::try_parse_from(*args);
            let fast = ExecCli::try_parse_from(*args);
            match (full, fast) {
                (Ok(full), Ok(fast)) => {
                    let Command::Exec(full) = full.command else {
                        panic!("{args:?}: not exec")
                    };
                    let ExecOnly::Exec(fast) = fast.command;
                    assert_eq!(format!("{full:?}"), format!("{fast:?}"), "{args:?}");
                }
                (Err(full), Err(fast)) => {
                    assert_eq!(full.kind(), fast.kind(), "{args:?}");
                    assert_eq!(full.exit_code(), fast.exit_code(), "{args:?}");
                    assert_eq!(
                        full.render().to_string(),
                        fast.render().to_string(),
                        "{args:?}"
                    );
                }
                (full, fast) => panic!("{args:?}: {full:?} vs {fast:?}"),
            }
        }
    }
}
