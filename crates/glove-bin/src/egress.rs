//! `glove exec --egress`: the egress policy file, the session's proxy and
//! its summary, wired to a launch spec.

use glove_egress::{Broker, ProxyConfig, ProxyHandle, ProxyLimits, Summary, TlsRoots};
use glove_sandbox::spec::{EgressSpec, LaunchSpec};
use glove_types::codes::egress::{EGRESS_POLICY_INVALID, EGRESS_TRUST_ROOTS_INVALID};
use glove_types::egress::settings::{EgressSettings, MAX_SETTINGS_BYTES};
use glove_types::ids::SessionId;
use glove_types::Rejection;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long connections still open when the command ends may finish.
const FINISH_GRACE: Duration = Duration::from_secs(2);

/// A read egress policy with its credentials, before the launch.
pub struct Prepared {
    settings: EgressSettings,
    broker: Broker,
    journal: PathBuf,
    session_id: SessionId,
    roots: TlsRoots,
}

/// The spec has the sandbox's end of the channel.
pub struct Attached {
    prepared: Prepared,
    host_end: OwnedFd,
}

/// The proxy serving a running sandbox.
pub struct Running {
    handle: ProxyHandle,
    journal: PathBuf,
}

fn invalid(m: impl Into<String>) -> Rejection {
    Rejection::new(EGRESS_POLICY_INVALID, m)
}

