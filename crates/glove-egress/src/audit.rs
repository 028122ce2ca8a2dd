//! The egress journal's writer: one thread that numbers events, appends
//! them and answers their senders, so the runtime never blocks on
//! `fdatasync`. A decision is answered only once it is durable; the events
//! queued together are made durable with one `fdatasync`. A closing event
//! (a connection's totals, which release nothing) is only queued: it
//! becomes durable with the next decision, within [`CLOSING_FLUSH`] when
//! no decision comes, or when the proxy finishes. The first failure closes
//! the audit for good (fail closed): every later event is refused without
//! being tried.

use crate::error::EgressError;
use glove_journal::{Journal, JournalKind, JournalSpec};
use glove_types::egress::event::{Decision, EgressEvent, EventKind, MAX_EVENT_BYTES};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// Longest a queued closing event waits for a sync when no decision comes.
pub(crate) const CLOSING_FLUSH: Duration = Duration::from_millis(20);

/// Most events made durable by one sync.
const BATCH: usize = 64;

/// The record kind of an egress event in the egress journal.
pub const EVENT_RECORD: u16 = 1;

/// The record kinds the egress journal carries.
const RECORD_KINDS: &[u16] = &[EVENT_RECORD];

/// The egress journal's spec for these bounds.
pub fn journal_spec(max_bytes: u64, max_records: u64) -> JournalSpec {
    JournalSpec {
        kind: JournalKind::EGRESS,
        max_bytes,
        max_records,
        max_payload: MAX_EVENT_BYTES as u32,
        record_kinds: RECORD_KINDS,
    }
}

/// Reads every event of an egress journal (for tests, receipts and
/// tools): opens it with `spec` through [`Journal::open`], which takes its
/// writer lock (so not while the proxy runs) and cuts a torn tail.
pub fn read_events(path: &Path, spec: &JournalSpec) -> Result<Vec<EgressEvent>, EgressError> {
    let opened = Journal::open(path, spec, None)?;
    opened
        .records()
        .map(|r| {
            EgressEvent::decode(r.payload).map_err(|e| EgressError::Event {
                seq: r.seq,
                message: e.to_string(),
            })
        })
        .collect()
}

/// What an event counts as in the summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tally {
    /// A decision (connection or request, allowed or refused).
    Decision,
    /// The end of an allowed connection.
    Closing,
    /// An allowed request that failed after it was let through.
    Failed,
}

struct Job {
    event: EgressEvent,
    tally: Tally,
    reply: oneshot::Sender<bool>,
}

/// Totals the writer keeps.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Totals {
    pub(crate) connections_allowed: u64,
    pub(crate) connections_refused: u64,
    pub(crate) connections_closed: u64,
    pub(crate) requests_allowed: u64,
    pub(crate) requests_refused: u64,
    pub(crate) requests_failed: u64,
    pub(crate) journal_records: u64,
    pub(crate) journal_head: [u8; 32],
    pub(crate) audit_failed: bool,
}

/// The sending side, shared by every connection.
pub(crate) struct Audit {
    tx: mpsc::Sender<Job>,
    failed: Arc<AtomicBool>,
    /// No room for another decision's events: decisions are refused, the
    /// end events already reserved for are still written.
    full: Arc<AtomicBool>,
    /// Events kept free beyond a decision's own: room for the end events
    /// of every connection that may be open (two per connection).
    margin: u64,
    bytes_left: Arc<AtomicU64>,
    records_left: Arc<AtomicU64>,
}

/// Room one event may need: the largest encoding and its framing.
const EVENT_ROOM: u64 = MAX_EVENT_BYTES as u64 + glove_journal::format::RECORD_OVERHEAD as u64;

impl Audit {
    /// Whether the audit has failed or is full (so every decision is
    /// refused).
    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst) || self.full.load(Ordering::SeqCst)
    }

    /// Checks, before anything is let through, that the journal has room
    /// for `events` more events at their largest, beyond the margin kept
    /// for the end events of what is already open. When it has not, the
    /// audit is full: this and every later decision is refused, while the
    /// end events still fit.
    pub(crate) fn ensure_room(&self, events: u64) -> bool {
        if self.failed() {
            return false;
        }
        let events = events.saturating_add(self.margin);
        let ok = self.bytes_left.load(Ordering::SeqCst) >= events.saturating_mul(EVENT_ROOM)
            && self.records_left.load(Ordering::SeqCst) >= events;
        if !ok {
            self.full.store(true, Ordering::SeqCst);
        }
        ok
    }

    /// Appends `event` durably (its `seq` is assigned by the writer);
    /// `false` if it was not recorded.
    pub(crate) async fn record(&self, event: EgressEvent, tally: Tally) -> bool {
        // A full journal still takes the end events of what it let
        // through (their room was reserved); a failed one takes nothing.
        let closed = if tally == Tally::Decision {
            self.failed()
        } else {
            self.failed.load(Ordering::SeqCst)
        };
        if closed {
            return false;
        }
        let (reply, rx) = oneshot::channel();
        // Unbounded, but every sender waits for its answer: at most one
        // job per connection task is queued.
        if self
            .tx
            .send(Job {
                event,
                tally,
                reply,
            })
            .is_err()
        {
            return false;
        }
        rx.await.unwrap_or(false)
    }
}

