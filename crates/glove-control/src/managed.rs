//! The Linux managed runtime: sandboxed sessions driven through
//! `glove-launcher`, with launch bindings, terminal receipts, an attachable
//! PTY transcript and crash recovery.
//!
//! One launcher process per session, spawned with one end of a socket pair
//! as its standard input. `start_session` runs on the blocking pool:
//! prepare → durable `preparing` → receipt capacity reserved → spec sent →
//! `Prepared` facts → launch binding → durable `starting` → `Release` →
//! `Started` → durable `running`. A reader thread per session then owns the
//! launcher socket: output goes into the session's bounded transcript and
//! to attached clients; `Exited`/`Failed` (or the launcher's socket closing)
//! builds the terminal receipt, appends it durably, and only then records
//! `exited`/`failed`.
//!
//! Lock order: the session's own state, then the session store, then the
//! receipt journal. The store and journal locks are never held while
//! waiting on the launcher.

use crate::ports::{self, ReceiptView, Transitions};
use crate::process;
use crate::protocol::RpcError;
use glove_journal::receipt::ReceiptKind;
use glove_journal::{ReceiptJournal, SessionStore};
use glove_lifecycle::{
    AnySession, LaunchBinding, PortError, ServiceKey, StartAuthPolicy, StartAuthorization,
    StopReason, TerminalReceiptRef, UsedNonces,
};
use glove_sandbox::outcome::{ExitStatus, Outcome};
use glove_sandbox::spec::{Bind, BundleMount, Enforcement, Grant, GrantMode, Terminal};
use glove_sandbox::wire::{Decoder, FromLauncher, SpecWire, ToLauncher};
use glove_types::codes::control::*;
use glove_types::digest::to_hex;
use glove_types::ids::SessionId;
use glove_types::plan::{admit, AdmittedPlan, DecodedPlan};
use glove_types::policy::{
    Access, CreatePolicy, LaunchTarget, NativeRuntime, ResourceLimits, ValidatedPolicy,
};
use glove_types::stage::SessionStage;
use glove_types::{canon, ErrorCode, Rejection, Sha256Digest};
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::broadcast;

/// Default transcript size per session.
pub const DEFAULT_TRANSCRIPT_BYTES: usize = 256 * 1024;
/// Default grace between TERM and KILL for `stop_session`.
pub const DEFAULT_STOP_GRACE_MS: u64 = 2_000;
/// How long the launcher may take to prepare or start a sandbox.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(60);
/// The domain of the launch binding digest (via
/// `LaunchBinding::of_launch_spec`, whose own domain is
/// `glove.lifecycle.launch-binding.v1`): the committed document is the
/// canonical JSON `{"binding":"glove.control.launch.v1","prepared":…,"spec":…}`.
pub const LAUNCH_DOCUMENT_TAG: &str = "glove.control.launch.v1";
/// Used start-authorization nonces kept.
const NONCE_CAPACITY: usize = 65_536;
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
}

/// One event of a session's stream.
#[derive(Clone, Debug)]
pub enum Event {
    /// Terminal output with its sequence number.
    Output(u64, Arc<[u8]>),
    /// The session ended; its terminal record is durable.
    Ended(Value),
}

impl Event {
    /// The notification sent to attached clients.
    pub fn notification(&self, session: &str) -> Value {
        match self {
            Event::Output(seq, data) => crate::protocol::notification(
                "output",
                json!({"session_id": session, "seq": seq, "data_hex": to_hex(data)}),
            ),
            Event::Ended(v) => crate::protocol::notification("session_ended", v.clone()),
        }
    }
}

/// A bounded transcript of output chunks.
#[derive(Debug)]
struct Transcript {
    chunks: VecDeque<(u64, Arc<[u8]>)>,
    bytes: usize,
    cap: usize,
    next_seq: u64,
}

impl Transcript {
    fn push(&mut self, data: Arc<[u8]>) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.bytes += data.len();
        self.chunks.push_back((seq, data));
        while self.bytes > self.cap {
            match self.chunks.pop_front() {
                Some((_, d)) => self.bytes -= d.len(),
                None => break,
            }
        }
        seq
    }
}

/// A session with a launcher in this process.
struct Live {
    id: SessionId,
    /// The client label that started the session; only it may attach,
    /// write, resize, signal, stop or clean up.
    owner: String,
    /// Writes to the launcher.
    writer: Mutex<UnixStream>,
    /// Transcript and the event sender, together so a new attacher sees
    /// each chunk exactly once (in the snapshot or the stream).
    stream: Mutex<(Transcript, broadcast::Sender<Event>)>,
    /// The typestate session (taken while a transition is in progress).
    session: Mutex<Option<AnySession>>,
    /// Set once the terminal record is durable.
    ended: Mutex<Option<Value>>,
    /// What the receipt needs besides the outcome.
    facts: ReceiptFacts,
}

/// The launch facts a receipt repeats.
#[derive(Clone, Debug)]
struct ReceiptFacts {
    digests: (String, String),
    binding: Option<String>,
    /// `None` only at recovery, when the stored plan cannot be decoded: the
    /// receipt then says `null`, never a made-up limit.
    limits: Option<ResourceLimits>,
    projections: Vec<Value>,
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

fn err(code: ErrorCode, msg: impl Into<String>) -> RpcError {
    RpcError::from_rejection(&Rejection::new(code, msg))
}

fn auth_err(e: &glove_lifecycle::StartAuthError) -> RpcError {
    RpcError::from_rejection(&Rejection::new(e.code(), e.to_string()).at("authorization"))
}

fn port(e: PortError) -> RpcError {
    err(e.code(), e.code().meaning())
}

fn life(e: &glove_lifecycle::LifecycleError) -> RpcError {
    err(e.code(), e.code().meaning())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Launches `/bin/true` under strict enforcement through the launcher and
/// checks that it exits 0 with memory and pids in a cgroup and no limit
/// left to an rlimit fallback.
pub fn probe(launcher: &Path) -> Result<(), Rejection> {
    let bad = |m: String| Rejection::new(SESSION_RUNTIME_UNAVAILABLE, m);
    let spec = glove_sandbox::profile::exec_spec(glove_sandbox::profile::ExecRequest {
        strict_limits: true,
        ..glove_sandbox::profile::ExecRequest::new(vec!["/bin/true".into()])
    })
    .map_err(|e| bad(format!("probe spec: {e}")))?;
    let mut wire = SpecWire::from_spec(&spec).ok_or_else(|| bad("probe spec".into()))?;
    wire.enforcement = Enforcement::Strict;
    let (sock, child) = spawn_launcher(launcher).map_err(|e| bad(e.message().into()))?;
    let verdict = probe_over(sock, wire);
    // The socket is closed by now, so the launcher finishes; it is reaped
    // here and leaves no zombie behind for the service's lifetime.
    reap_within(child, PROBE_REAP_TIMEOUT);
    verdict
}

/// How long the probe's launcher gets to exit after its verdict before it
/// is killed (and then reaped).
const PROBE_REAP_TIMEOUT: Duration = Duration::from_secs(10);

/// Waits for `child` for at most `timeout`, then kills it and waits.
fn reap_within(mut child: std::process::Child, timeout: Duration) {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return,
            Ok(None) if std::time::Instant::now() >= deadline => {
                tracing::warn!(
                    pid = child.id(),
                    "the probe's launcher did not exit; killing it"
                );
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// The probe's exchange with its launcher: the spec out, the verdict in.
fn probe_over(mut sock: UnixStream, wire: SpecWire) -> Result<(), Rejection> {
    let bad = |m: String| Rejection::new(SESSION_RUNTIME_UNAVAILABLE, m);
    sock.write_all(&ToLauncher::Spec(Box::new(wire)).encode())
        .map_err(|e| bad(format!("probe: {e}")))?;
    let mut dec = Decoder::default();
    loop {
        match read_frame(&mut sock, &mut dec).map_err(|e| bad(format!("probe: {e}")))? {
            FromLauncher::Exited(o) => {
                use glove_sandbox::outcome::Mechanism::*;
                let e = o.enforcement;
                let cg = |m| matches!(m, CgroupV2 | CgroupV1);
                if o.exit != (ExitStatus::Exited { code: 0 }) {
                    return Err(bad(format!("probe exited with {:?}", o.exit)));
                }
                let all = [
                    e.cpu_time,
                    e.memory,
                    e.pids,
                    e.wall_time,
                    e.disk,
                    e.terminal_output,
                ];
                // Strict means the launcher's strict: memory and pids in a
                // cgroup, and no limit left to an rlimit fallback (CPU time
                // may be a cgroup or the launcher's cgroup-accounted watchdog).
                if !(cg(e.memory) && cg(e.pids)) || all.contains(&Rlimit) {
                    return Err(bad(format!("limits not enforced by cgroups: {e:?}")));
                }
                return Ok(());
            }
            FromLauncher::Failed(f) => {
                return Err(bad(format!("probe failed: {}: {}", f.code, f.message)))
            }
            _ => {}
        }
    }
}

/// A spawned launcher: our socket end, and the child (reaped by a thread).
fn spawn_launcher(launcher: &Path) -> Result<(UnixStream, std::process::Child), Rejection> {
    let (mine, theirs) = UnixStream::pair()
        .map_err(|e| Rejection::new(SESSION_LAUNCH_FAILED, format!("socketpair: {e}")))?;
    let child = std::process::Command::new(launcher)
        .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
            theirs,
        )))
        .stdout(std::process::Stdio::null())
        .spawn()
        .map_err(|e| {
            Rejection::new(
                SESSION_LAUNCH_FAILED,
                format!("cannot run {}: {e}", launcher.display()),
            )
        })?;
    mine.set_read_timeout(Some(LAUNCH_TIMEOUT))
        .map_err(|e| Rejection::new(SESSION_LAUNCH_FAILED, format!("socket: {e}")))?;
    Ok((mine, child))
}

/// Reads frames until the launcher reports the end (or goes away).
fn read_until_end(sock: &mut UnixStream, dec: &mut Decoder) -> Result<(), String> {
    loop {
        match read_frame(sock, dec)? {
            FromLauncher::Exited(_) | FromLauncher::Failed(_) => return Ok(()),
            _ => {}
        }
    }
}

fn read_frame(sock: &mut UnixStream, dec: &mut Decoder) -> Result<FromLauncher, String> {
    let mut buf = [0u8; 16384];
    loop {
        if let Some(m) = dec.next_from_launcher().map_err(|e| e.to_string())? {
            return Ok(m);
        }
        let n = sock.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the launcher closed its socket".into());
        }
        dec.push(&buf[..n]);
    }
}

