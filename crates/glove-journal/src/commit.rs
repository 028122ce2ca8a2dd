//! Group commit: many appending threads share one `pwrite` and one
//! `fdatasync` per batch, and a record is acknowledged only by a completed
//! sync that covered it.
//!
//! Roles:
//!
//! * **Appenders** encode their record into the shared queue under the
//!   mutex (sequence number, offset and chained digest are assigned there),
//!   then wait for durability.
//! * **The leader** is the one waiting appender that holds `leader`. It
//!   *gathers* (below), cuts the batch — every queued record, `cut` moves
//!   to the last one — releases the mutex, writes the batch with one
//!   `pwrite`, runs one `fdatasync`, and publishes the result. Only the
//!   leader touches the file, so there is never more than one sync in
//!   flight.
//! * **Followers** register `(seq, waiter)` and park. The leader wakes
//!   exactly the followers its completed sync covers (`seq <= target`), no
//!   one else: there is no broadcast and no thundering herd on the mutex —
//!   a woken follower reads the published `synced` value atomically and
//!   returns without taking the lock. If records are still queued when a
//!   sync completes, the leader also wakes the oldest remaining follower to
//!   lead the next batch.
//!
//! Gathering. With `n` threads each waiting for its own record, a leader
//! that cuts whatever is queued the moment the previous sync ends splits
//! the threads into two alternating groups (a thread whose record was in
//! batch `k` cannot have a record queued when batch `k + 1` is cut, if that
//! happens at once), so each sync carries about `n / 2` records. So the
//! leader may first wait until the records it *expects* are queued: those
//! already waiting when the previous sync completed plus one from each
//! appender that sync released. The last expected appender wakes the leader
//! (one targeted notify). The wait is bounded by half the previous sync's
//! duration (at most [`MAX_GATHER`]), because an appender may not come
//! back. Whether to gather at all is decided from measurements: the leader
//! keeps the wall time per record (gathering, writing and syncing, divided
//! by the batch) of recent batches cut after gathering and of batches cut
//! at once — the two-group pipeline, which wins when waking every thread
//! costs more than a sync — takes the cheaper way, and tries the other
//! every [`PROBE_EVERY`] batches. A lone appender expects only itself and never
//! waits. The gather wait is the only timed wait; correctness never depends
//! on it.
//!
//! Failure. A failed write or sync poisons the state: the leader's call
//! returns the failure (`journal_sync_failed`), every follower and every
//! later call gets `journal_poisoned`, and the file is never written or
//! synced again through this handle. Nothing the failed sync was meant to
//! cover is acknowledged.

use crate::error::{IoOp, JournalError};
use rustix::io::Errno;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// Writes a batch at an offset and syncs the file; on failure says which
/// step failed.
pub(crate) type WriteSync<'a> = &'a dyn Fn(&[u8], u64) -> Result<(), (IoOp, Errno)>;

/// Every this many batches the leader tries the way (gather or cut at once)
/// it currently thinks is slower, to keep both measurements fresh.
const PROBE_EVERY: u32 = 16;

/// Upper bound of the gather window.
pub(crate) const MAX_GATHER: Duration = Duration::from_millis(2);

/// Counters describing how batches were formed (for benchmarks and logs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Completed `fdatasync` calls that acknowledged records.
    pub syncs: u64,
    /// Records acknowledged by those syncs.
    pub records: u64,
    /// The largest batch one sync acknowledged.
    pub max_batch: u64,
    /// Batches cut because the gather window ran out before every expected
    /// record was queued.
    pub gather_timeouts: u64,
    /// Time spent writing and syncing batches (the file was busy).
    pub sync_time: Duration,
    /// Batches for which the leader gathered expected records first.
    pub gathers: u64,
    /// Time leaders spent gathering expected records before cutting.
    pub gather_time: Duration,
}

