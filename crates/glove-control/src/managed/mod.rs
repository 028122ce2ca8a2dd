//! The Linux managed runtime: sandboxed sessions driven through
//! `glove-launcher`, with launch bindings, terminal receipts, an attachable
//! PTY transcript and crash recovery.
//!
//! One launcher per session, reached through the [`Launcher`] port (the real
//! one, [`ProcessLauncher`], spawns `glove-launcher` with one end of a
//! socket pair as its standard input). `start_session` runs on the blocking
//! pool:
//! prepare → durable `preparing` → receipt capacity reserved → spec sent →
//! `Prepared` facts → launch binding → durable `starting` → `Release` →
//! `Started` → durable `running`. A reader thread per session then owns the
//! launcher link: output goes into the session's bounded transcript and
//! to attached clients; `Exited`/`Failed` (or the launcher's socket closing)
//! builds the terminal receipt, appends it durably, and only then records
//! `exited`/`failed`.
//!
//! Lock order: the session's own state, then the session store, then the
//! receipt journal. The store and journal locks are never held while
//! waiting on the launcher.

mod authorization;
mod binding;
pub mod discovery;
mod door;
mod egress;
mod evaluation;
mod identity;
mod inputs;
mod launcher;
mod launcher_record;
pub use crate::assembly::lease;
mod mcp;
mod ops;
mod receipt;
mod recovery;
mod spec;
mod start;
mod transcript;

pub use authorization::{issue_authorization, read_key};
pub use binding::{launch_binding, LAUNCH_DOCUMENT_TAG};
pub use identity::identity_matches;
pub use launcher::{probe, Launcher, LauncherLink, LauncherWriter, ProcessLauncher};
pub use spec::{build_spec, Built, HOME};
pub use transcript::Event;

use self::receipt::ReceiptFacts;
use self::transcript::Transcript;
use crate::error::ControlError;
use crate::ports::{self, ReceiptView, Transitions};
use glove_journal::{ReceiptJournal, SessionStore};
use glove_lifecycle::{AnySession, PortError, ServiceKey, TerminalReceiptRef, UsedNonces};
use glove_types::codes::control::*;
use glove_types::ids::SessionId;
use glove_types::{ErrorCode, Sha256Digest};
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// Default transcript size per session.
pub const DEFAULT_TRANSCRIPT_BYTES: usize = 256 * 1024;
/// Default grace between TERM and KILL for `stop_session`.
pub const DEFAULT_STOP_GRACE_MS: u64 = 2_000;
/// Used start-authorization nonces kept.
/// As many as a store compaction carries, so a full set can always be
/// carried; one more unexpired start is refused
/// (`start_auth_nonce_store_full`) until the oldest expires.
const NONCE_CAPACITY: usize = glove_journal::session::record::MAX_CARRIED_NONCES;
/// Attach notifications buffered per attacher before it is cut off.
const ATTACH_QUEUE: usize = 1024;

/// What the runtime is configured with.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// The `glove-launcher` executable.
    pub launcher: PathBuf,
    /// The pinned library bundle root, if any.
    pub bundle_root: Option<PathBuf>,
    /// The runtime directory (the test hooks write there).
    pub runtime_dir: PathBuf,
    /// Every path the service holds; no grant may expose one.
    pub held: crate::held::HeldPaths,
    /// Transcript bytes per session.
    pub transcript_bytes: usize,
    /// The materialization root: one launcher record per started session.
    pub materialization_root: PathBuf,
    /// Extra roots (PEM, each checked to hold a certificate when the
    /// service started) the egress proxy trusts for upstreams besides the
    /// system bundle (`gloved --egress-ca`).
    pub egress_extra_roots: Vec<String>,
}

