//! The `glove` subcommands that talk to `gloved`: `capabilities`,
//! `session validate|create|status`, `receipts page|ack` (`receipts show`
//! is in [`crate::receipts_show`]).
//!
//! Each finds the socket and the bootstrap secret in the runtime directory
//! (`--runtime-dir`, default as for `gloved`), prints text or, with
//! `--json`, the result object on one line. Errors print `error[<code>]:
//! <message>` on stderr, or `{"code","location","message"}` on stdout with
//! `--json`, and exit with status 1.

use super::client::{Client, ClientError};
use crate::report::{print_json, EXIT_OK, EXIT_REJECTED};
use clap::{Args, Subcommand};
use glove_types::codes::file::{FILE_IO, FILE_TOO_LARGE};
use glove_types::codes::json::JSON_INVALID_UTF8;
use glove_types::plan::MAX_PLAN_BYTES;
use glove_types::Rejection;
use serde_json::{json, Value};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Where to find the service, and the output form.
#[derive(Debug, Args)]
pub struct ConnArgs {
    /// The service's runtime directory [default: the one in the `gloved`
    /// config `glove setup` wrote, else $XDG_RUNTIME_DIR/glove, else
    /// /run/glove for root].
    #[arg(long, value_name = "DIR")]
    pub runtime_dir: Option<PathBuf>,
    /// The client label to present (sessions started under one label can
    /// only be attached to and driven under the same label) [default: default].
    #[arg(long, value_name = "ID")]
    pub client_id: Option<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `glove capabilities`.
#[derive(Debug, Args)]
pub struct CapabilitiesArgs {
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// `glove session …`
#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Validate a plan against the service's frozen policy.
    Validate(PlanArgs),
    /// Durably create a session from a plan (idempotent retry).
    Create(PlanArgs),
    /// Show a session's stage and digests.
    Status(StatusArgs),
    /// Issue a start authorization for a session with the service's
    /// start-authorization key (reads the session's digests from gloved).
    Authorize(AuthorizeArgs),
    /// Start a created session with a start authorization.
    Start(StartArgs),
    /// Create, authorize, start and attach in one go; exits with the
    /// agent's status.
    Run(super::session_run::RunArgs),
    /// Every session the service holds: stage, template and age.
    List(super::session_run::ListArgs),
    /// Print a session's recent output and stream it until the session
    /// ends, passing this terminal's input to it; exits with the agent's
    /// status.
    Attach(super::session_run::AttachArgs),
    /// Send text to a session's terminal.
    Send(SendArgs),
    /// Stop a running session (TERM, then KILL after the grace).
    Stop(StopArgs),
    /// Forget a finished session's live state (after its receipt is durable).
    Cleanup(StatusArgs),
}

/// Arguments of `glove session authorize`.
#[derive(Debug, Args)]
pub struct AuthorizeArgs {
    /// The session id.
    pub id: String,
    /// The start-authorization key file gloved was started with.
    #[arg(long, value_name = "FILE")]
    pub start_auth_key: PathBuf,
    /// Validity in milliseconds (at most 60000).
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub ttl_ms: u64,
    /// Issue time in Unix ms [default: now] (tests against a fixed clock).
    #[arg(long, value_name = "MS", hide = true)]
    pub now_ms: Option<u64>,
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Arguments of `glove session start`.
#[derive(Debug, Args)]
pub struct StartArgs {
    /// The session id.
    pub id: String,
    /// The start authorization (`glove session authorize` prints it).
    #[arg(long, value_name = "JSON")]
    pub authorization: String,
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Arguments of `glove session send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// The session id.
    pub id: String,
    /// The text (a newline is not added).
    pub text: String,
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Arguments of `glove session stop`.
#[derive(Debug, Args)]
pub struct StopArgs {
    /// The session id.
    pub id: String,
    /// Milliseconds between TERM and KILL.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    pub grace_ms: u64,
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// A plan argument.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The plan file: canonical JSON, at most 64 KiB.
    #[arg(long, value_name = "FILE")]
    pub plan: PathBuf,
    /// The controller's BLAKE3 plan digest, verified by the service when given.
    #[arg(long, value_name = "HEX")]
    pub controller_digest: Option<String>,
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Arguments of `glove session status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The session id.
    pub id: String,
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// `glove receipts …`
#[derive(Debug, Subcommand)]
pub enum ReceiptsCommand {
    /// Fetch a page of receipts after a sequence number.
    Page(PageArgs),
    /// Show receipts readably: how each session ended, its limits and
    /// usage, apply outcomes (with --json, the decoded bodies).
    Show(crate::receipts_show::ShowArgs),
    /// Acknowledge the exact head of the last page.
    Ack(AckArgs),
    /// Verify a receipt journal file offline (no running gloved needed).
    Verify(crate::receipts_verify::VerifyArgs),
}

/// Arguments of `glove receipts page`.
#[derive(Debug, Args)]
pub struct PageArgs {
    /// Return receipts after this sequence number.
    #[arg(long, value_name = "SEQ", default_value_t = 0)]
    pub after: u64,
    /// At most this many receipts [default: 64, at most 1024].
    #[arg(long, value_name = "N")]
    pub max: Option<u64>,
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Arguments of `glove receipts ack`.
#[derive(Debug, Args)]
pub struct AckArgs {
    /// The head of the last page, `<seq>:<64 hex>`.
    #[arg(long, value_name = "HEAD")]
    pub head: String,
    /// Connection and output.
    #[command(flatten)]
    pub conn: ConnArgs,
}

pub(crate) fn connect(conn: &ConnArgs) -> Result<Client, ClientError> {
    let dir = super::discover::runtime_dir(conn.runtime_dir.as_deref())?;
    Client::connect_as(&dir, conn.client_id.as_deref())
}

pub(crate) fn fail(e: &ClientError, json: bool) -> i32 {
    if json {
        print_json(&json!({"code": e.code(), "location": e.location(), "message": e.message()}));
    } else {
        eprintln!("error[{}]: {e}", e.code());
    }
    EXIT_REJECTED
}

fn finish(r: Result<Value, ClientError>, json: bool, text: impl FnOnce(&Value)) -> i32 {
    match r {
        Ok(v) => {
            if json {
                print_json(&v);
            } else {
                text(&v);
            }
            EXIT_OK
        }
        Err(e) => fail(&e, json),
    }
}

pub(crate) fn read_plan(path: &Path) -> Result<String, ClientError> {
    let shown = path.display();
    let file = std::fs::File::open(path)
        .map_err(|e| Rejection::new(FILE_IO, format!("cannot open {shown}: {e}")))?;
    let mut buf = Vec::new();
    file.take(MAX_PLAN_BYTES as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Rejection::new(FILE_IO, format!("cannot read {shown}: {e}")))?;
    if buf.len() > MAX_PLAN_BYTES {
        return Err(Rejection::new(
            FILE_TOO_LARGE,
            format!("{shown} is larger than {MAX_PLAN_BYTES} bytes"),
        )
        .into());
    }
    String::from_utf8(buf)
        .map_err(|_| Rejection::new(JSON_INVALID_UTF8, format!("{shown} is not UTF-8")).into())
}

fn field<'a>(v: &'a Value, k: &str) -> &'a Value {
    v.get(k).unwrap_or(&Value::Null)
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `glove capabilities`.
pub fn capabilities(a: &CapabilitiesArgs) -> i32 {
    let r = connect(&a.conn).and_then(|mut c| c.capabilities());
    finish(r, a.conn.json, |v| {
        let methods: Vec<String> = field(v, "methods")
            .as_array()
            .map(|m| m.iter().map(show).collect())
            .unwrap_or_default();
        println!("protocol version {}", show(field(v, "protocol_version")));
        println!("methods: {}", methods.join(", "));
        for k in [
            "agent_runtime_adapter_schema_version",
            "refinement_evaluation_protocol_schema_version",
            "apply_schema_version",
            "session_policy_revision",
        ] {
            println!("{k}: {}", show(field(v, k)));
        }
        if let Some(r) = v.get("remote_backend").filter(|r| !r.is_null()) {
            println!(
                "remote backend: construction only (lifecycle_operational {})",
                show(field(r, "lifecycle_operational"))
            );
        }
    })
}

/// `glove session …`.
pub fn session(cmd: &SessionCommand) -> i32 {
    match cmd {
        SessionCommand::Validate(a) | SessionCommand::Create(a) => {
            let create = matches!(cmd, SessionCommand::Create(_));
            let r = read_plan(&a.plan).and_then(|plan| {
                let mut c = connect(&a.conn)?;
                let d = a.controller_digest.as_deref();
                if create {
                    c.create_session(&plan, d)
                } else {
                    c.validate_plan(&plan, d)
                }
            });
            finish(r, a.conn.json, |v| {
                if create {
                    let s = field(v, "session");
                    let verb = if field(v, "created").as_bool() == Some(true) {
                        "created"
                    } else {
                        "already exists (identical retry)"
                    };
                    println!("session {} {verb}", show(field(s, "session_id")));
                    print_status(s);
                } else {
                    println!("plan admitted: session {}", show(field(v, "session_id")));
                    for k in [
                        "plan_content_digest",
                        "controller_plan_digest",
                        "plan_context_digest",
                    ] {
                        println!("  {k:<24}{}", show(field(v, k)));
                    }
                }
            })
        }
        SessionCommand::Authorize(a) => {
            let r = connect(&a.conn).and_then(|mut c| {
                let st = c.session_status(&a.id)?;
                let key = super::managed::read_key(&a.start_auth_key)?;
                let now = a
                    .now_ms
                    .unwrap_or_else(|| super::service::Clock::System.now_ms());
                let auth = super::managed::issue_authorization(
                    &key,
                    &a.id,
                    field(&st, "plan_content_digest").as_str().unwrap_or(""),
                    field(&st, "controller_plan_digest").as_str().unwrap_or(""),
                    now,
                    a.ttl_ms,
                )?;
                Ok(json!({"authorization": auth}))
            });
            finish(r, a.conn.json, |v| {
                println!("{}", field(v, "authorization").as_str().unwrap_or(""));
            })
        }
        SessionCommand::Start(a) => {
            let r = connect(&a.conn).and_then(|mut c| {
                c.call(
                    "start_session",
                    json!({"session_id": a.id, "authorization": a.authorization}),
                )
            });
            finish(r, a.conn.json, |v| {
                println!("session {} running", show(field(v, "session_id")));
                println!(
                    "  launch_binding_digest   {}",
                    show(field(v, "launch_binding_digest"))
                );
            })
        }
        SessionCommand::Attach(a) => super::session_run::attach(a),
        SessionCommand::Run(a) => super::session_run::run(a),
        SessionCommand::List(a) => super::session_run::list(a),
        SessionCommand::Send(a) => {
            let r = connect(&a.conn).and_then(|mut c| {
                c.call("write_stdin", json!({"session_id": a.id, "data": a.text}))
            });
            finish(r, a.conn.json, |v| {
                println!("sent {} bytes", show(field(v, "written")))
            })
        }
        SessionCommand::Stop(a) => {
            let r = connect(&a.conn).and_then(|mut c| {
                c.call(
                    "stop_session",
                    json!({"session_id": a.id, "grace_ms": a.grace_ms}),
                )
            });
            finish(r, a.conn.json, |v| {
                println!("session {} stopping", show(field(v, "session_id")))
            })
        }
        SessionCommand::Cleanup(a) => {
            let r = connect(&a.conn)
                .and_then(|mut c| c.call("cleanup_session", json!({"session_id": a.id})));
            finish(r, a.conn.json, |v| {
                println!("session {} cleaned up", show(field(v, "session_id")))
            })
        }
        SessionCommand::Status(a) => {
            let r = connect(&a.conn).and_then(|mut c| c.session_status(&a.id));
            finish(r, a.conn.json, |v| {
                println!("session {}", show(field(v, "session_id")));
                print_status(v);
            })
        }
    }
}

fn print_status(s: &Value) {
    for k in [
        "stage",
        "idempotency_key",
        "plan_content_digest",
        "controller_plan_digest",
    ] {
        println!("  {k:<24}{}", show(field(s, k)));
    }
}

/// `glove receipts …`.
pub fn receipts(cmd: &ReceiptsCommand) -> i32 {
    match cmd {
        ReceiptsCommand::Page(a) => {
            let r = connect(&a.conn).and_then(|mut c| c.receipts_page(a.after, a.max));
            finish(r, a.conn.json, |v| {
                let items = field(v, "receipts").as_array().cloned().unwrap_or_default();
                for r in &items {
                    let kind = show(field(r, "kind"));
                    let line = format!(
                        "{} {kind} {}",
                        show(field(r, "seq")),
                        show(field(r, "chain"))
                    );
                    // An apply receipt also says what happened, on the
                    // same line.
                    match field(r, "envelope")
                        .as_str()
                        .and_then(|e| crate::receipts_verify::envelope_line(&kind, e))
                    {
                        Some(what) => println!("{line} {what}"),
                        None => println!("{line}"),
                    }
                }
                println!(
                    "{} receipt(s); head {}",
                    items.len(),
                    show(field(v, "head"))
                );
            })
        }
        ReceiptsCommand::Verify(a) => crate::receipts_verify::run(a),
        ReceiptsCommand::Show(a) => crate::receipts_show::run(a),
        ReceiptsCommand::Ack(a) => {
            let r = connect(&a.conn).and_then(|mut c| c.receipts_ack(&a.head));
            finish(r, a.conn.json, |v| {
                println!("acknowledged {}", show(field(v, "acknowledged")));
            })
        }
    }
}
