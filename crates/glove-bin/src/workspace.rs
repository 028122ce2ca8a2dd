//! `glove exec --workspace` and `glove run --workspace`: the flags read
//! into the assembly's retained part
//! ([`glove_control::assembly::retained`]), the stage's report rendered,
//! and where local stages are kept.

use crate::exec::ExecArgs;
use glove_control::assembly::retained::{RetainedInput, RetainedReport};
use glove_control::stages::StageStore;
use glove_types::codes::retained::RETAINED_UNSUPPORTED;
use glove_types::ids::SessionId;
use glove_types::Rejection;
use std::path::PathBuf;
use std::sync::Arc;

/// How `--workspace` stages its directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkspaceMode {
    /// An ext4 image kept after the session, for `glove diff` and `glove
    /// apply`.
    Retained,
    /// A throw-away copy in memory, discarded at the end.
    Ephemeral,
}

/// The alias of the one workspace of `glove exec` and `glove run`.
pub const ALIAS: &str = "workspace";

/// Where the workspace appears inside the sandbox.
pub const TARGET: &str = "/workspace";

fn mode(a: &ExecArgs) -> WorkspaceMode {
    a.workspace_mode.unwrap_or(WorkspaceMode::Retained)
}

/// The directory copied into `/workspace` in memory: `--rw-copy`, or
/// `--workspace` in ephemeral mode.
pub fn ephemeral_copy(a: &ExecArgs) -> Option<String> {
    match (&a.workspace, mode(a)) {
        (Some(dir), WorkspaceMode::Ephemeral) => Some(dir.display().to_string()),
        _ => a.rw_copy.clone(),
    }
}

/// Where this user's stages are kept: `$GLOVE_STAGE_DIR`, else
/// `$XDG_STATE_HOME/glove/stages`, else `$HOME/.local/state/glove/stages`
/// (made with mode 0700).
pub fn stage_dir() -> Result<PathBuf, Rejection> {
    if let Some(d) = std::env::var_os("GLOVE_STAGE_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d));
    }
    let base = crate::report::state_home().ok_or_else(|| {
        Rejection::new(
            glove_types::codes::retained::RETAINED_STAGE_IO,
            "neither GLOVE_STAGE_DIR, XDG_STATE_HOME nor HOME is set",
        )
    })?;
    let glove = base.join("glove");
    let _ = std::fs::create_dir_all(&base);
    match std::fs::create_dir(&glove) {
        Ok(()) => {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&glove, std::fs::Permissions::from_mode(0o700));
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(_) => {}
    }
    Ok(glove.join("stages"))
}

/// Opens this user's stage directory.
pub fn store() -> Result<StageStore, Rejection> {
    StageStore::open(&stage_dir()?)
}

/// The retained part's input from `--workspace DIR` (retained mode), or
/// `None`. When this host cannot make retained images, the error says why
/// and offers the ephemeral mode.
pub fn retained_input(
    a: &ExecArgs,
    _session_id: &SessionId,
) -> Result<Option<RetainedInput>, Rejection> {
    let Some(dir) = &a.workspace else {
        return Ok(None);
    };
    if mode(a) != WorkspaceMode::Retained {
        return Ok(None);
    }
    if let Err(why) = glove_control::assembly::retained::supported() {
        return Err(Rejection::new(
            RETAINED_UNSUPPORTED,
            format!(
                "a retained workspace is not available here: {why}; \
                 --workspace-mode ephemeral gives a throw-away copy instead"
            ),
        ));
    }
    let source = std::path::absolute(dir).map_err(|e| {
        Rejection::new(
            glove_types::codes::retained::RETAINED_SOURCE_INVALID,
            format!("{}: {e}", dir.display()),
        )
    })?;
    let id = glove_sandbox::launch::PRIVILEGED_AGENT_HOST_ID;
    Ok(Some(RetainedInput {
        store: Arc::new(store()?),
        alias: ALIAS.into(),
        target: TARGET.into(),
        source: Some(source),
        source_fd: None,
        bytes: a
            .disk
            .unwrap_or(glove_sandbox::profile::DEFAULT_LIMITS.disk_bytes),
        owner: (id, id),
    }))
}

/// The stage as the outcome record shows it.
pub fn summary_json(r: &RetainedReport) -> serde_json::Value {
    match &r.frozen {
        Ok(rec) => serde_json::json!({
            "alias": r.alias,
            "session_id": rec.session_id,
            "state": "frozen",
            "baseline_digest": rec.baseline_digest,
            "final_digest": rec.final_digest,
            "changed": rec.final_digest.as_deref() != Some(rec.baseline_digest.as_str()),
        }),
        Err(e) => serde_json::json!({
            "alias": r.alias,
            "state": "error",
            "error": { "code": e.code().as_str(), "message": e.detail() },
        }),
    }
}

/// The stage in one line, with what to run next.
pub fn summary_line(r: &RetainedReport) -> String {
    match &r.frozen {
        Ok(rec) if rec.final_digest.as_deref() == Some(rec.baseline_digest.as_str()) => format!(
            "workspace: unchanged (stage {} kept; `glove stages rm {}` removes it)",
            rec.session_id, rec.session_id
        ),
        Ok(rec) => format!(
            "workspace: changed; review with `glove diff {id}`, take with `glove apply {id}`",
            id = rec.session_id
        ),
        Err(e) => format!("workspace: error[{}]: {}", e.code().as_str(), e.detail()),
    }
}
