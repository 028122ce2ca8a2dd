//! From `--source` to a closure: which files of an npm install a runtime
//! needs, found with the same layout `glove policy detect` uses (each
//! harness's [`Npm`], in its file under `glove_types::harness`).
//!
//! A harness whose native executable is in a platform package
//! ([`Runs::PlatformBinary`]) needs that package (the real ELF and its
//! siblings) and the main package's `package.json` (its version). A node
//! script ([`Runs::NodeScript`]) needs its package, its runtime
//! dependencies resolved as node resolves them, and the interpreter.

use super::closure::Tree;
use crate::harness::{kind, locate, manifest, platform_dir};
use glove_types::codes::stage::{
    STAGE_DEPENDENCY_BOUND, STAGE_DEPENDENCY_MISSING, STAGE_LINK_ESCAPES, STAGE_SOURCE_INVALID,
    STAGE_SOURCE_IN_HARNESS_HOME,
};
use glove_types::harness::{Harness, Npm, Runs};
use glove_types::Rejection;
use std::collections::{BTreeSet, VecDeque};
use std::path::{Component, Path, PathBuf};

/// Most packages in a dependency closure (pi's has a few hundred).
pub const MAX_PACKAGES: usize = 2_000;
/// Deepest dependency chain followed from the runtime's package.
pub const MAX_DEPENDENCY_DEPTH: usize = 64;

/// A runtime's files in an npm install.
pub(crate) struct Source {
    /// The canonical file that really runs.
    pub(crate) executable: PathBuf,
    /// The version the package declares.
    pub(crate) version: String,
    /// What to copy, and where in the closure.
    pub(crate) trees: Vec<Tree>,
    /// The executable's relative path in the closure.
    pub(crate) executable_in_closure: String,
}

fn invalid(m: String) -> Rejection {
    Rejection::new(STAGE_SOURCE_INVALID, m).at("source")
}

/// Refuses a path inside a harness's own state directory under `$HOME`
/// (`$HOME/.codex`, `$HOME/.claude`, …: each harness's
/// `staging.user_state`).
pub(crate) fn refuse_harness_home(p: &Path, home: Option<&Path>) -> Result<(), Rejection> {
    let Some(home) = home.filter(|h| h.is_absolute()) else {
        return Ok(());
    };
    let homes = [
        home.to_path_buf(),
        std::fs::canonicalize(home).unwrap_or_default(),
    ];
    for h in &homes {
        if let Ok(rest) = p.strip_prefix(h) {
            if let Some(Component::Normal(first)) = rest.components().next() {
                if first
                    .to_str()
                    .is_some_and(glove_types::harness::is_user_state_directory)
                {
                    return Err(Rejection::new(
                        STAGE_SOURCE_IN_HARNESS_HOME,
                        format!(
                            "{} is inside the harness home {}: stage from the npm install instead",
                            p.display(),
                            h.join(first).display()
                        ),
                    )
                    .at("source"));
                }
            }
        }
    }
    Ok(())
}

fn canonical(p: &Path) -> Result<PathBuf, Rejection> {
    std::fs::canonicalize(p).map_err(|e| invalid(format!("{}: {e}", p.display())))
}

/// The relative path of `p` under `base`, `/`-separated and UTF-8.
fn rel(p: &Path, base: &Path) -> Result<String, Rejection> {
    p.strip_prefix(base)
        .ok()
        .and_then(Path::to_str)
        .map(str::to_owned)
        .ok_or_else(|| {
            invalid(format!(
                "{} is not a UTF-8 path inside {}",
                p.display(),
                base.display()
            ))
        })
}

/// The file a `node_modules` directory's copy of `h` runs (through the
/// platform package, or the package's `bin` entry).
fn entry_in_node_modules(nm: &Path, h: &Harness) -> Result<PathBuf, Rejection> {
    let l = &h.npm;
    let root = nm.join(l.package);
    if let Some((platform, path)) = l.platform() {
        // The platform package, nested under the package or hoisted
        // beside it (or installed alone).
        let p = platform_dir(&root, l.package, platform)
            .or_else(|| Some(nm.join(platform)).filter(|p| p.is_dir()))
            .ok_or_else(|| invalid(format!("{} holds no {platform}", nm.display())))?;
        return canonical(&p.join(path));
    }
    let m = manifest(&root)
        .filter(|m| m["name"] == l.package)
        .ok_or_else(|| invalid(format!("{} holds no {}", nm.display(), l.package)))?;
    let bin = match &m["bin"] {
        serde_json::Value::String(s) => Some(s.as_str()),
        serde_json::Value::Object(o) => o.get(h.executable_name).and_then(|v| v.as_str()),
        _ => None,
    }
    .ok_or_else(|| {
        invalid(format!(
            "{} declares no bin {}",
            l.package, h.executable_name
        ))
    })?;
    canonical(&root.join(bin))
}

