//! The fixture's `expect` member: the expected termination and exit
//! code, an optional maximum wall latency, and the required and forbidden
//! transcript literals, with their rules (see [`super::fixture`]).

use crate::codes::refinement::*;
use crate::Rejection;
use serde::Deserialize;
use serde_json::{json, Value};

/// Most literals in each list.
pub const MAX_LITERALS: usize = 64;
/// Longest literal, in bytes.
pub const MAX_LITERAL_BYTES: usize = 1024;
/// Largest `max_wall_latency_ms` (24 hours).
pub const MAX_WALL_LATENCY_MS: u64 = 86_400_000;
/// Largest signal number `expect.exit_code` names for `signaled`.
pub const MAX_SIGNAL: u64 = 64;

/// How the fixture expects the session's process to end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExpectedTermination {
    /// It exits with `exit_code` (0 to 255).
    Exited,
    /// It is killed by the signal `exit_code` (1 to 64).
    Signaled,
}

impl ExpectedTermination {
    /// The wire name: `exited` or `signaled`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ExpectedTermination::Exited => "exited",
            ExpectedTermination::Signaled => "signaled",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<ExpectedTermination> {
        [ExpectedTermination::Exited, ExpectedTermination::Signaled]
            .into_iter()
            .find(|t| t.as_str() == s)
    }
}

/// The fixture's `expect` member: what the evaluator checks. Only
/// [`Expectation::new`] (and so [`super::Fixture::decode`]) makes one, so every
/// expectation obeys the fixture's bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expectation {
    termination: ExpectedTermination,
    exit_code: i32,
    max_wall_latency_ms: Option<u64>,
    required_literals: Vec<String>,
    forbidden_literals: Vec<String>,
}

pub(super) fn bound(msg: impl Into<String>) -> Rejection {
    Rejection::new(REFINEMENT_FIXTURE_BOUND, msg)
}

pub(super) fn invalid(msg: impl Into<String>) -> Rejection {
    Rejection::new(REFINEMENT_FIXTURE_INVALID, msg)
}

/// A sorted, unique list of 1 to `max_len`-byte strings, at most `max`
/// of them; `printable` also refuses control characters.
pub(super) fn check_list(
    items: &[String],
    max: usize,
    max_len: usize,
    printable: bool,
    field: &str,
) -> Result<(), Rejection> {
    if items.len() > max {
        return Err(bound(format!("at most {max} entries")).at(field));
    }
    for (i, s) in items.iter().enumerate() {
        if printable {
            check_text(s, max_len).map_err(|r| r.at(format!("{field}[{i}]")))?;
        } else if s.is_empty() || s.len() > max_len {
            return Err(bound(format!("1 to {max_len} bytes")).at(format!("{field}[{i}]")));
        }
    }
    for (i, w) in items.windows(2).enumerate() {
        if w[0].as_bytes() >= w[1].as_bytes() {
            return Err(Rejection::new(
                REFINEMENT_FIXTURE_NOT_CANONICAL,
                "entries are sorted in byte order, each once",
            )
            .at(format!("{field}[{}]", i + 1)));
        }
    }
    Ok(())
}

/// 1 to `max` bytes without a control character.
pub(super) fn check_text(s: &str, max: usize) -> Result<(), Rejection> {
    if s.is_empty() || s.len() > max || s.chars().any(char::is_control) {
        return Err(bound(format!(
            "1 to {max} bytes without a control character"
        )));
    }
    Ok(())
}

impl Expectation {
    /// Checks the `expect` rules (locations are relative to `expect`).
    pub fn new(
        termination: ExpectedTermination,
        exit_code: u64,
        max_wall_latency_ms: Option<u64>,
        required_literals: Vec<String>,
        forbidden_literals: Vec<String>,
    ) -> Result<Expectation, Rejection> {
        let (min_code, max_code) = match termination {
            ExpectedTermination::Exited => (0, 255),
            ExpectedTermination::Signaled => (1, MAX_SIGNAL),
        };
        if !(min_code..=max_code).contains(&exit_code) {
            return Err(bound(format!(
                "exit_code of a {} process is {min_code} to {max_code}",
                termination.as_str()
            ))
            .at("exit_code"));
        }
        if max_wall_latency_ms.is_some_and(|l| l == 0 || l > MAX_WALL_LATENCY_MS) {
            return Err(bound(format!("1 to {MAX_WALL_LATENCY_MS}")).at("max_wall_latency_ms"));
        }
        for (list, field) in [
            (&required_literals, "required_literals"),
            (&forbidden_literals, "forbidden_literals"),
        ] {
            check_list(list, MAX_LITERALS, MAX_LITERAL_BYTES, false, field)?;
        }
        // Both lists are sorted: one merge finds a shared literal.
        let (mut i, mut j) = (0, 0);
        while let (Some(a), Some(b)) = (required_literals.get(i), forbidden_literals.get(j)) {
            match a.as_bytes().cmp(b.as_bytes()) {
                core::cmp::Ordering::Less => i += 1,
                core::cmp::Ordering::Greater => j += 1,
                core::cmp::Ordering::Equal => {
                    return Err(Rejection::new(
                        REFINEMENT_LITERAL_CONFLICT,
                        "a literal is both required and forbidden",
                    )
                    .at(format!("forbidden_literals[{j}]")))
                }
            }
        }
        Ok(Expectation {
            termination,
            // At most 255: fits.
            exit_code: i32::try_from(exit_code).unwrap_or(i32::MAX),
            max_wall_latency_ms,
            required_literals,
            forbidden_literals,
        })
    }

    /// The expected termination.
    pub fn termination(&self) -> ExpectedTermination {
        self.termination
    }
    /// The expected exit code (for [`ExpectedTermination::Signaled`], the
    /// signal number).
    pub fn exit_code(&self) -> i32 {
        self.exit_code
    }
    /// The longest wall latency accepted, milliseconds.
    pub fn max_wall_latency_ms(&self) -> Option<u64> {
        self.max_wall_latency_ms
    }
    /// Literals the transcript must contain, sorted in byte order.
    pub fn required_literals(&self) -> &[String] {
        &self.required_literals
    }
    /// Literals the transcript must not contain, sorted in byte order.
    pub fn forbidden_literals(&self) -> &[String] {
        &self.forbidden_literals
    }

    pub(super) fn to_value(&self) -> Value {
        let mut v = json!({
            "termination": self.termination.as_str(),
            "exit_code": self.exit_code,
            "required_literals": self.required_literals,
            "forbidden_literals": self.forbidden_literals,
        });
        if let (Some(l), Some(o)) = (self.max_wall_latency_ms, v.as_object_mut()) {
            o.insert("max_wall_latency_ms".into(), json!(l));
        }
        v
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExpect {
    pub(super) termination: String,
    pub(super) exit_code: u64,
    #[serde(default)]
    pub(super) max_wall_latency_ms: Option<u64>,
    pub(super) required_literals: Vec<String>,
    pub(super) forbidden_literals: Vec<String>,
}
