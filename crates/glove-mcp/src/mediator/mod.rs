//! The mediator: serves one agent connection over the upstream servers of
//! a profile, deciding every request itself and auditing every decision
//! before its outcome is released.
//!
//! **Revisions.** The agent speaks `2025-11-25` (`initialize`, then
//! requests) or `2026-07-28` (no handshake; `server/discover` and every
//! request carry `_meta["io.modelcontextprotocol/protocolVersion"]`), per
//! request: a request whose `_meta` names `2026-07-28` is served in that
//! revision (its result carries `resultType: "complete"`, and a listing,
//! `server/discover` or `resources/read` the caching hints `ttlMs: 0`,
//! `cacheScope: "private"`); one naming any
//! other version is answered `UnsupportedProtocolVersionError` (-32022,
//! `mcp_protocol_refused`, `data.supported`); one without a version is
//! served only after `initialize` (else `mcp_protocol_refused`).
//! `initialize` is answered with `2025-11-25` whatever the agent asks
//! (the only legacy revision the mediator speaks) and only once.
//!
//! **Methods.** Answered locally: `initialize`, `server/discover`, `ping`,
//! `tools/list` (Glove's view, see [`crate::view`]; one page, a `cursor`
//! is `mcp_params_invalid`). `tools/call`: the name is resolved in Glove's
//! view (`mcp_tool_unknown`, `mcp_tool_denied`, `mcp_pin_mismatch`); the
//! profile's argument rules (`mcp_argument_refused`), then the tool's own
//! pinned `inputSchema` and the profile's `schema`
//! (`mcp_schema_refused`) are checked — and an argument that the
//! `inputSchema` does not declare is refused unless its
//! `additionalProperties` allows it (or the profile has a rule for it),
//! since the SDK servers silently drop such arguments and other servers
//! may not. An `inputSchema` that uses a keyword outside the enforced
//! subset at its top level (`allOf`, `$ref`, …, see [`crate::schema`])
//! could declare arguments the mediator cannot see: its calls are
//! `mcp_schema_refused` unless the profile's tool entry says
//! `lenient_input_schema`. Only `name` and `arguments`
//! are forwarded, with the request deadline. `params.task` and every
//! `tasks/*` method are refused (`mcp_task_refused`): a task's result
//! would arrive outside the call and escape audit-before-release.
//! `resources/list`, `resources/read`, `prompts/list`, `prompts/get` and
//! `completion/complete` reach only what the profile lists
//! (`mcp_resource_denied`); `resources/templates/list` is empty. Anything
//! else is -32601 `mcp_method_unknown`. Requests are handled concurrently,
//! at most `limits.max_in_flight` at a time (reading pauses beyond); a
//! request reusing the id of one still in flight is `mcp_frame_invalid`.
//!
//! **Upstream answers.** A result is released as it came (plus
//! `resultType` for a `2026-07-28` request) when it is complete: an
//! `input_required` result (the upstream asks the client for sampling,
//! elicitation or roots inside its answer) has each of its input requests
//! denied and audited as a server-to-client request is, and the request
//! ends `mcp_input_refused` (`upstream_error`), and so does a result
//! carrying `inputRequests` whatever its `resultType` (none, or
//! `complete`); the denials come from the upstream's budget (below). A
//! result of any other type is `mcp_upstream_failed`. Nothing of either reaches the agent; an `isError` result has every
//! string in it — text items, embedded resources, `structuredContent`,
//! object keys — passed through [`crate::sanitize::strip_value`]. A JSON-RPC
//! error keeps its numeric code, has its message sanitised and prefixed
//! `upstream <server>: ` and its `data` replaced by
//! `{"glove_code":"mcp_upstream_error"}`, so an upstream cannot pass its
//! error off as one of Glove's (`glove: <code>: …`). Only
//! `error.data.glove_code` is authoritative: Glove's own refusals carry
//! their code there, an upstream's error always `mcp_upstream_error`. A timeout is
//! `mcp_upstream_timeout`, an exit `mcp_upstream_failed`; a server that
//! exited stays failed.
//!
//! **Re-listing.** On `notifications/tools/list_changed` from an
//! upstream, and before an agent's `tools/list` is answered (at most once
//! per [`AGENT_RELIST_EVERY`] per server, so a server that changes a tool
//! without notifying is caught when the agent looks), its tools are
//! listed again and judged against their pins ([`crate::view`]). Notifications that come while a re-list runs make
//! one more, not one each; each server re-lists under its own lock. When that re-list fails (an error, a timeout, a
//! malformed answer) the old definitions are no longer what the server
//! offers: every tool of that server is withdrawn (hidden; calls are
//! `mcp_upstream_failed`), the failure is audited (`upstream_error`,
//! method `tools/list`) and the agent told the list changed; a later
//! successful re-list restores them, each judged against its pin.
//!
//! **What an upstream causes on its own is budgeted.** Each dropped
//! frame, server-to-client request (raw, or inside a result), failed
//! re-list and pin mismatch found by a re-list is one audit event that no agent request paid
//! for; one upstream may cause at most [`MAX_UNSOLICITED_EVENTS`] of them
//! in its whole life, whoever started the re-list (its `list_changed` or
//! the agent's `tools/list`): one budget per upstream (first sights of
//! allowed tools are not counted: at most one each).
//! The next one is not audited: the upstream is stopped instead — its
//! tools withdrawn, its process group killed, one `upstream_error`
//! event (`mcp_upstream_failed`, no method) recorded, the agent told —
//! and its calls are answered `mcp_upstream_failed`. So a misbehaving
//! server cannot fill the journal and close the audit for the others.
//!
//! **Notifications** from the agent are dropped, except
//! `notifications/cancelled` for a forwarded call still in flight (it is
//! forwarded under the upstream's id, the call ends `cancelled` and
//! nothing is answered) and `notifications/initialized`; each dropped one
//! is audited (`dropped`, `mcp_notification_ignored`, its method). Handling them
//! never waits on an upstream: a cancellation is queued to the server
//! only if its queue has room (see [`crate::upstream`]), and every
//! forwarded request's deadline covers queueing it, so a server that
//! stops reading its stdin stalls neither the agent's reader nor, past
//! the deadline, the in-flight slots it waits for. The agent gets
//! `notifications/tools/list_changed` when Glove's view changes.
//!
//! **Audit before release.** Every request's outcome is an
//! [`crate::AuditEvent`] appended durably before its answer is written;
//! refused frames and ignored notifications are audited too.
//!
//! **The agent's refusals are budgeted.** Refusals of the agent's frames
//! (denied requests, frames refused without a usable id, notifications
//! ignored) and the answers the mediator makes itself (`ping`,
//! `initialize`, `server/discover`, `tools/list`,
//! `resources/templates/list`: [`ANSWERED_LOCALLY`]) are journaled one by one up to [`REFUSAL_EVENTS_PER_SECOND`]
//! a second per session; past that they are still answered (or dropped)
//! but only counted, and the count is journaled as one `counted` event
//! before the next event of a later second (or at `finish`). A refusal
//! releases nothing from an upstream, so answering it before its count
//! is durable releases nothing unaudited; a flood can neither fill the
//! journal nor, by filling it, switch the session's tools off. (A
//! mediator dropped without `finish` loses a count not yet journaled.) When the audit fails (or
//! the journal is full) the agent gets `mcp_audit_failed` and nothing
//! from upstream, and every later request is answered `mcp_audit_failed`
//! without being forwarded (fail closed).

