//! Thrashing: a memory limit below the working set, told by the rate of
//! refaults, ends the session as a memory stop.

use std::time::{Duration, Instant};

/// Tells a memory limit below the working set, which the kernel answers
/// not with an OOM kill but by reclaiming and refaulting the same pages
/// (often executable code) in a loop that burns CPU until the wall limit:
/// the session is ended as a memory stop once, in each of
/// [`THRASH_SECONDS`] consecutive seconds, more than a quarter of the
/// limit's pages (at least [`THRASH_MIN_PAGES`]) was refaulted.
#[derive(Clone, Debug)]
pub struct ThrashWatch {
    threshold: u64,
    last: Option<(Instant, u64)>,
    hot: u32,
}

/// Consecutive seconds of refaulting that end a session.
pub const THRASH_SECONDS: u32 = 3;
/// Fewest refaulted pages per second counted as thrashing.
pub const THRASH_MIN_PAGES: u64 = 1024;

impl ThrashWatch {
    /// A watch for a memory limit of `memory_bytes`.
    pub fn new(memory_bytes: u64) -> ThrashWatch {
        ThrashWatch {
            threshold: (memory_bytes / 4096 / 4).max(THRASH_MIN_PAGES),
            last: None,
            hot: 0,
        }
    }

    /// Takes the refault counter at `now`; true once the session has
    /// thrashed for [`THRASH_SECONDS`] seconds in a row.
    pub fn observe(&mut self, now: Instant, refaults: u64) -> bool {
        let Some((then, before)) = self.last else {
            self.last = Some((now, refaults));
            return false;
        };
        let elapsed = now.saturating_duration_since(then);
        if elapsed < Duration::from_secs(1) {
            return false;
        }
        let per_second =
            (refaults.saturating_sub(before) as u128 * 1000 / elapsed.as_millis().max(1)) as u64;
        self.last = Some((now, refaults));
        if per_second >= self.threshold {
            self.hot += 1;
        } else {
            self.hot = 0;
        }
        self.hot >= THRASH_SECONDS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sustained_refaulting_is_thrashing_and_a_pause_resets_it() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // 32 MiB: 8192 pages, a threshold of 2048 pages a second.
        let mut w = ThrashWatch::new(32 << 20);
        assert!(!w.observe(at(0), 0));
        assert!(
            !w.observe(at(500), 10_000),
            "less than a second: no verdict"
        );
        assert!(!w.observe(at(1000), 3_000));
        assert!(!w.observe(at(2000), 6_000));
        // A quiet second resets the count.
        assert!(!w.observe(at(3000), 6_100));
        assert!(!w.observe(at(4000), 9_000));
        assert!(!w.observe(at(5000), 12_000));
        assert!(w.observe(at(6000), 15_000));
    }

    #[test]
    fn a_large_limit_needs_a_proportionate_rate() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        // 1 GiB: 262144 pages, a threshold of 65536 pages a second.
        let mut w = ThrashWatch::new(1 << 30);
        let mut hit = false;
        for s in 0..10 {
            hit |= w.observe(at(s), s * 60_000);
        }
        assert!(!hit, "60k pages/s is below a quarter of the limit");
        let mut w = ThrashWatch::new(1 << 30);
        for s in 0..4 {
            hit = w.observe(at(s), s * 70_000);
        }
        assert!(hit);
    }
}
