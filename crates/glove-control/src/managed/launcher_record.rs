//! The durable record of each started session's launcher, for recovery.

use super::Runtime;
use crate::process;
use glove_types::codes::control::*;
use glove_types::ids::SessionId;
use glove_types::{Rejection, Sha256Digest};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

impl Runtime {
    pub(super) fn launcher_file(&self, id: &SessionId) -> PathBuf {
        self.cfg.materialization_root.join(format!(
            "launcher-{}.json",
            &Sha256Digest::of(id.as_str().as_bytes()).to_hex()[..32]
        ))
    }

    /// Durably records the launcher's identity for `id` (file and
    /// directory synced).
    pub(super) fn record_launcher(&self, id: &SessionId, pid: u32) -> Result<(), Rejection> {
        let bad = |m: String| Rejection::new(SESSION_LAUNCH_FAILED, m);
        let ident = glove_sandbox::identity::ProcessIdentity::of(pid as i32)
            .map_err(|e| bad(format!("launcher identity: {e}")))?;
        let body = json!({
            "session_id": id.as_str(),
            "boot_id": ident.boot_id,
            "pid": ident.pid,
            "start_time_ticks": ident.start_time_ticks,
        });
        let name = self
            .launcher_file(id)
            .file_name()
            .map(std::ffi::OsStr::to_owned)
            .ok_or_else(|| bad("launcher record name".into()))?;
        let root =
            crate::placement::open_dir(&self.cfg.materialization_root, "the materialization root")
                .map_err(|r| {
                    tracing::warn!(
                        code = r.code().as_str(),
                        reason = r.message(),
                        "launcher record"
                    );
                    bad("launcher record: cannot open the materialization root".into())
                })?;
        glove_journal::atomic::write_file(
            rustix::fd::AsFd::as_fd(&root),
            &name,
            body.to_string().as_bytes(),
        )
        .map_err(|e| bad(format!("launcher record: {e}")))
    }

    pub(super) fn forget_launcher(&self, id: &SessionId) {
        let _ = std::fs::remove_file(self.launcher_file(id));
    }

    /// SIGKILLs the recorded launcher of `id` if it is still that process
    /// (boot id, pid, start time); true when it was killed.
    /// Kills the session's recorded launcher if it is still that process,
    /// then removes the session cgroup it can no longer remove itself;
    /// `Some(directories removed)` when it was killed.
    pub(super) fn kill_recorded_launcher(&self, id: &SessionId) -> Option<usize> {
        let Ok(text) = std::fs::read(self.launcher_file(id)) else {
            return None;
        };
        let Ok(v) = serde_json::from_slice::<Value>(&text) else {
            return None;
        };
        let pid = v["pid"]
            .as_i64()
            .and_then(|p| i32::try_from(p).ok())
            .unwrap_or(0);
        // Through a pidfd opened before the check (see `process`), with a
        // bounded wait for it to be gone (the sandbox init dies with it).
        let killed = process::kill_if_same(
            &process::PidFds,
            pid,
            |now| {
                v["session_id"] == id.as_str()
                    && v["boot_id"] == now.boot_id.as_str()
                    && v["start_time_ticks"].as_u64() == Some(now.start_time_ticks)
            },
            Duration::from_secs(1),
        );
        if !matches!(killed, process::Killed::Signalled { .. }) {
            return None;
        }
        Some(glove_sandbox::cgroup::remove_abandoned(
            pid,
            Duration::from_secs(1),
        ))
    }
}
