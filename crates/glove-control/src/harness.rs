//! What is installed in a search directory: the registered agent harnesses
//! under their executable names, followed through their npm layouts (each
//! harness's [`Npm`], in its file under `glove_types::harness`) to the
//! file that really runs, with the version their package declares and
//! whether the directories are safe to launch from.
//!
//! This is setup inspection (`glove policy detect`), not launch authority:
//! it follows links and reads package manifests, bounded; nothing it
//! reports is trusted by the runtime.

use glove_types::codes::cli::CLI_INVALID_ARGUMENT;
use glove_types::harness::{Harness, Npm};
use glove_types::Rejection;
use serde_json::{json, Value};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// Largest package manifest read.
const MAX_MANIFEST_BYTES: u64 = 1 << 20;
/// How far up from an executable a package root is looked for.
const MAX_PACKAGE_DEPTH: usize = 8;

/// Why `dir` and its ancestors are not safe to launch from (empty: safe):
/// each must be owned by root or by this user and writable by nobody else.
/// An unmapped owner (the overflow uid) is not root.
pub fn unsafe_reasons(dir: &Path) -> Vec<String> {
    let me = rustix::process::geteuid().as_raw();
    let mut out = Vec::new();
    let mut cur = Some(dir);
    while let Some(d) = cur {
        match std::fs::symlink_metadata(d) {
            Err(e) => out.push(format!("{}: {e}", d.display())),
            Ok(m) => {
                if m.uid() != 0 && m.uid() != me {
                    out.push(format!("{} is owned by uid {}", d.display(), m.uid()));
                }
                if m.mode() & 0o020 != 0 {
                    out.push(format!("{} is group-writable", d.display()));
                }
                if m.mode() & 0o002 != 0 {
                    out.push(format!("{} is writable by others", d.display()));
                }
            }
        }
        cur = d.parent();
    }
    out
}

fn file_start(p: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut f = std::fs::File::open(p).ok()?;
    let mut b = vec![0u8; 256];
    let n = f.read(&mut b).ok()?;
    b.truncate(n);
    Some(b)
}

/// `elf`, `script` (with its interpreter line) or `other`.
pub(crate) fn kind(p: &Path) -> (&'static str, Option<String>) {
    match file_start(p) {
        Some(b) if b.starts_with(b"\x7fELF") => ("elf", None),
        Some(b) if b.starts_with(b"#!") => {
            let line = b[2..].split(|c| *c == b'\n').next().unwrap_or(&[]);
            let line = String::from_utf8_lossy(line).trim().to_owned();
            ("script", Some(line))
        }
        _ => ("other", None),
    }
}

pub(crate) fn manifest(dir: &Path) -> Option<Value> {
    let p = dir.join("package.json");
    let m = std::fs::metadata(&p).ok()?;
    if !m.is_file() || m.len() > MAX_MANIFEST_BYTES {
        return None;
    }
    serde_json::from_slice(&std::fs::read(p).ok()?).ok()
}

/// The package root of `package` at or above `file`.
fn package_root(file: &Path, package: &str) -> Option<PathBuf> {
    let mut cur = file.parent();
    for _ in 0..MAX_PACKAGE_DEPTH {
        let d = cur?;
        if manifest(d).is_some_and(|m| m["name"] == package) {
            return Some(d.to_path_buf());
        }
        cur = d.parent();
    }
    None
}

/// The `node_modules` directory holding a package root.
pub(crate) fn node_modules_of(root: &Path, package: &str) -> Option<PathBuf> {
    let up = Path::new(package).components().count();
    let mut d = root;
    for _ in 0..up {
        d = d.parent()?;
    }
    Some(d.to_path_buf())
}

/// A platform package: nested under the package, or hoisted beside it.
pub(crate) fn platform_dir(root: &Path, package: &str, platform: &str) -> Option<PathBuf> {
    let nested = root.join("node_modules").join(platform);
    if nested.is_dir() {
        return Some(nested);
    }
    let hoisted = node_modules_of(root, package)?.join(platform);
    hoisted.is_dir().then_some(hoisted)
}

/// Where a resolved file (what a `.bin` entry, or a path given by hand,
/// leads to) sits in a harness's npm layout.
pub(crate) struct Located {
    /// The npm package's root, when the file is inside it or inside its
    /// platform package with the package beside it.
    pub(crate) root: Option<PathBuf>,
    /// The platform package's root, when the layout has one and it is
    /// installed (nested under the package, hoisted beside it, or the
    /// package the file itself is in).
    pub(crate) platform_root: Option<PathBuf>,
    /// The file that really runs.
    pub(crate) executable: Option<PathBuf>,
    /// The version the package (or, without it, the platform package)
    /// declares.
    pub(crate) version: Option<String>,
    /// What is missing or odd, for a person to read.
    pub(crate) problems: Vec<String>,
}

