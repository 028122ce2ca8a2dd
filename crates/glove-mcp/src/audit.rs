//! The MCP audit: one [`AuditEvent`] per decision, appended durably to the
//! session's MCP audit journal (kind `MCP_AUDIT`) **before** the agent
//! sees the outcome.
//!
//! **The event.** One canonical encoding (Glove's canonical JSON, members
//! sorted, absent optional members omitted, at most [`MAX_EVENT_BYTES`]):
//!
//! ```text
//! {"arguments_sha256":hex?,"code":"mcp_…"?,"count":u64?,"decision":…,"latency_ms":u64,"method":…?,
//!  "result_sha256":hex?,"seq":u64,"server":…?,"session_id":…,"started_at_ms":u64,"tool":…?}
//! ```
//!
//! | decision | what happened | code | result_sha256 |
//! | --- | --- | --- | --- |
//! | `allowed` | answered (locally or by the upstream) with a result | none | the released result |
//! | `denied` | refused before anything was forwarded; or a server-to-client request answered with an error; or a tool blocked by its pin or for hidden characters in its definition | an `mcp_*` refusal | none; for `mcp_pin_mismatch` or `mcp_definition_refused` seen in a listing, the digest seen |
//! | `upstream_error` | forwarded; the upstream failed, timed out, answered an error, or asked the client for input | `mcp_upstream_failed`, `mcp_upstream_timeout`, `mcp_upstream_error`, `mcp_input_refused` | the released error, for `mcp_upstream_error` |
//! | `dropped` | a frame without a usable id (never decided; the agent's answered with `id: null` unless a response), or an agent's notification not acted on (with its method) | `mcp_frame_invalid`, `mcp_frame_too_large`, `mcp_batch_refused`, `mcp_notification_ignored` | none |
//! | `pinned` | an allowed tool's definition seen first and recorded | none | the tool digest |
//! | `cancelled` | the agent cancelled a forwarded call; nothing released | none | none |
//! | `counted` | refusals of agent frames past the per-second budget (`count` of them), answered or dropped but not journaled one by one | none | none |
//!
//! `arguments_sha256` is `SHA-256("glove.mcp-arguments.v1" || 0x00 ||
//! canonical(arguments))` of a `tools/call`'s `arguments` (or of a request's
//! `params` for other methods), `result_sha256` is
//! `SHA-256("glove.mcp-result.v1" || 0x00 || canonical(result))` of what
//! was released, both with [`crate::json::canonical`]. `server` is a
//! server id, `tool` an upstream tool name (as the upstream knows it),
//! `method` printable ASCII of 1-128 bytes; an unusable name sent by the
//! agent is recorded as absent (the arguments digest still covers it).
//! [`AuditEvent::decode`] accepts exactly the bytes
//! [`AuditEvent::encode`] writes for a valid event and refuses anything
//! else with `mcp_event_invalid`.
//!
//! **The writer.** One task owns the journal: it numbers events, queues
//! each batch and makes it durable with one `fdatasync`, run in place on
//! the mediator's thread (see `Writer::run`), then answers each sender.
//! Room for an event is reserved (at its largest) before the request it
//! records is forwarded, so nothing reaches an upstream that
//! the journal could not record. The first failure (no room, a write or
//! sync error) closes the audit for good: the decision that failed and
//! every later one are answered `mcp_audit_failed`, nothing from upstream
//! is released.

use crate::error::McpError;
use glove_journal::{Journal, JournalKind, JournalSpec};
use glove_types::canon::{self, Form};
use glove_types::codes::mcp::*;
use glove_types::codes::Area;
use glove_types::ids::SessionId;
use glove_types::{ErrorCode, Rejection, Sha256Digest};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::{oneshot, Notify};

mod event;

/// Largest encoded event.
pub const MAX_EVENT_BYTES: usize = 4096;
/// The record kind of an event in the MCP audit journal.
pub const EVENT_RECORD: u16 = 1;
/// Domain of `arguments_sha256`.
pub const ARGUMENTS_DOMAIN: &str = "glove.mcp-arguments.v1";
/// Domain of `result_sha256`.
pub const RESULT_DOMAIN: &str = "glove.mcp-result.v1";

