//! The client side: one upstream MCP server, a host process Glove starts
//! and talks to over its stdin and stdout.
//!
//! **Start.** The command from the profile runs with exactly the
//! profile's environment (`env_clear`), its working directory, its own
//! process group, stdin and stdout piped, stderr kept in a bounded buffer
//! (the last [`STDERR_KEEP`] bytes, for the operator), and is killed when
//! the handle goes.
//!
//! **Handshake.** First `server/discover` for revision `2026-07-28`, with
//! the per-request `_meta` (protocol version, client info, capabilities);
//! a server that answers with that revision among its `supportedVersions`
//! is spoken to in it: every request carries the `_meta`, there is no
//! `initialize`. A server that answers any error other than
//! `UnsupportedProtocolVersionError` (-32022, or -32004 of the drafts) —
//! the SDK servers answer
//! -32601 — or does not answer within [`DISCOVER_WAIT`] is a legacy
//! server: `initialize` offering `2025-11-25`, then
//! `notifications/initialized`. The client declares **no** capabilities
//! unless the profile names `sampling` or `elicitation`; never `roots`.
//!
//! **Requests.** Ids are the mediator's own integers (an agent's ids are
//! never forwarded). Every request has a deadline, which covers waiting
//! for room in the queue to the server's stdin as well as the answer (a
//! server that stops reading cannot hold a caller past it); on expiry
//! the pending entry goes, the server gets `notifications/cancelled`,
//! and the caller [`CallError::Timeout`]. `notifications/cancelled` —
//! after a deadline or from [`Upstream::cancel`] — is queued **without
//! waiting**: when the queue is full it is dropped (the server is not
//! told; the mediator has forgotten the request either way), so nothing
//! that cancels ever waits on a server's stdin. When the process closes
//! its stdout every pending request fails ([`CallError::Failed`]) and so
//! does every later one: a server is not restarted.
//!
//! **What the server sends** is decoded with [`crate::frame::decode`].
//! Responses go to their pending request (a response to no pending id is
//! dropped and reported); `ping` is answered with an empty result at
//! once (not audited: it reaches nothing); other requests (`roots/list`,
//! `sampling/createMessage`, `elicitation/create`, anything) are reported as [`Inbound::Request`] for
//! the mediator to deny and audit; `notifications/tools/list_changed` is
//! a wake-up ([`Upstream::tools_changed`]: any number of them before the
//! mediator looks is one re-list); other notifications (logging,
//! progress) are discarded; malformed frames are reported as
//! [`Inbound::Dropped`]. The reader never waits on the mediator: it
//! reports into a bounded queue without waiting, and a server that
//! overflows it is marked [`Upstream::flooded`] (the mediator stops it).
//! Otherwise a flood could fill the queue while the mediator waits for a
//! re-list answer only the blocked reader could deliver.

use crate::frame::{self, Id, Line, LineReader, Message, RpcError, MAX_FRAME_BYTES};
use crate::profile::{Limits, ServerProfile};
use glove_types::ErrorCode;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};

mod handshake;

/// The legacy revision offered in `initialize`.
pub const LEGACY_REVISION: &str = "2025-11-25";
/// The stateless revision tried with `server/discover`.
pub const MODERN_REVISION: &str = "2026-07-28";
/// Legacy revisions accepted in a server's `initialize` answer.
pub const LEGACY_ACCEPTED: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];
/// Longest wait for an answer to `server/discover`.
pub const DISCOVER_WAIT: Duration = Duration::from_secs(2);
/// How much of the server's stderr is kept.
pub const STDERR_KEEP: usize = 64 * 1024;
/// The `_meta` key of the protocol version (2026-07-28).
pub const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// The `_meta` key of the client capabilities (2026-07-28).
pub const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// The `_meta` key of the client info (2026-07-28).
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";

const MAX_INSTRUCTIONS: usize = 64 * 1024;

/// What became of a request.
#[derive(Clone, Debug, PartialEq)]
pub enum CallError {
    /// No answer within the deadline.
    Timeout,
    /// The server is gone or sent something unusable (a path-free reason).
    Failed(String),
    /// The server answered with an error.
    Rpc(RpcError),
    /// The request was cancelled by the mediator.
    Cancelled,
}

/// Something the server sent that is not an answer to a request
/// (`notifications/tools/list_changed` is not one: it is coalesced, see
/// [`Upstream::tools_changed`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Inbound {
    /// A server-to-client request, to be denied.
    Request {
        /// Its id.
        id: Id,
        /// Its method.
        method: String,
    },
    /// A frame dropped (malformed, or an answer to nothing).
    Dropped {
        /// Why.
        code: ErrorCode,
    },
    /// The server closed its stdout (exited).
    Closed,
}