use crate::audit::{self, Audit, AuditEvent, Decision, Reservation, Summary, RESULT_DOMAIN};
use crate::error::McpError;
use crate::frame::{self, glove_error, Id, Line, LineReader, Message, MAX_FRAME_BYTES};
use crate::json;
use crate::pin::PinFile;
use crate::profile::Profile;
use crate::upstream::{CallError, Upstream, LEGACY_REVISION, META_VERSION, MODERN_REVISION};
use crate::view::View;
use outcome::{Outcome, Reply, Req};

mod call;
mod listing;
mod outcome;
use glove_journal::JournalSpec;
use glove_types::codes::mcp::*;
use glove_types::ids::SessionId;
use glove_types::{ErrorCode, Sha256Digest};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, Semaphore};

/// The methods whose 2026-07-28 results carry caching hints (`ttlMs`,
/// `cacheScope`).
const CACHEABLE: &[&str] = &[
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// The audit events one upstream may cause on its own after start —
/// dropped frames, server-to-client requests, failed re-lists, pin
/// mismatches found by a re-list — before the mediator stops it (see the
/// module docs).
pub const MAX_UNSOLICITED_EVENTS: usize = 64;

/// Refusals of the agent's frames journaled one by one per second, per
/// session; past it they are answered (or dropped) and counted, and the
/// count is journaled as one `counted` event (see the module docs).
pub const REFUSAL_EVENTS_PER_SECOND: u32 = 64;

/// The methods the mediator answers itself, from its own state and
/// Glove's view (whose definitions were audited when they were pinned):
/// their allowed answers share the refusals' budget
/// ([`REFUSAL_EVENTS_PER_SECOND`]), since they forward nothing and release
/// nothing an upstream answered.
const ANSWERED_LOCALLY: &[&str] = &[
    "ping",
    "initialize",
    "server/discover",
    "tools/list",
    "resources/templates/list",
];

/// The current second's refusal budget and the refusals counted past it.
#[derive(Default)]
struct RefusalWindow {
    /// The second (Unix time) the budget is of.
    second: u64,
    /// Refusals journaled in it.
    journaled: u32,
    /// Refusals counted, not yet journaled as a count.
    pending: u64,
}

/// Whether a refusal is journaled, and a count owed before it.
struct Ticket {
    journal: bool,
    flush: Option<u64>,
}

/// How often an agent's `tools/list` lists a server's tools upstream
/// again at most (see the module docs).
pub const AGENT_RELIST_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Where a mediator keeps its audit and pins.
#[derive(Clone, Debug)]
pub struct MediatorConfig {
    /// The session the events belong to.
    pub session_id: SessionId,
    /// The MCP audit journal to create (its directory mode 0700).
    pub audit_path: PathBuf,
    /// Its bounds ([`crate::journal_spec`]).
    pub audit_spec: JournalSpec,
    /// The pin file (its directory mode 0700); `None` keeps first-sight
    /// pins in memory only.
    pub pin_file: Option<PathBuf>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

struct Shared {
    profile: Profile,
    session_id: SessionId,
    upstreams: BTreeMap<String, Arc<Upstream>>,
    view: Mutex<View>,
    pins: Mutex<PinFile>,
    pin_path: Option<PathBuf>,
    audit: Audit,
    /// The connected agents' writers (by connection), for list_changed
    /// notifications.
    agents: Mutex<BTreeMap<u64, AgentWriter>>,
    /// Agent requests in flight over all connections (`limits.max_in_flight`).
    in_flight_all: Arc<Semaphore>,
    /// Bytes of agent frames in flight over all connections
    /// ([`FRAME_BUDGET`]).
    frame_budget: Arc<Semaphore>,
    /// The last connection number given.
    connections: std::sync::atomic::AtomicU64,
    /// (connection, agent request id) → (server, upstream id) of
    /// forwarded calls.
    in_flight: Mutex<HashMap<(u64, Id), InFlight>>,
    /// Serialises re-listing of each upstream's tools (one lock per
    /// server: a server slow to list stalls no other).
    relist: BTreeMap<String, tokio::sync::Mutex<()>>,
    /// What each upstream may still cause on its own
    /// ([`MAX_UNSOLICITED_EVENTS`] for its whole life, shared by its
    /// watcher and the agent's re-lists).
    budgets: BTreeMap<String, Mutex<listing::Budget>>,
    /// Each server's instructions from its handshake (for its digest).
    instructions: BTreeMap<String, Option<String>>,
    /// The agent's refusals: this second's budget, and the count past it
    /// ([`REFUSAL_EVENTS_PER_SECOND`]).
    refusals: Mutex<RefusalWindow>,
    /// When an agent's `tools/list` last listed each server again
    /// ([`AGENT_RELIST_EVERY`]).
    agent_relists: Mutex<HashMap<String, Instant>>,
}

/// A running mediator (see the module docs).
pub struct Mediator {
    shared: Arc<Shared>,
    audit_task: Option<tokio::task::JoinHandle<Summary>>,
    watchers: Vec<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Mediator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mediator")
            .field("session_id", &self.shared.session_id)
            .finish_non_exhaustive()
    }
}

impl Drop for Mediator {
    fn drop(&mut self) {
        for w in &self.watchers {
            w.abort();
        }
        for up in self.shared.upstreams.values() {
            up.kill_now();
        }
        self.shared.audit.shut();
    }
}

/// A forwarded call, for the agent's `notifications/cancelled`.
pub(super) enum InFlight {
    /// Still waiting for room in the queue to its server: a cancel sets
    /// `cancelled` and wakes the call, which then sends nothing.
    Queueing {
        cancel: Arc<tokio::sync::Notify>,
        cancelled: bool,
    },
    /// Sent to `server` as request `uid`.
    Sent { server: String, uid: i64 },
}

/// Answers queued per connection before its requests wait.
const WRITER_QUEUE: usize = 4;

/// How long a write to an agent may make no progress before the
/// connection is closed (its requests in flight then end at once).
const WRITE_STALL: std::time::Duration = std::time::Duration::from_secs(10);

/// The bytes of agent frames in flight over all connections, from read to
/// answer (16 MiB: four frames of the largest size).
const FRAME_BUDGET: u32 = 16 << 20;

/// A connected agent's writer.
struct AgentWriter {
    tx: mpsc::Sender<Vec<u8>>,
    /// A list_changed is owed (the queue was full when it was sent).
    changed: Arc<std::sync::atomic::AtomicBool>,
}

#[derive(Default)]
struct Session {
    initialized: std::sync::atomic::AtomicBool,
    active: Mutex<HashSet<Id>>,
}

impl Mediator {
    /// Creates the audit journal, starts every upstream of `profile`,
    /// completes their handshakes, lists and pins their tools (auditing
    /// first sights and mismatches) and starts watching them. Any failure
    /// stops the servers already started.
    pub async fn start(profile: Profile, config: MediatorConfig) -> Result<Mediator, McpError> {
        let (audit, thread) = audit::spawn(&config.audit_path, &config.audit_spec)?;
        let pins = match &config.pin_file {
            Some(p) => PinFile::load(p).map_err(McpError::PinFile)?,
            None => PinFile::default(),
        };
        let limits = profile.limits();
        let mut upstreams = BTreeMap::new();
        let mut inbound = Vec::new();
        let mut listings = Vec::new();
        let started = async {
            for s in profile.servers() {
                let (up, rx) = Upstream::spawn(s).map_err(|message| McpError::Upstream {
                    server: s.id().to_owned(),
                    message,
                })?;
                upstreams.insert(s.id().to_owned(), up.clone());
                inbound.push((s.id().to_owned(), rx));
            }
            for s in profile.servers() {
                let Some(up) = upstreams.get(s.id()) else {
                    continue;
                };
                let fail = |method: &str, e: CallError| match e {
                    CallError::Timeout => McpError::UpstreamTimeout {
                        server: s.id().to_owned(),
                        method: method.to_owned(),
                    },
                    CallError::Rpc(e) => McpError::Upstream {
                        server: s.id().to_owned(),
                        message: format!("{method}: error {}: {}", e.code, e.message),
                    },
                    CallError::Failed(m) => McpError::Upstream {
                        server: s.id().to_owned(),
                        message: format!("{method}: {m}"),
                    },
                    CallError::Cancelled => McpError::Upstream {
                        server: s.id().to_owned(),
                        message: format!("{method}: cancelled"),
                    },
                };
                // One deadline from the handshake to the listed tools.
                let ready = async {
                    let hs = up
                        .handshake(&limits)
                        .await
                        .map_err(|e| fail("initialize", e))?;
                    let tools = up
                        .list_tools(&limits)
                        .await
                        .map_err(|e| fail("tools/list", e))?;
                    Ok::<_, McpError>((tools, hs.instructions))
                };
                let (tools, instructions) = tokio::time::timeout(limits.startup_timeout, ready)
                    .await
                    .map_err(|_| McpError::UpstreamTimeout {
                        server: s.id().to_owned(),
                        method: "initialize and tools/list".to_owned(),
                    })??;
                listings.push((s.id().to_owned(), tools, instructions));
            }
            Ok::<(), McpError>(())
        }
        .await;
        if let Err(e) = started {
            for up in upstreams.values() {
                up.kill().await;
            }
            audit.shut();
            let _ = thread.await;
            return Err(e);
        }
        let relist = upstreams
            .keys()
            .map(|s| (s.clone(), tokio::sync::Mutex::new(())))
            .collect();
        let budgets = upstreams
            .keys()
            .map(|s| (s.clone(), Mutex::new(listing::Budget::new())))
            .collect();
        let shared = Arc::new(Shared {
            profile,
            session_id: config.session_id,
            upstreams,
            view: Mutex::new(View::default()),
            pins: Mutex::new(pins),
            pin_path: config.pin_file,
            audit,
            agents: Mutex::new(BTreeMap::new()),
            in_flight_all: Arc::new(Semaphore::new(limits.max_in_flight)),
            frame_budget: Arc::new(Semaphore::new(FRAME_BUDGET as usize)),
            connections: std::sync::atomic::AtomicU64::new(0),
            in_flight: Mutex::new(HashMap::new()),
            relist,
            budgets,
            instructions: listings
                .iter()
                .map(|(s, _, i)| (s.clone(), i.clone()))
                .collect(),
            refusals: Mutex::new(RefusalWindow::default()),
            agent_relists: Mutex::new(HashMap::new()),
        });
        let mut m = Mediator {
            shared: shared.clone(),
            audit_task: Some(thread),
            watchers: Vec::new(),
        };
        for (server, tools, instructions) in listings {
            match shared
                .apply_listing(&server, &tools, instructions.as_deref(), false)
                .await?
            {
                listing::Applied::Recorded => {}
                listing::Applied::AuditFailed | listing::Applied::OverBudget => {
                    return Err(McpError::AuditFailed)
                }
            }
        }
        for (server, rx) in inbound {
            let s = shared.clone();
            m.watchers
                .push(tokio::spawn(async move { s.watch(server, rx).await }));
        }
        Ok(m)
    }

    /// The process id of an upstream server.
    pub fn upstream_pid(&self, server: &str) -> Option<u32> {
        self.shared.upstreams.get(server).and_then(|u| u.pid())
    }

    /// The last bytes an upstream wrote to its stderr.
    pub fn upstream_stderr(&self, server: &str) -> Vec<u8> {
        self.shared
            .upstreams
            .get(server)
            .map(|u| u.stderr_tail())
            .unwrap_or_default()
    }

    /// The names the agent's `tools/list` shows now.
    pub fn shown_tools(&self) -> Vec<String> {
        lock(&self.shared.view)
            .listing()
            .iter()
            .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_owned))
            .collect()
    }

    /// Whether the audit failed (the mediator refuses everything).
    pub fn audit_failed(&self) -> bool {
        self.shared.audit.failed()
    }

    /// Serves one agent connection until it closes, then waits for the
    /// requests still in flight. Several connections may be served at once.
    pub async fn serve<S>(&self, io: S) -> Result<(), McpError>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        self.serve_inner(io, None).await
    }

    /// Serves one agent connection that reaches only `server` (the relay
    /// of one upstream inside the sandbox): its `tools/list` shows that
    /// server's permitted tools under their own names (the agent's client
    /// namespaces them by the server it configured), its calls resolve
    /// only there, and only that server's listed resources and prompts are
    /// reached. An id the profile does not name is refused.
    pub async fn serve_scoped<S>(&self, io: S, server: &str) -> Result<(), McpError>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        if !self.shared.upstreams.contains_key(server) {
            return Err(McpError::Upstream {
                server: server.chars().take(64).collect(),
                message: "the profile names no such server".into(),
            });
        }
        self.serve_inner(io, Some(server.to_owned())).await
    }

    async fn serve_inner<S>(&self, io: S, scope: Option<String>) -> Result<(), McpError>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let shared = &self.shared;
        let conn = shared
            .connections
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        let (r, w) = tokio::io::split(io);
        // Few answers queue per connection: a connection that does not
        // read holds little, and its requests wait for the queue.
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(WRITER_QUEUE);
        let changed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let pending = changed.clone();
        let writer = tokio::spawn(async move {
            let mut w = w;
            let mut out: Vec<u8> = Vec::new();
            while let Some(f) = rx.recv().await {
                // Every answer already queued goes out in one write.
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
                // A list_changed that found the queue full goes out now.
                if pending.swap(false, std::sync::atomic::Ordering::SeqCst) {
                    out.extend_from_slice(&frame::encode_notification(
                        "notifications/tools/list_changed",
                        None,
                    ));
                    out.push(b'\n');
                }
                // An agent that stops reading is cut off: its answers would
                // otherwise hold in-flight slots and memory for good.
                let sent = async {
                    w.write_all(&out).await?;
                    w.flush().await
                };
                match tokio::time::timeout(WRITE_STALL, sent).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) | Err(_) => break,
                }
            }
            let _ = w.shutdown().await;
        });
        lock(&shared.agents).insert(
            conn,
            AgentWriter {
                tx: tx.clone(),
                changed,
            },
        );
        let session = Arc::new(Session::default());
        // One connection takes at most a quarter of the mediator's
        // in-flight requests, so one that stalls cannot starve the others.
        let max = (shared.profile.limits().max_in_flight / 4).max(1);
        let sem = Arc::new(Semaphore::new(max));
        let mut lines = LineReader::new(BufReader::new(r), MAX_FRAME_BYTES);
        loop {
            // Reading stops when the writer gave up on this agent.
            let next = tokio::select! {
                l = lines.next() => l,
                _ = tx.closed() => break,
            };
            let line = match next {
                Ok(Line::Frame(f)) => f,
                Ok(Line::TooLong(_)) => {
                    let m = "a frame over the 4 MiB bound";
                    shared
                        .refuse_frame(&tx, MCP_FRAME_TOO_LARGE, frame::INVALID_REQUEST, m)
                        .await;
                    continue;
                }
                Ok(Line::Eof) | Err(_) => break,
            };
            let started = Instant::now();
            let started_at_ms = now_ms();
            // The frame's bytes count against the budget of every agent
            // frame in flight (a parsed frame can take ten times its size)
            // until it is answered.
            let cost = u32::try_from(line.len().max(1))
                .unwrap_or(u32::MAX)
                .min(FRAME_BUDGET);
            let Ok(budget) = shared.frame_budget.clone().acquire_many_owned(cost).await else {
                break;
            };
            match frame::decode(&line) {
                Ok(Message::Request { id, method, params }) => {
                    let Ok(permit) = sem.clone().acquire_owned().await else {
                        break;
                    };
                    let Ok(all) = shared.in_flight_all.clone().acquire_owned().await else {
                        break;
                    };
                    let req = Req {
                        id,
                        method,
                        params: params.unwrap_or_default(),
                        modern: false,
                        started,
                        started_at_ms,
                        conn,
                        scope: scope.clone(),
                    };
                    let (s, sess, tx) = (shared.clone(), session.clone(), tx.clone());
                    if req.method == "initialize" {
                        // Decided before the next frame is read: a client
                        // that does not wait for the answer still has its
                        // next requests seen after the handshake.
                        s.handle(&sess, &tx, req).await;
                        drop((all, permit, budget));
                        continue;
                    }
                    tokio::spawn(async move {
                        s.handle(&sess, &tx, req).await;
                        drop((all, permit, budget));
                    });
                }
                Ok(Message::Notification { method, params }) => {
                    // Never waits on an upstream (see `Upstream::cancel`).
                    if !shared.notification(conn, &method, params) {
                        shared.ignored(&method).await;
                    }
                }
                Ok(Message::Response { .. }) | Ok(Message::Error { .. }) => {
                    // The mediator sends the agent no requests.
                    shared.dropped(None, MCP_FRAME_INVALID).await;
                }
                Err(rej) => match rej.reply_to() {
                    Some(id) => {
                        let req = Req {
                            id: id.clone(),
                            method: String::new(),
                            params: Map::new(),
                            modern: false,
                            started,
                            started_at_ms,
                            conn,
                            scope: scope.clone(),
                        };
                        let o = Outcome::denied(rej.code(), rej.message());
                        match shared.audit.reserve() {
                            Some(res) => shared.release(&tx, &req, o, res).await,
                            None => shared.refuse_closed(&tx, &req.id).await,
                        }
                    }
                    None if rej.answers_null() => {
                        shared
                            .refuse_frame(&tx, rej.code(), rej.rpc_code(), rej.message())
                            .await;
                    }
                    None => shared.dropped(None, rej.code()).await,
                },
            }
        }
        let all = u32::try_from(max).unwrap_or(u32::MAX);
        let _ = sem.acquire_many(all).await;
        lock(&shared.agents).remove(&conn);
        drop(tx);
        let _ = writer.await;
        Ok(())
    }

    /// Stops the upstreams and the audit writer; the session's totals.
    pub async fn finish(mut self) -> Summary {
        for w in &self.watchers {
            w.abort();
        }
        let owed = std::mem::take(&mut lock(&self.shared.refusals).pending);
        self.shared.record_count(owed).await;
        for up in self.shared.upstreams.values() {
            up.kill().await;
        }
        self.shared.audit.shut();
        let joined = match self.audit_task.take() {
            Some(t) => t.await.ok(),
            None => None,
        };
        joined.unwrap_or(Summary {
            audit_failed: true,
            ..Summary::default()
        })
    }
}

