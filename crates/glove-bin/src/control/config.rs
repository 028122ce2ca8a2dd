//! `gloved`'s configuration: flags and an optional JSON config file,
//! resolved in two phases (raw values, then [`Settings`]), and the startup
//! that turns settings into a [`Service`] after checking every path.
//!
//! Startup refuses, with a stable code and a message naming the path and
//! what is wrong, any of: a runtime or materialization directory that is
//! not absolute, not a directory, a symbolic link, not owned by the service
//! user or not mode 0700; a policy, receipt key or exposure policy that
//! fails the protected-file checks; a journal whose directory or file
//! breaks its placement rules or whose replay finds corruption; a session
//! store without a policy; a policy `remote_backend` together with a
//! materialization root; half of the path-exposure pair; an `--egress-ca`
//! file that is not absolute, or that fails the protected-file checks or
//! holds no certificate (then with `egress_trust_roots_invalid`).

use super::capabilities::{Components, RemoteBackendDiagnostic};
use super::limits::Limits;
use super::placement;
use super::service::{Clock, Parts, Service};
use crate::protected::{self, Requirements};
use clap::{Parser, ValueEnum};
use glove_journal::anchor_file::{AnchorFile, STORE_ANCHOR_DOMAIN};
use glove_journal::receipt::{ReceiptConfig, ReceiptHead, ReceiptKey};
use glove_journal::{JournalError, ReceiptJournal, SessionStore};
use glove_types::canon::{self, Form};
use glove_types::codes::control::*;
use glove_types::policy::ValidatedPolicy;
use glove_types::Rejection;
use rustix::fd::OwnedFd;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Name of the socket in the runtime directory.
pub const SOCKET_FILE: &str = "gloved.sock";

/// Largest config file.
pub const MAX_CONFIG_BYTES: u64 = 64 * 1024;

/// The genesis receipt anchor used when `--receipt-anchor` is not given.
pub const GENESIS_ANCHOR: &str =
    "0:0000000000000000000000000000000000000000000000000000000000000000";

/// Log line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Human,
    /// One JSON object per event.
    Json,
}

