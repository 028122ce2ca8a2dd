//! Where `glove run --agent` finds the harness: `--harness-path DIR`, else
//! the copy `glove setup` staged (`<state>/harnesses/bin/<name>`), else the
//! usual npm install locations. Each is inspected as `glove policy
//! detect` does (the harness's npm layout followed to the file that really
//! runs); the inherited `PATH` is never searched. A harness found in a
//! directory others can write is refused, not launched.

use super::AgentError;
use glove_types::codes::cli::{AGENT_NOT_INSTALLED, AGENT_UNSAFE_INSTALL};
use glove_types::harness::{Harness, Runs};
use std::path::{Path, PathBuf};

/// The usual global npm `bin` directories (`npm root -g` + `/.bin`).
const INSTALL_DIRS: &[&str] = &[
    "/usr/local/lib/node_modules/.bin",
    "/usr/lib/node_modules/.bin",
    "/opt/homebrew/lib/node_modules/.bin",
];

/// A harness found, and what the sandbox needs to run it.
#[derive(Debug)]
pub(crate) struct Found {
    /// The command that starts it (the interpreter first for a script).
    pub(crate) command: Vec<String>,
    /// Host paths bound read-only (at the same path).
    pub(crate) ro_binds: Vec<String>,
    /// Variables the staged closure needs.
    pub(crate) env: Vec<String>,
    /// Its version, as its package declares it.
    pub(crate) version: String,
    /// Where it was found, for the status line.
    pub(crate) from: String,
}

/// The directories looked in, in order, with what each is.
fn candidates(explicit: Option<&Path>) -> Vec<(PathBuf, &'static str)> {
    if let Some(p) = explicit {
        // A node_modules directory is taken for its `.bin`.
        let bin = p.join(".bin");
        return vec![if bin.is_dir() {
            (bin, "--harness-path")
        } else {
            (p.to_owned(), "--harness-path")
        }];
    }
    let mut out = Vec::new();
    if let Some(l) = crate::layout::Layout::current() {
        out.push((l.harness_root().join("bin"), "staged"));
    }
    if let Some(h) = std::env::var_os("HOME").filter(|h| Path::new(h).is_absolute()) {
        out.push((
            PathBuf::from(h).join(".npm-global/lib/node_modules/.bin"),
            "npm install -g",
        ));
    }
    for d in INSTALL_DIRS {
        out.push((PathBuf::from(d), "npm install -g"));
    }
    out
}

fn not_installed(h: &Harness, tried: &[PathBuf]) -> AgentError {
    let list: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
    let root = crate::layout::Layout::current()
        .map(|l| l.harness_root().display().to_string())
        .unwrap_or_else(|| "DIR".into());
    AgentError::new(
        AGENT_NOT_INSTALLED,
        format!(
            "{} ({}) was not found in {}",
            h.id,
            h.executable_name,
            list.join(", ")
        ),
        format!(
            "`npm install -g {pkg}` (found there), then optionally stage it: `glove policy stage --runtime {id} --source \"$(npm root -g)\" --directory {root} --yes`; or give --harness-path DIR",
            pkg = h.npm.package,
            id = h.id,
        ),
    )
}

/// The top-most `node_modules` directory above `p` (what an npm install's
/// packages are under), if any.
fn node_modules_root(p: &Path) -> Option<PathBuf> {
    p.ancestors()
        .filter(|a| a.file_name().is_some_and(|n| n == "node_modules"))
        .last()
        .map(Path::to_owned)
}

/// Finds `h`.
pub(crate) fn locate(h: &Harness, explicit: Option<&Path>) -> Result<Found, AgentError> {
    let staged_store = crate::layout::Layout::current()
        .map(|l| l.harness_root().join("store"))
        .and_then(|s| std::fs::canonicalize(s).ok());
    let mut tried = Vec::new();
    for (dir, what) in candidates(explicit) {
        tried.push(dir.clone());
        if !dir.join(h.executable_name).exists() {
            continue;
        }
        let Ok(seen) = glove_control::harness::detect(&dir) else {
            continue;
        };
        let Some(r) = seen["runtimes"]
            .as_array()
            .and_then(|a| a.iter().find(|r| r["runtime"] == h.id))
        else {
            continue;
        };
        let Some(exe) = r["executable"].as_str().map(PathBuf::from) else {
            continue;
        };
        if r["executable_safe"] != true {
            let problems: Vec<String> = r["executable_problems"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|p| p.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            return Err(AgentError::new(
                AGENT_UNSAFE_INSTALL,
                format!("{} at {}: {}", h.id, exe.display(), problems.join("; ")),
                "stage it into a protected directory with `glove policy stage` (or `glove setup --search-path`)",
            ));
        }
        let version = r["version"].as_str().unwrap_or("?").to_owned();
        let staged = staged_store
            .as_ref()
            .and_then(|s| exe.strip_prefix(s).ok().map(|rest| (s, rest)))
            .and_then(|(s, rest)| rest.components().next().map(|c| s.join(c)));
        let (ro_binds, env, interpreter) = match &staged {
            Some(store) => {
                let store_s = store.display().to_string();
                let node = store.join("node/bin/node");
                (
                    vec![store_s.clone()],
                    h.staging.environment(&h.npm.runs, &store_s),
                    node.is_file().then(|| node.display().to_string()),
                )
            }
            // An npm install: its node_modules tree. A bare executable
            // (no package around it): that file alone, never the directory
            // it sits in (which may be a home holding keys).
            None => (
                node_modules_root(&exe)
                    .unwrap_or_else(|| exe.clone())
                    .to_str()
                    .map(|d| vec![d.to_owned()])
                    .unwrap_or_default(),
                Vec::new(),
                None,
            ),
        };
        let mut command = Vec::new();
        if let Runs::NodeScript { interpreter: i } = h.npm.runs {
            command.push(interpreter.unwrap_or_else(|| i.to_owned()));
        }
        command.push(exe.display().to_string());
        return Ok(Found {
            command,
            ro_binds,
            env,
            version,
            from: format!("{what}, {}", dir.display()),
        });
    }
    Err(not_installed(h, &tried))
}
