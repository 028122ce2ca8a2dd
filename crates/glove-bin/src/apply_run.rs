//! `glove apply SESSION`: bring a retained workspace's changes into its
//! source (wiring only; the work is `glove_control::apply`).
//!
//! In order: unfinished applies of earlier runs are recovered; the stage's
//! `--stat` is shown; on a terminal the owner is asked (or `--yes`); the
//! authorization is `--authorization FILE`, or one signed now with the
//! owner's key (a fresh grant id, ten minutes); the exchange runs.

use crate::report::{print_json, EXIT_OK, EXIT_REJECTED};
use clap::Args;
use glove_control::apply::books::{local_receipts, Books};
use glove_control::apply::recover::{recover, Recovered};
use glove_control::apply::run::{apply, ApplyInput, Ended};
use glove_control::apply::{load_signing_key, sign, TrustPolicy};
use glove_control::stages;
use glove_types::apply::{ApplyAuthorization, AuthorizationTerms, SignedApplyAuthorization};
use glove_types::codes::cli::CLI_INVALID_ARGUMENT;
use glove_types::ids::{ApplyGrantId, ApplyTargetId, SessionId};
use glove_types::Rejection;
use serde_json::json;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

/// The trust policy's default place.
pub const DEFAULT_TRUST: &str = "/etc/glove/apply-trust.json";

/// Exit status when the exchange's outcome is unknown (ambiguous).
pub const EXIT_AMBIGUOUS: i32 = 3;

/// Arguments of `glove apply SESSION`.
#[derive(Debug, Args)]
pub struct ApplyRunArgs {
    /// The workspace's alias, when the session has several.
    #[arg(long)]
    pub alias: Option<String>,
    /// Apply without asking.
    #[arg(long)]
    pub yes: bool,
    /// A signed authorization made elsewhere (`glove apply sign`) instead
    /// of one signed now with the owner's key.
    #[arg(long, value_name = "FILE")]
    pub authorization: Option<PathBuf>,
    /// The owner's signing key [default: as for `glove apply keygen`].
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// The trust policy [default: $GLOVE_APPLY_TRUST, else
    /// /etc/glove/apply-trust.json].
    #[arg(long, value_name = "FILE")]
    pub trust: Option<PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// A stage of gloved's managed sessions: gloved applies it (through
    /// its owner socket) and its receipt joins gloved's receipt journal.
    #[arg(long)]
    pub service: bool,
    /// gloved's runtime directory (with --service).
    #[arg(long, value_name = "DIR", requires = "service")]
    pub runtime_dir: Option<PathBuf>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Where this user's apply books are: `$GLOVE_APPLY_DIR`, else `apply`
/// beside the stage directory.
pub fn apply_dir() -> Result<PathBuf, Rejection> {
    if let Some(d) = std::env::var_os("GLOVE_APPLY_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d));
    }
    let stages = crate::workspace::stage_dir()?;
    Ok(stages
        .parent()
        .map(|p| p.join("apply"))
        .unwrap_or_else(|| PathBuf::from("apply")))
}

fn trust_path(a: &ApplyRunArgs) -> PathBuf {
    a.trust
        .clone()
        .or_else(|| std::env::var_os("GLOVE_APPLY_TRUST").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_TRUST))
}

fn recovered_json(r: &Recovered) -> serde_json::Value {
    r.to_json()
}

/// The digests an authorization binds, as the stage record or the service
/// reports them.
struct Binding {
    session_id: String,
    alias: String,
    baseline: Option<glove_types::Sha256Digest>,
    last: Option<glove_types::Sha256Digest>,
}

fn authorization(
    a: &ApplyRunArgs,
    record: &Binding,
) -> Result<SignedApplyAuthorization, Rejection> {
    let path = a
        .key
        .clone()
        .or_else(crate::apply::default_key_path)
        .ok_or_else(|| {
            Rejection::new(
                CLI_INVALID_ARGUMENT,
                "no key: pass --key or --authorization",
            )
        })?;
    let key = load_signing_key(&path)?;
    let now = now_ms();
    let grant = format!(
        "grant-{}",
        glove_types::digest::to_hex(&glove_control::random_bytes::<8>()?)
    );
    let missing = || {
        Rejection::new(
            glove_types::codes::retained::RETAINED_STAGE_INVALID,
            "the stage is not frozen",
        )
    };
    let terms = AuthorizationTerms {
        session_id: SessionId::new(record.session_id.as_str())?,
        target: ApplyTargetId::new(record.alias.as_str())?,
        baseline_digest: record.baseline.ok_or_else(missing)?,
        manifest_digest: record.last.ok_or_else(missing)?,
        grant_id: ApplyGrantId::new(grant)?,
        issued_at_ms: now,
        expires_at_ms: now + crate::apply::DEFAULT_TTL_SECS * 1000,
        key_id: key.id().clone(),
    };
    sign(&key, &ApplyAuthorization::new(terms)?)
}