type Reply = Result<Value, CallError>;

/// Requests queued to one server's stdin before senders wait for room
/// (each at most a frame: the queue bounds what a stalled server holds).
const UPSTREAM_QUEUE: usize = 16;

/// One running upstream server.
#[derive(Debug)]
pub struct Upstream {
    id: String,
    tx: mpsc::Sender<Vec<u8>>,
    pending: Arc<Mutex<HashMap<i64, oneshot::Sender<Reply>>>>,
    next_id: AtomicI64,
    alive: Arc<AtomicBool>,
    modern: AtomicBool,
    capabilities: Value,
    child: Mutex<Option<Child>>,
    pid: Option<u32>,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// `notifications/tools/list_changed` came (one stored wake-up however
    /// many came: they coalesce).
    changed: Arc<tokio::sync::Notify>,
    /// The inbound queue was full: the server sent more unsolicited frames
    /// than the mediator takes, and some were not reported.
    flooded: Arc<AtomicBool>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the handshake learnt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handshake {
    /// The revision spoken.
    pub revision: String,
    /// The server's instructions, if any (never relayed to the agent).
    pub instructions: Option<String>,
}

impl Upstream {
    /// Starts the server's process (see the module docs).
    pub fn spawn(
        profile: &ServerProfile,
    ) -> Result<(Arc<Upstream>, mpsc::Receiver<Inbound>), String> {
        let c = profile.command();
        let mut cmd = Command::new(&c.path);
        cmd.args(&c.arguments)
            .env_clear()
            .envs(c.environment.iter().map(|(k, v)| (k, v)))
            .current_dir(&c.working_directory)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| format!("cannot start: {e}"))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("cannot start: no pipes".into());
        };
        let pid = child.id();
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(UPSTREAM_QUEUE);
        let (itx, irx) = mpsc::channel::<Inbound>(256);
        let alive = Arc::new(AtomicBool::new(true));
        let pending: Arc<Mutex<HashMap<i64, oneshot::Sender<Reply>>>> = Arc::default();
        let keep = Arc::new(Mutex::new(Vec::new()));
        let caps = {
            let mut m = Map::new();
            if profile.declares_sampling() {
                m.insert("sampling".into(), Value::Object(Map::new()));
            }
            if profile.declares_elicitation() {
                m.insert("elicitation".into(), Value::Object(Map::new()));
            }
            Value::Object(m)
        };
        let up = Arc::new(Upstream {
            id: profile.id().to_owned(),
            tx,
            pending: pending.clone(),
            next_id: AtomicI64::new(1),
            alive: alive.clone(),
            modern: AtomicBool::new(false),
            capabilities: caps,
            child: Mutex::new(Some(child)),
            pid,
            stderr: keep.clone(),
            changed: Arc::new(tokio::sync::Notify::new()),
            flooded: Arc::new(AtomicBool::new(false)),
        });
        // stdin writer
        let w_alive = alive.clone();
        tokio::spawn(async move {
            let mut stdin = stdin;
            let mut out: Vec<u8> = Vec::new();
            while let Some(f) = rx.recv().await {
                // Every request already queued goes out in one write.
                out.clear();
                out.extend_from_slice(&f);
                out.push(b'\n');
                while out.len() < MAX_FRAME_BYTES {
                    let Ok(f) = rx.try_recv() else {
                        break;
                    };
                    out.extend_from_slice(&f);
                    out.push(b'\n');
                }
                if stdin.write_all(&out).await.is_err() || stdin.flush().await.is_err() {
                    w_alive.store(false, Ordering::SeqCst);
                    break;
                }
            }
        });
        // stderr keeper
        tokio::spawn(async move {
            let mut stderr = stderr;
            let mut buf = vec![0u8; 8192];
            while let Ok(n) = stderr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let mut k = lock(&keep);
                k.extend_from_slice(&buf[..n]);
                if k.len() > STDERR_KEEP {
                    let cut = k.len() - STDERR_KEEP;
                    k.drain(..cut);
                }
            }
        });
        // stdout reader
        let r_up = up.clone();
        tokio::spawn(async move {
            let mut lines = LineReader::new(BufReader::new(stdout), MAX_FRAME_BYTES);
            loop {
                let line = match lines.next().await {
                    Ok(Line::Frame(f)) => f,
                    Ok(Line::TooLong(_)) => {
                        r_up.report(
                            &itx,
                            Inbound::Dropped {
                                code: glove_types::codes::mcp::MCP_FRAME_TOO_LARGE,
                            },
                        );
                        continue;
                    }
                    Ok(Line::Eof) | Err(_) => break,
                };
                match frame::decode(&line) {
                    Ok(Message::Response { id, result }) => r_up.answer(&itx, id, Ok(result)),
                    Ok(Message::Error { id, error }) => {
                        r_up.answer(&itx, id, Err(CallError::Rpc(error)));
                    }
                    // A ping is answered at once, without waiting: it asks
                    // nothing of the agent (dropped when the queue to the
                    // server is full, as a cancel is).
                    Ok(Message::Request { id, method, .. }) if method == "ping" => {
                        let _ = r_up
                            .tx
                            .try_send(frame::encode_result(&id, Value::Object(Map::new())));
                    }
                    Ok(Message::Request { id, method, .. }) => {
                        r_up.report(&itx, Inbound::Request { id, method });
                    }
                    Ok(Message::Notification { method, .. }) => {
                        if method == "notifications/tools/list_changed" {
                            r_up.changed.notify_one();
                        }
                    }
                    Err(r) => r_up.report(&itx, Inbound::Dropped { code: r.code() }),
                }
            }
            r_up.alive.store(false, Ordering::SeqCst);
            let drained: Vec<_> = lock(&r_up.pending).drain().collect();
            for (_, tx) in drained {
                let _ = tx.send(Err(CallError::Failed("the server exited".into())));
            }
            let _ = itx.send(Inbound::Closed).await;
        });
        Ok((up, irx))
    }

    /// Reports an unsolicited frame without waiting: the reader must never
    /// wait on the consumer, which may itself wait for an answer only the
    /// reader can deliver. A full queue marks the server flooded.
    fn report(&self, itx: &mpsc::Sender<Inbound>, ev: Inbound) {
        if itx.try_send(ev).is_err() {
            self.flooded.store(true, Ordering::SeqCst);
        }
    }

    /// Wakes when the server said its tool list changed; many
    /// notifications before the wake-up is taken are one.
    pub fn tools_changed(&self) -> Arc<tokio::sync::Notify> {
        self.changed.clone()
    }

    /// Whether the server sent more unsolicited frames than were taken
    /// (some were not reported).
    pub fn flooded(&self) -> bool {
        self.flooded.load(Ordering::SeqCst)
    }

    fn answer(&self, itx: &mpsc::Sender<Inbound>, id: Id, reply: Reply) {
        let waiter = match id {
            Id::Int(i) => lock(&self.pending).remove(&i),
            Id::Str(_) => None,
        };
        match waiter {
            Some(tx) => {
                let _ = tx.send(reply);
            }
            None => self.report(
                itx,
                Inbound::Dropped {
                    code: glove_types::codes::mcp::MCP_FRAME_INVALID,
                },
            ),
        }
    }

    /// The server id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The process id (while it runs).
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Whether the server still runs (its stdout is open).
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// The last [`STDERR_KEEP`] bytes of its stderr.
    pub fn stderr_tail(&self) -> Vec<u8> {
        lock(&self.stderr).clone()
    }

    fn meta(&self) -> Value {
        let mut m = Map::new();
        m.insert(META_VERSION.into(), Value::from(MODERN_REVISION));
        m.insert(META_CAPABILITIES.into(), self.capabilities.clone());
        m.insert(META_CLIENT_INFO.into(), client_info());
        Value::Object(m)
    }

    /// Sends a request and returns its id and the waiter; see
    /// [`Upstream::wait`]. Waits for room in the queue to the server
    /// without a bound (see [`Upstream::send_within`]); dropping the
    /// future meanwhile leaves nothing behind.
    pub async fn send(
        &self,
        method: &str,
        params: Option<Map<String, Value>>,
    ) -> Result<(i64, oneshot::Receiver<Reply>), CallError> {
        if !self.is_alive() {
            return Err(CallError::Failed("the server is not running".into()));
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let mut params = params;
        if self.modern.load(Ordering::SeqCst) {
            params
                .get_or_insert_with(Map::new)
                .insert("_meta".into(), self.meta());
        }
        let f = frame::encode_request(&Id::Int(id), method, params);
        if f.len() > MAX_FRAME_BYTES {
            return Err(CallError::Failed(
                "the request is over the frame bound".into(),
            ));
        }
        // Room first, so that a send given up while waiting for it (a
        // deadline) leaves no pending entry.
        let Ok(slot) = self.tx.reserve().await else {
            return Err(CallError::Failed("the server is not running".into()));
        };
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        slot.send(f);
        Ok((id, rx))
    }

    /// [`Upstream::send`] with a deadline for the wait for room
    /// ([`CallError::Timeout`]; then nothing was sent).
    pub async fn send_within(
        &self,
        method: &str,
        params: Option<Map<String, Value>>,
        deadline: Duration,
    ) -> Result<(i64, oneshot::Receiver<Reply>), CallError> {
        tokio::time::timeout(deadline, self.send(method, params))
            .await
            .unwrap_or(Err(CallError::Timeout))
    }

    /// Waits for the answer to request `id` until `deadline`.
    pub async fn wait(
        &self,
        id: i64,
        mut rx: oneshot::Receiver<Reply>,
        deadline: Duration,
    ) -> Result<Value, CallError> {
        match tokio::time::timeout(deadline, &mut rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(CallError::Failed("the server exited".into())),
            Err(_) => {
                // The mediator's thread may have been busy past the
                // deadline (an audit sync runs in place): an answer that
                // came in time may still wait unread in the pipe. One turn
                // of the runtime lets the reader take it.
                tokio::task::yield_now().await;
                if let Ok(r) = rx.try_recv() {
                    return r;
                }
                lock(&self.pending).remove(&id);
                self.notify_cancelled(id, "deadline");
                Err(CallError::Timeout)
            }
        }
    }

    /// A request with a deadline (for queueing it and for its answer).
    pub async fn request(
        &self,
        method: &str,
        params: Option<Map<String, Value>>,
        deadline: Duration,
    ) -> Result<Value, CallError> {
        let t0 = Instant::now();
        let (id, rx) = self.send_within(method, params, deadline).await?;
        self.wait(id, rx, deadline.saturating_sub(t0.elapsed()))
            .await
    }

    /// Cancels request `id`: its waiter gets [`CallError::Cancelled`] and
    /// the server `notifications/cancelled` if there is room in its queue.
    /// Never waits.
    pub fn cancel(&self, id: i64) {
        let waiter = lock(&self.pending).remove(&id);
        if let Some(tx) = waiter {
            let _ = tx.send(Err(CallError::Cancelled));
            self.notify_cancelled(id, "cancelled by the client");
        }
    }

    /// Queues `notifications/cancelled` for `id` without waiting; dropped
    /// when the queue is full (see the module docs).
    fn notify_cancelled(&self, id: i64, reason: &str) {
        let mut p = Map::new();
        p.insert("requestId".into(), Value::from(id));
        p.insert("reason".into(), Value::from(reason));
        let _ = self.tx.try_send(frame::encode_notification(
            "notifications/cancelled",
            Some(p),
        ));
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str, params: Option<Map<String, Value>>) {
        let _ = self
            .tx
            .send(frame::encode_notification(method, params))
            .await;
    }

    /// Answers a server-to-client request with an error, without
    /// waiting (dropped when the queue to the server is full).
    pub fn refuse(&self, id: &Id, error: &RpcError) {
        let _ = self.tx.try_send(frame::encode_error(id, error));
    }

    /// Kills the process (its whole process group) and waits for it;
    /// every later request fails at once.
    pub async fn kill(&self) {
        self.alive.store(false, Ordering::SeqCst);
        let child = lock(&self.child).take();
        if let Some(mut c) = child {
            self.kill_group();
            let _ = c.start_kill();
            let _ = c.wait().await;
        }
    }

    /// Kills the process group without waiting (for `Drop`).
    pub(crate) fn kill_now(&self) {
        let mut child = lock(&self.child);
        if let Some(c) = child.as_mut() {
            self.kill_group();
            let _ = c.start_kill();
        }
    }

    /// SIGKILL to the server's process group. Called only while the child
    /// is held unreaped, so its id (the group id) cannot have been reused.
    fn kill_group(&self) {
        let pid = self
            .pid
            .and_then(|p| i32::try_from(p).ok())
            .and_then(rustix::process::Pid::from_raw);
        if let Some(pid) = pid {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

fn client_info() -> Value {
    let mut m = Map::new();
    m.insert("name".into(), Value::from("glove"));
    m.insert("version".into(), Value::from(env!("CARGO_PKG_VERSION")));
    Value::Object(m)
}