impl Shared {
    fn event(&self, req: Option<&Req>, o: &Outcome, result: Option<Sha256Digest>) -> AuditEvent {
        let (method, latency_ms, started_at_ms) = match req {
            Some(r) => (
                Some(r.method.clone()).filter(|m| audit::is_method(m)),
                u64::try_from(r.started.elapsed().as_millis()).unwrap_or(u64::MAX),
                r.started_at_ms,
            ),
            None => (None, 0, now_ms()),
        };
        AuditEvent {
            seq: 1,
            session_id: self.session_id.clone(),
            server: o.server.clone(),
            tool: o.tool.clone(),
            method,
            decision: o.decision,
            code: o.code,
            arguments_sha256: o.arguments,
            result_sha256: result,
            latency_ms,
            started_at_ms,
            count: None,
        }
    }

    /// Audits a frame dropped unanswered (the agent's within the refusal
    /// budget).
    async fn dropped(&self, server: Option<&str>, code: ErrorCode) {
        if server.is_none() && !self.refusal_journaled().await {
            return;
        }
        let o = Outcome {
            reply: Reply::Nothing,
            decision: Decision::Dropped,
            code: Some(code),
            server: server.map(str::to_owned),
            tool: None,
            arguments: None,
        };
        let e = self.event(None, &o, None);
        self.audit.record(e).await;
    }

