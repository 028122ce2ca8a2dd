//! Errors and results on the terminal, and the exit statuses.
//!
//! | status | meaning |
//! | --- | --- |
//! | 0 | success (the policy is valid, the plan was admitted, …) |
//! | 1 | the input was rejected: a validation rule, a protected-file check, an admission rule; the code says which |
//! | 2 | the command line is malformed |

use glove_types::Rejection;
use serde_json::json;

/// Exit status for success.
pub const EXIT_OK: i32 = 0;
/// Exit status for a rejected input.
pub const EXIT_REJECTED: i32 = 1;
/// Exit status for a malformed command line.
pub const EXIT_USAGE: i32 = 2;

/// `error[<code>]: <location>: <message>`.
pub fn error_line(e: &Rejection) -> String {
    format!("error[{}]: {e}", e.code())
}

/// The JSON object for an error: `{"code", "location", "message"}`.
pub fn error_json(e: &Rejection) -> serde_json::Value {
    json!({
        "code": e.code().as_str(),
        "location": e.location(),
        "message": e.message(),
    })
}

/// Prints a JSON value on stdout, one line.
pub fn print_json(v: &serde_json::Value) {
    // A reader that went away (`… | head`) is not an error of ours.
    use std::io::Write as _;
    let _ = writeln!(std::io::stdout().lock(), "{v}");
}

/// The user's state directory: `$XDG_STATE_HOME`, else
/// `$HOME/.local/state` (each only when absolute).
pub fn state_home() -> Option<std::path::PathBuf> {
    use std::path::{Path, PathBuf};
    match std::env::var_os("XDG_STATE_HOME").filter(|v| Path::new(v).is_absolute()) {
        Some(v) => Some(PathBuf::from(v)),
        None => std::env::var_os("HOME")
            .filter(|v| Path::new(v).is_absolute())
            .map(|h| PathBuf::from(h).join(".local/state")),
    }
}