/// The launch spec and the receipt facts for an admitted plan.
pub fn build_spec(
    policy: &ValidatedPolicy,
    admitted: &AdmittedPlan,
    cfg: &RuntimeConfig,
    rows: u16,
    cols: u16,
) -> Result<(SpecWire, Vec<Value>), Rejection> {
    let template = policy
        .template(admitted.runtime_template_id().as_str())
        .ok_or_else(|| Rejection::new(SESSION_PLAN_NOT_ADMITTED, "the template is gone"))?;
    let launch = template.launch();
    let executable = match launch.target() {
        LaunchTarget::Pinned { executable_path } => executable_path.clone(),
        LaunchTarget::Discovery {
            runtime,
            executable_search_paths,
        } => executable_search_paths
            .iter()
            .map(|d| format!("{}/{}", d.trim_end_matches('/'), runtime.executable_name()))
            .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file()))
            .ok_or_else(|| {
                Rejection::new(
                    SESSION_EXECUTABLE_NOT_FOUND,
                    format!(
                        "{} is in none of the template's search paths",
                        runtime.executable_name()
                    ),
                )
            })?,
    };
    let mut grants = Vec::new();
    let mut working_directory = "/home/agent".to_owned();
    for g in admitted.path_grants() {
        let alias = policy
            .path_alias(g.alias.as_str())
            .ok_or_else(|| Rejection::new(SESSION_PLAN_NOT_ADMITTED, "a path alias is gone"))?;
        let tuple = alias.access().iter().find(|t| t.access == g.access);
        let mode = match g.access {
            Access::ReadOnly => GrantMode::ReadOnly,
            Access::EphemeralWrite => GrantMode::EphemeralCopy {
                max_bytes: g.max_bytes,
            },
            Access::DirectWrite => {
                return Err(Rejection::new(
                    SESSION_DIRECT_WRITE_REFUSED,
                    format!("the grant of {} asks for direct_write", g.alias.as_str()),
                )
                .at("path_grants"))
            }
            Access::RetainedWrite => {
                return Err(Rejection::new(
                    SESSION_RETAINED_WRITE_UNSUPPORTED,
                    format!("the grant of {} asks for retained_write", g.alias.as_str()),
                )
                .at("path_grants"))
            }
        };
        cfg.held.check_grant(g.alias.as_str(), alias.host_path())?;
        if grants.is_empty() {
            working_directory = alias.target_path().to_owned();
        }
        grants.push(Grant {
            host_path: alias.host_path().to_owned(),
            target: alias.target_path().to_owned(),
            mode,
            create_if_missing: tuple
                .is_some_and(|t| t.create_policy == CreatePolicy::EmptyDirectory),
        });
    }
    let mut bundles = Vec::new();
    let mut projections = Vec::new();
    for p in admitted.library_projections() {
        let root = cfg.bundle_root.as_ref().ok_or_else(|| {
            Rejection::new(
                SESSION_BUNDLE_ROOT_MISSING,
                "the plan projects a library bundle; start gloved with --library-bundle-root",
            )
        })?;
        let dest = policy
            .destination(p.destination_alias.as_str())
            .ok_or_else(|| Rejection::new(SESSION_PLAN_NOT_ADMITTED, "a destination is gone"))?;
        let target = format!(
            "{}/{}",
            dest.target_path().trim_end_matches('/'),
            p.projection_id.as_str()
        );
        bundles.push(BundleMount {
            root: root.display().to_string(),
            sha256: p.sha256.to_hex(),
            target: target.clone(),
        });
        projections.push(json!({
            "projection_id": p.projection_id.as_str(),
            "destination_alias": p.destination_alias.as_str(),
            "target": target,
            "sha256": p.sha256.to_hex(),
        }));
    }
    // System directories, /etc and the generated files of the default
    // profile; everything the agent runs is the template's.
    let base = glove_sandbox::profile::exec_spec(glove_sandbox::profile::ExecRequest {
        limits: *admitted.limits(),
        pty: Some((rows, cols)),
        strict_limits: true,
        ..glove_sandbox::profile::ExecRequest::new(vec!["/bin/true".into()])
    })
    .map_err(|e| Rejection::new(SESSION_LAUNCH_FAILED, e.to_string()))?;
    let mut wire = SpecWire::from_spec(&base)
        .ok_or_else(|| Rejection::new(SESSION_LAUNCH_FAILED, "base spec"))?;
    let mut environment: Vec<String> = launch.environment().to_vec();
    let mut set = |e: String| {
        let name = e.split('=').next().unwrap_or("").to_owned();
        environment.retain(|x| x.split('=').next() != Some(name.as_str()));
        environment.push(e);
    };
    set("HOME=/home/agent".into());
    if let Some(m) = NativeRuntime::parse(template.runtime_id().as_str())
        .and_then(NativeRuntime::managed_environment)
    {
        set(m.to_owned());
    }
    environment.sort();
    for p in launch.read_only_paths() {
        if !wire.read_only_binds.iter().any(|b| &b.target == p) {
            wire.read_only_binds.push(Bind {
                source: p.clone(),
                target: p.clone(),
            });
        }
    }
    wire.executable = executable;
    wire.arguments = launch.arguments().to_vec();
    wire.environment = environment;
    wire.working_directory = working_directory;
    wire.writable_dirs = vec!["/home/agent".into(), "/tmp".into()];
    wire.copy_in = vec![];
    wire.limits = *admitted.limits();
    wire.terminal = Terminal::Pty { rows, cols };
    wire.enforcement = Enforcement::Strict;
    wire.grants = grants;
    wire.bundles = bundles;
    wire.protected_paths = cfg.held.to_strings();
    wire.hold_for_release = true;
    Ok((wire, projections))
}