/// Resolves `source` (absolute) for the harness `h`.
pub(crate) fn resolve(
    h: &Harness,
    source: &Path,
    home: Option<&Path>,
) -> Result<Source, Rejection> {
    let l: &Npm = &h.npm;
    if !source.is_absolute()
        || source
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(invalid(
            "--source must be an absolute path without . or ..".into(),
        ));
    }
    refuse_harness_home(source, home)?;
    let c = canonical(source)?;
    refuse_harness_home(&c, home)?;
    let resolved = if c.is_dir() {
        entry_in_node_modules(&c, h)?
    } else {
        c
    };
    refuse_harness_home(&resolved, home)?;
    let loc = locate(&resolved, l);
    let problems = || loc.problems.join("; ");
    let version = loc
        .version
        .clone()
        .ok_or_else(|| invalid(format!("no version for {}: {}", l.package, problems())))?;
    match l.runs {
        Runs::PlatformBinary {
            package: platform,
            path,
        } => {
            let p = loc.platform_root.as_deref().ok_or_else(|| {
                invalid(format!(
                    "{} is not in an npm install of {platform}: {}",
                    resolved.display(),
                    problems()
                ))
            })?;
            let p = canonical(p)?;
            let executable = canonical(&p.join(path))?;
            if !executable.starts_with(&p) || kind(&executable).0 != "elf" {
                return Err(invalid(format!(
                    "{} is not an executable inside {}",
                    executable.display(),
                    p.display()
                )));
            }
            let mut trees = vec![Tree {
                src: p.clone(),
                dest: format!("node_modules/{platform}"),
                skip_node_modules: false,
            }];
            if let Some(root) = &loc.root {
                trees.push(Tree {
                    src: root.join("package.json"),
                    dest: format!("node_modules/{}/package.json", l.package),
                    skip_node_modules: false,
                });
            }
            Ok(Source {
                executable_in_closure: format!("node_modules/{platform}/{}", rel(&executable, &p)?),
                executable,
                version,
                trees,
            })
        }
        Runs::NodeScript { interpreter } => {
            let root = loc
                .root
                .as_deref()
                .ok_or_else(|| invalid(format!("no package for {}: {}", l.package, problems())))?;
            let root = canonical(root)?;
            let executable = loc.executable.clone().ok_or_else(|| invalid(problems()))?;
            if !executable.starts_with(&root) {
                return Err(invalid(format!(
                    "{} is not inside {}",
                    executable.display(),
                    root.display()
                )));
            }
            let nm = outermost_node_modules(&root).ok_or_else(|| {
                invalid(format!("{} is not inside a node_modules", root.display()))
            })?;
            let mut trees = Vec::new();
            for pkg in dependency_closure(&root, &nm)? {
                trees.push(Tree {
                    dest: format!("node_modules/{}", rel(&pkg, &nm)?),
                    src: pkg,
                    skip_node_modules: true,
                });
            }
            let node = canonical(Path::new(interpreter))?;
            trees.push(Tree {
                src: node,
                dest: "node/bin/node".into(),
                skip_node_modules: false,
            });
            Ok(Source {
                executable_in_closure: format!("node_modules/{}", rel(&executable, &nm)?),
                executable,
                version,
                trees,
            })
        }
    }
}

/// The outermost ancestor of `p` named `node_modules`.
fn outermost_node_modules(p: &Path) -> Option<PathBuf> {
    p.ancestors()
        .filter(|a| a.file_name().is_some_and(|n| n == "node_modules"))
        .last()
        .map(Path::to_path_buf)
}

/// A dependency name npm could install: `name` or `@scope/name`, no
/// dots-only or empty parts.
fn valid_name(n: &str) -> bool {
    let parts: Vec<&str> = n.split('/').collect();
    let ok = |p: &str| !p.is_empty() && p != "." && p != ".." && !p.contains('\\');
    match parts.as_slice() {
        [one] => ok(one) && !one.starts_with('@'),
        [scope, name] => scope.starts_with('@') && ok(scope) && ok(name),
        _ => false,
    }
}

/// Where node finds `name` from the package at `from`: each ancestor's
/// `node_modules` (nested first, then hoisted), never outside `nm`.
fn find(from: &Path, name: &str, nm: &Path) -> Option<PathBuf> {
    for a in from.ancestors() {
        if !a.starts_with(nm) && a != nm.parent()? {
            return None;
        }
        if a.file_name().is_some_and(|n| n == "node_modules") {
            continue;
        }
        let c = a.join("node_modules").join(name);
        if c.starts_with(nm) && manifest(&c).is_some_and(|m| m["name"] == name) {
            return Some(c);
        }
        if a == nm.parent()? {
            return None;
        }
    }
    None
}