const RECORD_KINDS: &[u16] = &[EVENT_RECORD];
const BATCH: usize = 64;

/// The MCP audit journal's spec for these bounds.
pub fn journal_spec(max_bytes: u64, max_records: u64) -> JournalSpec {
    JournalSpec {
        kind: JournalKind::MCP_AUDIT,
        max_bytes,
        max_records,
        max_payload: MAX_EVENT_BYTES as u32,
        record_kinds: RECORD_KINDS,
    }
}

/// What was decided (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Answered with a result.
    Allowed,
    /// Refused before forwarding, or a server-to-client request denied.
    Denied,
    /// Forwarded; the upstream failed, timed out or answered an error.
    UpstreamError,
    /// A frame dropped without an answer.
    Dropped,
    /// A tool definition recorded at first sight.
    Pinned,
    /// Cancelled by the agent.
    Cancelled,
    /// Refusals past the per-second budget, answered (or dropped) and
    /// counted, not journaled one by one; `count` says how many.
    Counted,
}

/// One audit event (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEvent {
    /// Number within the session, from 1 (assigned by the writer).
    pub seq: u64,
    /// The session.
    pub session_id: SessionId,
    /// The upstream server concerned.
    pub server: Option<String>,
    /// The upstream tool concerned.
    pub tool: Option<String>,
    /// The JSON-RPC method.
    pub method: Option<String>,
    /// The decision.
    pub decision: Decision,
    /// The refusal or failure code.
    pub code: Option<ErrorCode>,
    /// Digest of the arguments.
    pub arguments_sha256: Option<Sha256Digest>,
    /// Digest of what was released.
    pub result_sha256: Option<Sha256Digest>,
    /// From receipt of the request to the decision, milliseconds.
    pub latency_ms: u64,
    /// When the request arrived, Unix milliseconds.
    pub started_at_ms: u64,
    /// For `counted` only: how many refusals it stands for (at least 1).
    pub count: Option<u64>,
}

/// Whether `m` can be recorded as a method: 1-128 bytes of printable ASCII.
pub fn is_method(m: &str) -> bool {
    !m.is_empty() && m.len() <= 128 && m.bytes().all(|b| (0x21..=0x7e).contains(&b))
}

/// Reads every event of an MCP audit journal: opens it with `spec` (which
/// takes the writer lock, so not while a mediator writes it).
pub fn read_events(path: &Path, spec: &JournalSpec) -> Result<Vec<AuditEvent>, McpError> {
    let opened = Journal::open(path, spec, None)?;
    opened
        .records()
        .map(|r| {
            AuditEvent::decode(r.payload).map_err(|e| McpError::Event {
                seq: r.seq,
                message: e.to_string(),
            })
        })
        .collect()
}

/// A session's audit totals, for its receipt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// `allowed` events.
    pub allowed: u64,
    /// `denied` events.
    pub denied: u64,
    /// `upstream_error` events.
    pub upstream_errors: u64,
    /// `dropped` events.
    pub dropped: u64,
    /// `pinned` events.
    pub pinned: u64,
    /// `cancelled` events.
    pub cancelled: u64,
    /// Refusals answered but not journaled one by one (the sum of the
    /// `counted` events' counts).
    pub unjournaled: u64,
    /// Durable records in the journal.
    pub journal_records: u64,
    /// The journal's head digest (the header digest when empty).
    pub journal_head: [u8; 32],
    /// Whether the audit failed (and the mediator refused everything after).
    pub audit_failed: bool,
}

struct Job {
    event: AuditEvent,
    reply: oneshot::Sender<bool>,
}

/// Room one event may need: the largest encoding and its framing.
const EVENT_ROOM: u64 = MAX_EVENT_BYTES as u64 + glove_journal::format::RECORD_OVERHEAD as u64;

/// What the journal still holds, and how much of it is promised.
#[derive(Debug)]
struct Room {
    records_left: u64,
    bytes_left: u64,
    reserved: u64,
}

/// Room for one event, promised before its request is forwarded, so a
/// call never reaches an upstream unless its event will fit. Dropping it
/// gives the room back.
#[derive(Debug)]
#[must_use = "a reservation is spent on one event"]
pub(crate) struct Reservation {
    room: Arc<std::sync::Mutex<Room>>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut r = self.room.lock().unwrap_or_else(|e| e.into_inner());
        r.reserved = r.reserved.saturating_sub(1);
    }
}

