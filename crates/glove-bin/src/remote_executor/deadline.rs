//! Deadlines: the channel's lifetime and each request's.
//!
//! The channel deadline is fixed when the executor starts serving:
//! [`CHANNEL_LIFETIME`] later, the channel ends whatever it is doing.
//!
//! For each frame, *before* the read begins, the executor captures the
//! monotonic receive start; the read (waiting for the first byte included)
//! is bounded by the channel deadline. When the frame is in, the request's
//! `params.ttl_ms` is converted into a request deadline measured from the
//! receive start, not from the end of the read: every millisecond spent
//! waiting for and reading the frame is subtracted from the TTL. A frame
//! whose receive took the whole TTL or more is refused
//! (`remote_request_expired`). The reply is written only before the
//! request deadline (the earlier of receive start + TTL and the channel
//! deadline); a reply whose deadline has passed is not written at all.
//!
//! Everything here is arithmetic on [`Instant`]s handed in by the caller,
//! so the rules are tested with constructed instants.

use glove_types::codes::control::{REMOTE_REQUEST_EXPIRED, REMOTE_TTL_INVALID};
use glove_types::Rejection;
use serde_json::{Map, Value};
use std::time::{Duration, Instant};

/// How long one channel may live, from the start of serving.
pub const CHANNEL_LIFETIME: Duration = Duration::from_secs(5 * 60);

/// The smallest `ttl_ms` accepted.
pub const MIN_TTL_MS: u64 = 1;

/// The largest `ttl_ms` accepted.
pub const MAX_TTL_MS: u64 = 60_000;

/// The deadline, from the receive start, of a reply to a frame that has no
/// usable TTL (not JSON, not a request, no valid `ttl_ms`, too large).
pub const UNTIMED_REPLY: Duration = Duration::from_secs(5);

/// `at + d`, or `at` itself if that cannot be represented (failing closed:
/// a deadline that cannot be computed is already over).
fn after(at: Instant, d: Duration) -> Instant {
    at.checked_add(d).unwrap_or(at)
}

/// The channel deadline of a channel that started serving at `start`.
pub fn channel_deadline(start: Instant) -> Instant {
    after(start, CHANNEL_LIFETIME)
}

/// A request's time to live, as checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ttl(u64);

impl Ttl {
    /// Reads `params.ttl_ms`: an integer from [`MIN_TTL_MS`] to
    /// [`MAX_TTL_MS`] (`remote_ttl_invalid` otherwise, at `ttl_ms`).
    pub fn from_params(params: &Map<String, Value>) -> Result<Ttl, Rejection> {
        let invalid = |what: &str| {
            Rejection::new(
                REMOTE_TTL_INVALID,
                format!(
                    "params.ttl_ms {what}; every request carries an integer from {MIN_TTL_MS} to {MAX_TTL_MS}"
                ),
            )
            .at("ttl_ms")
        };
        match params.get("ttl_ms") {
            None => Err(invalid("is missing")),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(ms) if (MIN_TTL_MS..=MAX_TTL_MS).contains(&ms) => Ok(Ttl(ms)),
                _ => Err(invalid("is out of range")),
            },
            Some(_) => Err(invalid("is not an integer")),
        }
    }

    /// The TTL in milliseconds.
    pub fn as_ms(self) -> u64 {
        self.0
    }

    fn duration(self) -> Duration {
        Duration::from_millis(self.0)
    }
}

/// When one frame's receive began and ended, and the channel deadline it
/// was read under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameTiming {
    /// Captured before the read began (before waiting for the first byte).
    pub receive_start: Instant,
    /// Captured when the last byte of the frame was in.
    pub received: Instant,
    /// The channel deadline in force.
    pub channel_deadline: Instant,
}

impl FrameTiming {
    /// All the time the frame's receive took.
    pub fn receive_time(&self) -> Duration {
        self.received.saturating_duration_since(self.receive_start)
    }

    /// The deadline of a reply to a frame without a usable TTL.
    pub fn untimed_deadline(&self) -> Instant {
        after(self.receive_start, UNTIMED_REPLY).min(self.channel_deadline)
    }