/// A session with a launcher in this process.
struct Live {
    id: SessionId,
    /// The client label that started the session; only it may attach,
    /// write, resize, signal, stop or clean up.
    owner: String,
    /// Writes to the launcher.
    writer: Mutex<Box<dyn LauncherWriter>>,
    /// Transcript and the event sender, together so a new attacher sees
    /// each chunk exactly once (in the snapshot or the stream).
    stream: Mutex<(Transcript, broadcast::Sender<Event>)>,
    /// The typestate session (taken while a transition is in progress).
    session: Mutex<Option<AnySession>>,
    /// Set once the terminal record is durable.
    ended: Mutex<Option<Value>>,
    /// What the receipt needs besides the outcome.
    facts: ReceiptFacts,
    /// The session's parts (egress proxy, MCP mediator, credential
    /// leases), stopped when the session ends (their reports into the
    /// receipt; the leases locked until it is written).
    parts: Mutex<Option<crate::assembly::Started>>,
    /// A refinement evaluation's evaluator, fed every raw PTY byte before
    /// the transcript sees it; taken at the end.
    evaluation: Mutex<Option<evaluation::Running>>,
}

/// The managed runtime.
pub struct Runtime {
    cfg: RuntimeConfig,
    key: ServiceKey,
    store: Arc<Mutex<SessionStore>>,
    receipts: Arc<Mutex<ReceiptJournal>>,
    nonces: Mutex<UsedNonces>,
    live: Mutex<HashMap<SessionId, Arc<Live>>>,
    /// Sessions with a `start_session` in progress (one at a time each).
    starting: Mutex<std::collections::HashSet<SessionId>>,
    clock: crate::service::Clock,
    /// Where launchers come from (the real `glove-launcher`, or a test's).
    launcher: Arc<dyn Launcher>,
    /// Set by [`Runtime::shutdown`]: no start is begun, and none is
    /// released, from then on.
    closing: std::sync::atomic::AtomicBool,
    /// The path exposures, when configured: a start opens the plan's.
    exposures: Option<Arc<crate::exposures::Exposures>>,
}

impl core::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Runtime").finish_non_exhaustive()
    }
}

struct ClockPort(crate::service::Clock);
impl glove_lifecycle::Clock for ClockPort {
    fn now_ms(&self) -> u64 {
        self.0.now_ms()
    }
}

fn err(code: ErrorCode, msg: impl Into<String>) -> ControlError {
    ControlError::refused(code, msg)
}

fn auth_err(e: glove_lifecycle::StartAuthError) -> ControlError {
    ControlError::Authorization(e)
}

fn port(e: PortError) -> ControlError {
    ControlError::Port(e)
}

fn life(e: &glove_lifecycle::LifecycleError) -> ControlError {
    ControlError::Lifecycle(e.clone())
}

use crate::error::{lock, mem};

/// A signal name accepted by `signal`.
pub fn signal_number(name: &str) -> Option<i32> {
    Some(match name {
        "HUP" => 1,
        "INT" => 2,
        "QUIT" => 3,
        "KILL" => 9,
        "USR1" => 10,
        "USR2" => 12,
        "TERM" => 15,
        "CONT" => 18,
        "STOP" => 19,
        "WINCH" => 28,
        _ => return None,
    })
}

/// Parses hex (for `write_stdin`'s `data_hex`).
pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Whether a sha256 hex names a digest (re-export for the CLI).
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256Digest::of(bytes).to_hex()
}

impl Runtime {
    /// Where the runtime keeps retained stages.
    pub fn stage_dir(&self) -> PathBuf {
        self.cfg.materialization_root.join("stages")
    }

    /// Where the runtime keeps its apply books.
    pub fn apply_dir(&self) -> PathBuf {
        self.cfg.materialization_root.join("apply")
    }

    /// Builds the runtime and rebuilds the used-nonce set from the store.
    pub fn new(
        cfg: RuntimeConfig,
        key: ServiceKey,
        store: Arc<Mutex<SessionStore>>,
        receipts: Arc<Mutex<ReceiptJournal>>,
        clock: crate::service::Clock,
    ) -> Runtime {
        let launcher = Arc::new(ProcessLauncher::new(&cfg.launcher));
        Runtime::with_launcher(cfg, key, store, receipts, clock, launcher)
    }

    /// The runtime with the service's path exposures (a start opens the
    /// plan's from their held descriptors).
    pub fn with_exposures(mut self, x: Option<Arc<crate::exposures::Exposures>>) -> Runtime {
        self.exposures = x;
        self
    }