    /// Audits a frame refused without a usable id (as `dropped`), then
    /// answers it with `id: null` and JSON-RPC code `rpc`: the agent is
    /// not left waiting on a frame it got wrong.
    async fn refuse_frame(
        &self,
        tx: &mpsc::Sender<Vec<u8>>,
        code: ErrorCode,
        rpc: i64,
        message: &str,
    ) {
        let o = Outcome {
            reply: Reply::Nothing,
            decision: Decision::Dropped,
            code: Some(code),
            server: None,
            tool: None,
            arguments: None,
        };
        let e = self.event(None, &o, None);
        let recorded = !self.refusal_journaled().await || self.audit.record(e).await;
        let mut err = if recorded {
            glove_error(code, message)
        } else {
            glove_error(
                MCP_AUDIT_FAILED,
                "the decision could not be recorded; nothing is released",
            )
        };
        err.code = rpc;
        let _ = tx.send(frame::encode_error_null(&err)).await;
    }

    /// Audits `o`, then (only then) writes its reply; `mcp_audit_failed`
    /// instead when the audit did not record it.
    async fn release(
        &self,
        tx: &mpsc::Sender<Vec<u8>>,
        req: &Req,
        mut o: Outcome,
        res: Reservation,
    ) {
        let mut result = None;
        let mut bytes = match &mut o.reply {
            Reply::Result(v) => {
                if req.modern {
                    if let Some(m) = v.as_object_mut() {
                        m.insert("resultType".into(), Value::from("complete"));
                        // 2026-07-28 cacheable results: immediately stale
                        // and private (the view is this session's policy,
                        // and a pin can block a tool at any moment).
                        if CACHEABLE.contains(&req.method.as_str()) {
                            m.insert("ttlMs".into(), Value::from(0));
                            m.insert("cacheScope".into(), Value::from("private"));
                        }
                    }
                }
                result = Some(json::digest(RESULT_DOMAIN, v));
                Some(frame::encode_result(&req.id, v.clone()))
            }
            Reply::Error(e) => {
                if o.code == Some(MCP_UPSTREAM_ERROR) {
                    let mut ev = Map::new();
                    ev.insert("code".into(), Value::from(e.code));
                    ev.insert("message".into(), Value::from(e.message.clone()));
                    result = Some(json::digest(RESULT_DOMAIN, &Value::Object(ev)));
                }
                Some(frame::encode_error(&req.id, e))
            }
            Reply::Nothing => None,
        };
        if bytes.as_ref().is_some_and(|b| b.len() > MAX_FRAME_BYTES) {
            o = Outcome {
                reply: Reply::Nothing,
                decision: Decision::UpstreamError,
                code: Some(MCP_UPSTREAM_FAILED),
                server: o.server,
                tool: o.tool,
                arguments: o.arguments,
            };
            result = None;
            bytes = Some(frame::encode_error(
                &req.id,
                &glove_error(MCP_UPSTREAM_FAILED, "the answer is over the frame bound"),
            ));
        }
        let e = self.event(Some(req), &o, result);
        // A refusal, or an answer the mediator made itself from nothing an
        // upstream said in reply (a ping above all): budgeted, or a flood
        // of them would fill the journal as refusals did.
        let budgeted = o.decision == Decision::Denied
            || (o.decision == Decision::Allowed && ANSWERED_LOCALLY.contains(&req.method.as_str()));
        if budgeted && !self.refusal_journaled().await {
            // Past this second's budget: answered, counted (nothing was
            // forwarded; the count is journaled later).
            drop(res);
            if let Some(b) = bytes {
                let _ = tx.send(b).await;
            }
            return;
        }
        if !budgeted {
            let due = self.count_due();
            self.record_count(due).await;
        }
        if self.audit.record_reserved(e, res).await {
            if let Some(b) = bytes {
                let _ = tx.send(b).await;
            }
        } else if bytes.is_some() {
            let err = glove_error(
                MCP_AUDIT_FAILED,
                "the decision could not be recorded; nothing is released",
            );
            let _ = tx.send(frame::encode_error(&req.id, &err)).await;
        }
    }

