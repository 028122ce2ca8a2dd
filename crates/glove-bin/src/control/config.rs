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

mod start;

pub use start::{held_paths, start, Started};

/// Name of the socket in the runtime directory.
pub const SOCKET_FILE: &str = "gloved.sock";
/// The owner socket in the runtime directory: the same handshake, for the
/// owner at this machine only (never forward it to a controller). Stage
/// inspection, apply and removal are answered only here.
pub const OWNER_SOCKET_FILE: &str = "owner.sock";

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
    /// $XDG_RUNTIME_DIR/glove, else /run/glove for root, /run/user/UID/glove
    /// otherwise]; created 0700 if missing.
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
    /// The apply trust policy (root-owned, mode 0644 or stricter, in a
    /// directory only root can write; docs/apply.md). With a managed
    /// runtime, the owner may apply retained stages (`stage_apply` on the
    /// owner socket).
    #[arg(long, value_name = "FILE")]
    pub apply_trust: Option<PathBuf>,
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
    /// Remove retained stages (not running, not applied or applied) made
    /// longer ago than this many seconds: at startup and every ten minutes
    /// [default: never].
    #[arg(long, value_name = "SECS")]
    pub stage_max_age_secs: Option<u64>,
    /// Records the receipt journal holds (reservations, releases and
    /// receipts); acknowledged receipts are compacted away [default: 100000].
    #[arg(long, value_name = "N")]
    pub receipt_journal_max_records: Option<u64>,
    /// Library bundle root (directory, mode 0700), checked and pinned.
    #[arg(long, value_name = "DIR")]
    pub library_bundle_root: Option<PathBuf>,
    /// Path-exposure policy (protected file: roots, modes, lifetimes,
    /// templates); with --path-exposure-journal enables exposure_create,
    /// exposure_revoke (owner socket) and exposure_catalog.
    #[arg(long, value_name = "FILE")]
    pub path_exposure_policy: Option<PathBuf>,
    /// Path-exposure journal (directory mode 0700; created if missing,
    /// anchored with the receipt key); needs --path-exposure-policy.
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
    apply_trust: Option<PathBuf>,
    start_auth_key: Option<PathBuf>,
    egress_ca: Option<Vec<PathBuf>>,
    transcript_bytes: Option<usize>,
    stage_max_age_secs: Option<u64>,
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
    /// The apply trust policy.
    pub apply_trust: Option<PathBuf>,
    /// The start-authorization key file.
    pub start_auth_key: Option<PathBuf>,
    /// Extra upstream roots for managed egress (PEM files).
    pub egress_ca: Vec<PathBuf>,
    /// Transcript bytes per session.
    pub transcript_bytes: usize,
    /// The age after which retained stages are removed.
    pub stage_max_age_secs: Option<u64>,
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

/// The default runtime directory (see [`crate::layout`]):
/// `$XDG_RUNTIME_DIR/glove` when that is an absolute path, else
/// `/run/glove` for root and `/run/user/<uid>/glove` for anyone else.
pub fn default_runtime_dir() -> PathBuf {
    let uid = rustix::process::geteuid().as_raw();
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(d) if d.is_absolute() => d.join("glove"),
        _ if uid == 0 => PathBuf::from("/run/glove"),
        _ => PathBuf::from(format!("/run/user/{uid}/glove")),
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
                apply_trust: self.apply_trust.or(file.apply_trust),
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
                stage_max_age_secs: self.stage_max_age_secs.or(file.stage_max_age_secs),
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