    /// The request deadline for `ttl`: receive start + TTL, capped by the
    /// channel deadline; or `remote_request_expired` when the receive took
    /// the whole TTL.
    pub fn request_deadline(&self, ttl: Ttl) -> Result<Instant, Rejection> {
        let used = self.receive_time();
        if used >= ttl.duration() {
            return Err(Rejection::new(
                REMOTE_REQUEST_EXPIRED,
                format!(
                    "receiving the frame took {} ms of its ttl_ms of {} ms",
                    used.as_millis(),
                    ttl.as_ms()
                ),
            ));
        }
        Ok(self.deadline_for(ttl))
    }

    /// Receive start + `ttl`, capped by the channel deadline, whether or
    /// not it has passed.
    pub fn deadline_for(&self, ttl: Ttl) -> Instant {
        after(self.receive_start, ttl.duration()).min(self.channel_deadline)
    }
}

/// What is left before `deadline` at `now`; `None` when nothing is.
pub fn remaining(deadline: Instant, now: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(now)
        .filter(|d| !d.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ttl(v: Value) -> Result<Ttl, Rejection> {
        let Value::Object(m) = json!({ "ttl_ms": v }) else {
            unreachable!()
        };
        Ttl::from_params(&m)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn ttl_bounds() {
        assert_eq!(ttl(json!(1)).expect("min").as_ms(), 1);
        assert_eq!(ttl(json!(60_000)).expect("max").as_ms(), 60_000);
        for bad in [
            json!(0),
            json!(60_001),
            json!(-5),
            json!("100"),
            json!(null),
        ] {
            let e = ttl(bad).expect_err("refused");
            assert_eq!((e.code(), e.location()), (REMOTE_TTL_INVALID, "ttl_ms"));
        }
        let e = Ttl::from_params(&Map::new()).expect_err("missing");
        assert_eq!(e.code(), REMOTE_TTL_INVALID);
    }

    #[test]
    fn receive_time_counts_against_the_ttl() {
        let t0 = Instant::now();
        let timing = |received_after: u64| FrameTiming {
            receive_start: t0,
            received: t0 + ms(received_after),
            channel_deadline: t0 + ms(1_000_000),
        };
        let ttl = Ttl(200);
        // 150 ms of waiting and reading leave 50 ms: the deadline is measured
        // from the receive start, not from when the frame was in.
        assert_eq!(timing(150).request_deadline(ttl), Ok(t0 + ms(200)));
        assert_eq!(remaining(t0 + ms(200), timing(150).received), Some(ms(50)));
        // Exactly the TTL, or more: expired.
        for used in [200, 201, 1500] {
            let e = timing(used).request_deadline(ttl).expect_err("expired");
            assert_eq!(e.code(), REMOTE_REQUEST_EXPIRED);
        }
        assert!(timing(0).request_deadline(Ttl(1)).is_ok());
        assert!(timing(1).request_deadline(Ttl(1)).is_err());
    }

    #[test]
    fn the_channel_deadline_caps_the_request_deadline() {
        let t0 = Instant::now();
        let timing = FrameTiming {
            receive_start: t0,
            received: t0 + ms(10),
            channel_deadline: t0 + ms(100),
        };
        assert_eq!(timing.request_deadline(Ttl(30_000)), Ok(t0 + ms(100)));
        assert_eq!(timing.untimed_deadline(), t0 + ms(100));
        let roomy = FrameTiming {
            channel_deadline: t0 + ms(1_000_000),
            ..timing
        };
        assert_eq!(roomy.untimed_deadline(), t0 + UNTIMED_REPLY);
    }

    #[test]
    fn remaining_is_none_at_and_after_the_deadline() {
        let t0 = Instant::now();
        assert_eq!(remaining(t0 + ms(5), t0), Some(ms(5)));
        assert_eq!(remaining(t0, t0), None);
        assert_eq!(remaining(t0, t0 + ms(1)), None);
        assert_eq!(channel_deadline(t0), t0 + CHANNEL_LIFETIME);
    }
}