/// The launch binding: the lifecycle's launch-binding digest of the
/// canonical launch document (spec and prepared facts).
pub fn launch_binding(
    spec: &SpecWire,
    facts: &glove_sandbox::launch::PreparedFacts,
) -> Result<LaunchBinding, Rejection> {
    let doc = json!({
        "binding": LAUNCH_DOCUMENT_TAG,
        "spec": serde_json::to_value(spec).map_err(|e| Rejection::new(SESSION_LAUNCH_FAILED, e.to_string()))?,
        "prepared": serde_json::to_value(facts).map_err(|e| Rejection::new(SESSION_LAUNCH_FAILED, e.to_string()))?,
    });
    let bytes = canon::to_canonical(&doc)?;
    LaunchBinding::of_launch_spec(&bytes).map_err(|e| Rejection::new(e.code(), e.code().meaning()))
}

/// The identity the lifecycle records: boot id, pid, start time and the
/// inode of the init's cgroup directory.
fn lifecycle_identity(
    id: &glove_sandbox::identity::ProcessIdentity,
) -> Result<glove_lifecycle::ProcessIdentity, Rejection> {
    let cg = cgroup_inode(&id.cgroup)
        .ok_or_else(|| Rejection::new(SESSION_LAUNCH_FAILED, "cannot read the sandbox cgroup"))?;
    glove_lifecycle::ProcessIdentity::new(
        &id.boot_id,
        u32::try_from(id.pid).unwrap_or(0),
        id.start_time_ticks,
        cg,
    )
    .map_err(|e| Rejection::new(e.code(), e.code().meaning()))
}

/// The inode of the process's cgroup directory named in a
/// `/proc/PID/cgroup` text: the unified hierarchy's on cgroup v2, else the
/// `pids` controller's (the one the launcher's v1 cgroup always joins).
fn cgroup_inode(text: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let dir = if v2 {
        let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
        format!("/sys/fs/cgroup{}", path.trim_end())
    } else {
        let path = text.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, ctl, path) = (parts.next()?, parts.next()?, parts.next()?);
            ctl.split(',').any(|c| c == "pids").then_some(path)
        })?;
        format!("/sys/fs/cgroup/pids{}", path.trim_end())
    };
    std::fs::metadata(dir).ok().map(|m| m.ino())
}

/// Whether the recorded identity names a live process now (boot id, pid,
/// start time and cgroup inode all equal).
pub fn identity_matches(id: &glove_lifecycle::ProcessIdentity) -> bool {
    let Ok(now) =
        glove_sandbox::identity::ProcessIdentity::of(i32::try_from(id.pid()).unwrap_or(0))
    else {
        return false;
    };
    init_matches(id, &now)
}

/// Whether `now` (read for the recorded pid) is the recorded init.
fn init_matches(
    id: &glove_lifecycle::ProcessIdentity,
    now: &glove_sandbox::identity::ProcessIdentity,
) -> bool {
    now.boot_id == id.boot_id()
        && now.start_time_ticks == id.start_time_ticks()
        && cgroup_inode(&now.cgroup) == Some(id.cgroup_id())
}

fn limits_json(l: &ResourceLimits) -> Value {
    json!({
        "cpu_time_ms": l.cpu_time_ms,
        "memory_bytes": l.memory_bytes,
        "pids": l.pids,
        "wall_time_ms": l.wall_time_ms,
        "disk_bytes": l.disk_bytes,
        "terminal_output_bytes": l.terminal_output_bytes,
    })
}

/// How a session ended, for its receipt.
enum Ending<'a> {
    Outcome(&'a Outcome),
    Failure { code: String, message: String },
}

fn receipt_body(id: &SessionId, f: &ReceiptFacts, end: &Ending<'_>, recovered: bool) -> Value {
    let mut body = json!({
        "receipt_kind": "resource_v1",
        "session_id": id.as_str(),
        "plan_content_digest": f.digests.0,
        "controller_plan_digest": f.digests.1,
        "launch_binding_digest": f.binding,
        "limits": f.limits.as_ref().map_or(Value::Null, limits_json),
        "projections": f.projections,
        "recovered": recovered,
    });
    let m = body.as_object_mut().expect("object");
    match end {
        Ending::Outcome(o) => {
            let u = &o.usage;
            m.insert(
                "usage".into(),
                json!({
                    "cpu_time_ms": u.cpu_time_ms,
                    "peak_memory_bytes": u.peak_memory_bytes,
                    "pids_peak": u.pids_peak,
                    "wall_time_ms": u.wall_time_ms,
                    "disk_bytes": u.disk_bytes,
                    "terminal_bytes": u.terminal_bytes,
                }),
            );
            let (reason, limit) = match (o.ended_by, o.stopped) {
                (Some(l), _) => ("limit", Some(l.as_str())),
                (None, true) => ("stopped", None),
                (None, false) => match o.exit {
                    ExitStatus::Exited { .. } => ("exited", None),
                    ExitStatus::Signaled { .. } => ("signaled", None),
                },
            };
            m.insert(
                "termination".into(),
                json!({
                    "reason": reason,
                    "limit": limit,
                    "limits_reached": o.limits_reached.iter().map(|l| l.as_str()).collect::<Vec<_>>(),
                    "exit": match o.exit {
                        ExitStatus::Exited { code } => json!({"kind": "exited", "code": code}),
                        ExitStatus::Signaled { signal } => json!({"kind": "signaled", "signal": signal}),
                    },
                }),
            );
        }
        Ending::Failure { code, message } => {
            m.insert("usage".into(), Value::Null);
            m.insert(
                "termination".into(),
                json!({"reason": "failed", "code": code, "message": message, "limit": null, "limits_reached": [], "exit": null}),
            );
        }
    }
    body
}

impl Runtime {
    /// Builds the runtime and rebuilds the used-nonce set from the store.
    pub fn new(
        cfg: RuntimeConfig,
        key: ServiceKey,
        store: Arc<Mutex<SessionStore>>,
        receipts: Arc<Mutex<ReceiptJournal>>,
        clock: crate::service::Clock,
    ) -> Runtime {
        let mut nonces = UsedNonces::new(NONCE_CAPACITY);
        let report = glove_lifecycle::recover_all(ports::all_records(&lock(&store)));
        for (n, exp) in report.used_nonces {
            nonces.insert_recovered(n, exp);
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
        }
    }

    /// Appends the terminal receipt of `id` (spending its reservation, or a
    /// new one) unless one is durable already; returns its reference.
    fn append_receipt(&self, id: &SessionId, body: &Value) -> Result<TerminalReceiptRef, RpcError> {
        let mut j = lock(&self.receipts);
        if let Some(r) = glove_lifecycle::ReceiptLog::terminal_receipt(
            &ReceiptView::new(&j),
            glove_lifecycle::Subject::Session(id),
        )
        .map_err(port)?
        {
            return Ok(r);
        }
        let bytes = canon::to_canonical(body).map_err(|r| RpcError::from_rejection(&r))?;
        let res = match j.held_reservation(id) {
            Some(r) => r,
            None => j.reserve(id).map_err(|e| err(e.code(), e.to_string()))?,
        };
        let stored = j
            .append_receipt(&res, ReceiptKind::ResourceV1, &bytes)
            .map_err(|e| err(e.code(), e.to_string()))?;
        Ok(ports::reference(&stored))
    }