/// The queue and the commit bookkeeping, guarded by the mutex.
#[derive(Debug)]
pub(crate) struct State {
    /// End of the last queued record: where the next one goes.
    pub(crate) end: u64,
    /// Records queued or written (equals the last assigned sequence number).
    pub(crate) written: u64,
    /// Chained digest of the last queued record.
    pub(crate) head: [u8; 32],
    /// Encoded records queued for the next batch.
    pub(crate) pending: Vec<u8>,
    /// File offset of `pending[0]`.
    pending_offset: u64,
    /// Highest sequence number taken into a batch by a leader.
    cut: u64,
    /// Highest sequence number covered by a completed sync.
    synced: u64,
    /// End offset and chained digest of record `synced`: with `synced`,
    /// the anchor of what is durable.
    synced_end: u64,
    synced_head: [u8; 32],
    /// End offset and chained digest of record `cut` (the batch in flight).
    cut_end: u64,
    cut_head: [u8; 32],
    /// Whether a thread is leading (gathering, writing or syncing).
    leader: bool,
    /// While the leader gathers: wake it once `written` reaches this.
    gather_until: Option<u64>,
    /// Records queued while the last sync ran (they wait for the next one).
    carried: u64,
    /// Records the last completed sync acknowledged (their appenders may
    /// come back with a new record).
    released: u64,
    /// How long the leader may gather: a quarter of the last sync.
    gather_window: Duration,
    /// Wall time per record (gathering plus write and sync, divided by the
    /// batch) of recent batches cut after gathering, and of batches cut at
    /// once (moving averages; zero until measured). The leader picks the
    /// cheaper way.
    cost_gathered: Duration,
    cost_at_once: Duration,
    /// Batches led so far (every [`PROBE_EVERY`]th tries the other way).
    led: u64,
    /// Parked followers: the sequence number each waits for.
    waiters: Vec<(u64, Arc<Waiter>)>,
    /// Set by a failed write or sync; the handle is unusable from then on.
    pub(crate) poisoned: bool,
    /// A spare buffer handed back by the last leader, to avoid reallocating.
    spare: Vec<u8>,
    /// How batches were formed.
    stats: CommitStats,
}

/// One parked follower.
#[derive(Debug)]
struct Waiter {
    thread: Thread,
    woken: AtomicBool,
}

impl Waiter {
    fn wake(&self) {
        self.woken.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// Group-commit state of one journal handle.
#[derive(Debug)]
pub(crate) struct Commit {
    state: Mutex<State>,
    /// Wakes a gathering leader (only the leader waits on it).
    gathered: Condvar,
    /// Mirror of `State::synced`, so a woken follower needs no lock.
    synced: AtomicU64,
}

impl Commit {
    /// State for a file whose valid records end at `end`, the last being
    /// number `written` with digest `head`; all of them are durable.
    pub(crate) fn new(end: u64, written: u64, head: [u8; 32]) -> Commit {
        Commit {
            state: Mutex::new(State {
                end,
                written,
                head,
                pending: Vec::new(),
                pending_offset: end,
                cut: written,
                synced: written,
                synced_end: end,
                synced_head: head,
                cut_end: end,
                cut_head: head,
                leader: false,
                gather_until: None,
                carried: 0,
                released: 0,
                gather_window: Duration::ZERO,
                cost_gathered: Duration::ZERO,
                cost_at_once: Duration::ZERO,
                led: 0,
                waiters: Vec::new(),
                poisoned: false,
                spare: Vec::new(),
                stats: CommitStats::default(),
            }),
            gathered: Condvar::new(),
            synced: AtomicU64::new(written),
        }
    }

    /// Locks the state. A panic while holding the lock leaves the state
    /// unknown: treat the handle as poisoned.
    pub(crate) fn state(&self) -> Result<MutexGuard<'_, State>, JournalError> {
        self.state.lock().map_err(|_| JournalError::Poisoned)
    }

    /// Call after queuing a record (with the lock held): wakes a gathering
    /// leader once the records it expects are all queued.
    pub(crate) fn queued(&self, st: &State) {
        if st.gather_until.is_some_and(|until| st.written >= until) {
            self.gathered.notify_one();
        }
    }

    /// What a completed sync covered: `(records, end offset, head digest)`.
    /// A record whose write or sync failed is never part of it.
    pub(crate) fn durable(&self) -> Result<(u64, u64, [u8; 32]), JournalError> {
        let st = self.state()?;
        Ok((st.synced, st.synced_end, st.synced_head))
    }

    /// How batches were formed so far.
    pub(crate) fn stats(&self) -> CommitStats {
        self.state().map(|s| s.stats).unwrap_or_default()
    }

    /// Waits until a completed sync covers `seq`, leading batches when no
    /// one else does. Called with the lock held (the caller just queued
    /// record `seq`). `write_sync(batch, offset)` writes the batch at
    /// `offset` and syncs the file.
    pub(crate) fn wait_durable<'a>(
        &'a self,
        st: MutexGuard<'a, State>,
        seq: u64,
        write_sync: WriteSync<'_>,
    ) -> Result<(), JournalError> {
        self.wait_durable_gathering(st, seq, write_sync, true)
    }