/// Runs `glove apply recover`: exit 0 when nothing is left ambiguous or
/// unfinished, [`EXIT_AMBIGUOUS`] otherwise.
pub fn recover_only(json: bool) -> i32 {
    let result = (|| {
        let dir = apply_dir()?;
        let mut books = Books::open(&dir)?;
        let mut receipts = local_receipts(&dir)?;
        Ok::<_, Rejection>(recover(&mut books, &mut receipts))
    })();
    let recovered = match result {
        Ok(r) => r,
        Err(e) => return crate::cli::fail(&e, json, None),
    };
    let stuck = recovered
        .iter()
        .any(|r| matches!(r, Recovered::Ambiguous { .. } | Recovered::Error { .. }));
    if json {
        print_json(&json!({
            "recovered": recovered.iter().map(recovered_json).collect::<Vec<_>>(),
        }));
    } else if recovered.is_empty() {
        println!("no apply to recover");
    } else {
        for r in &recovered {
            println!("{}", recovered_json(r));
        }
    }
    if stuck {
        EXIT_AMBIGUOUS
    } else {
        EXIT_OK
    }
}

/// Reads an authorization file: a regular file (a FIFO or device is
/// refused, never waited on), at most 64 KiB.
fn read_authorization(file: &std::path::Path) -> Result<Vec<u8>, Rejection> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let bad = |m: String| Rejection::new(glove_types::codes::apply::APPLY_FILE_IO, m);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc_flags::NONBLOCK)
        .open(file)
        .map_err(|e| bad(format!("{}: {e}", file.display())))?;
    let m = f
        .metadata()
        .map_err(|e| bad(format!("{}: {e}", file.display())))?;
    if !m.is_file() {
        return Err(bad(format!("{} is not a regular file", file.display())));
    }
    let mut out = Vec::new();
    f.take(64 << 10)
        .read_to_end(&mut out)
        .map_err(|e| bad(format!("{}: {e}", file.display())))?;
    Ok(out)
}

mod libc_flags {
    /// `O_NONBLOCK`: opening a FIFO never waits for a writer.
    pub(super) const NONBLOCK: i32 = rustix::fs::OFlags::NONBLOCK.bits() as i32;
}

/// Asks on a terminal unless `--yes`; `Ok(false)` when the owner says no.
fn confirm(a: &ApplyRunArgs, source: &str) -> Result<bool, Rejection> {
    if a.yes {
        return Ok(true);
    }
    if !std::io::stdin().is_terminal() {
        return Err(Rejection::new(
            CLI_INVALID_ARGUMENT,
            "not a terminal: pass --yes to apply without asking",
        ));
    }
    print!("apply these changes to {source}? [y/N] ");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    Ok(matches!(line.trim(), "y" | "Y" | "yes"))
}