    /// Fails a live session: receipt first, then the failure record.
    fn fail_any(
        &self,
        any: AnySession,
        code: ErrorCode,
        body: &Value,
    ) -> Result<AnySession, RpcError> {
        let id = any.id().clone();
        let r = self.append_receipt(&id, body)?;
        let mut store = lock(&self.store);
        let j = lock(&self.receipts);
        let view = ReceiptView::new(&j);
        let mut log = Transitions::new(&mut store);
        // Each typed session is failed under a brand of its own.
        macro_rules! fail {
            ($s:expr) => {{
                $s.enter(|s| -> Result<AnySession, RpcError> {
                    let p = s.log_fail(code, r, &view, &mut log).map_err(|e| life(&e))?;
                    Ok(AnySession::from(s.fail(p).map_err(|e| life(e.error()))?))
                })?
            }};
        }
        Ok(match any.stage() {
            SessionStage::Created => {
                fail!(any.try_into_created().map_err(|e| life(e.error()))?)
            }
            SessionStage::Preparing => {
                fail!(any.try_into_preparing().map_err(|e| life(e.error()))?)
            }
            SessionStage::Starting => {
                fail!(any.try_into_starting().map_err(|e| life(e.error()))?)
            }
            SessionStage::Running => {
                fail!(any.try_into_running().map_err(|e| life(e.error()))?)
            }
            SessionStage::Stopping => {
                fail!(any.try_into_stopping().map_err(|e| life(e.error()))?)
            }
            SessionStage::Exited | SessionStage::Failed => any,
        })
    }

    /// `start_session`; a concurrent start of the same session is refused
    /// with `session_not_startable`.
    pub fn start(
        self: &Arc<Self>,
        policy: &ValidatedPolicy,
        owner: &str,
        id: &SessionId,
        authorization: &str,
        size: (u16, u16),
    ) -> Result<Value, RpcError> {
        if !lock(&self.starting).insert(id.clone()) {
            return Err(err(
                SESSION_NOT_STARTABLE,
                format!("session {} is being started", id.as_str()),
            ));
        }
        let r = self.start_inner(policy, owner, id, authorization, size);
        lock(&self.starting).remove(id);
        r
    }

    fn start_inner(
        self: &Arc<Self>,
        policy: &ValidatedPolicy,
        owner: &str,
        id: &SessionId,
        authorization: &str,
        size: (u16, u16),
    ) -> Result<Value, RpcError> {
        // The session, its plan, and the plan admitted again now.
        let (any, plan_bytes) = {
            let store = lock(&self.store);
            let rec = store.get(id).ok_or_else(|| {
                err(
                    glove_types::codes::journal::STORE_SESSION_NOT_FOUND,
                    format!("no session {}", id.as_str()),
                )
            })?;
            let plan = rec.plan().to_vec();
            (
                ports::replay(&store, id)
                    .ok_or_else(crate::service::internal)?
                    .map_err(port)?,
                plan,
            )
        };
        // The authorization is checked (and its nonce spent) first, so a
        // replayed one is refused as such whatever the session's stage.
        let digests = *any.digests();
        let auth =
            StartAuthorization::decode(authorization.as_bytes()).map_err(|e| auth_err(&e))?;
        let verified = {
            let mut nonces = lock(&self.nonces);
            auth.verify(
                &self.key,
                id,
                &digests,
                StartAuthPolicy::default(),
                &ClockPort(self.clock),
                &mut nonces,
            )
            .map_err(|e| auth_err(&e))?
        };
        if any.stage() != SessionStage::Created {
            return Err(err(
                SESSION_NOT_STARTABLE,
                format!("session {} is {}", id.as_str(), any.stage().as_str()),
            ));
        }
        let created = any.try_into_created().map_err(|e| life(e.error()))?;
        // From here on the session is typed, under one brand; it leaves the
        // scope only as an `AnySession` (the live registry, `fail_with`).
        created.enter(|created| -> Result<Value, RpcError> {
            let decoded =
                DecodedPlan::decode(&plan_bytes).map_err(|r| RpcError::from_rejection(&r))?;
            let admitted = admit(decoded, None, policy, self.clock.now_ms()).map_err(|r| {
                err(
                    SESSION_PLAN_NOT_ADMITTED,
                    format!(
                        "the stored plan is not admitted now: {}: {}",
                        r.code().as_str(),
                        r.message()
                    ),
                )
            })?;
            let (spec, projections) = build_spec(policy, &admitted, &self.cfg, size.0, size.1)
                .map_err(|r| RpcError::from_rejection(&r))?;
            let mut facts = ReceiptFacts {
                digests: (
                    digests.plan_content_digest().to_hex(),
                    digests.controller_plan_digest().to_hex(),
                ),
                binding: None,
                limits: Some(*admitted.limits()),
                projections,
            };
            // Preparing, then receipt capacity.
            let preparing = {
                let mut store = lock(&self.store);
                let p = created
                    .log_prepare(&mut Transitions::new(&mut store))
                    .map_err(|e| life(&e))?;
                created.prepare(p).map_err(|e| life(e.error()))?
            };
            self.test_pause("after_prepare_record");
            if let Err(e) = lock(&self.receipts).reserve(id) {
                let code = e.code();
                let body = receipt_body(
                    id,
                    &facts,
                    &Ending::Failure {
                        code: code.as_str().into(),
                        message: e.to_string(),
                    },
                    false,
                );
                // Without capacity there may be no room for a receipt either;
                // the failure record needs one, so try and report the first error.
                let _ = self.fail_any(preparing.into(), code, &body);
                return Err(err(code, e.to_string()));
            }
            let fail_with =
                |any: AnySession, code: ErrorCode, reason: String, facts: &ReceiptFacts| {
                    let body = receipt_body(
                        id,
                        facts,
                        &Ending::Failure {
                            code: code.as_str().into(),
                            message: reason.clone(),
                        },
                        false,
                    );
                    match self.fail_any(any, code, &body) {
                        Ok(_) => err(code, reason),
                        Err(e) => e,
                    }
                };
            let (mut sock, child) = match spawn_launcher(&self.cfg.launcher) {
                Ok(x) => x,
                Err(r) => {
                    return Err(fail_with(
                        preparing.into(),
                        r.code(),
                        r.message().into(),
                        &facts,
                    ))
                }
            };
            let mut dec = Decoder::default();
            let sent = sock.write_all(&ToLauncher::Spec(Box::new(spec.clone())).encode());
            let reply = sent
                .map_err(|e| e.to_string())
                .and_then(|()| read_frame(&mut sock, &mut dec));
            let prepared = match expect_frame(reply, |f| match f {
                FromLauncher::Prepared(p) => Ok(p),
                other => Err(other),
            }) {
                Ok(p) => p,
                Err((code, message)) => {
                    reap(child);
                    return Err(fail_with(preparing.into(), code, message, &facts));
                }
            };
            let binding = match launch_binding(&spec, &prepared) {
                Ok(b) => b,
                Err(r) => {
                    reap(child);
                    return Err(fail_with(
                        preparing.into(),
                        r.code(),
                        r.message().into(),
                        &facts,
                    ));
                }
            };
            facts.binding = Some(binding.digest().to_hex());
            // The binding is durable before the agent may run.
            let starting = {
                let mut store = lock(&self.store);
                let p =
                    match preparing.log_start(binding, verified, &mut Transitions::new(&mut store))
                    {
                        Ok(p) => p,
                        Err(e) => {
                            drop(store);
                            reap(child);
                            return Err(fail_with(
                                preparing.into(),
                                e.code(),
                                e.code().meaning().into(),
                                &facts,
                            ));
                        }
                    };
                preparing.start(p).map_err(|e| life(e.error()))?
            };
            // Before the agent may run: where its launcher is, so recovery can
            // end a sandbox whose running record never became durable (the
            // sandbox init dies with its launcher).
            if let Err(r) = self.record_launcher(id, child.id()) {
                reap(child);
                return Err(fail_with(
                    starting.into(),
                    r.code(),
                    r.message().into(),
                    &facts,
                ));
            }
            self.test_pause("after_start_record");
            let started = sock
                .write_all(&ToLauncher::Release.encode())
                .map_err(|e| e.to_string())
                .and_then(|()| read_frame(&mut sock, &mut dec));
            let info = match expect_frame(started, |f| match f {
                FromLauncher::Started(s) => Ok(s),
                other => Err(other),
            }) {
                Ok(s) => s,
                Err((code, message)) => {
                    reap(child);
                    return Err(fail_with(starting.into(), code, message, &facts));
                }
            };
            let identity = match lifecycle_identity(&info.init) {
                Ok(i) => i,
                Err(r) => {
                    let _ = sock.write_all(&ToLauncher::Stop(0).encode());
                    reap(child);
                    return Err(fail_with(
                        starting.into(),
                        r.code(),
                        r.message().into(),
                        &facts,
                    ));
                }
            };
            self.test_pause("after_release");
            let logged = {
                let mut store = lock(&self.store);
                starting.log_run(identity, &mut Transitions::new(&mut store))
            };
            let p = match logged {
                Ok(p) => p,
                Err(e) => {
                    // The agent runs but its identity is not durable: end it
                    // now rather than leave it to its limits.
                    let _ = sock.write_all(&ToLauncher::Stop(0).encode());
                    let _ = read_until_end(&mut sock, &mut dec);
                    reap(child);
                    return Err(fail_with(
                        starting.into(),
                        e.code(),
                        e.code().meaning().into(),
                        &facts,
                    ));
                }
            };
            let running = starting.run(p).map_err(|e| life(e.error()))?;
            let _ = sock.set_read_timeout(None);
            let writer = sock.try_clone().map_err(|_| crate::service::internal())?;
            let (tx, _) = broadcast::channel(ATTACH_QUEUE);
            let live = Arc::new(Live {
                id: id.clone(),
                owner: owner.to_owned(),
                writer: Mutex::new(writer),
                stream: Mutex::new((
                    Transcript {
                        chunks: VecDeque::new(),
                        bytes: 0,
                        cap: self.cfg.transcript_bytes,
                        next_seq: 1,
                    },
                    tx,
                )),
                session: Mutex::new(Some(running.into())),
                ended: Mutex::new(None),
                facts,
            });
            lock(&self.live).insert(id.clone(), live.clone());
            let rt = self.clone();
            std::thread::Builder::new()
                .name(format!("session-{}", id.as_str()))
                .spawn(move || rt.pump(&live, sock, dec, child))
                .map_err(|_| crate::service::internal())?;
            tracing::info!(session_id = ?id.as_str(), init_pid = info.init.pid, "session running");
            Ok(json!({
                "session_id": id.as_str(),
                "stage": "running",
                "launch_binding_digest": binding.digest().to_hex(),
                "init_pid": info.init.pid,
            }))
        })
    }