    /// Takes one refusal from this second's budget: `true` when it is to
    /// be journaled (after any count owed from earlier seconds, journaled
    /// here first), `false` when it is only counted.
    async fn refusal_journaled(&self) -> bool {
        let t = {
            let mut w = lock(&self.refusals);
            let second = now_ms() / 1000;
            if w.second != second {
                w.second = second;
                w.journaled = 0;
            }
            if w.journaled < REFUSAL_EVENTS_PER_SECOND {
                w.journaled += 1;
                Ticket {
                    journal: true,
                    flush: Some(std::mem::take(&mut w.pending)),
                }
            } else {
                w.pending = w.pending.saturating_add(1);
                Ticket {
                    journal: false,
                    flush: None,
                }
            }
        };
        if let Some(n) = t.flush {
            self.record_count(n).await;
        }
        t.journal
    }

    /// The refusals counted in a second now past (they are journaled
    /// with the next event, whatever it is).
    fn count_due(&self) -> u64 {
        let mut w = lock(&self.refusals);
        if w.pending == 0 || w.second == now_ms() / 1000 {
            return 0;
        }
        std::mem::take(&mut w.pending)
    }

    /// Journals `n` counted refusals as one `counted` event (nothing when
    /// `n` is 0).
    async fn record_count(&self, n: u64) {
        if n == 0 {
            return;
        }
        let mut e = self.event(
            None,
            &Outcome {
                reply: Reply::Nothing,
                decision: Decision::Counted,
                code: None,
                server: None,
                tool: None,
                arguments: None,
            },
            None,
        );
        e.count = Some(n);
        self.audit.record(e).await;
    }