/// Follows `resolved` (a canonical path) through `npm`'s layout.
pub(crate) fn locate(resolved: &Path, l: &Npm) -> Located {
    let mut problems = Vec::new();
    let mut root = package_root(resolved, l.package);
    // A file inside the platform package (a staged closure, or the real
    // executable named by hand): the package, if installed, is beside it.
    // The platform package is found by its directory, not its manifest's
    // name (codex's is an npm alias named like the package itself).
    let own_platform = l.platform().and_then(|(platform, _)| {
        let p = resolved
            .ancestors()
            .skip(1)
            .take(MAX_PACKAGE_DEPTH)
            .find(|d| d.ends_with(platform) && manifest(d).is_some())?;
        Some((platform, p.to_path_buf()))
    });
    if let Some((platform, p)) = &own_platform {
        if root.is_none() || root.as_ref() == Some(p) {
            root = node_modules_of(p, platform)
                .map(|nm| nm.join(l.package))
                .filter(|r| manifest(r).is_some_and(|m| m["name"] == l.package));
        }
    }
    let platform_root = match (&root, l.platform(), &own_platform) {
        (_, _, Some((_, p))) => Some(p.clone()),
        (Some(root), Some((platform, _)), None) => platform_dir(root, l.package, platform),
        _ => None,
    };
    let version = root
        .as_deref()
        .or(platform_root.as_deref())
        .and_then(manifest)
        .and_then(|m| m["version"].as_str().map(str::to_owned));
    let executable = match (&root, l.platform(), kind(resolved).0) {
        // Already the real thing (claude-code's hard-linked `bin/*.exe`,
        // opencode's linked binary, or an executable outside npm).
        (_, _, "elf") => Some(resolved.to_path_buf()),
        (Some(_), Some((platform, path)), _) => match &platform_root {
            Some(p) => Some(p.join(path)).filter(|e| e.is_file()).or_else(|| {
                problems.push(format!("{platform} has no {path}"));
                None
            }),
            None => {
                problems.push(format!("the platform package {platform} is not installed"));
                None
            }
        },
        (_, None, _) => Some(resolved.to_path_buf()),
        (None, Some(_), _) => {
            problems.push(format!(
                "{} is not inside an npm install of {}",
                resolved.display(),
                l.package
            ));
            None
        }
    };
    if root.is_none() && platform_root.is_none() {
        problems.push("no package manifest: version unknown".into());
    }
    Located {
        root,
        platform_root,
        executable,
        version,
        problems,
    }
}

fn detect_one(dir: &Path, h: &Harness) -> Value {
    let entry = dir.join(h.executable_name);
    let Ok(resolved) = std::fs::canonicalize(&entry) else {
        return json!({"runtime": h.id, "name": h.executable_name, "installed": false});
    };
    let Located {
        root,
        executable,
        version,
        problems,
        ..
    } = locate(&resolved, &h.npm);
    let (exe_kind, interpreter) = executable.as_deref().map_or(("missing", None), kind);
    let exe_problems = executable
        .as_deref()
        .and_then(Path::parent)
        .map(unsafe_reasons)
        .unwrap_or_default();
    json!({
        "runtime": h.id,
        "name": h.executable_name,
        "installed": true,
        "entry": entry.display().to_string(),
        "resolved": resolved.display().to_string(),
        "package": root.as_ref().map(|_| h.npm.package),
        "version": version,
        "executable": executable.as_ref().map(|e| e.display().to_string()),
        "executable_kind": exe_kind,
        "interpreter": interpreter,
        "executable_safe": executable.is_some() && exe_problems.is_empty(),
        "executable_problems": exe_problems,
        "problems": problems,
    })
}

/// Inspects `search_path` (absolute, a directory) for every registered
/// harness.
pub fn detect(search_path: &Path) -> Result<Value, Rejection> {
    let bad = |m: String| Rejection::new(CLI_INVALID_ARGUMENT, m).at("search_path");
    if !search_path.is_absolute()
        || search_path
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(bad(
            "--search-path must be an absolute path without . or ..".into(),
        ));
    }
    let dir = std::fs::canonicalize(search_path)
        .map_err(|e| bad(format!("{}: {e}", search_path.display())))?;
    if !dir.is_dir() {
        return Err(bad(format!("{} is not a directory", search_path.display())));
    }
    let problems = unsafe_reasons(&dir);
    Ok(json!({
        "search_path": dir.display().to_string(),
        "search_path_safe": problems.is_empty(),
        "search_path_problems": problems,
        "runtimes": glove_types::harness::all().map(|h| detect_one(&dir, h)).collect::<Vec<_>>(),
    }))
}