/// `gloved`: the operator's per-user control service.
#[derive(Debug, Parser, Default)]
#[command(
    name = "gloved",
    version,
    about = "Glove's per-user control service: an owner-only Unix socket for plan validation, durable sessions and receipts"
)]
pub struct GlovedArgs {
    /// A JSON config file (protected: mode 0600, owned by you) whose keys are
    /// these flags' names with underscores; flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Runtime directory for the socket and the bootstrap secret [default:
    /// $XDG_RUNTIME_DIR/glove, else /run/user/UID/glove]; created 0700 if missing.
    #[arg(long, value_name = "DIR")]
    pub runtime_dir: Option<PathBuf>,
    /// The operator's session policy (protected file); enables validate_plan.
    #[arg(long, value_name = "FILE")]
    pub session_policy: Option<PathBuf>,
    /// The session store journal (created if missing; directory mode 0700);
    /// with a policy, enables create_session and session_status.
    #[arg(long, value_name = "FILE")]
    pub session_store: Option<PathBuf>,
    /// The receipt journal (required; created if missing; directory mode 0700).
    #[arg(long, value_name = "FILE")]
    pub receipt_journal: Option<PathBuf>,
    /// The receipt key: 64 hex characters in a protected file (required).
    #[arg(long, value_name = "FILE")]
    pub receipt_key: Option<PathBuf>,
    /// The controller's trusted receipt anchor, `<seq>:<64 hex>` [default: 0 and 64 zeros].
    #[arg(long, value_name = "HEAD")]
    pub receipt_anchor: Option<String>,
    /// Materialization root (directory, mode 0700). With a session store and
    /// --start-auth-key, constructs the Linux managed runtime, which is
    /// advertised once its strict sandbox probe passes.
    #[arg(long, value_name = "DIR")]
    pub materialization_root: Option<PathBuf>,
    /// The start-authorization key: 64 hex characters in a protected file
    /// (mode 0600); `glove session authorize` issues authorizations with it.
    #[arg(long, value_name = "FILE")]
    pub start_auth_key: Option<PathBuf>,
    /// Also trust this CA (a protected PEM file, at most 1 MiB) for the
    /// upstreams a managed session's egress proxy reaches over TLS, besides
    /// the system bundle; repeatable, at most 16. Read at startup.
    #[arg(long, value_name = "FILE")]
    pub egress_ca: Vec<PathBuf>,
    /// Bytes of recent output kept per session for late attachers [default: 262144].
    #[arg(long, value_name = "BYTES")]
    pub transcript_bytes: Option<usize>,
    /// Records the receipt journal holds (reservations, releases and
    /// receipts); acknowledged receipts are compacted away [default: 100000].
    #[arg(long, value_name = "N")]
    pub receipt_journal_max_records: Option<u64>,
    /// Library bundle root (directory, mode 0700), checked and pinned.
    #[arg(long, value_name = "DIR")]
    pub library_bundle_root: Option<PathBuf>,
    /// Path-exposure policy (protected file); needs --path-exposure-journal.
    #[arg(long, value_name = "FILE")]
    pub path_exposure_policy: Option<PathBuf>,
    /// Path-exposure journal (directory mode 0700); needs --path-exposure-policy.
    #[arg(long, value_name = "FILE")]
    pub path_exposure_journal: Option<PathBuf>,
    /// Log format on stderr.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Largest frame in bytes [default: 1048576].
    #[arg(long, value_name = "BYTES")]
    pub max_frame_bytes: Option<u32>,
    /// Authenticated connections served at once [default: 64].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Connections still in the handshake at once, counted apart from the
    /// authenticated ones; one more waits, then closes the oldest [default: 16].
    #[arg(long, value_name = "N")]
    pub max_handshakes: Option<usize>,
    /// Requests in flight per connection [default: 8].
    #[arg(long, value_name = "N")]
    pub max_in_flight: Option<usize>,
    /// Idle connection timeout in seconds [default: 300].
    #[arg(long, value_name = "SECS")]
    pub idle_timeout_secs: Option<u64>,
    /// Handshake timeout in seconds [default: 5].
    #[arg(long, value_name = "SECS")]
    pub handshake_timeout_secs: Option<u64>,
    /// Time in-flight requests get on shutdown, in seconds [default: 10].
    #[arg(long, value_name = "SECS")]
    pub shutdown_grace_secs: Option<u64>,
    /// A frame not written to its client within this long closes the
    /// connection, in seconds [default: 30].
    #[arg(long, value_name = "SECS")]
    pub write_timeout_secs: Option<u64>,
}

/// The config file: the same settings as the flags, strictly decoded.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    runtime_dir: Option<PathBuf>,
    session_policy: Option<PathBuf>,
    session_store: Option<PathBuf>,
    receipt_journal: Option<PathBuf>,
    receipt_key: Option<PathBuf>,
    receipt_anchor: Option<String>,
    materialization_root: Option<PathBuf>,
    start_auth_key: Option<PathBuf>,
    egress_ca: Option<Vec<PathBuf>>,
    transcript_bytes: Option<usize>,
    receipt_journal_max_records: Option<u64>,
    library_bundle_root: Option<PathBuf>,
    path_exposure_policy: Option<PathBuf>,
    path_exposure_journal: Option<PathBuf>,
    log_format: Option<LogFormat>,
    max_frame_bytes: Option<u32>,
    max_connections: Option<usize>,
    max_handshakes: Option<usize>,
    max_in_flight: Option<usize>,
    idle_timeout_secs: Option<u64>,
    handshake_timeout_secs: Option<u64>,
    shutdown_grace_secs: Option<u64>,
    write_timeout_secs: Option<u64>,
}