    /// [`Commit::wait_durable`] for a caller that knows no other appender
    /// is coming (a single writer flushing what it queued): a batch it
    /// leads is cut at once, never waiting to gather.
    pub(crate) fn wait_durable_alone<'a>(
        &'a self,
        st: MutexGuard<'a, State>,
        seq: u64,
        write_sync: WriteSync<'_>,
    ) -> Result<(), JournalError> {
        self.wait_durable_gathering(st, seq, write_sync, false)
    }

    fn wait_durable_gathering<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        seq: u64,
        write_sync: WriteSync<'_>,
        may_gather: bool,
    ) -> Result<(), JournalError> {
        loop {
            if st.synced >= seq {
                return Ok(());
            }
            if st.poisoned {
                return Err(JournalError::Poisoned);
            }
            if !st.leader {
                return self.lead(st, seq, write_sync, may_gather);
            }
            let waiter = Arc::new(Waiter {
                thread: std::thread::current(),
                woken: AtomicBool::new(false),
            });
            st.waiters.push((seq, Arc::clone(&waiter)));
            drop(st);
            // `park` may return spuriously; `woken` says a leader meant it.
            while !waiter.woken.load(Ordering::Acquire) {
                std::thread::park();
            }
            if self.synced.load(Ordering::Acquire) >= seq {
                return Ok(());
            }
            st = self.state()?;
        }
    }

    /// Leads one batch that includes `seq` (queued before this call).
    fn lead<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        seq: u64,
        write_sync: WriteSync<'_>,
        may_gather: bool,
    ) -> Result<(), JournalError> {
        st.leader = true;
        let expected = st.cut + (st.carried + st.released).max(1);
        let missing = expected.saturating_sub(st.written);
        // An unmeasured way (zero cost) is tried first; then the cheaper
        // one, with the other re-measured every PROBE_EVERY batches.
        st.led += 1;
        let prefer = st.cost_gathered <= st.cost_at_once;
        let gather = if st.led % u64::from(PROBE_EVERY) == 0 {
            !prefer
        } else {
            prefer
        };
        let gather = may_gather && gather && missing > 0 && !st.gather_window.is_zero();
        let gather_start = Instant::now();
        if gather {
            let deadline = gather_start + st.gather_window;
            st.gather_until = Some(expected);
            while st.written < expected && !st.poisoned {
                let now = Instant::now();
                if now >= deadline {
                    st.stats.gather_timeouts += 1;
                    break;
                }
                // A panic elsewhere while holding the lock: keep leading
                // long enough to poison the state and wake everyone.
                st = match self.gathered.wait_timeout(st, deadline - now) {
                    Ok((g, _)) => g,
                    Err(e) => {
                        let mut g = e.into_inner().0;
                        g.poisoned = true;
                        g
                    }
                };
            }
            st.gather_until = None;
            st.stats.gather_time += gather_start.elapsed();
            st.stats.gathers += 1;
        }
        if st.poisoned {
            st.leader = false;
            wake_all(&mut st);
            return Err(JournalError::Poisoned);
        }
        let target = st.written;
        let offset = st.pending_offset;
        let spare = std::mem::take(&mut st.spare);
        let mut batch = std::mem::replace(&mut st.pending, spare);
        st.pending_offset = offset + batch.len() as u64;
        st.cut = target;
        st.cut_end = st.pending_offset;
        st.cut_head = st.head;
        drop(st);
        let started = Instant::now();
        let result = write_sync(&batch, offset);
        let took = started.elapsed();
        // Followers are parked on this leader: even if another thread
        // panicked while holding the lock, publish a poisoned state and
        // wake them rather than leave them waiting.
        let mut st = self.state.lock().unwrap_or_else(|e| {
            let mut g = e.into_inner();
            g.poisoned = true;
            g
        });
        st.leader = false;
        if st.poisoned && result.is_ok() {
            wake_all(&mut st);
            return Err(JournalError::Poisoned);
        }
        batch.clear();
        st.spare = batch;
        match result {
            Ok(()) => {
                let covered = target - st.synced;
                st.synced = target;
                st.synced_end = st.cut_end;
                st.synced_head = st.cut_head;
                self.synced.store(target, Ordering::Release);
                st.released = covered;
                st.carried = st.written - target;
                st.gather_window = (took / 2).min(MAX_GATHER);
                if missing > 0 {
                    let per_record =
                        gather_start.elapsed() / u32::try_from(covered.max(1)).unwrap_or(u32::MAX);
                    let cost = if gather {
                        &mut st.cost_gathered
                    } else {
                        &mut st.cost_at_once
                    };
                    *cost = if cost.is_zero() {
                        per_record
                    } else {
                        (*cost * 3 + per_record) / 4
                    };
                }
                st.stats.syncs += 1;
                st.stats.sync_time += took;
                st.stats.records += covered;
                st.stats.max_batch = st.stats.max_batch.max(covered);
                let waiters = std::mem::take(&mut st.waiters);
                let (done, mut rest): (Vec<_>, Vec<_>) =
                    waiters.into_iter().partition(|(s, _)| *s <= target);
                // The oldest follower still waiting leads the next batch.
                rest.sort_by_key(|(s, _)| *s);
                let next = (!rest.is_empty()).then(|| rest.remove(0));
                st.waiters = rest;
                drop(st);
                for (_, w) in done.iter().chain(next.iter()) {
                    w.wake();
                }
                debug_assert!(seq <= target);
                Ok(())
            }
            Err((op, errno)) => {
                st.poisoned = true;
                wake_all(&mut st);
                Err(JournalError::SyncFailed { op, errno })
            }
        }
    }
}

