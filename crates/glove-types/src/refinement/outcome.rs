//! The canonical outcome of a `refinement-eval-v1` session and its
//! commitment.
//!
//! ```text
//! {"failed_assertions":[name…],
//!  "forbidden_literals":{"expected":n,"matched":n},
//!  "latency_us":n,"passed":bool,
//!  "required_literals":{"expected":n,"matched":n}}
//! ```
//!
//! `failed_assertions` lists, sorted in byte order, the stable names of
//! every assertion that did not hold: `termination`, `exit_code` (checked
//! only when the termination matched), `wall_latency`,
//! `required_literal:<i>` (the `i`-th required literal, from 0, was not
//! found), `forbidden_literal:<i>` (the `i`-th forbidden literal was
//! seen), `utf8` (the stream is not UTF-8), `stream_incomplete` (the
//! evaluator did not see the whole stream) and `resource_stop` (a resource
//! limit ended the session). `passed` is `true` exactly when the list is
//! empty. `required_literals.matched` counts the required literals found,
//! `forbidden_literals.matched` the forbidden literals seen.
//!
//! ```text
//! outcome_commitment = sha256_domain("glove.refinement-outcome.v1", canonical outcome)
//! ```

use crate::canon::{self, MAX_SAFE_INTEGER};
use crate::codes::refinement::REFINEMENT_OUTCOME_INVALID;
use crate::digest::Sha256Digest;
use crate::Rejection;
use serde::{Deserialize, Serialize};

use super::expect::MAX_LITERALS;

/// Domain of [`Outcome::commitment`].
pub const OUTCOME_DOMAIN: &str = "glove.refinement-outcome.v1";

/// Assertion name: the process did not end the expected way.
pub const ASSERT_TERMINATION: &str = "termination";
/// Assertion name: the exit code (or signal) differs.
pub const ASSERT_EXIT_CODE: &str = "exit_code";
/// Assertion name: the wall latency exceeded the fixture's maximum.
pub const ASSERT_WALL_LATENCY: &str = "wall_latency";
/// Assertion name: the stream is not valid UTF-8.
pub const ASSERT_UTF8: &str = "utf8";
/// Assertion name: the evaluator did not see the whole stream.
pub const ASSERT_STREAM_INCOMPLETE: &str = "stream_incomplete";
/// Assertion name: a resource limit stopped the session.
pub const ASSERT_RESOURCE_STOP: &str = "resource_stop";
/// Prefix of a required literal's assertion name (`required_literal:<i>`).
pub const REQUIRED_LITERAL_PREFIX: &str = "required_literal:";
/// Prefix of a forbidden literal's assertion name (`forbidden_literal:<i>`).
pub const FORBIDDEN_LITERAL_PREFIX: &str = "forbidden_literal:";

/// Most assertion names an outcome lists: the six fixed names and one per
/// literal.
pub const MAX_FAILED_ASSERTIONS: usize = 6 + 2 * MAX_LITERALS;

/// How many literals of one list the fixture names and how many the
/// transcript matched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiteralCount {
    /// Literals in the fixture's list.
    pub expected: u64,
    /// Literals found (required) or seen (forbidden).
    pub matched: u64,
}

/// The canonical outcome (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outcome {
    /// Whether every assertion held and the evidence is valid.
    pub passed: bool,
    /// The wall latency the runtime measured, microseconds.
    pub latency_us: u64,
    /// The names of the assertions that did not hold, sorted.
    pub failed_assertions: Vec<String>,
    /// Required literals: expected and found.
    pub required_literals: LiteralCount,
    /// Forbidden literals: expected and seen.
    pub forbidden_literals: LiteralCount,
}

fn invalid(msg: impl Into<String>) -> Rejection {
    Rejection::new(REFINEMENT_OUTCOME_INVALID, msg)
}

/// The literal index of `name` after `prefix`: decimal, no leading zero.
fn literal_index(name: &str, prefix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?;
    let canonical = !digits.is_empty()
        && digits.len() <= 4
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    if canonical {
        digits.parse().ok()
    } else {
        None
    }
}

impl Outcome {
    /// The rules an outcome obeys (every outcome
    /// [`super::Evaluator::finish`] makes does): names known, sorted and
    /// unique, literal indexes within their list, the literal counts agree
    /// with the names, `passed` exactly when nothing failed, integers at
    /// most 2^53 − 1. `refinement_outcome_invalid` otherwise.
    pub fn check(&self) -> Result<(), Rejection> {
        let (req, forb) = (self.required_literals, self.forbidden_literals);
        for (c, at) in [(req, "required_literals"), (forb, "forbidden_literals")] {
            if c.expected > MAX_LITERALS as u64 || c.matched > c.expected {
                return Err(invalid(format!(
                    "at most {MAX_LITERALS} expected, and no more matched than expected"
                ))
                .at(at));
            }
        }
        if self.latency_us > MAX_SAFE_INTEGER {
            return Err(invalid("latency_us is at most 2^53 - 1").at("latency_us"));
        }
        let names = &self.failed_assertions;
        if names.len() > MAX_FAILED_ASSERTIONS {
            return Err(invalid("too many assertion names").at("failed_assertions"));
        }
        if names.windows(2).any(|w| w[0].as_bytes() >= w[1].as_bytes()) {
            return Err(
                invalid("names are sorted in byte order, each once").at("failed_assertions")
            );
        }
        let (mut missing, mut seen) = (0u64, 0u64);
        for (i, n) in names.iter().enumerate() {
            let fixed = [
                ASSERT_TERMINATION,
                ASSERT_EXIT_CODE,
                ASSERT_WALL_LATENCY,
                ASSERT_UTF8,
                ASSERT_STREAM_INCOMPLETE,
                ASSERT_RESOURCE_STOP,
            ]
            .contains(&n.as_str());
            let ok = if fixed {
                true
            } else if let Some(k) = literal_index(n, REQUIRED_LITERAL_PREFIX) {
                missing += 1;
                k < req.expected
            } else if let Some(k) = literal_index(n, FORBIDDEN_LITERAL_PREFIX) {
                seen += 1;
                k < forb.expected
            } else {
                false
            };
            if !ok {
                return Err(invalid("not an assertion name of this outcome")
                    .at(format!("failed_assertions[{i}]")));
            }
        }
        if missing != req.expected - req.matched || seen != forb.matched {
            return Err(invalid(
                "the literal counts disagree with the literal assertions",
            ));
        }
        if self.passed != names.is_empty() {
            return Err(invalid("passed exactly when no assertion failed").at("passed"));
        }
        Ok(())
    }

    /// The canonical encoding of a valid outcome ([`Self::check`]).
    pub fn encode(&self) -> Result<Vec<u8>, Rejection> {
        self.check()?;
        canon::encode(self)
    }

    /// `sha256_domain("glove.refinement-outcome.v1", canonical outcome)`.
    /// An outcome [`Self::encode`] refuses (none the evaluator makes) has
    /// no canonical bytes; its commitment is that of empty bytes, which no
    /// valid outcome shares and no receipt carries.
    pub fn commitment(&self) -> Sha256Digest {
        let bytes = self.encode().unwrap_or_default();
        Sha256Digest::of_domain(OUTCOME_DOMAIN, &bytes)
    }
}