    /// The runtime's path exposures, when configured.
    pub(crate) fn exposures(&self) -> Option<&Arc<crate::exposures::Exposures>> {
        self.exposures.as_ref()
    }

    /// [`Runtime::new`] with launchers from `launcher` instead of the
    /// configured executable.
    pub fn with_launcher(
        cfg: RuntimeConfig,
        key: ServiceKey,
        store: Arc<Mutex<SessionStore>>,
        receipts: Arc<Mutex<ReceiptJournal>>,
        clock: crate::service::Clock,
        launcher: Arc<dyn Launcher>,
    ) -> Runtime {
        let mut nonces = UsedNonces::new(NONCE_CAPACITY);
        // The nonces in the stored start records, and those a compaction
        // carried for sessions it dropped (their start records are gone).
        let (used, carried) = match lock(&store) {
            Ok(s) => (
                glove_lifecycle::recover_all(&*s).used_nonces,
                s.carried_nonces().to_vec(),
            ),
            Err(_) => (Vec::new(), Vec::new()),
        };
        for (n, exp) in used {
            nonces.insert_recovered(n, exp);
        }
        for c in carried {
            nonces.insert_recovered(glove_lifecycle::Nonce::from_bytes(c.nonce), c.expires_at_ms);
        }
        Runtime {
            cfg,
            key,
            store,
            receipts,
            nonces: Mutex::new(nonces),
            live: Mutex::new(HashMap::new()),
            starting: Mutex::new(std::collections::HashSet::new()),
            clock,
            launcher,
            closing: std::sync::atomic::AtomicBool::new(false),
            exposures: None,
        }
    }

    /// Appends the terminal receipt of `id` (spending its reservation, or a
    /// new one) unless one is durable already; returns its reference.
    fn append_receipt(
        &self,
        id: &SessionId,
        body: &receipt::TerminalBody,
    ) -> Result<TerminalReceiptRef, ControlError> {
        let mut j = lock(&self.receipts)?;
        let subject = glove_lifecycle::Subject::Session(id);
        if let Some(r) =
            TerminalReceiptRef::durable(&ReceiptView::new(&j), subject).map_err(|e| life(&e))?
        {
            return Ok(r);
        }
        let (kind, bytes) = body.encode().map_err(ControlError::from)?;
        let res = match j.held_reservation(id) {
            Some(r) => r,
            None => ports::reserve(&mut j, id).map_err(|e| err(e.code(), e.to_string()))?,
        };
        j.append_receipt(&res, kind, &bytes)
            .map_err(|e| err(e.code(), e.to_string()))?;
        // The reference comes from the receipt log, now that it is durable.
        TerminalReceiptRef::durable(&ReceiptView::new(&j), subject)
            .map_err(|e| life(&e))?
            .ok_or(ControlError::Internal("receipt state"))
    }

    /// Fails a live session: receipt first, then the failure record.
    fn fail_any(
        &self,
        any: AnySession,
        code: ErrorCode,
        body: &receipt::TerminalBody,
    ) -> Result<AnySession, ControlError> {
        let r = self.fail_any_now(any, code, body);
        if r.is_ok() {
            self.compact_store_if_due();
        }
        r
    }

    fn fail_any_now(
        &self,
        any: AnySession,
        code: ErrorCode,
        body: &receipt::TerminalBody,
    ) -> Result<AnySession, ControlError> {
        let id = any.id().clone();
        let r = self.append_receipt(&id, body)?;
        let mut store = lock(&self.store)?;
        let j = lock(&self.receipts)?;
        let view = ReceiptView::new(&j);
        let mut log = Transitions::new(&mut store);
        // Each typed session is failed under a brand of its own.
        macro_rules! fail {
            ($s:expr) => {{
                $s.enter(|s| -> Result<AnySession, ControlError> {
                    let p = s.log_fail(code, r, &view, &mut log).map_err(|e| life(&e))?;
                    Ok(AnySession::from(s.fail(p).map_err(|e| life(e.error()))?))
                })?
            }};
        }
        Ok(match any {
            AnySession::Created(s) => fail!(s),
            AnySession::Preparing(s) => fail!(s),
            AnySession::Starting(s) => fail!(s),
            AnySession::Running(s) => fail!(s),
            AnySession::Stopping(s) => fail!(s),
            terminal @ (AnySession::Exited(_) | AnySession::Failed(_)) => terminal,
        })
    }

