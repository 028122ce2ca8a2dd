//! The streaming evaluator: fed every raw PTY byte of a session, in order
//! and in any chunking, it keeps the SHA-256 and length of the stream, its
//! UTF-8 state and which literals occurred; [`Evaluator::finish`] adds the
//! trusted end the runtime observed and synthesizes the [`Outcome`].
//!
//! Memory is bounded by the fixture's literals, whatever the stream's
//! length; each byte costs amortised constant work (one automaton step,
//! one validator step, the hash) plus one step per literal ending there.
//! Nothing in the stream is parsed: PTY output is only text and can never
//! say what the outcome is.

use super::expect::{Expectation, ExpectedTermination};
use super::matcher::Matcher;
use super::outcome::*;
use super::utf8::Utf8Stream;
use crate::canon::MAX_SAFE_INTEGER;
use crate::digest::Sha256Digest;
use core::fmt;
use sha2::{Digest as _, Sha256};

/// Whether the evidence the evaluator saw can be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Evidence {
    /// The whole stream was seen and it is UTF-8.
    Valid,
    /// The stream is incomplete or not UTF-8: the outcome has not passed.
    Invalid,
}

impl Evidence {
    /// The wire name: `valid` or `invalid`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Evidence::Valid => "valid",
            Evidence::Invalid => "invalid",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Evidence> {
        [Evidence::Valid, Evidence::Invalid]
            .into_iter()
            .find(|e| e.as_str() == s)
    }
}

/// How the session's process ended, as the runtime (never the stream)
/// observed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ObservedEnd {
    /// It exited with this code.
    Exited(i32),
    /// A signal killed it.
    Signaled(i32),
    /// The session failed to run or to end cleanly.
    Failed,
}

/// What the runtime observed besides the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// How the process ended.
    pub termination: ObservedEnd,
    /// Wall latency, microseconds (from release to exit).
    pub latency_us: u64,
    /// Whether the PTY was drained to its end and every byte was fed.
    pub stream_complete: bool,
    /// The limit that stopped the session (e.g. `wall_time`), if one did.
    pub resource_stop: Option<String>,
}

/// What [`Evaluator::finish`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evaluation {
    /// The canonical outcome.
    pub outcome: Outcome,
    /// SHA-256 of every byte fed, in order.
    pub raw_pty_sha256: Sha256Digest,
    /// How many bytes were fed.
    pub raw_pty_bytes: u64,
    /// Whether the evidence is valid.
    pub evidence: Evidence,
    /// Whether the evaluator saw the whole stream
    /// ([`Observed::stream_complete`]).
    pub complete: bool,
}

/// The streaming evaluator (see the module docs).
pub struct Evaluator {
    expect: Expectation,
    hash: Sha256,
    bytes: u64,
    utf8: Utf8Stream,
    /// Required literals first, then forbidden ones.
    matcher: Matcher,
}

impl fmt::Debug for Evaluator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Evaluator")
            .field("bytes", &self.bytes)
            .field("expect", &self.expect)
            .finish_non_exhaustive()
    }
}

impl Evaluator {
    /// An evaluator for a fixture's expectation ([`super::Fixture::expect`]).
    pub fn new(expect: &Expectation) -> Evaluator {
        let literals: Vec<&str> = expect
            .required_literals()
            .iter()
            .chain(expect.forbidden_literals())
            .map(String::as_str)
            .collect();
        Evaluator {
            matcher: Matcher::new(&literals),
            expect: expect.clone(),
            hash: Sha256::new(),
            bytes: 0,
            utf8: Utf8Stream::new(),
        }
    }

    /// Feeds the next raw PTY bytes.
    pub fn feed(&mut self, chunk: &[u8]) {
        self.hash.update(chunk);
        self.bytes = self
            .bytes
            .saturating_add(u64::try_from(chunk.len()).unwrap_or(u64::MAX));
        self.utf8.feed(chunk);
        self.matcher.feed(chunk);
    }

    /// Bytes fed so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Synthesizes the outcome from the stream and the observed end (see
    /// [`super::outcome`] for the assertion names). The evidence is
    /// invalid, and the outcome fails, when the stream is incomplete or
    /// not UTF-8; a resource stop fails it even when every other assertion
    /// held.
    pub fn finish(self, observed: &Observed) -> Evaluation {
        let e = &self.expect;
        let mut failed: Vec<String> = Vec::new();
        let code = match (e.termination(), observed.termination) {
            (ExpectedTermination::Exited, ObservedEnd::Exited(c))
            | (ExpectedTermination::Signaled, ObservedEnd::Signaled(c)) => Some(c),
            _ => None,
        };
        match code {
            Some(c) if c != e.exit_code() => failed.push(ASSERT_EXIT_CODE.into()),
            Some(_) => {}
            None => failed.push(ASSERT_TERMINATION.into()),
        }
        let latency_us = observed.latency_us.min(MAX_SAFE_INTEGER);
        if let Some(max_ms) = e.max_wall_latency_ms() {
            if latency_us > max_ms.saturating_mul(1000) {
                failed.push(ASSERT_WALL_LATENCY.into());
            }
        }
        let required = e.required_literals().len();
        let forbidden = e.forbidden_literals().len();
        let mut found = 0u64;
        for i in 0..required {
            if self.matcher.seen(i) {
                found += 1;
            } else {
                failed.push(format!("{REQUIRED_LITERAL_PREFIX}{i}"));
            }
        }
        let mut seen = 0u64;
        for i in 0..forbidden {
            if self.matcher.seen(required + i) {
                seen += 1;
                failed.push(format!("{FORBIDDEN_LITERAL_PREFIX}{i}"));
            }
        }
        let utf8 = self.utf8.valid_at_end();
        if !utf8 {
            failed.push(ASSERT_UTF8.into());
        }
        if !observed.stream_complete {
            failed.push(ASSERT_STREAM_INCOMPLETE.into());
        }
        if observed.resource_stop.is_some() {
            failed.push(ASSERT_RESOURCE_STOP.into());
        }
        failed.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        let evidence = if utf8 && observed.stream_complete {
            Evidence::Valid
        } else {
            Evidence::Invalid
        };
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let outcome = Outcome {
            passed: evidence == Evidence::Valid && failed.is_empty(),
            latency_us,
            failed_assertions: failed,
            required_literals: LiteralCount {
                expected: count(required),
                matched: found,
            },
            forbidden_literals: LiteralCount {
                expected: count(forbidden),
                matched: seen,
            },
        };
        Evaluation {
            outcome,
            raw_pty_sha256: Sha256Digest::from_bytes(self.hash.finalize().into()),
            raw_pty_bytes: self.bytes,
            evidence,
            complete: observed.stream_complete,
        }
    }
}