/// What the mediator's tasks hand the writer.
#[derive(Default)]
struct Queue {
    jobs: Vec<Job>,
    /// No more events are taken: the writer ends once `jobs` is empty.
    shut: bool,
}

/// The sending side, shared by every task of the mediator.
pub(crate) struct Audit {
    queue: Arc<std::sync::Mutex<Queue>>,
    wake: Arc<Notify>,
    failed: Arc<AtomicBool>,
    room: Arc<std::sync::Mutex<Room>>,
}

impl std::fmt::Debug for Audit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Audit")
            .field("failed", &self.failed())
            .finish_non_exhaustive()
    }
}

impl Audit {
    /// Whether the audit has failed (everything is refused).
    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    /// Closes the audit (fail closed).
    pub(crate) fn close(&self) {
        self.failed.store(true, Ordering::SeqCst);
    }

    /// Promises room for one more event (on top of every promise still
    /// open). When there is none the audit closes: this and every later
    /// decision is refused.
    pub(crate) fn reserve(&self) -> Option<Reservation> {
        if self.failed() {
            return None;
        }
        let mut r = self.room.lock().unwrap_or_else(|e| e.into_inner());
        let n = r.reserved + 1;
        if r.records_left >= n && r.bytes_left >= n.saturating_mul(EVENT_ROOM) {
            r.reserved = n;
            Some(Reservation {
                room: self.room.clone(),
            })
        } else {
            drop(r);
            self.close();
            None
        }
    }

    /// Appends `event` durably (its `seq` assigned by the writer); `false`
    /// when it was not recorded, after which the audit is closed.
    pub(crate) async fn record(&self, event: AuditEvent) -> bool {
        match self.reserve() {
            Some(res) => self.record_reserved(event, res).await,
            None => false,
        }
    }

    /// [`record`](Self::record) in room reserved earlier.
    pub(crate) async fn record_reserved(&self, event: AuditEvent, res: Reservation) -> bool {
        if self.failed() {
            return false;
        }
        let (reply, rx) = oneshot::channel();
        let queued = {
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            if q.shut {
                false
            } else {
                q.jobs.push(Job { event, reply });
                true
            }
        };
        if queued {
            self.wake.notify_one();
        }
        let ok = queued && rx.await.unwrap_or(false);
        drop(res);
        if !ok {
            self.close();
        }
        ok
    }

    /// Stops accepting events (the writer ends once the queue is empty).
    pub(crate) fn shut(&self) {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).shut = true;
        self.wake.notify_one();
    }
}

impl Drop for Audit {
    /// The last sending handle gone: the writer ends once the queue is
    /// empty.
    fn drop(&mut self) {
        self.shut();
    }
}

/// Creates the journal and starts its writer, a task of the current
/// runtime (see `Writer::run`). The mediator is served and finished on
/// that runtime.
pub(crate) fn spawn(
    path: &Path,
    spec: &JournalSpec,
) -> Result<(Audit, tokio::task::JoinHandle<Summary>), McpError> {
    let (audit, writer) = open(path, spec)?;
    Ok((audit, tokio::spawn(writer.run())))
}

/// The journal, its sending side and its writer, not yet started.
fn open(path: &Path, spec: &JournalSpec) -> Result<(Audit, Writer), McpError> {
    let journal = Journal::create(path, spec)?;
    let failed = Arc::new(AtomicBool::new(false));
    let room = Arc::new(std::sync::Mutex::new(Room {
        records_left: spec.max_records,
        bytes_left: spec.max_bytes.saturating_sub(journal.len_bytes()),
        reserved: 0,
    }));
    let queue = Arc::new(std::sync::Mutex::new(Queue::default()));
    let wake = Arc::new(Notify::new());
    let w = Writer {
        journal,
        queue: queue.clone(),
        wake: wake.clone(),
        failed: failed.clone(),
        room: room.clone(),
    };
    Ok((
        Audit {
            queue,
            wake,
            failed,
            room,
        },
        w,
    ))
}

struct Writer {
    journal: Journal,
    queue: Arc<std::sync::Mutex<Queue>>,
    wake: Arc<Notify>,
    failed: Arc<AtomicBool>,
    room: Arc<std::sync::Mutex<Room>>,
}