    /// Answers `mcp_audit_failed` without deciding anything.
    async fn refuse_closed(&self, tx: &mpsc::Sender<Vec<u8>>, id: &Id) {
        let err = glove_error(
            MCP_AUDIT_FAILED,
            "the audit cannot record decisions; the mediator refuses everything",
        );
        let _ = tx.send(frame::encode_error(id, &err)).await;
    }

    async fn handle(&self, session: &Session, tx: &mpsc::Sender<Vec<u8>>, mut req: Req) {
        // Room for this request's event is promised before anything is
        // decided or forwarded.
        let Some(res) = self.audit.reserve() else {
            self.refuse_closed(tx, &req.id).await;
            return;
        };
        if !lock(&session.active).insert(req.id.clone()) {
            let o = Outcome::denied(MCP_FRAME_INVALID, "a request with this id is in flight");
            self.release(tx, &req, o, res).await;
            return;
        }
        let o = self.decide(session, &mut req).await;
        // Set before the answer is written: the agent's next request may
        // come the moment it reads it. (If the audit fails, everything is
        // refused anyway.)
        if req.method == "initialize" && o.decision == Decision::Allowed {
            session
                .initialized
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        self.release(tx, &req, o, res).await;
        lock(&session.active).remove(&req.id);
    }

    async fn decide(&self, session: &Session, req: &mut Req) -> Outcome {
        let version = req
            .params
            .get("_meta")
            .and_then(|m| m.get(META_VERSION))
            .cloned();
        match version {
            None => {}
            Some(Value::String(v)) if v == MODERN_REVISION => req.modern = true,
            Some(_) => {
                let mut o = Outcome::denied(
                    MCP_PROTOCOL_REFUSED,
                    "unsupported protocol version; the mediator speaks 2026-07-28 per request and 2025-11-25 after initialize",
                );
                if let Reply::Error(e) = &mut o.reply {
                    e.code = frame::UNSUPPORTED_PROTOCOL_VERSION;
                    if let Some(Value::Object(d)) = &mut e.data {
                        d.insert("supported".into(), serde_json::json!([MODERN_REVISION]));
                    }
                }
                return o;
            }
        }
        let initialized = session
            .initialized
            .load(std::sync::atomic::Ordering::SeqCst);
        match req.method.as_str() {
            "initialize" => {
                if req.modern || initialized {
                    return Outcome::denied(
                        MCP_PROTOCOL_REFUSED,
                        "initialize is answered once, and not in revision 2026-07-28",
                    );
                }
                Outcome::allowed(self.initialize_result())
            }
            "server/discover" => Outcome::allowed(self.discover_result()),
            "ping" => Outcome::allowed(Value::Object(Map::new())),
            _ if !req.modern && !initialized => Outcome::denied(
                MCP_PROTOCOL_REFUSED,
                "send initialize first, or name revision 2026-07-28 in _meta",
            ),
            "tools/list" => {
                if req.params.contains_key("cursor") {
                    return Outcome::denied(MCP_PARAMS_INVALID, "the tool list has one page");
                }
                // What the server offers now, judged against its pins,
                // not only what it offered when it last said so.
                self.relist_for_agent(req.scope.as_deref()).await;
                let mut m = Map::new();
                let tools = match &req.scope {
                    Some(server) => lock(&self.view).listing_scoped(server),
                    None => lock(&self.view).listing(),
                };
                m.insert("tools".into(), Value::Array(tools));
                Outcome::allowed(Value::Object(m))
            }
            "tools/call" => self.tools_call(req).await,
            "resources/list" | "prompts/list" => self.list_listed(req).await,
            "resources/templates/list" => {
                let mut m = Map::new();
                m.insert("resourceTemplates".into(), Value::Array(Vec::new()));
                Outcome::allowed(Value::Object(m))
            }
            "resources/read" | "prompts/get" | "completion/complete" => self.get_listed(req).await,
            m if m.starts_with("tasks/") => {
                Outcome::denied(MCP_TASK_REFUSED, "task-augmented requests are not mediated")
            }
            _ => Outcome::denied(MCP_METHOD_UNKNOWN, "method not found"),
        }
    }

    fn capabilities(&self) -> Value {
        let servers = self.profile.servers();
        let mut c = Map::new();
        c.insert("tools".into(), serde_json::json!({"listChanged": true}));
        let resources = servers.iter().any(|s| !s.resources().is_empty());
        let prompts = servers.iter().any(|s| !s.prompts().is_empty());
        if resources {
            c.insert("resources".into(), Value::Object(Map::new()));
        }
        if prompts {
            c.insert("prompts".into(), Value::Object(Map::new()));
        }
        if resources || prompts {
            c.insert("completions".into(), Value::Object(Map::new()));
        }
        Value::Object(c)
    }

    fn server_info() -> Value {
        serde_json::json!({"name": "glove-mcp", "version": env!("CARGO_PKG_VERSION")})
    }

    fn initialize_result(&self) -> Value {
        serde_json::json!({
            "protocolVersion": LEGACY_REVISION,
            "capabilities": self.capabilities(),
            "serverInfo": Self::server_info(),
        })
    }

    fn discover_result(&self) -> Value {
        serde_json::json!({
            "supportedVersions": [MODERN_REVISION],
            "capabilities": self.capabilities(),
            "serverInfo": Self::server_info(),
        })
    }

    /// Tells every connected agent that Glove's view of the tools changed.
    /// Never waits: a connection whose queue is full gets the notification
    /// after its next answer (notifications of one kind merge).
    pub(super) async fn tell_agents_list_changed(&self) {
        let agents = lock(&self.agents);
        for a in agents.values() {
            let n = frame::encode_notification("notifications/tools/list_changed", None);
            if a.tx.try_send(n).is_err() {
                a.changed.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }

    /// An agent's notification; `false` when the mediator does not act on
    /// it (then it is audited as ignored). Synchronous: the agent's reader
    /// must not wait on an upstream that does not read its input.
    fn notification(&self, conn: u64, method: &str, params: Option<Map<String, Value>>) -> bool {
        match method {
            "notifications/initialized" => true,
            "notifications/cancelled" => {
                let id = params
                    .as_ref()
                    .and_then(|p| p.get("requestId"))
                    .and_then(Id::from_value);
                let Some(id) = id else {
                    return false;
                };
                let (known, sent) = {
                    let mut calls = lock(&self.in_flight);
                    match calls.get_mut(&(conn, id)) {
                        Some(InFlight::Sent { server, uid }) => {
                            (true, Some((server.clone(), *uid)))
                        }
                        Some(InFlight::Queueing { cancel, cancelled }) => {
                            *cancelled = true;
                            cancel.notify_one();
                            (true, None)
                        }
                        None => (false, None),
                    }
                };
                if let Some((server, uid)) = sent {
                    if let Some(up) = self.upstreams.get(&server) {
                        up.cancel(uid);
                    }
                }
                known
            }
            // Everything else (roots/list_changed above all) is ignored.
            _ => false,
        }
    }

    /// Audits an agent's notification the mediator did not act on:
    /// `dropped`, `mcp_notification_ignored`, with its method.
    async fn ignored(&self, method: &str) {
        if !self.refusal_journaled().await {
            return;
        }
        let o = Outcome {
            reply: Reply::Nothing,
            decision: Decision::Dropped,
            code: Some(MCP_NOTIFICATION_IGNORED),
            server: None,
            tool: None,
            arguments: None,
        };
        let mut e = self.event(None, &o, None);
        e.method = Some(method.to_owned()).filter(|m| audit::is_method(m));
        self.audit.record(e).await;
    }
}
