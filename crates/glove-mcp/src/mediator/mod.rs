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
mod dispatch;
mod journaling;
mod listing;
mod outcome;
mod serve;
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