/// Resolved settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The runtime directory.
    pub runtime_dir: PathBuf,
    /// The policy file.
    pub session_policy: Option<PathBuf>,
    /// The session store.
    pub session_store: Option<PathBuf>,
    /// The receipt journal.
    pub receipt_journal: PathBuf,
    /// The receipt key file.
    pub receipt_key: PathBuf,
    /// The trusted anchor.
    pub receipt_anchor: String,
    /// The materialization root.
    pub materialization_root: Option<PathBuf>,
    /// The start-authorization key file.
    pub start_auth_key: Option<PathBuf>,
    /// Extra upstream roots for managed egress (PEM files).
    pub egress_ca: Vec<PathBuf>,
    /// Transcript bytes per session.
    pub transcript_bytes: usize,
    /// The receipt journal's bounds.
    pub receipt_config: ReceiptConfig,
    /// The library bundle root.
    pub library_bundle_root: Option<PathBuf>,
    /// The exposure policy and journal.
    pub path_exposure: Option<(PathBuf, PathBuf)>,
    /// Log format.
    pub log_format: LogFormat,
    /// Bounds.
    pub limits: Limits,
    /// The clock plan admission uses.
    pub clock: Clock,
}

/// The default runtime directory: `$XDG_RUNTIME_DIR/glove` when that is an
/// absolute path, else `/run/user/<uid>/glove`.
pub fn default_runtime_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(d) if d.is_absolute() => d.join("glove"),
        _ => PathBuf::from(format!(
            "/run/user/{}/glove",
            rustix::process::geteuid().as_raw()
        )),
    }
}

fn config_invalid(msg: impl Into<String>) -> Rejection {
    Rejection::new(CONTROL_CONFIG_INVALID, msg)
}