/// Creates the journal and starts its writer thread.
pub(crate) fn spawn(
    path: &Path,
    spec: &JournalSpec,
    max_concurrent: usize,
) -> Result<(Audit, std::thread::JoinHandle<Totals>), EgressError> {
    let journal = Journal::create(path, spec)?;
    let (tx, rx) = mpsc::channel::<Job>();
    let failed = Arc::new(AtomicBool::new(false));
    let full = Arc::new(AtomicBool::new(false));
    let bytes_left = Arc::new(AtomicU64::new(
        spec.max_bytes.saturating_sub(journal.len_bytes()),
    ));
    let records_left = Arc::new(AtomicU64::new(spec.max_records));
    let w = Writer {
        journal,
        rx,
        failed: failed.clone(),
        full: full.clone(),
        bytes_left: bytes_left.clone(),
        records_left: records_left.clone(),
    };
    let thread = std::thread::Builder::new()
        .name("glove-egress-audit".into())
        .spawn(move || w.run())
        .map_err(EgressError::io("spawn the egress audit thread"))?;
    Ok((
        Audit {
            tx,
            failed,
            full: full.clone(),
            margin: 2 * max_concurrent as u64,
            bytes_left,
            records_left,
        },
        thread,
    ))
}

struct Writer {
    journal: Journal,
    rx: mpsc::Receiver<Job>,
    failed: Arc<AtomicBool>,
    full: Arc<AtomicBool>,
    bytes_left: Arc<AtomicU64>,
    records_left: Arc<AtomicU64>,
}

impl Writer {
    fn run(self) -> Totals {
        let mut t = Totals::default();
        // Closing events queued but not yet covered by a sync.
        let mut dirty = false;
        loop {
            let first = if dirty {
                match self.rx.recv_timeout(CLOSING_FLUSH) {
                    Ok(job) => job,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        let _ = self.sync(&mut dirty);
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            } else {
                match self.rx.recv() {
                    Ok(job) => job,
                    Err(_) => break,
                }
            };
            let mut batch = vec![first];
            while batch.len() < BATCH {
                match self.rx.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            // Queue the batch, then one sync if a decision waits on it.
            let mut queued = Vec::with_capacity(batch.len());
            for mut job in batch {
                if job.tally != Tally::Decision {
                    job.event.phase = glove_types::egress::event::Phase::End;
                }
                let ok = !self.failed.load(Ordering::SeqCst) && self.queue(job.event.clone());
                if !ok {
                    self.failed.store(true, Ordering::SeqCst);
                }
                queued.push((job, ok));
            }
            let synced = if queued
                .iter()
                .any(|(j, ok)| *ok && j.tally == Tally::Decision)
            {
                self.sync(&mut dirty)
            } else {
                dirty |= queued.iter().any(|(_, ok)| *ok);
                true
            };
            for (job, ok) in queued {
                // A decision counts only once durable; a closing event
                // once queued (its sync may come later).
                let ok = ok && synced;
                if ok {
                    count(&mut t, &job.event, job.tally);
                }
                let _ = job.reply.send(ok);
            }
        }
        if dirty {
            let _ = self.sync(&mut dirty);
        }
        let anchor = self.journal.anchor();
        t.journal_records = anchor.records;
        t.journal_head = anchor.head;
        t.audit_failed = self.failed.load(Ordering::SeqCst) || self.full.load(Ordering::SeqCst);
        t
    }

    /// Makes everything queued durable; a failure closes the audit.
    fn sync(&self, dirty: &mut bool) -> bool {
        *dirty = false;
        if self.journal.flush().is_err() {
            self.failed.store(true, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Numbers and queues one event.
    fn queue(&self, mut event: EgressEvent) -> bool {
        event.seq = self.journal.record_count() + 1;
        let Ok(bytes) = event.encode() else {
            return false;
        };
        let ok = self.journal.queue(EVENT_RECORD, &bytes).is_ok();
        let spec = self.journal.spec();
        self.bytes_left.store(
            spec.max_bytes.saturating_sub(self.journal.len_bytes()),
            Ordering::SeqCst,
        );
        self.records_left.store(
            spec.max_records.saturating_sub(self.journal.record_count()),
            Ordering::SeqCst,
        );
        ok
    }
}

fn count(t: &mut Totals, e: &EgressEvent, tally: Tally) {
    match (tally, e.kind, e.decision) {
        (Tally::Closing, _, _) => t.connections_closed += 1,
        (Tally::Failed, _, _) => t.requests_failed += 1,
        (Tally::Decision, EventKind::Connection, Decision::Allowed) => t.connections_allowed += 1,
        (Tally::Decision, EventKind::Connection, Decision::Refused) => t.connections_refused += 1,
        (Tally::Decision, EventKind::Request, Decision::Allowed) => t.requests_allowed += 1,
        (Tally::Decision, EventKind::Request, Decision::Refused) => t.requests_refused += 1,
    }
}