impl Drop for Writer {
    /// A writer that ends before it was shut (it panicked, its task was
    /// aborted, its runtime went away) fails closed: every event still
    /// queued is answered "not recorded" (its sender dropped) and every
    /// later one is refused at once, so no request waits for good.
    fn drop(&mut self) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if !q.shut || !q.jobs.is_empty() {
            self.failed.store(true, Ordering::SeqCst);
        }
        q.shut = true;
        q.jobs.clear();
    }
}

impl Writer {
    /// Group commit on the mediator's own thread. Woken by the first event
    /// queued, the writer first lets every task that is ready now run (the
    /// answers of one upstream read, the requests of one agent read): each
    /// adds its event. Then it writes the batch and syncs it *in place*,
    /// blocking the thread: nothing can be released before the sync
    /// anyway, and meanwhile requests and answers wait in their sockets
    /// and pipes, to be handled together after it. No thread hand-off
    /// per event or per batch: on a two-CPU VM each wake-up of another
    /// thread costs more CPU than the decision itself. On a multi-thread
    /// runtime (tests, embedders) the sync runs in `block_in_place`,
    /// which hands the worker's other tasks to another thread per batch.
    async fn run(self) -> Summary {
        let multi = tokio::runtime::Handle::current().runtime_flavor()
            == tokio::runtime::RuntimeFlavor::MultiThread;
        let mut s = Summary::default();
        loop {
            self.wake.notified().await;
            tokio::task::yield_now().await;
            let shut = loop {
                let (batch, shut) = {
                    let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                    let n = q.jobs.len().min(BATCH);
                    (q.jobs.drain(..n).collect::<Vec<_>>(), q.shut)
                };
                if batch.is_empty() {
                    break shut;
                }
                if multi {
                    tokio::task::block_in_place(|| self.commit(batch, &mut s));
                } else {
                    self.commit(batch, &mut s);
                }
            };
            if shut {
                break;
            }
        }
        let anchor = self.journal.anchor();
        s.journal_records = anchor.records;
        s.journal_head = anchor.head;
        s.audit_failed = self.failed.load(Ordering::SeqCst);
        s
    }

    /// Queues, writes and syncs one batch, then answers each sender.
    fn commit(&self, batch: Vec<Job>, s: &mut Summary) {
        let mut queued = Vec::with_capacity(batch.len());
        for job in batch {
            let ok = !self.failed.load(Ordering::SeqCst) && self.queue_event(&job.event);
            if !ok {
                self.failed.store(true, Ordering::SeqCst);
            }
            queued.push((job, ok));
        }
        let synced = if queued.iter().any(|(_, ok)| *ok) {
            let ok = self.journal.flush().is_ok();
            if !ok {
                self.failed.store(true, Ordering::SeqCst);
            }
            ok
        } else {
            true
        };
        for (job, ok) in queued {
            let ok = ok && synced;
            if ok {
                count(s, &job.event);
            }
            let _ = job.reply.send(ok);
        }
    }

    fn queue_event(&self, event: &AuditEvent) -> bool {
        let mut e = event.clone();
        e.seq = self.journal.record_count() + 1;
        let Ok(bytes) = e.encode() else {
            return false;
        };
        let ok = self.journal.queue(EVENT_RECORD, &bytes).is_ok();
        let spec = self.journal.spec();
        let mut r = self.room.lock().unwrap_or_else(|e| e.into_inner());
        r.records_left = spec.max_records.saturating_sub(self.journal.record_count());
        r.bytes_left = spec.max_bytes.saturating_sub(self.journal.len_bytes());
        ok
    }
}

fn count(s: &mut Summary, e: &AuditEvent) {
    match e.decision {
        Decision::Counted => s.unjournaled += e.count.unwrap_or(0),
        Decision::Allowed => s.allowed += 1,
        Decision::Denied => s.denied += 1,
        Decision::UpstreamError => s.upstream_errors += 1,
        Decision::Dropped => s.dropped += 1,
        Decision::Pinned => s.pinned += 1,
        Decision::Cancelled => s.cancelled += 1,
    }
}

#[cfg(test)]
mod tests;