impl GlovedArgs {
    /// Resolves flags (over the config file, over defaults) into settings.
    pub fn resolve(self, clock: Clock) -> Result<(Settings, LogFormat), Rejection> {
        let file = match &self.config {
            None => ConfigFile::default(),
            Some(p) => {
                let bytes = protected::read(
                    p,
                    Requirements {
                        max_bytes: MAX_CONFIG_BYTES,
                        mode: 0o600,
                    },
                )?;
                canon::decode(&bytes, MAX_CONFIG_BYTES as usize, Form::Strict)
                    .map_err(|r| r.at("config"))?
            }
        };
        let d = Limits::default();
        let secs = |a: Option<u64>, b: Option<u64>, dflt: Duration, name: &str| match a.or(b) {
            None => Ok(dflt),
            Some(0) => Err(config_invalid(format!("{name} must be at least 1 second"))),
            Some(s) => Ok(Duration::from_secs(s)),
        };
        let count = |a: Option<usize>, b: Option<usize>, dflt: usize, name: &str| match a.or(b) {
            None => Ok(dflt),
            Some(0) => Err(config_invalid(format!("{name} must be at least 1"))),
            Some(n) => Ok(n),
        };
        let max_frame_bytes = self
            .max_frame_bytes
            .or(file.max_frame_bytes)
            .unwrap_or(d.max_frame_bytes);
        if !(1024..=64 << 20).contains(&max_frame_bytes) {
            return Err(config_invalid("max_frame_bytes must be 1024 to 67108864"));
        }
        let limits = Limits {
            max_frame_bytes,
            max_connections: count(
                self.max_connections,
                file.max_connections,
                d.max_connections,
                "max_connections",
            )?,
            max_handshakes: count(
                self.max_handshakes,
                file.max_handshakes,
                d.max_handshakes,
                "max_handshakes",
            )?,
            max_in_flight: count(
                self.max_in_flight,
                file.max_in_flight,
                d.max_in_flight,
                "max_in_flight",
            )?,
            idle_timeout: secs(
                self.idle_timeout_secs,
                file.idle_timeout_secs,
                d.idle_timeout,
                "idle_timeout_secs",
            )?,
            handshake_timeout: secs(
                self.handshake_timeout_secs,
                file.handshake_timeout_secs,
                d.handshake_timeout,
                "handshake_timeout_secs",
            )?,
            shutdown_grace: secs(
                self.shutdown_grace_secs,
                file.shutdown_grace_secs,
                d.shutdown_grace,
                "shutdown_grace_secs",
            )?,
            write_timeout: secs(
                self.write_timeout_secs,
                file.write_timeout_secs,
                d.write_timeout,
                "write_timeout_secs",
            )?,
            replay_window: d.replay_window,
        };
        let receipt_journal = self
            .receipt_journal
            .or(file.receipt_journal)
            .ok_or_else(|| config_invalid("--receipt-journal is required"))?;
        let receipt_key = self
            .receipt_key
            .or(file.receipt_key)
            .ok_or_else(|| config_invalid("--receipt-key is required"))?;
        let path_exposure = match (
            self.path_exposure_policy.or(file.path_exposure_policy),
            self.path_exposure_journal.or(file.path_exposure_journal),
        ) {
            (None, None) => None,
            (Some(p), Some(j)) => Some((p, j)),
            _ => {
                return Err(config_invalid(
                    "--path-exposure-policy and --path-exposure-journal go together",
                ))
            }
        };
        let session_policy = self.session_policy.or(file.session_policy);
        let session_store = self.session_store.or(file.session_store);
        if session_store.is_some() && session_policy.is_none() {
            return Err(config_invalid(
                "--session-store needs --session-policy: sessions are created only from admitted plans",
            ));
        }
        let log_format = self.log_format.or(file.log_format).unwrap_or_default();
        Ok((
            Settings {
                runtime_dir: self
                    .runtime_dir
                    .or(file.runtime_dir)
                    .unwrap_or_else(default_runtime_dir),
                session_policy,
                session_store,
                receipt_journal,
                receipt_key,
                receipt_anchor: self
                    .receipt_anchor
                    .or(file.receipt_anchor)
                    .unwrap_or_else(|| GENESIS_ANCHOR.to_owned()),
                materialization_root: self.materialization_root.or(file.materialization_root),
                start_auth_key: self.start_auth_key.or(file.start_auth_key),
                egress_ca: if self.egress_ca.is_empty() {
                    file.egress_ca.unwrap_or_default()
                } else {
                    self.egress_ca
                },
                transcript_bytes: match self.transcript_bytes.or(file.transcript_bytes) {
                    None => super::managed::DEFAULT_TRANSCRIPT_BYTES,
                    Some(n) if (1024..=64 << 20).contains(&n) => n,
                    Some(_) => {
                        return Err(config_invalid("transcript_bytes must be 1024 to 67108864"))
                    }
                },
                receipt_config: match self
                    .receipt_journal_max_records
                    .or(file.receipt_journal_max_records)
                {
                    None => ReceiptConfig::default(),
                    Some(n) if (64..=1_000_000).contains(&n) => ReceiptConfig {
                        max_records: n,
                        ..ReceiptConfig::default()
                    },
                    Some(_) => {
                        return Err(config_invalid(
                            "receipt_journal_max_records must be 64 to 1000000",
                        ))
                    }
                },
                library_bundle_root: self.library_bundle_root.or(file.library_bundle_root),
                path_exposure,
                log_format,
                limits,
                clock,
            },
            log_format,
        ))
    }
}

/// What startup built: the service and the pinned directories.
#[derive(Debug)]
pub struct Started {
    /// The service.
    pub service: Service,
    /// The runtime directory, checked, held open.
    pub runtime_dir: OwnedFd,
    /// Directories whose identity is pinned for the process lifetime.
    pub pinned: Vec<OwnedFd>,
}

fn at<'p>(path: &'p Path, what: &str) -> impl Fn(JournalError) -> Rejection + 'p {
    let what = what.to_owned();
    move |e| Rejection::new(e.code(), format!("{what} {}: {e}", path.display()))
}

fn exists(path: &Path) -> bool {
    path.symlink_metadata().is_ok()
}

