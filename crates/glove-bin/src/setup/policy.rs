//! The starter session policy: a `shell` template for `/bin/sh`, one
//! template per agent harness found on the `--search-path` directories
//! (staged into the state directory first, so the policy never points at
//! an npm tree that may change), two resource profiles, nothing else
//! allowed. Validated before it is written.

use super::files::{Action, Item};
use glove_control::stage::{self, NoProgress, Progress};
use glove_types::codes::cli::CLI_INVALID_ARGUMENT;
use glove_types::policy::{generate_template, GenerateTarget, TemplateRequest, ValidatedPolicy};
use glove_types::{canon, Rejection};
use serde_json::{json, Value};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// The template every starter policy has: a shell.
pub(super) const SHELL_TEMPLATE: &str = "shell";

fn bad(m: String) -> Rejection {
    Rejection::new(CLI_INVALID_ARGUMENT, m).at("search_path")
}

fn utf8(p: &Path) -> Result<String, Rejection> {
    p.to_str()
        .map(str::to_owned)
        .ok_or_else(|| bad(format!("{} is not UTF-8", p.display())))
}

fn template(req: TemplateRequest) -> Result<Value, Rejection> {
    let bytes = generate_template(&req)?;
    serde_json::from_slice(&bytes).map_err(|e| bad(format!("generated template: {e}")))
}

/// The shell template: `/bin/sh` (its real path), no arguments.
fn shell() -> Result<Value, Rejection> {
    let sh = std::fs::canonicalize("/bin/sh").map_err(|e| bad(format!("/bin/sh: {e}")))?;
    template(TemplateRequest {
        template_id: SHELL_TEMPLATE.into(),
        runtime_id: SHELL_TEMPLATE.into(),
        sandbox_backend: "linux_production".into(),
        target: GenerateTarget::Pinned(utf8(&sh)?),
        arguments: vec![],
        environment: vec![
            "PATH=/usr/local/bin:/usr/bin:/bin".into(),
            "TERM=xterm-256color".into(),
        ],
        read_only_paths: vec![],
        allowed_path_aliases: vec![],
        allowed_projection_destinations: vec![],
    })
}

/// Stages every harness installed in `search_paths` (the first directory
/// that has one wins) into `harness_root`, and generates its template.
/// A bar on a terminal while copying.
pub(super) fn stage_harnesses(
    search_paths: &[PathBuf],
    harness_root: &Path,
    json_output: bool,
    items: &mut Vec<Item>,
) -> Result<Vec<Value>, Rejection> {
    let mut templates: Vec<Value> = Vec::new();
    let mut done: Vec<String> = Vec::new();
    let bin = harness_root.join("bin");
    for dir in search_paths {
        let found = glove_control::harness::detect(dir)?;
        let runtimes = found.get("runtimes").and_then(Value::as_array);
        for r in runtimes.into_iter().flatten() {
            let installed = r.get("installed").and_then(Value::as_bool) == Some(true);
            let id = r.get("runtime").and_then(Value::as_str).unwrap_or("");
            let Some(entry) = r.get("entry").and_then(Value::as_str) else {
                continue;
            };
            if !installed || done.iter().any(|d| d == id) {
                continue;
            }
            let progress: Box<dyn Progress> = if !json_output && std::io::stderr().is_terminal() {
                eprintln!("staging {id} from {entry}");
                Box::new(crate::stage::bar())
            } else {
                Box::new(NoProgress)
            };
            let req = stage::Request {
                runtime: id.to_owned(),
                source: PathBuf::from(entry),
                directory: harness_root.to_path_buf(),
                home: std::env::var_os("HOME").map(Into::into),
                glove: std::env::current_exe().ok(),
            };
            let report = stage::plan(&req, progress.as_ref())?.execute(progress.as_ref())?;
            drop(progress);
            templates.push(template(TemplateRequest {
                template_id: id.to_owned(),
                runtime_id: id.to_owned(),
                sandbox_backend: "linux_production".into(),
                target: GenerateTarget::Discovery(vec![utf8(&bin)?]),
                arguments: vec![],
                environment: report.environment.clone(),
                read_only_paths: report.read_only_paths.clone(),
                allowed_path_aliases: vec![],
                allowed_projection_destinations: vec![],
            })?);
            items.push(Item {
                what: "staged harness",
                path: report.store.clone(),
                action: if report.already_stored {
                    Action::Unchanged
                } else {
                    Action::Created
                },
                note: Some(format!("{id} {} ({} files)", report.version, report.files)),
            });
            done.push(id.to_owned());
        }
    }
    Ok(templates)
}

/// The starter policy's canonical bytes, validated.
pub(super) fn starter(harness_templates: Vec<Value>) -> Result<Vec<u8>, Rejection> {
    let mut templates = vec![shell()?];
    templates.extend(harness_templates);
    templates.sort_by(|a, b| {
        let id = |v: &Value| v["runtime_template_id"].as_str().unwrap_or("").to_owned();
        id(a).cmp(&id(b))
    });
    let policy = json!({
        "schema_version": 1,
        "revision": 1,
        // 25 hours: a plan may wait that long for its start.
        "max_plan_ttl_ms": 90_000_000u64,
        "runtime_templates": templates,
        "path_aliases": [],
        "library_projection_destinations": [],
        "resource_profiles": [
            {
                "profile_id": "small",
                "cpu_time_ms": 60_000,
                "memory_bytes": 536_870_912u64,
                "pids": 128,
                "wall_time_ms": 600_000,
                "disk_bytes": 268_435_456u64,
                "terminal_output_bytes": 16_777_216u64,
            },
            {
                "profile_id": "standard",
                "cpu_time_ms": 3_600_000u64,
                "memory_bytes": 4_294_967_296u64,
                "pids": 1024,
                "wall_time_ms": 7_200_000u64,
                "disk_bytes": 4_294_967_296u64,
                "terminal_output_bytes": 67_108_864u64,
            },
        ],
        "egress_policy_ids": [],
        "tool_policy_ids": [],
        "secret_handles": [],
    });
    let bytes = canon::to_canonical(&policy)?;
    ValidatedPolicy::from_json(&bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_starter_policy_validates_and_has_a_shell() {
        let bytes = super::starter(vec![]).expect("starter");
        let p = glove_types::policy::ValidatedPolicy::from_json(&bytes).expect("valid");
        assert_eq!(p.revision(), 1);
        assert!(String::from_utf8_lossy(&bytes).contains("\"runtime_template_id\":\"shell\""));
    }
}