/// The package at `root` and every package its `dependencies` (required),
/// `optionalDependencies` and `peerDependencies` (when installed) reach.
fn dependency_closure(root: &Path, nm: &Path) -> Result<Vec<PathBuf>, Rejection> {
    let mut seen = BTreeSet::from([root.to_path_buf()]);
    let mut queue = VecDeque::from([(root.to_path_buf(), 0usize)]);
    while let Some((pkg, depth)) = queue.pop_front() {
        let m = manifest(&pkg)
            .ok_or_else(|| invalid(format!("{} has no readable package.json", pkg.display())))?;
        for (field, required) in [
            ("dependencies", true),
            ("optionalDependencies", false),
            ("peerDependencies", false),
        ] {
            let Some(deps) = m[field].as_object() else {
                continue;
            };
            for name in deps.keys() {
                if !valid_name(name) {
                    return Err(invalid(format!(
                        "{} names the dependency {name:?}",
                        pkg.display()
                    )));
                }
                let Some(found) = find(&pkg, name, nm) else {
                    if required {
                        return Err(Rejection::new(
                            STAGE_DEPENDENCY_MISSING,
                            format!(
                                "{name}, a dependency of {}, is not installed inside {}",
                                pkg.display(),
                                nm.display()
                            ),
                        ));
                    }
                    continue;
                };
                if canonical(&found)? != found {
                    return Err(Rejection::new(
                        STAGE_LINK_ESCAPES,
                        format!("the package {} is a link", found.display()),
                    ));
                }
                if seen.insert(found.clone()) {
                    if seen.len() > MAX_PACKAGES || depth + 1 > MAX_DEPENDENCY_DEPTH {
                        return Err(Rejection::new(
                            STAGE_DEPENDENCY_BOUND,
                            format!(
                                "the closure of {} has more than {MAX_PACKAGES} packages or \
                                 is deeper than {MAX_DEPENDENCY_DEPTH}",
                                root.display()
                            ),
                        ));
                    }
                    queue.push_back((found, depth + 1));
                }
            }
        }
    }
    Ok(seen.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependency_names_are_checked() {
        for ok in ["chalk", "@scope/x", "a.b"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "..", "@scope", "a/b", "@s/..", "@s/x/y", "../x"] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_source_in_a_harness_home_is_refused() {
        let home = Path::new("/home/u");
        for p in ["/home/u/.codex/bin/codex", "/home/u/.claude"] {
            assert_eq!(
                refuse_harness_home(Path::new(p), Some(home))
                    .err()
                    .map(|e| e.code()),
                Some(STAGE_SOURCE_IN_HARNESS_HOME),
                "{p}"
            );
        }
        for p in ["/home/u/.cache/x", "/home/u/codex", "/srv/.codex/x"] {
            assert!(refuse_harness_home(Path::new(p), Some(home)).is_ok(), "{p}");
        }
    }

    /// Nested first, then hoisted; never above the outermost node_modules.
    #[test]
    fn dependencies_resolve_nested_first_then_hoisted() {
        let t = tempfile::tempdir().expect("tempdir");
        let nm = t.path().join("node_modules");
        let pkg = |dir: &Path, name: &str, deps: &str| {
            std::fs::create_dir_all(dir).expect("mkdir");
            std::fs::write(
                dir.join("package.json"),
                format!(r#"{{"name":"{name}","version":"1.0.0","dependencies":{{{deps}}}}}"#),
            )
            .expect("write");
        };
        pkg(&nm.join("@s/top"), "@s/top", r#""a":"1","b":"1""#);
        pkg(&nm.join("@s/top/node_modules/a"), "a", r#""b":"1""#);
        pkg(&nm.join("a"), "a", "");
        pkg(&nm.join("b"), "b", "");
        let got = dependency_closure(&nm.join("@s/top"), &nm).expect("closure");
        let got: Vec<String> = got.iter().map(|p| rel(p, &nm).expect("rel")).collect();
        assert_eq!(got, ["@s/top", "@s/top/node_modules/a", "b"]);
        // A missing required dependency is refused.
        pkg(&nm.join("b"), "b", r#""gone":"1""#);
        assert_eq!(
            dependency_closure(&nm.join("@s/top"), &nm)
                .err()
                .map(|e| e.code()),
            Some(STAGE_DEPENDENCY_MISSING)
        );
        // Outside the node_modules is not looked at.
        pkg(
            &t.path().join("node_modules/../other/node_modules/gone"),
            "gone",
            "",
        );
        assert_eq!(find(&nm.join("b"), "gone", &nm), None);
    }
}