/// Wakes every follower (after poisoning: each sees it and fails).
fn wake_all(st: &mut State) {
    for (_, w) in std::mem::take(&mut st.waiters) {
        w.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn queue(c: &Commit) -> (u64, MutexGuard<'_, State>) {
        let mut st = c.state().unwrap();
        st.pending.push(0);
        st.end += 1;
        st.written += 1;
        c.queued(&st);
        (st.written, st)
    }

    #[test]
    fn a_lone_appender_leads_and_is_acknowledged() {
        let c = Commit::new(0, 0, [0; 32]);
        let syncs = AtomicUsize::new(0);
        let ok = |_: &[u8], _: u64| {
            syncs.fetch_add(1, Ordering::SeqCst);
            Ok(())
        };
        for _ in 0..3 {
            let (seq, st) = queue(&c);
            c.wait_durable(st, seq, &ok).unwrap();
        }
        assert_eq!(syncs.load(Ordering::SeqCst), 3);
        let stats = c.stats();
        assert_eq!((stats.syncs, stats.records, stats.max_batch), (3, 3, 1));
    }

    #[test]
    fn a_failed_sync_poisons_and_acknowledges_nothing_it_covered() {
        let c = Arc::new(Commit::new(0, 0, [0; 32]));
        let ok = |_: &[u8], _: u64| Ok(());
        let (first, st) = queue(&c);
        c.wait_durable(st, first, &ok).unwrap();
        // Many threads queue; every sync fails.
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || {
                    let (seq, st) = queue(&c);
                    let fail = |_: &[u8], _: u64| Err((IoOp::Sync, Errno::IO));
                    c.wait_durable(st, seq, &fail).map_err(|e| e.code())
                })
            })
            .collect();
        let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        use glove_types::codes::journal as jc;
        let failed = results
            .iter()
            .filter(|r| **r == Err(jc::JOURNAL_SYNC_FAILED))
            .count();
        let poisoned = results
            .iter()
            .filter(|r| **r == Err(jc::JOURNAL_POISONED))
            .count();
        // Exactly one call saw the failure; everyone else is poisoned.
        assert_eq!((failed, poisoned), (1, 7));
        assert_eq!(c.synced.load(Ordering::SeqCst), first);
        assert!(c.state().unwrap().poisoned);
        let never = |_: &[u8], _: u64| -> Result<(), (IoOp, Errno)> {
            panic!("a poisoned handle must not sync again")
        };
        let (seq, st) = queue(&c);
        assert_eq!(
            c.wait_durable(st, seq, &never).unwrap_err().code(),
            jc::JOURNAL_POISONED
        );
    }
}
