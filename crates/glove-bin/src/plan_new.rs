//! `glove plan new` and `glove plan fmt`: the wiring around
//! [`glove_types::plan::new`] (flags in, files and lines out).

use crate::cli::{fail, now_ms, read_bounded};
use crate::protected;
use crate::report::{print_json, EXIT_OK, EXIT_REJECTED};
use clap::Args;
use glove_types::codes::cli::CLI_INVALID_ARGUMENT;
use glove_types::codes::file::FILE_IO;
use glove_types::ids::ExposureId;
use glove_types::plan::new::{
    build, canonicalize, GrantRequest, PlanRequest, ProjectionRequest, MAX_PLAN_SOURCE_BYTES,
};
use glove_types::plan::{AdmittedPlan, PlanExposure};
use glove_types::policy::{Access, ValidatedPolicy};
use glove_types::{Rejection, Sha256Digest};
use serde_json::json;
use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};

/// Arguments of `glove plan new`.
#[derive(Debug, Args)]
pub struct PlanNew {
    /// The policy file (protected, as for `policy validate`) [default: the
    /// session policy `glove setup` made].
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// The runtime template id; its runtime, adapter digest and backend
    /// come from the policy.
    #[arg(long, value_name = "ID")]
    pub template: String,
    /// The resource profile id; its six limits come from the policy.
    #[arg(long, value_name = "ID")]
    pub profile: String,
    /// A path grant (repeatable): the alias and one of its access modes
    /// (default: the alias's first); the rest comes from the alias's tuple.
    #[arg(long = "alias", value_name = "ALIAS[:MODE]")]
    pub aliases: Vec<String>,
    /// A library projection (repeatable): the bundle's SHA-256, the
    /// destination alias and the projection id (default `lib-<12 hex>`).
    #[arg(long = "library", value_name = "DIGEST:DEST[:ID]")]
    pub libraries: Vec<String>,
    /// A path exposure (repeatable): its id and generation as `glove init`
    /// printed them, and the access (`read_only`, the default, or
    /// `ephemeral_write`); gloved checks them against its exposure journal
    /// when the session is created and again when it starts.
    #[arg(long = "exposure", value_name = "ID:GEN[:MODE]")]
    pub exposures: Vec<String>,
    /// A secret handle the policy lists (repeatable).
    #[arg(long = "secret", value_name = "HANDLE")]
    pub secrets: Vec<String>,
    /// An egress policy id the policy lists (repeatable).
    #[arg(long = "egress", value_name = "ID")]
    pub egress: Vec<String>,
    /// A tool policy id the policy lists (repeatable).
    #[arg(long = "tool-policy", value_name = "ID")]
    pub tool_policies: Vec<String>,
    /// Lifetime of the plan and of every grant, seconds (default: the
    /// policy's maxima; more than a maximum is refused).
    #[arg(long, value_name = "SECS")]
    pub ttl: Option<u64>,
    /// The session id, also the idempotency key (default `plan-<16 hex>`,
    /// random).
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// The issue time, Unix milliseconds (default: now).
    #[arg(long, value_name = "MS")]
    pub now: Option<u64>,
    /// Write the plan to FILE (replaced atomically) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Print one JSON object (the plan as a string, its digests) instead.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `glove plan fmt`.
#[derive(Debug, Args)]
pub struct PlanFmt {
    /// The plan file: strict JSON (no repeated keys), at most 256 KiB.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Rewrite FILE atomically instead of printing.
    #[arg(long)]
    pub in_place: bool,
}

fn bad(flag: &str, msg: String) -> Rejection {
    Rejection::new(CLI_INVALID_ARGUMENT, msg).at(flag)
}

fn grant(s: &str) -> Result<GrantRequest, Rejection> {
    let (alias, access) = match s.split_once(':') {
        None => (s, None),
        Some((a, m)) => match Access::parse(m) {
            Some(m) => (a, Some(m)),
            None => return Err(bad("--alias", format!("{m:?} is not an access mode"))),
        },
    };
    Ok(GrantRequest {
        alias: alias.to_owned(),
        access,
    })
}

fn exposure(s: &str) -> Result<PlanExposure, Rejection> {
    let usage = || bad("--exposure", format!("{s:?} is not ID:GEN[:MODE]"));
    let mut parts = s.splitn(3, ':');
    let (Some(id), Some(generation)) = (parts.next(), parts.next()) else {
        return Err(usage());
    };
    let generation: u64 = generation.parse().map_err(|_| usage())?;
    let access = match parts.next() {
        None => Access::ReadOnly,
        Some(m) => Access::parse(m)
            .ok_or_else(|| bad("--exposure", format!("{m:?} is not an access mode")))?,
    };
    Ok(PlanExposure {
        exposure_id: ExposureId::new(id).map_err(|e| e.at("--exposure"))?,
        generation,
        access,
    })
}

fn exposures(a: &PlanNew) -> Result<Vec<PlanExposure>, Rejection> {
    a.exposures.iter().map(|s| exposure(s)).collect()
}

fn projection(s: &str) -> Result<ProjectionRequest, Rejection> {
    let mut parts = s.splitn(3, ':');
    let (Some(digest), Some(dest)) = (parts.next(), parts.next()) else {
        return Err(bad("--library", format!("{s:?} is not DIGEST:DEST[:ID]")));
    };
    let sha256 = Sha256Digest::parse(digest).map_err(|e| e.at("--library"))?;
    let projection_id = match parts.next() {
        Some(id) => id.to_owned(),
        None => format!("lib-{}", digest.get(..12).unwrap_or(digest)),
    };
    Ok(ProjectionRequest {
        projection_id,
        sha256,
        destination_alias: dest.to_owned(),
    })
}

fn new_plan(a: &PlanNew) -> Result<AdmittedPlan, Rejection> {
    let path = match &a.policy {
        Some(p) => p.clone(),
        None => crate::layout::Layout::current()
            .map(|l| l.session_policy())
            .ok_or_else(|| {
                Rejection::new(
                    glove_types::codes::cli::CLI_INVALID_ARGUMENT,
                    "HOME is not set: give --policy",
                )
            })?,
    };
    let policy =
        ValidatedPolicy::from_json(&protected::read(&path, protected::Requirements::POLICY)?)?;
    let session = match &a.session {
        Some(s) => s.clone(),
        None => {
            let b = glove_control::random_bytes::<8>()?;
            format!(
                "plan-{}",
                b.iter().map(|x| format!("{x:02x}")).collect::<String>()
            )
        }
    };
    let req = PlanRequest {
        runtime_template_id: a.template.clone(),
        profile_id: a.profile.clone(),
        grants: a
            .aliases
            .iter()
            .map(|s| grant(s))
            .collect::<Result<_, _>>()?,
        projections: a
            .libraries
            .iter()
            .map(|s| projection(s))
            .collect::<Result<_, _>>()?,
        secret_handles: a.secrets.clone(),
        egress_policy_ids: a.egress.clone(),
        tool_policy_ids: a.tool_policies.clone(),
        exposures: exposures(a)?,
        ttl_secs: a.ttl,
        idempotency_key: session.clone(),
        session_id: session,
        now_ms: a.now.unwrap_or_else(now_ms),
    };
    build(&policy, &req)
}

/// Prints canonical bytes on stdout, with a newline only for a terminal
/// (redirected, the output is exactly the plan file).
fn print_bytes(b: &[u8]) -> i32 {
    let mut out = std::io::stdout().lock();
    let nl: &[u8] = if out.is_terminal() { b"\n" } else { b"" };
    match out.write_all(b).and_then(|()| out.write_all(nl)) {
        Ok(()) => EXIT_OK,
        Err(_) => EXIT_REJECTED,
    }
}

/// `glove plan new`.
pub fn plan_new(a: &PlanNew) -> i32 {
    let p = match new_plan(a) {
        Ok(p) => p,
        Err(e) => return fail(&e, a.json, None),
    };
    let bytes = p.plan().canonical_bytes();
    if let Some(out) = &a.out {
        if let Err(e) = replace(out, bytes) {
            return fail(&e, a.json, None);
        }
    }
    if a.json {
        print_json(&json!({
            "session_id": p.plan().session_id(),
            "expires_at_ms": p.expires_at_ms(),
            "out": a.out.as_ref().map(|o| o.display().to_string()),
            "plan": String::from_utf8_lossy(bytes),
            "plan_content_digest": p.plan_content_digest(),
            "controller_plan_digest": p.controller_plan_digest(),
            "plan_context_digest": p.plan_context_digest(),
        }));
        return EXIT_OK;
    }
    match &a.out {
        None => print_bytes(bytes),
        Some(out) => {
            println!(
                "plan written to {}: session {}, expires at {} ms",
                out.display(),
                p.plan().session_id(),
                p.expires_at_ms()
            );
            println!("  controller_plan_digest  {}", p.controller_plan_digest());
            EXIT_OK
        }
    }
}

/// `glove plan fmt`.
pub fn plan_fmt(a: &PlanFmt) -> i32 {
    let result = read_bounded(&a.file, MAX_PLAN_SOURCE_BYTES).and_then(|b| {
        let out = canonicalize(&b)?;
        if a.in_place && out != b {
            replace(&a.file, &out)?;
        }
        Ok(out)
    });
    match result {
        Ok(_) if a.in_place => EXIT_OK,
        Ok(out) => print_bytes(&out),
        Err(e) => fail(&e, false, None),
    }
}

/// Replaces `path` atomically: a new sibling (`O_EXCL`, the old file's
/// mode or 0644), its bytes, `fsync`, rename over `path`, `fsync` of the
/// directory. A failure leaves `path` as it was.
fn replace(path: &Path, bytes: &[u8]) -> Result<(), Rejection> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let io = |what: &str, e: std::io::Error| {
        Rejection::new(FILE_IO, format!("cannot {what} {}: {e}", path.display()))
    };
    let name = path
        .file_name()
        .ok_or_else(|| bad("FILE", format!("{} names no file", path.display())))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mode = match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_file() => m.permissions().mode() & 0o777,
        Ok(_) => {
            return Err(bad(
                "FILE",
                format!("{} is not a regular file", path.display()),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0o644,
        Err(e) => return Err(io("inspect", e)),
    };
    let b = glove_control::random_bytes::<6>()?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(
        ".tmp-{}",
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    ));
    let tmp = dir.join(tmp_name);
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io("write", e)
    })
}
