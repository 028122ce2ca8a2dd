//! How a client finds the running service without flags.
//!
//! In order: `--runtime-dir` when given; the runtime directory named in the
//! `gloved` configuration `glove setup` wrote ([`Layout::gloved_config`]);
//! `$XDG_RUNTIME_DIR/glove`; and for root, `/run/glove`. The first of them
//! holding `gloved.sock` is used. When none does, the error says where it
//! looked and how to start a service.

use super::config::{default_runtime_dir, SOCKET_FILE};
use crate::layout::Layout;
use crate::protected::{self, Requirements};
use glove_types::codes::control::CONTROL_UNREACHABLE;
use glove_types::Rejection;
use std::path::{Path, PathBuf};

/// The runtime directory named by a `gloved` configuration file (read as a
/// protected file), when it names one.
pub fn configured_runtime_dir(config: &Path) -> Option<PathBuf> {
    let bytes = protected::read(
        config,
        Requirements {
            max_bytes: super::config::MAX_CONFIG_BYTES,
            mode: 0o600,
        },
    )
    .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    v.get("runtime_dir")
        .and_then(serde_json::Value::as_str)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

/// The places looked at, in order, without duplicates.
pub fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(d) = Layout::current().and_then(|l| configured_runtime_dir(&l.gloved_config())) {
        out.push(d);
    }
    out.push(default_runtime_dir());
    if rustix::process::geteuid().is_root() {
        out.push(PathBuf::from("/run/glove"));
    }
    let mut seen = Vec::new();
    out.retain(|p| {
        let fresh = !seen.contains(p);
        seen.push(p.clone());
        fresh
    });
    out
}

/// The runtime directory to use: `explicit`, else the first candidate with
/// a socket; an error naming every place looked when none has one.
pub fn runtime_dir(explicit: Option<&Path>) -> Result<PathBuf, Rejection> {
    if let Some(d) = explicit {
        return Ok(d.to_path_buf());
    }
    let places = candidates();
    if let Some(d) = places.iter().find(|d| d.join(SOCKET_FILE).exists()) {
        return Ok(d.clone());
    }
    let shown: Vec<String> = places
        .iter()
        .map(|p| p.join(SOCKET_FILE).display().to_string())
        .collect();
    let config = Layout::current()
        .map(|l| l.gloved_config().display().to_string())
        .unwrap_or_else(|| "FILE".into());
    Err(Rejection::new(
        CONTROL_UNREACHABLE,
        format!(
            "no gloved is running here (no socket at {}); start one with `glove daemon start` \
             (after `glove setup` and `glove daemon install`), or run `gloved --config {config}`",
            shown.join(" or ")
        ),
    ))
}