/// Every path the service holds, which no path grant may expose: the
/// runtime directory, the materialization root, the keys, the policies,
/// and the journals with the files kept beside them.
pub fn held_paths(s: &Settings) -> super::held::HeldPaths {
    let mut h = super::held::HeldPaths::new();
    h.add(&s.runtime_dir).add(&s.receipt_key);
    h.add_journal(&s.receipt_journal);
    for p in [
        &s.materialization_root,
        &s.start_auth_key,
        &s.session_policy,
    ]
    .into_iter()
    .flatten()
    {
        h.add(p);
    }
    if let Some(store) = &s.session_store {
        h.add_journal(store);
    }
    if let Some((policy, journal)) = &s.path_exposure {
        h.add(policy).add_journal(journal);
    }
    h
}

/// Checks every configured path and builds the service (no socket yet).
pub fn start(s: &Settings) -> Result<Started, Rejection> {
    let runtime_dir = placement::ensure_dir(&s.runtime_dir, "the runtime directory")?;
    let mut pinned = Vec::new();
    let policy = match &s.session_policy {
        None => None,
        Some(p) => {
            placement::require_absolute(p, "the session policy")?;
            let bytes = protected::read(p, Requirements::POLICY)?;
            Some(ValidatedPolicy::from_json(&bytes).map_err(|r| {
                let msg = format!(
                    "the session policy {} is invalid: {}",
                    p.display(),
                    r.message()
                );
                Rejection::new(r.code(), msg).at(r.location())
            })?)
        }
    };
    // Read even without a managed runtime: a bad file is refused, never
    // ignored.
    for f in &s.egress_ca {
        placement::require_absolute(f, "an --egress-ca file")?;
    }
    let egress_extra_roots = crate::egress::read_extra_roots(&s.egress_ca)?;
    let remote = policy.as_ref().and_then(ValidatedPolicy::remote_backend);
    if let (Some(_), Some(root)) = (remote, &s.materialization_root) {
        return Err(Rejection::new(
            CONTROL_REMOTE_BACKEND_CONFLICT,
            format!(
                "the policy names a remote_backend, which excludes the materialization root {}",
                root.display()
            ),
        ));
    }
    if let Some(root) = &s.materialization_root {
        pinned.push(placement::open_dir(root, "the materialization root")?);
    }
    let library_bundle_store = match &s.library_bundle_root {
        None => false,
        Some(root) => {
            pinned.push(placement::open_dir(root, "the library bundle root")?);
            true
        }
    };
    if let Some((policy_path, journal_path)) = &s.path_exposure {
        placement::require_absolute(policy_path, "the path-exposure policy")?;
        protected::read(policy_path, Requirements::POLICY)?;
        placement::check_parent(journal_path, "the path-exposure journal")?;
        if exists(journal_path) {
            placement::check_file(journal_path, "the path-exposure journal")?;
        }
    }
    placement::require_absolute(&s.receipt_key, "the receipt key")?;
    let key_bytes = protected::read(
        &s.receipt_key,
        Requirements {
            max_bytes: 128,
            mode: 0o600,
        },
    )?;
    let key =
        ReceiptKey::from_key_file(&key_bytes).map_err(at(&s.receipt_key, "the receipt key"))?;
    // The store and the receipt journal each keep an anchor file beside
    // them (`<file>.anchor`, keyed with the receipt key), rewritten after
    // every durable append; opening checks the file against it, and a
    // missing file whose anchor or ack is still there is refused, never
    // recreated.
    let store = match &s.session_store {
        None => None,
        Some(p) => {
            placement::check_parent(p, "the session store")?;
            let what = "the session store";
            let anchor_file =
                AnchorFile::beside(p, key.clone(), STORE_ANCHOR_DOMAIN).map_err(at(p, what))?;
            let store = if exists(p) {
                let (store, report) =
                    SessionStore::open_anchored(p, anchor_file).map_err(at(p, what))?;
                if report.unanchored {
                    tracing::warn!(path = ?p, "the session store had no anchor file; nothing could be checked against one on this start (one is kept from now on)");
                }
                if let Some(torn) = report.torn {
                    tracing::warn!(path = ?p, torn = ?torn, "session store had a torn tail; it was cut off and a copy kept");
                }
                tracing::info!(path = ?p, sessions = store.index().len(), "session store replayed");
                store
            } else {
                tracing::info!(path = ?p, "session store created");
                SessionStore::create_anchored(p, anchor_file).map_err(at(p, what))?
            };
            Some(store)
        }
    };
    let anchor = ReceiptHead::parse(&s.receipt_anchor).map_err(|e| {
        Rejection::new(
            e.code(),
            "--receipt-anchor must be <seq>:<64 lowercase hex>",
        )
    })?;
    let rj = &s.receipt_journal;
    placement::check_parent(rj, "the receipt journal")?;
    let receipts = if exists(rj) {
        let (mut j, report) = ReceiptJournal::open(rj, key, &anchor, s.receipt_config)
            .map_err(at(rj, "the receipt journal"))?;
        if report.unanchored {
            tracing::warn!(path = ?rj, "the receipt journal had no anchor file; nothing could be checked against one on this start (one is kept from now on)");
        }
        if let Some(torn) = report.torn {
            tracing::warn!(path = ?rj, torn = ?torn, "receipt journal had a torn tail; it was cut off and a copy kept");
        }
        tracing::info!(path = ?rj, head_seq = j.head().seq, "receipt journal replayed");
        // Acknowledged receipts a previous run left are compacted away now,
        // so start-up stays bounded by what is unacknowledged.
        glove_control::ports::compact_if_due(&mut j).map_err(at(rj, "the receipt journal"))?;
        j
    } else {
        tracing::info!(path = ?rj, "receipt journal created");
        ReceiptJournal::create(rj, key, &anchor, s.receipt_config)
            .map_err(at(rj, "the receipt journal"))?
    };
    let remote_backend = match remote {
        None => None,
        Some(r) => {
            super::remote::prepare(&runtime_dir, &s.runtime_dir, r)?;
            tracing::info!(
                "remote backend constructed (construction only; lifecycle not operational)"
            );
            Some(RemoteBackendDiagnostic {
                container_image_digest: r.container_image_digest().to_hex(),
                ssh_artifacts_prepared: true,
            })
        }
    };
    let runtime = match (&s.materialization_root, &s.start_auth_key) {
        (None, _) => None,
        (Some(_), None) => {
            tracing::info!("materialization root checked; without --start-auth-key no managed runtime is constructed, so lifecycle methods stay unadvertised");
            None
        }
        (Some(mat_root), Some(key_path)) => {
            placement::require_absolute(key_path, "the start-authorization key")?;
            let key = super::managed::read_key(key_path)?;
            let launcher = std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(|d| d.join("glove-launcher")))
                .unwrap_or_else(|| PathBuf::from("glove-launcher"));
            let ok = match super::managed::probe(&launcher) {
                Ok(()) => {
                    tracing::info!("managed runtime constructed: strict sandbox probe passed; lifecycle methods advertised");
                    true
                }
                Err(r) => {
                    tracing::warn!(
                        code = r.code().as_str(),
                        reason = r.message(),
                        "managed runtime probe failed; lifecycle methods stay unadvertised"
                    );
                    false
                }
            };
            let cfg = super::managed::RuntimeConfig {
                launcher,
                bundle_root: s.library_bundle_root.clone(),
                runtime_dir: s.runtime_dir.clone(),
                held: held_paths(s),
                materialization_root: mat_root.clone(),
                transcript_bytes: s.transcript_bytes,
                egress_extra_roots,
            };
            Some((cfg, key, ok))
        }
    };
    let service = Service::new(Parts {
        policy,
        store,
        receipts: Some(receipts),
        components: Components {
            library_bundle_store,
            remote_backend,
            ..Components::default()
        },
        clock: s.clock,
        max_frame_bytes: s.limits.max_frame_bytes,
    });
    let service = match runtime {
        Some((cfg, key, ok)) => service.with_runtime(cfg, key, ok),
        None => service,
    };
    for r in service.recover() {
        tracing::warn!(recovered = %r, "recovered an interrupted session");
    }
    Ok(Started {
        service,
        runtime_dir,
        pinned,
    })
}