fn random_hex(n: usize) -> Result<String, Rejection> {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).map_err(|e| invalid(format!("random: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// The default journal directory: `$XDG_STATE_HOME/glove/egress`, else
/// `$HOME/.local/state/glove/egress` (made with mode 0700).
fn default_journal_dir() -> Result<PathBuf, Rejection> {
    let base = match std::env::var_os("XDG_STATE_HOME").filter(|v| Path::new(v).is_absolute()) {
        Some(v) => PathBuf::from(v),
        None => match std::env::var_os("HOME").filter(|v| Path::new(v).is_absolute()) {
            Some(h) => PathBuf::from(h).join(".local/state"),
            None => {
                return Err(invalid(
                    "neither XDG_STATE_HOME nor HOME is set: give --egress-journal",
                ))
            }
        },
    };
    let dir = base.join("glove/egress");
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| invalid(format!("{}: {e}", dir.display())))?;
    Ok(dir)
}

fn roots_refused(e: glove_egress::EgressError) -> Rejection {
    Rejection::new(e.code(), e.to_string())
}

/// The extra roots an operator names (`--egress-ca` of `glove exec` and
/// `gloved`), read now: each a protected file (mode 0600, owned by the
/// caller, one link, at most 1 MiB) holding PEM certificates and nothing
/// else, at most 16 files. Any fault is `egress_trust_roots_invalid`.
pub fn extra_roots(files: &[PathBuf]) -> Result<Vec<String>, Rejection> {
    if files.len() > glove_egress::MAX_EXTRA_ROOTS {
        return Err(Rejection::new(
            EGRESS_TRUST_ROOTS_INVALID,
            format!(
                "--egress-ca is given {} times; at most {}",
                files.len(),
                glove_egress::MAX_EXTRA_ROOTS
            ),
        ));
    }
    let mut roots = TlsRoots {
        extra_pem: Vec::new(),
        system_bundle: None,
    };
    for f in files {
        let bytes = crate::protected::read(
            f,
            crate::protected::Requirements {
                max_bytes: glove_egress::MAX_EXTRA_ROOT_BYTES,
                mode: 0o600,
            },
        )
        .map_err(|r| {
            Rejection::new(
                EGRESS_TRUST_ROOTS_INVALID,
                format!("--egress-ca: {} ({})", r.message(), r.code().as_str()),
            )
        })?;
        roots
            .add_extra_pem(&f.display().to_string(), &bytes)
            .map_err(roots_refused)?;
    }
    Ok(roots.extra_pem)
}

/// The roots upstreams are verified against: the system bundle found at
/// the usual places ([`glove_egress::BUNDLE_CANDIDATES`]) and the extra
/// roots (see [`extra_roots`]), all read now.
pub fn trust_roots(extra: &[PathBuf]) -> Result<TlsRoots, Rejection> {
    let roots = TlsRoots {
        extra_pem: extra_roots(extra)?,
        ..TlsRoots::system().map_err(roots_refused)?
    };
    // The proxy starts only after the sandbox is built: read the bundle
    // now, so unusable roots refuse the launch rather than end it.
    roots.check().map_err(roots_refused)?;
    Ok(roots)
}

/// Reads the egress policy file, the trust roots (see [`trust_roots`])
/// and the brokered credentials.
pub fn prepare(
    file: &Path,
    journal: Option<&Path>,
    extra_roots: &[PathBuf],
) -> Result<Prepared, Rejection> {
    let bytes = read_bounded(file)?;
    let settings = EgressSettings::from_json(&bytes)
        .map_err(|r| Rejection::new(r.code(), format!("{}: {}", file.display(), r.message())))?;
    let broker = Broker::prepare(&settings).map_err(|e| Rejection::new(e.code(), e.to_string()))?;
    // Upstreams are verified only inside terminated tunnels: a policy
    // without them needs no bundle (the extra roots are still checked).
    let roots = if broker.terminates_tls() {
        trust_roots(extra_roots)?
    } else {
        TlsRoots {
            extra_pem: self::extra_roots(extra_roots)?,
            system_bundle: None,
        }
    };
    let session_id = SessionId::new(format!("exec-{}", random_hex(8)?))?;
    let journal = match journal {
        Some(j) => j.to_owned(),
        None => default_journal_dir()?.join(format!("{session_id}.journal")),
    };
    Ok(Prepared {
        settings,
        broker,
        journal,
        session_id,
        roots,
    })
}

fn read_bounded(file: &Path) -> Result<Vec<u8>, Rejection> {
    use std::io::Read;
    let f = std::fs::File::open(file).map_err(|e| invalid(format!("{}: {e}", file.display())))?;
    let mut bytes = Vec::new();
    f.take(MAX_SETTINGS_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| invalid(format!("{}: {e}", file.display())))?;
    if bytes.len() > MAX_SETTINGS_BYTES {
        return Err(invalid(format!(
            "{} is larger than {MAX_SETTINGS_BYTES} bytes",
            file.display()
        )));
    }
    Ok(bytes)
}

impl Prepared {
    /// What the agent's environment gets (see
    /// [`glove_egress::sandbox_environment`]).
    pub fn environment(&self) -> Vec<String> {
        glove_egress::sandbox_environment(&self.broker)
    }

    /// Puts the sandbox's end of a new egress channel into `spec`.
    pub fn attach(self, spec: &mut LaunchSpec) -> Result<Attached, Rejection> {
        let (host_end, sandbox_end) =
            glove_sandbox::egress_channel().map_err(|e| Rejection::new(e.code(), e.to_string()))?;
        spec.egress = Some(EgressSpec {
            channel: sandbox_end,
            ports: glove_egress::sandbox_ports(&self.settings),
        });
        for (path, text) in glove_egress::sandbox_trust_files(&self.broker, &self.roots) {
            spec.files.retain(|(p, _)| p != &path);
            spec.files.push((path, text.into_bytes()));
        }
        Ok(Attached {
            prepared: self,
            host_end,
        })
    }
}

impl Attached {
    /// Starts the proxy on the host end.
    pub fn start(self) -> Result<Running, Rejection> {
        let Attached { prepared, host_end } = self;
        let journal = prepared.journal.clone();
        let config = ProxyConfig {
            session_id: prepared.session_id,
            settings: prepared.settings,
            journal_path: prepared.journal,
            limits: ProxyLimits::default(),
            tls_roots: prepared.roots,
        };
        let handle = glove_egress::start(config, prepared.broker, host_end)
            .map_err(|e| Rejection::new(e.code(), e.to_string()))?;
        Ok(Running { handle, journal })
    }
}

impl Running {
    /// Stops the proxy; its summary as the outcome's `egress` member.
    pub fn finish(self) -> serde_json::Value {
        let journal = self.journal.display().to_string();
        match self.handle.finish(FINISH_GRACE) {
            Ok(s) => summary_json(&s, &journal),
            Err(e) => serde_json::json!({
                "journal": journal,
                "error": {"code": e.code().as_str(), "message": e.to_string()},
            }),
        }
    }
}

fn summary_json(s: &Summary, journal: &str) -> serde_json::Value {
    let head: String = s.journal_head.iter().map(|b| format!("{b:02x}")).collect();
    serde_json::json!({
        "policy_id": s.policy_id.as_str(),
        "connections_allowed": s.connections_allowed,
        "connections_refused": s.connections_refused,
        "requests_allowed": s.requests_allowed,
        "requests_refused": s.requests_refused,
        "requests_failed": s.requests_failed,
        "connections_closed": s.connections_closed,
        "names_resolved": s.names_resolved,
        "refusals_unjournaled": s.refusals_unjournaled,
        "audit_failed": s.audit_failed,
        "bytes_up": s.bytes_up,
        "bytes_down": s.bytes_down,
        "journal": journal,
        "journal_records": s.journal_records,
        "journal_head": head,
    })
}

/// Replays an egress journal read-only (see
/// [`crate::audit::replay_read_only`]): its events, decoded strictly, and
/// its head in hex.
fn replay_read_only(
    path: &std::path::Path,
    spec: &glove_journal::JournalSpec,
) -> Result<(Vec<glove_types::egress::event::EgressEvent>, String), Rejection> {
    use glove_types::codes::egress::{EGRESS_AUDIT_FAILED, EGRESS_EVENT_INVALID};
    let shown = path.display();
    let (bytes, replayed) = crate::audit::replay_read_only(path, spec, EGRESS_AUDIT_FAILED, |e| {
        let e = glove_egress::EgressError::from(e);
        Rejection::new(e.code(), format!("{shown}: {e}"))
    })?;
    let mut events = Vec::with_capacity(replayed.records.len());
    for rec in &replayed.records {
        let payload = bytes.get(rec.payload.clone()).unwrap_or(&[]);
        let e = glove_types::egress::event::EgressEvent::decode(payload).map_err(|x| {
            Rejection::new(
                EGRESS_EVENT_INVALID,
                format!("{shown}: record {}: {x}", rec.seq),
            )
        })?;
        events.push(e);
    }
    Ok((events, glove_types::digest::to_hex(&replayed.head)))
}

/// One line for a person: what left the sandbox.
pub fn summary_line(v: &serde_json::Value) -> String {
    if let Some(e) = v.get("error") {
        return format!(
            "glove: egress proxy failed: {} ({})",
            e["message"].as_str().unwrap_or(""),
            e["code"].as_str().unwrap_or("")
        );
    }
    let failed = if v["audit_failed"] == true {
        " AUDIT FAILED (everything after the failure was refused);"
    } else {
        ""
    };
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    // Every refusal: those journaled one by one and those past the
    // per-second budget, answered and only counted.
    let unjournaled = n("refusals_unjournaled");
    let refused = n("connections_refused")
        .saturating_add(n("requests_refused"))
        .saturating_add(unjournaled);
    let counted = if unjournaled > 0 {
        format!(" ({unjournaled} of them counted, not journaled one by one)")
    } else {
        String::new()
    };
    format!(
        "glove: egress {}:{failed} {} connections and {} requests allowed, {refused} refused{counted}; {} bytes up, {} down; journal {}",
        v["policy_id"].as_str().unwrap_or(""),
        v["connections_allowed"],
        v["requests_allowed"],
        v["bytes_up"],
        v["bytes_down"],
        v["journal"].as_str().unwrap_or("")
    )
}

/// `glove egress …`
#[derive(Debug, clap::Subcommand)]
pub enum EgressCommand {
    /// Replay an egress journal strictly (every record's chain, every
    /// event's canonical encoding) and show its events and its head, which
    /// a receipt's `egress.journal_head` names. Read-only: a torn tail
    /// fails and is left as it is.
    Show(ShowArgs),
}

/// Arguments of `glove egress show`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The egress journal.
    #[arg(long, value_name = "FILE")]
    pub journal: PathBuf,
    /// One JSON object: `{"events": [...], "records", "head"}`.
    #[arg(long)]
    pub json: bool,
}

/// Runs `glove egress …`.
pub fn command(c: &EgressCommand) -> i32 {
    match c {
        EgressCommand::Show(a) => show(a),
    }
}

fn show(a: &ShowArgs) -> i32 {
    let spec = ProxyLimits::default().journal_spec();
    let (events, head) = match replay_read_only(&a.journal, &spec) {
        Ok(v) => v,
        Err(r) => return crate::cli::fail(&r, a.json, None),
    };
    if a.json {
        let list: Vec<serde_json::Value> = events
            .iter()
            .filter_map(|e| e.encode().ok())
            .filter_map(|b| serde_json::from_slice(&b).ok())
            .collect();
        crate::report::print_json(&serde_json::json!({
            "records": events.len(),
            "head": head,
            "events": list,
        }));
        return 0;
    }
    println!(
        "egress journal {} ({} events, head {head})",
        a.journal.display(),
        events.len()
    );
    for e in &events {
        println!("{}", event_line(e));
    }
    0
}

/// One event of `glove egress show`, for a person. A decision reads
/// `allowed` or `REFUSED <code>`; the end of something allowed earlier
/// reads `ended` (a tunnel's or mapped connection's totals) or
/// `FAILED <code>` (a request that failed after it was let through), never
/// as a second decision.
pub fn event_line(e: &glove_types::egress::event::EgressEvent) -> String {
    use glove_types::egress::event::{Decision, EventKind, Phase};
    let what = match e.kind {
        EventKind::Connection => "connection",
        EventKind::Request => "request",
    };
    let code = e.code.as_deref().unwrap_or("");
    let verdict = match (e.phase, e.decision) {
        (Phase::Decision, Decision::Allowed) => "allowed".to_owned(),
        (Phase::Decision, Decision::Refused) => format!("REFUSED {code}"),
        (Phase::End, Decision::Allowed) => "ended".to_owned(),
        (Phase::End, Decision::Refused) => format!("FAILED {code}"),
    };
    let host = match glove_types::egress::Host::parse(&e.host) {
        Ok(h) => h.to_string(),
        Err(_) => e.host.clone(),
    };
    let method = e
        .method
        .as_deref()
        .map(|m| format!(" {m}"))
        .unwrap_or_default();
    let cred = e
        .credential
        .as_ref()
        .map(|c| format!(" credential {}", c.as_str()))
        .unwrap_or_default();
    format!(
        "{:>6}  {what:<10} {host}:{}{method}  {}{cred}  up {} B, down {} B, {} ms",
        e.seq,
        e.port,
        verdict.trim_end(),
        e.bytes_up,
        e.bytes_down,
        e.duration_ms
    )
}