    /// A test hook (debug builds only): with `GLOVE_TEST_PAUSE_AT=<point>`,
    /// reaching `point` writes `paused-<point>` in the runtime directory and
    /// blocks this request for good, so a test can SIGKILL `gloved` there.
    fn test_pause(&self, point: &str) {
        if !cfg!(debug_assertions) {
            return;
        }
        if std::env::var("GLOVE_TEST_PAUSE_AT").ok().as_deref() != Some(point) {
            return;
        }
        let _ = std::fs::write(self.cfg.runtime_dir.join(format!("paused-{point}")), b"");
        tracing::warn!(point, "test hook: paused");
        loop {
            std::thread::park();
        }
    }

    /// Debug builds only: with `GLOVE_TEST_HOLD_AT=<point>`, writes
    /// `held-<point>` in the runtime directory and waits (at most 60 s)
    /// until `resume-<point>` appears there, then removes both. A test
    /// changes the world at a known point and lets the service go on.
    fn test_hold(&self, point: &str) {
        if !cfg!(debug_assertions) {
            return;
        }
        if std::env::var("GLOVE_TEST_HOLD_AT").ok().as_deref() != Some(point) {
            return;
        }
        let held = self.cfg.runtime_dir.join(format!("held-{point}"));
        let resume = self.cfg.runtime_dir.join(format!("resume-{point}"));
        let _ = std::fs::write(&held, b"");
        for _ in 0..6000 {
            if resume.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = std::fs::remove_file(&resume);
        let _ = std::fs::remove_file(&held);
    }

    /// The used nonces with their expiry, as a compaction carries them;
    /// `None` when their lock is poisoned.
    pub(crate) fn nonce_carry(&self) -> Option<Vec<([u8; 16], u64)>> {
        let n = lock(&self.nonces).ok()?;
        Some(n.iter().map(|(n, e)| (*n.as_bytes(), e)).collect())
    }

    /// Compacts the session store if it is due (after a session ends, at
    /// recovery, when room runs short).
    pub(crate) fn compact_store_if_due(&self) {
        let carry = self.nonce_carry();
        if let Ok(mut store) = lock(&self.store) {
            ports::compact_store_if_due(&mut store, carry.as_deref(), self.clock.now_ms());
        }
    }

    fn is_closing(&self) -> bool {
        self.closing.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn terminal(&self, id: &SessionId) -> Option<TerminalReceiptRef> {
        let j = lock(&self.receipts).ok()?;
        TerminalReceiptRef::durable(&ReceiptView::new(&j), glove_lifecycle::Subject::Session(id))
            .ok()
            .flatten()
    }

    /// The live session; otherwise why not, in words a person can act on:
    /// a session the store never had does not exist
    /// (`store_session_not_found`), one it has is not live (its stage).
    fn live(&self, id: &SessionId) -> Result<Arc<Live>, ControlError> {
        if let Some(live) = mem(&self.live).get(id).cloned() {
            return Ok(live);
        }
        let stage = lock(&self.store)?.get(id).map(|r| r.stage());
        Err(match stage {
            Some(s) => err(
                SESSION_NOT_LIVE,
                format!(
                    "session {} is {} and has no live sandbox here",
                    id.as_str(),
                    s.as_str()
                ),
            ),
            None if self.terminal(id).is_some() => err(
                SESSION_NOT_LIVE,
                format!("session {} has ended", id.as_str()),
            ),
            None => err(
                glove_types::codes::journal::STORE_SESSION_NOT_FOUND,
                format!("session {} does not exist", id.as_str()),
            ),
        })
    }

    /// The live session, if `caller` is the client that started it.
    fn owned(&self, caller: &str, id: &SessionId) -> Result<Arc<Live>, ControlError> {
        let live = self.live(id)?;
        if live.owner != caller {
            return Err(err(
                SESSION_NOT_OWNED,
                format!("session {} belongs to another client", id.as_str()),
            ));
        }
        Ok(live)
    }
}
