//! The rejection type shared by every validator in this crate.

use crate::codes::ErrorCode;
use core::fmt;

/// A rejected input: a stable code, the location inside the document (a
/// field path such as `runtime_templates[0].launch.arguments`, empty for the
/// whole input) and a human message.
///
/// Messages produced while checking a *plan* never contain host paths: a
/// plan cannot carry one, and plan-versus-policy mismatches name only plan
/// fields and identifiers. Policy messages may name the policy's own paths;
/// they are shown only to the local operator.
#[derive(Clone, PartialEq, Eq)]
pub struct Rejection {
    code: ErrorCode,
    at: String,
    message: String,
}

impl Rejection {
    /// A rejection of the whole input.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            at: String::new(),
            message: message.into(),
        }
    }

    /// The same rejection, located at `at` (prefixed to any deeper location).
    #[must_use]
    pub fn at(mut self, at: impl AsRef<str>) -> Self {
        let at = at.as_ref();
        if self.at.is_empty() {
            self.at = at.to_owned();
        } else if !at.is_empty() {
            let sep = if self.at.starts_with('[') { "" } else { "." };
            self.at = format!("{at}{sep}{}", self.at);
        }
        self
    }

    /// The stable code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// Where in the document the problem is (may be empty).
    pub fn location(&self) -> &str {
        &self.at
    }

    /// The human message, without the location.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.at.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.at, self.message)
        }
    }
}

impl fmt::Debug for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Rejection[{}]({self})", self.code)
    }
}

impl std::error::Error for Rejection {}