    /// The session thread: output, then the ending.
    fn pump(
        &self,
        live: &Live,
        mut sock: UnixStream,
        mut dec: Decoder,
        child: std::process::Child,
    ) {
        let end = loop {
            match read_frame(&mut sock, &mut dec) {
                Ok(FromLauncher::Output(b)) => {
                    let mut s = lock(&live.stream);
                    let data: Arc<[u8]> = b.into();
                    let seq = s.0.push(data.clone());
                    let _ = s.1.send(Event::Output(seq, data));
                }
                Ok(FromLauncher::Exited(o)) => break Ok(o),
                Ok(FromLauncher::Failed(f)) => {
                    break Err((SESSION_LAUNCH_FAILED, format!("{}: {}", f.code, f.message)))
                }
                Ok(_) => {}
                Err(e) => break Err((SESSION_LAUNCHER_LOST, e)),
            }
        };
        reap(child);
        let result = self.finish(live, end);
        if result.is_ok() {
            self.forget_launcher(&live.id);
        }
        let ended = match result {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(session_id = ?live.id.as_str(), code = e.code.as_str(), "cannot record the session's end");
                json!({"session_id": live.id.as_str(), "stage": "unrecorded", "code": e.code.as_str()})
            }
        };
        *lock(&live.ended) = Some(ended.clone());
        let s = lock(&live.stream);
        let _ = s.1.send(Event::Ended(ended));
    }

    fn finish(
        &self,
        live: &Live,
        end: Result<Box<Outcome>, (ErrorCode, String)>,
    ) -> Result<Value, RpcError> {
        let mut guard = lock(&live.session);
        let any = guard.take().ok_or_else(crate::service::internal)?;
        let id = live.id.clone();
        let result = match end {
            Ok(o) => {
                let reason = if o.ended_by.is_some() {
                    StopReason::LimitReached
                } else {
                    StopReason::AgentExited
                };
                let stopping = match any.stage() {
                    SessionStage::Running => {
                        let running = any.try_into_running().map_err(|e| life(e.error()))?;
                        let mut store = lock(&self.store);
                        running.enter(|running| -> Result<_, RpcError> {
                            let p = running
                                .log_stop(reason, &mut Transitions::new(&mut store))
                                .map_err(|e| life(&e))?;
                            Ok(running.stop(p).map_err(|e| life(e.error()))?.park())
                        })?
                    }
                    _ => any.try_into_stopping().map_err(|e| life(e.error()))?,
                };
                let body = receipt_body(&id, &live.facts, &Ending::Outcome(&o), false);
                let r = self.append_receipt(&id, &body)?;
                let mut store = lock(&self.store);
                let j = lock(&self.receipts);
                let exited = stopping.enter(|stopping| -> Result<_, RpcError> {
                    let p = stopping
                        .log_exit(r, &ReceiptView::new(&j), &mut Transitions::new(&mut store))
                        .map_err(|e| life(&e))?;
                    Ok(stopping.exit(p).map_err(|e| life(e.error()))?.park())
                })?;
                let v = json!({"session_id": id.as_str(), "stage": "exited", "receipt_seq": r.receipt_seq()});
                *guard = Some(exited.into());
                v
            }
            Err((code, message)) => {
                let body = receipt_body(
                    &id,
                    &live.facts,
                    &Ending::Failure {
                        code: code.as_str().into(),
                        message,
                    },
                    false,
                );
                let failed = self.fail_any(any, code, &body)?;
                let seq = self.terminal(&id).map(|r| r.receipt_seq());
                *guard = Some(failed);
                json!({"session_id": id.as_str(), "stage": "failed", "code": code.as_str(), "receipt_seq": seq})
            }
        };
        tracing::info!(session_id = ?id.as_str(), result = %result, "session ended");
        Ok(result)
    }

    fn launcher_file(&self, id: &SessionId) -> PathBuf {
        self.cfg.materialization_root.join(format!(
            "launcher-{}.json",
            &Sha256Digest::of(id.as_str().as_bytes()).to_hex()[..32]
        ))
    }

    /// Durably records the launcher's identity for `id` (file and
    /// directory synced).
    fn record_launcher(&self, id: &SessionId, pid: u32) -> Result<(), Rejection> {
        let bad = |m: String| Rejection::new(SESSION_LAUNCH_FAILED, m);
        let ident = glove_sandbox::identity::ProcessIdentity::of(pid as i32)
            .map_err(|e| bad(format!("launcher identity: {e}")))?;
        let body = json!({
            "session_id": id.as_str(),
            "boot_id": ident.boot_id,
            "pid": ident.pid,
            "start_time_ticks": ident.start_time_ticks,
        });
        let name = self
            .launcher_file(id)
            .file_name()
            .map(std::ffi::OsStr::to_owned)
            .ok_or_else(|| bad("launcher record name".into()))?;
        let root =
            crate::placement::open_dir(&self.cfg.materialization_root, "the materialization root")
                .map_err(|r| {
                    tracing::warn!(
                        code = r.code().as_str(),
                        reason = r.message(),
                        "launcher record"
                    );
                    bad("launcher record: cannot open the materialization root".into())
                })?;
        glove_journal::atomic::write_file(
            rustix::fd::AsFd::as_fd(&root),
            &name,
            body.to_string().as_bytes(),
        )
        .map_err(|e| bad(format!("launcher record: {e}")))
    }

    fn forget_launcher(&self, id: &SessionId) {
        let _ = std::fs::remove_file(self.launcher_file(id));
    }

    /// SIGKILLs the recorded launcher of `id` if it is still that process
    /// (boot id, pid, start time); true when it was killed.
    /// Kills the session's recorded launcher if it is still that process,
    /// then removes the session cgroup it can no longer remove itself;
    /// `Some(directories removed)` when it was killed.
    fn kill_recorded_launcher(&self, id: &SessionId) -> Option<usize> {
        let Ok(text) = std::fs::read(self.launcher_file(id)) else {
            return None;
        };
        let Ok(v) = serde_json::from_slice::<Value>(&text) else {
            return None;
        };
        let pid = v["pid"]
            .as_i64()
            .and_then(|p| i32::try_from(p).ok())
            .unwrap_or(0);
        // Through a pidfd opened before the check (see `process`), with a
        // bounded wait for it to be gone (the sandbox init dies with it).
        let killed = process::kill_if_same(
            &process::PidFds,
            pid,
            |now| {
                v["session_id"] == id.as_str()
                    && v["boot_id"] == now.boot_id.as_str()
                    && v["start_time_ticks"].as_u64() == Some(now.start_time_ticks)
            },
            Duration::from_secs(1),
        );
        if !matches!(killed, process::Killed::Signalled { .. }) {
            return None;
        }
        Some(glove_sandbox::cgroup::remove_abandoned(
            pid,
            Duration::from_secs(1),
        ))
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

    fn terminal(&self, id: &SessionId) -> Option<TerminalReceiptRef> {
        let j = lock(&self.receipts);
        glove_lifecycle::ReceiptLog::terminal_receipt(
            &ReceiptView::new(&j),
            glove_lifecycle::Subject::Session(id),
        )
        .ok()
        .flatten()
    }

    fn live(&self, id: &SessionId) -> Result<Arc<Live>, RpcError> {
        lock(&self.live).get(id).cloned().ok_or_else(|| {
            err(
                SESSION_NOT_LIVE,
                format!("session {} has no live sandbox here", id.as_str()),
            )
        })
    }

    /// The live session, if `caller` is the client that started it.
    fn owned(&self, caller: &str, id: &SessionId) -> Result<Arc<Live>, RpcError> {
        let live = self.live(id)?;
        if live.owner != caller {
            return Err(err(
                SESSION_NOT_OWNED,
                format!("session {} belongs to another client", id.as_str()),
            ));
        }
        Ok(live)
    }

    fn send(&self, caller: &str, id: &SessionId, m: ToLauncher) -> Result<(), RpcError> {
        let live = self.owned(caller, id)?;
        if lock(&live.ended).is_some() {
            return Err(err(
                SESSION_NOT_LIVE,
                format!("session {} has ended", id.as_str()),
            ));
        }
        let r = lock(&live.writer).write_all(&m.encode());
        r.map_err(|_| {
            err(
                SESSION_NOT_LIVE,
                format!("session {} has ended", id.as_str()),
            )
        })
    }

    /// `write_stdin`.
    pub fn write_stdin(
        &self,
        caller: &str,
        id: &SessionId,
        data: &[u8],
    ) -> Result<Value, RpcError> {
        self.send(caller, id, ToLauncher::Stdin(data.to_vec()))?;
        Ok(json!({"written": data.len()}))
    }

    /// `resize`.
    pub fn resize(
        &self,
        caller: &str,
        id: &SessionId,
        rows: u16,
        cols: u16,
    ) -> Result<Value, RpcError> {
        self.send(caller, id, ToLauncher::Resize(rows, cols))?;
        Ok(json!({"rows": rows, "cols": cols}))
    }

    /// `signal`.
    pub fn signal(&self, caller: &str, id: &SessionId, signal: i32) -> Result<Value, RpcError> {
        self.send(caller, id, ToLauncher::Signal(signal))?;
        Ok(json!({"signalled": signal}))
    }

    /// `stop_session`: the stop intent is durable, then TERM, KILL after
    /// the grace. The receipt follows when the launcher reports the exit.
    pub fn stop(&self, caller: &str, id: &SessionId, grace_ms: u64) -> Result<Value, RpcError> {
        self.owned(caller, id)?;
        self.stop_for(id, grace_ms, StopReason::Requested)
    }

    fn stop_for(
        &self,
        id: &SessionId,
        grace_ms: u64,
        reason: StopReason,
    ) -> Result<Value, RpcError> {
        let live = self.live(id)?;
        {
            let mut guard = lock(&live.session);
            match guard.take() {
                Some(any) if any.stage() == SessionStage::Running => {
                    let running = any.try_into_running().map_err(|e| life(e.error()))?;
                    let mut store = lock(&self.store);
                    // The session goes back into the guard whatever happens.
                    let (session, stopped) = running.enter(|running| {
                        match running.log_stop(reason, &mut Transitions::new(&mut store)) {
                            Ok(p) => match running.stop(p) {
                                Ok(s) => (AnySession::from(s), Ok(())),
                                Err(r) => {
                                    let (s, e) = r.into_parts();
                                    (AnySession::from(s), Err(life(&e)))
                                }
                            },
                            Err(e) => (AnySession::from(running), Err(life(&e))),
                        }
                    });
                    *guard = Some(session);
                    stopped?;
                }
                Some(any) if any.stage() == SessionStage::Stopping => *guard = Some(any),
                other => {
                    let stage = other
                        .as_ref()
                        .map(|a| a.stage().as_str())
                        .unwrap_or("ending");
                    *guard = other;
                    return Err(err(
                        SESSION_NOT_LIVE,
                        format!("session {} is {stage}", id.as_str()),
                    ));
                }
            }
        }
        self.test_pause("after_stop_record");
        let r = lock(&live.writer).write_all(&ToLauncher::Stop(grace_ms).encode());
        r.map_err(|_| err(SESSION_NOT_LIVE, "the launcher is gone"))?;
        Ok(json!({"session_id": id.as_str(), "stage": "stopping", "grace_ms": grace_ms}))
    }

    /// Graceful shutdown: every running session is stopped (TERM, KILL
    /// after `grace_ms`) with the reason `service_shutdown`, and its receipt
    /// awaited for at most `wait`. Sessions not finished by then are left
    /// to recovery at the next start.
    pub fn shutdown(&self, grace_ms: u64, wait: Duration) {
        let live: Vec<Arc<Live>> = lock(&self.live).values().cloned().collect();
        for l in &live {
            if lock(&l.ended).is_none() {
                if let Err(e) = self.stop_for(&l.id, grace_ms, StopReason::ServiceShutdown) {
                    tracing::warn!(session_id = ?l.id.as_str(), code = e.code.as_str(), "cannot stop a session at shutdown");
                }
            }
        }
        let deadline = std::time::Instant::now() + wait;
        for l in &live {
            // Bounded wait for the session thread to record the end.
            while lock(&l.ended).is_none() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// `attach`: the transcript after `after_seq`, and the stream.
    pub fn attach(
        &self,
        caller: &str,
        id: &SessionId,
        after_seq: u64,
    ) -> Result<(Value, Option<broadcast::Receiver<Event>>), RpcError> {
        let live = self.owned(caller, id)?;
        let s = lock(&live.stream);
        let chunks: Vec<Value> =
            s.0.chunks
                .iter()
                .filter(|(seq, _)| *seq > after_seq)
                .map(|(seq, d)| json!({"seq": seq, "data_hex": to_hex(d)}))
                .collect();
        let first = s.0.chunks.front().map_or(s.0.next_seq, |(q, _)| *q);
        let ended = lock(&live.ended).clone();
        let rx = ended.is_none().then(|| s.1.subscribe());
        Ok((
            json!({
                "session_id": id.as_str(),
                "transcript": chunks,
                "first_seq": first,
                "next_seq": s.0.next_seq,
                "ended": ended,
            }),
            rx,
        ))
    }

    /// `cleanup_session`: forgets the live state once the terminal receipt
    /// is durable. The sandbox's own mounts, tmpfs copies and cgroup are
    /// removed by the launcher when the sandbox ends.
    pub fn cleanup(&self, caller: &str, id: &SessionId) -> Result<Value, RpcError> {
        if let Some(live) = lock(&self.live).get(id).cloned() {
            if live.owner != caller {
                return Err(err(
                    SESSION_NOT_OWNED,
                    format!("session {} belongs to another client", id.as_str()),
                ));
            }
        }
        let stage = {
            let store = lock(&self.store);
            store.get(id).map(|r| r.stage()).ok_or_else(|| {
                err(
                    glove_types::codes::journal::STORE_SESSION_NOT_FOUND,
                    format!("no session {}", id.as_str()),
                )
            })?
        };
        let terminal = matches!(stage, SessionStage::Exited | SessionStage::Failed);
        let receipt = self.terminal(id);
        if !terminal || receipt.is_none() {
            return Err(err(
                SESSION_NOT_TERMINAL,
                format!("session {} is {}", id.as_str(), stage.as_str()),
            ));
        }
        let removed = lock(&self.live).remove(id).is_some();
        Ok(json!({"session_id": id.as_str(), "cleaned": true, "live_state_removed": removed}))
    }

    /// Recovery at startup (see `docs/operations.md`).
    pub fn recover(&self) -> Vec<Value> {
        // Every session the store holds, with its records and the stage the
        // store holds for it: one whose records do not replay is failed
        // with a code and a receipt, never skipped.
        let stored: Vec<(SessionId, SessionStage, Vec<Vec<u8>>)> = {
            let store = lock(&self.store);
            store
                .index()
                .iter()
                .map(|s| {
                    let id = s.session_id().clone();
                    let records = ports::session_records(&store, &id).unwrap_or_default();
                    (id, s.stage(), records)
                })
                .collect()
        };
        let mut out = Vec::new();
        for (id, stored_stage, records) in stored {
            let d = match glove_lifecycle::recover_stored(&id, &records, stored_stage) {
                Ok(glove_lifecycle::Recovered::Interrupted(d)) => d,
                Ok(_) => continue,
                Err(u) => {
                    out.extend(self.fail_unreplayable(u));
                    continue;
                }
            };
            let code = d.code();
            let stage = d.stage();
            // Running and stopping sessions recorded the init's identity;
            // a starting one did not (its launcher holds the sandbox for a
            // release that never comes and tears it down when our end of
            // the socket closes).
            let recorded = match &d {
                glove_lifecycle::RecoveryDecision::ReconcileProcess(s) => {
                    Some(s.process_identity().clone())
                }
                glove_lifecycle::RecoveryDecision::FinishStop(_) => self.identity_of(&id),
                _ => None,
            };
            let rec = self.reconcile(&id, recorded.as_ref());
            let matched = rec.matched;
            // A stop whose receipt is already durable only lacks its exit
            // record.
            if let glove_lifecycle::RecoveryDecision::FinishStop(_) = &d {
                if let Some(r) = self.terminal(&id) {
                    let any = d.into_any();
                    let res = (|| {
                        let stopping = any.try_into_stopping().map_err(|e| life(e.error()))?;
                        let mut store = lock(&self.store);
                        let j = lock(&self.receipts);
                        stopping.enter(|stopping| {
                            let p = stopping
                                .log_exit(
                                    r,
                                    &ReceiptView::new(&j),
                                    &mut Transitions::new(&mut store),
                                )
                                .map_err(|e| life(&e))?;
                            stopping
                                .exit(p)
                                .map(glove_lifecycle::Session::park)
                                .map_err(|e| life(e.error()))
                        })
                    })();
                    tracing::warn!(session_id = ?id.as_str(), ok = res.is_ok(), "stop finished at recovery (receipt was durable)");
                    if res.is_ok() {
                        self.forget_launcher(&id);
                    }
                    out.push(json!({"session_id": id.as_str(), "stage": "exited", "identity_matched": matched}));
                    continue;
                }
            }
            let digests = *d.into_any().digests();
            let facts = ReceiptFacts {
                digests: (
                    digests.plan_content_digest().to_hex(),
                    digests.controller_plan_digest().to_hex(),
                ),
                binding: None,
                limits: self.limits_of(&id),
                projections: vec![],
            };
            let facts = ReceiptFacts {
                binding: self.binding_of(&id),
                ..facts
            };
            let mut body = receipt_body(
                &id,
                &facts,
                &Ending::Failure {
                    code: code.as_str().into(),
                    message: format!(
                        "gloved restarted with the session {}; identity {}",
                        stage.as_str(),
                        rec.describe()
                    ),
                },
                true,
            );
            body["recovery"] = rec.json(stage);
            // Replay again: the decision was consumed above.
            let any = match ports::replay(&lock(&self.store), &id) {
                Some(Ok(a)) => a,
                _ => continue,
            };
            let res = self.fail_any(any, code, &body);
            if res.is_ok() {
                self.forget_launcher(&id);
            }
            tracing::warn!(session_id = ?id.as_str(), code = code.as_str(), matched, ok = res.is_ok(), "session recovered");
            out.push(json!({"session_id": id.as_str(), "code": code.as_str(), "identity_matched": matched}));
        }
        self.sweep_launcher_records();
        out
    }

    /// Ends what is left of a session's processes at recovery. With the
    /// init's identity recorded, the init if it is still that process;
    /// with none recorded (a crash between release and the running
    /// record), the launcher if it is still the recorded one (the sandbox
    /// init dies with it: parent-death signal). A recorded identity that
    /// does not match means nothing is signalled at all.
    fn reconcile(
        &self,
        id: &SessionId,
        recorded: Option<&glove_lifecycle::ProcessIdentity>,
    ) -> Reconciled {
        // The init is signalled through a pidfd opened and checked first
        // (see `process`): never by raw pid after a check.
        let matched = recorded.is_some_and(|ident| {
            process::kill_if_same(
                &process::PidFds,
                i32::try_from(ident.pid()).unwrap_or(0),
                |now| init_matches(ident, now),
                Duration::from_secs(5),
            )
            .matched()
        });
        let cgroups_removed = if recorded.is_none() {
            self.kill_recorded_launcher(id)
        } else {
            None
        };
        Reconciled {
            matched,
            launcher_killed: cgroups_removed.is_some(),
            cgroups_removed: cgroups_removed.unwrap_or(0),
        }
    }

    /// Removes launcher records of sessions that are terminal (a start
    /// that failed after writing one, or a crash after the end).
    fn sweep_launcher_records(&self) {
        let Ok(dir) = std::fs::read_dir(&self.cfg.materialization_root) else {
            return;
        };
        for e in dir.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if !(name.starts_with("launcher-") && name.ends_with(".json")) {
                continue;
            }
            let id = std::fs::read(e.path())
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .and_then(|v| v["session_id"].as_str().map(str::to_owned))
                .and_then(|s| SessionId::new(s).ok());
            let terminal = id.as_ref().is_none_or(|id| {
                lock(&self.store).get(id).is_none_or(|r| {
                    matches!(r.stage(), SessionStage::Exited | SessionStage::Failed)
                })
            });
            if terminal {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    fn identity_of(&self, id: &SessionId) -> Option<glove_lifecycle::ProcessIdentity> {
        let store = lock(&self.store);
        store.transitions(id)?.iter().find_map(|t| {
            match glove_lifecycle::SessionRecord::decode(t.evidence())
                .ok()?
                .entry
            {
                glove_lifecycle::SessionEntry::Running { identity } => Some(identity),
                _ => None,
            }
        })
    }

    /// The limits the session was admitted with: the stored plan's, decoded
    /// strictly (the plan is what admission checked the policy against and
    /// what the launch spec took its limits from). `None` when the plan
    /// cannot be decoded; nothing is defaulted.
    fn limits_of(&self, id: &SessionId) -> Option<ResourceLimits> {
        let store = lock(&self.store);
        recorded_limits(store.get(id)?.plan())
    }

    /// Fails a session whose records do not replay: its processes are
    /// reconciled as a running session's are (from the last identity that
    /// still decodes, else the recorded launcher), then its receipt is
    /// written and the failure record appended after the last stored one.
    fn fail_unreplayable(&self, u: Box<glove_lifecycle::Unreplayable>) -> Option<Value> {
        let id = u.id().clone();
        let code = u.code();
        let replay_error = u.error().code();
        let stage = u.stored_stage();
        if matches!(stage, SessionStage::Exited | SessionStage::Failed) {
            // Failed at an earlier recovery (or terminal before the damage).
            if self.terminal(&id).is_none() {
                tracing::error!(session_id = ?id.as_str(), replay_error = replay_error.as_str(), "a terminal session does not replay and has no receipt");
            }
            return None;
        }
        let recorded = self.identity_of(&id);
        let r = self.reconcile(&id, recorded.as_ref());
        let digests = {
            let store = lock(&self.store);
            store.get(&id).map(|s| {
                (
                    s.plan_content_digest().to_hex(),
                    s.controller_plan_digest().to_hex(),
                )
            })
        }?;
        let facts = ReceiptFacts {
            digests,
            binding: self.binding_of(&id),
            limits: self.limits_of(&id),
            projections: vec![],
        };
        let mut body = receipt_body(
            &id,
            &facts,
            &Ending::Failure {
                code: code.as_str().into(),
                message: format!(
                    "gloved restarted with the session {} and its records do not replay ({}); identity {}",
                    stage.as_str(),
                    replay_error.as_str(),
                    r.describe()
                ),
            },
            true,
        );
        body["recovery"] = r.json(stage);
        body["recovery"]["replay_error"] = json!(replay_error.as_str());
        let res = self.append_receipt(&id, &body).and_then(|receipt| {
            let mut store = lock(&self.store);
            let j = lock(&self.receipts);
            (*u).log_fail(
                receipt,
                &ReceiptView::new(&j),
                &mut Transitions::new(&mut store),
            )
            .map_err(|e| life(&e))
        });
        if res.is_ok() {
            self.forget_launcher(&id);
        }
        tracing::error!(session_id = ?id.as_str(), code = code.as_str(), replay_error = replay_error.as_str(), ok = res.is_ok(), "a session whose records do not replay was failed");
        Some(
            json!({"session_id": id.as_str(), "code": code.as_str(), "replay_error": replay_error.as_str(), "identity_matched": r.matched}),
        )
    }

    fn binding_of(&self, id: &SessionId) -> Option<String> {
        let store = lock(&self.store);
        store.transitions(id)?.iter().find_map(|t| {
            let r = glove_lifecycle::SessionRecord::decode(t.evidence()).ok()?;
            match r.entry {
                glove_lifecycle::SessionEntry::Starting { binding, .. } => {
                    Some(binding.digest().to_hex())
                }
                _ => None,
            }
        })
    }
}

/// What recovery did to a session's processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reconciled {
    /// The recorded init identity matched (and the init was killed).
    matched: bool,
    /// The recorded launcher was killed instead.
    launcher_killed: bool,
    /// Session cgroup directories removed after the launcher was killed.
    cgroups_removed: usize,
}

impl Reconciled {
    fn describe(&self) -> &'static str {
        if self.matched {
            "matched, sandbox killed"
        } else if self.launcher_killed {
            "not recorded or not matching; the recorded launcher was killed, and the sandbox with it"
        } else {
            "did not match, nothing signalled"
        }
    }

    fn json(&self, stage: SessionStage) -> Value {
        json!({
            "stage": stage.as_str(),
            "identity_matched": self.matched,
            "launcher_killed": self.launcher_killed,
            "cgroups_removed": self.cgroups_removed,
            "killed": self.matched || self.launcher_killed,
        })
    }
}

/// The limits a stored plan asks for, decoded strictly; `None` when the
/// bytes are no plan (never a limit defaulted to 0).
fn recorded_limits(plan: &[u8]) -> Option<ResourceLimits> {
    DecodedPlan::decode(plan).ok().map(|p| *p.limits())
}

fn reap(mut child: std::process::Child) {
    std::thread::spawn(move || {
        let _ = child.wait();
    });
}

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

/// Reads a start-authorization key file (protected, 64 lowercase hex).
pub fn read_key(path: &Path) -> Result<ServiceKey, Rejection> {
    let bytes = crate::protected::read(
        path,
        crate::protected::Requirements {
            max_bytes: 128,
            mode: 0o600,
        },
    )?;
    let text = core::str::from_utf8(bytes.strip_suffix(b"\n").unwrap_or(&bytes)).unwrap_or("");
    let raw = Sha256Digest::parse(text).map_err(|_| {
        Rejection::new(
            CONTROL_CONFIG_INVALID,
            format!(
                "the start-authorization key {} must hold 64 lowercase hex characters",
                path.display()
            ),
        )
    })?;
    ServiceKey::new(raw.as_bytes()).map_err(|e| Rejection::new(e.code(), e.to_string()))
}

/// Issues a start authorization for `id` with its two digests (hex), valid
/// from `now_ms` for `ttl_ms`; returns its wire form.
pub fn issue_authorization(
    key: &ServiceKey,
    id: &str,
    plan_content_digest: &str,
    controller_plan_digest: &str,
    now_ms: u64,
    ttl_ms: u64,
) -> Result<String, Rejection> {
    let fields = glove_lifecycle::StartAuthFields {
        session_id: SessionId::new(id)?,
        digests: glove_lifecycle::PlanDigests::new(
            Sha256Digest::parse(plan_content_digest)?,
            glove_types::Blake3Digest::parse(controller_plan_digest)?,
        ),
        nonce: glove_lifecycle::Nonce::from_bytes(crate::random_bytes::<16>()?),
        issued_at_ms: now_ms,
        expires_at_ms: now_ms.saturating_add(ttl_ms),
    };
    let a = StartAuthorization::issue(key, fields)
        .and_then(|a| a.to_bytes())
        .map_err(|e| Rejection::new(e.code(), e.to_string()))?;
    String::from_utf8(a).map_err(|_| Rejection::new(CONTROL_INTERNAL, "authorization encoding"))
}

/// A launcher's reply as the frame `want` accepts, or the failure to record:
/// the launcher's own failure or an unexpected frame (`session_launch_failed`),
/// or a lost launcher (`session_launcher_lost`).
fn expect_frame<T>(
    reply: Result<FromLauncher, String>,
    want: impl FnOnce(FromLauncher) -> Result<T, FromLauncher>,
) -> Result<T, (ErrorCode, String)> {
    match reply.map(want) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(FromLauncher::Failed(f))) => {
            Err((SESSION_LAUNCH_FAILED, format!("{}: {}", f.code, f.message)))
        }
        Ok(Err(other)) => Err((SESSION_LAUNCH_FAILED, format!("unexpected frame {other:?}"))),
        Err(e) => Err((SESSION_LAUNCHER_LOST, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forged_identity_does_not_match() {
        let me = glove_sandbox::identity::ProcessIdentity::of(std::process::id() as i32)
            .expect("identity");
        let Some(cg) = cgroup_inode(&me.cgroup) else {
            eprintln!("skipping: no cgroup v2 path for this process");
            return;
        };
        let pid = std::process::id();
        let real = glove_lifecycle::ProcessIdentity::new(&me.boot_id, pid, me.start_time_ticks, cg)
            .expect("valid");
        assert!(identity_matches(&real));
        for forged in [
            glove_lifecycle::ProcessIdentity::new(&me.boot_id, pid, me.start_time_ticks + 1, cg),
            glove_lifecycle::ProcessIdentity::new(&me.boot_id, pid, me.start_time_ticks, cg + 1),
            glove_lifecycle::ProcessIdentity::new(
                "00000000-0000-0000-0000-000000000001",
                pid,
                me.start_time_ticks,
                cg,
            ),
        ] {
            assert!(!identity_matches(&forged.expect("valid")));
        }
    }

    #[test]
    fn transcript_keeps_the_most_recent_bytes() {
        let mut t = Transcript {
            chunks: VecDeque::new(),
            bytes: 0,
            cap: 10,
            next_seq: 1,
        };
        for i in 0..5u8 {
            t.push(Arc::from(vec![i; 4]));
        }
        assert_eq!(t.next_seq, 6);
        let seqs: Vec<u64> = t.chunks.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, [4, 5]);
        assert!(t.bytes <= 10);
    }
}