fn service_run(session: &str, a: &ApplyRunArgs) -> Result<i32, Rejection> {
    let client = |e: crate::control::client::ClientError| {
        Rejection::new(
            glove_types::codes::control::CONTROL_UNREACHABLE,
            format!("{}: {}", e.code(), e.message()),
        )
    };
    let v = crate::stages_service::stat(&a.runtime_dir, session, &a.alias).map_err(client)?;
    if !a.json {
        print!("{}", v["stat"].as_str().unwrap_or_default());
    }
    if !confirm(a, "the session's source")? {
        println!("not applied");
        return Ok(EXIT_REJECTED);
    }
    let digest = |k: &str| {
        v[k].as_str()
            .and_then(|d| glove_types::Sha256Digest::parse(d).ok())
    };
    let signed = match &a.authorization {
        Some(file) => SignedApplyAuthorization::decode_file(&read_authorization(file)?)?,
        None => authorization(
            a,
            &Binding {
                session_id: session.to_owned(),
                // The stage the service showed (a session's only stage
                // may be an exposure's, named by its label).
                alias: a
                    .alias
                    .clone()
                    .or_else(|| v["alias"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| "workspace".into()),
                baseline: digest("baseline_digest"),
                last: digest("final_digest"),
            },
        )?,
    };
    let text = String::from_utf8_lossy(signed.canonical_bytes()).into_owned();
    match crate::stages_service::apply(&a.runtime_dir, session, &a.alias, &text) {
        Ok(out) => {
            let applied = out["outcome"] == "applied";
            if a.json {
                print_json(&out);
            } else if applied {
                println!(
                    "applied (transaction {}, receipt {} in gloved's receipt journal)",
                    out["transaction_id"].as_str().unwrap_or_default(),
                    out["receipt_seq"]
                );
            } else {
                eprintln!(
                    "error[{}]: {} ({} {})",
                    out["code"].as_str().unwrap_or_default(),
                    out["message"].as_str().unwrap_or_default(),
                    out["outcome"].as_str().unwrap_or_default(),
                    out["transaction_id"].as_str().unwrap_or_default()
                );
            }
            Ok(match out["outcome"].as_str() {
                Some("applied") => EXIT_OK,
                Some("ambiguous") => EXIT_AMBIGUOUS,
                _ => EXIT_REJECTED,
            })
        }
        Err(e) => {
            let r = Rejection::new(
                glove_types::ErrorCode::from_code(e.code())
                    .unwrap_or(glove_types::codes::control::CONTROL_INTERNAL),
                e.message(),
            );
            Err(r)
        }
    }
}

/// Runs `glove apply SESSION`.
pub fn run(session: &str, a: &ApplyRunArgs) -> i32 {
    if a.service {
        return match service_run(session, a) {
            Ok(code) => code,
            Err(e) => crate::cli::fail(&e, a.json, None),
        };
    }
    match run_inner(session, a) {
        Ok(code) => code,
        Err(e) => crate::cli::fail(&e, a.json, None),
    }
}

fn run_inner(session: &str, a: &ApplyRunArgs) -> Result<i32, Rejection> {
    let store = crate::workspace::store()?;
    let dir = apply_dir()?;
    let mut books = Books::open(&dir)?;
    let mut receipts = local_receipts(&dir)?;
    let recovered = recover(&mut books, &mut receipts);
    if !a.json {
        for r in &recovered {
            eprintln!("recovered an earlier apply: {}", recovered_json(r));
        }
    }
    // An authorization made elsewhere: a replay is named before anything
    // else is looked at.
    let given = match &a.authorization {
        Some(file) => {
            let signed = SignedApplyAuthorization::decode_file(&read_authorization(file)?)?;
            glove_control::apply::run::check_grant(&books, &signed)?;
            Some(signed)
        }
        None => None,
    };
    let stage = store.open_stage(session, a.alias.as_deref())?;
    let seen = stages::inspect(&stage, now_ms())?;
    let changes = seen.changes();
    let stat = glove_control::workspace::render::render_stat(
        &changes,
        &seen.trees(),
        std::io::stdout().is_terminal(),
    )
    .map_err(|e| e.to_rejection())?;
    let record = seen.record.clone();
    seen.release()?;
    if !a.json {
        print!("{stat}");
    }
    if !confirm(a, record.source.as_deref().unwrap_or("?"))? {
        println!("not applied");
        return Ok(EXIT_REJECTED);
    }
    let signed = match given {
        Some(s) => s,
        None => authorization(
            a,
            &Binding {
                session_id: record.session_id.clone(),
                alias: record.alias.clone(),
                baseline: record.baseline(),
                last: record.final_manifest(),
            },
        )?,
    };
    let trust = TrustPolicy::load(&trust_path(a), rustix::process::geteuid().as_raw())?;
    let ended = apply(
        &mut books,
        &mut receipts,
        &ApplyInput {
            stage: &stage,
            signed: &signed,
            trust: &trust,
        },
    )?;
    let source = record.source.unwrap_or_default();
    let (code, line) = match &ended {
        Ended::Applied {
            transaction_id,
            receipt_seq,
            ..
        } => (
            EXIT_OK,
            format!("applied to {source} (transaction {transaction_id}, receipt {receipt_seq})"),
        ),
        Ended::Failed {
            transaction_id,
            error,
            receipt_seq,
        } => (
            EXIT_REJECTED,
            format!(
                "error[{}]: {} (transaction {transaction_id} failed, receipt {receipt_seq}; {source} is unchanged)",
                error.code().as_str(),
                error.message()
            ),
        ),
        Ended::Ambiguous {
            transaction_id,
            error,
        } => (
            EXIT_AMBIGUOUS,
            format!(
                "error[{}]: {} (transaction {transaction_id} is ambiguous: check {source} by hand)",
                error.code().as_str(),
                error.message()
            ),
        ),
    };
    let mut v = ended.to_json();
    if let Some(m) = v.as_object_mut() {
        m.insert("source".into(), source.clone().into());
    }
    if a.json {
        if let Some(m) = v.as_object_mut() {
            m.insert(
                "recovered".into(),
                recovered
                    .iter()
                    .map(recovered_json)
                    .collect::<Vec<_>>()
                    .into(),
            );
        }
        print_json(&v);
    } else if code == EXIT_OK {
        println!("{line}");
    } else {
        eprintln!("{line}");
    }
    Ok(code)
}
