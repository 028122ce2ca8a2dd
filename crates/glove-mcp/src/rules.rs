//! Argument rules: what the profile demands of one named argument of a
//! tool call, checked before the call is forwarded.
//!
//! Every constraint a rule states must hold (they combine with "and"):
//!
//! | member | the argument must be |
//! | --- | --- |
//! | `required: true` | present (otherwise an absent argument passes every rule) |
//! | `equals` | exactly this JSON value |
//! | `one_of` | one of these JSON values (1-256) |
//! | `prefix` | a string starting with this |
//! | `pattern` | a string the regular expression matches **whole** (`^(?:…)$`; the `regex` crate's syntax, linear time, at most 1 KiB of pattern and 1 MiB compiled) |
//! | `range` | a number within `{min, max}` (inclusive, integers in the profile) |
//! | `length` | a string of `{min, max}` Unicode scalar values or an array of that many elements |
//! | `path` | a string naming a path under one of `roots`, see below |
//! | `items` | an array whose every element satisfies this nested rule (at most 4 deep) |
//!
//! **Paths.** The value must already be in normal form: absolute, no
//! empty, `.` or `..` component, no trailing `/`, no NUL, at most 4096
//! bytes — nothing is resolved lexically, so nothing can be smuggled past
//! the check by spelling. It must be one of `roots` or lie beneath one
//! (component-wise). With `no_symlinks: true` every existing component
//! from the root down to the path itself is checked on the host with
//! `lstat`, and a symbolic link anywhere refuses the call; a component
//! that does not exist ends the walk (a file about to be created). The
//! check is made at call time: a link created between the check and the
//! upstream's use of the path is not seen (the upstream runs with the
//! operator's authority; server-filesystem resolves links itself).

use regex::{Regex, RegexBuilder};
use serde_json::Value;
use std::path::Path;

/// Longest pattern source.
pub const MAX_PATTERN_BYTES: usize = 1024;
/// Largest compiled pattern.
pub const MAX_PATTERN_COMPILED: usize = 1 << 20;
/// Most values in `one_of`.
pub const MAX_ONE_OF: usize = 256;
/// Most roots of a path rule.
pub const MAX_ROOTS: usize = 16;
/// Deepest nesting of `items` rules.
pub const MAX_ITEMS_DEPTH: usize = 4;

/// One argument's rule (see the module docs).
#[derive(Clone, Debug)]
pub struct ArgumentRule {
    pub(crate) required: bool,
    pub(crate) equals: Option<Value>,
    pub(crate) one_of: Option<Vec<Value>>,
    pub(crate) prefix: Option<String>,
    pub(crate) pattern: Option<Regex>,
    pub(crate) range: Option<(Option<i64>, Option<i64>)>,
    pub(crate) length: Option<(Option<u64>, Option<u64>)>,
    pub(crate) path: Option<PathRule>,
    pub(crate) items: Option<Box<ArgumentRule>>,
}

/// A path rule: the roots and whether links are refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathRule {
    pub(crate) roots: Vec<String>,
    pub(crate) no_symlinks: bool,
}

impl PathRule {
    /// The roots.
    pub fn roots(&self) -> &[String] {
        &self.roots
    }
}

/// Compiles a pattern for whole-value matching, bounded.
pub(crate) fn compile_pattern(src: &str) -> Result<Regex, String> {
    if src.len() > MAX_PATTERN_BYTES {
        return Err(format!("a pattern is at most {MAX_PATTERN_BYTES} bytes"));
    }
    RegexBuilder::new(&format!("^(?:{src})$"))
        .size_limit(MAX_PATTERN_COMPILED)
        .dfa_size_limit(MAX_PATTERN_COMPILED)
        .nest_limit(32)
        .build()
        .map_err(|e| match e {
            regex::Error::CompiledTooBig(_) => "the pattern compiles too large".to_owned(),
            _ => "the pattern does not compile".to_owned(),
        })
}

/// Whether `p` is an absolute path in normal form (see the module docs);
/// `/` itself is one.
pub(crate) fn is_normal_path(p: &str) -> bool {
    if p == "/" {
        return true;
    }
    let Some(rest) = p.strip_prefix('/') else {
        return false;
    };
    p.len() <= glove_types::paths::MAX_PATH_LEN
        && !p.contains('\0')
        && rest
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

/// Whether `inner` is `outer` or beneath it, component-wise.
pub(crate) fn is_under(inner: &str, outer: &str) -> bool {
    outer == "/"
        || inner == outer
        || (inner.starts_with(outer) && inner.as_bytes().get(outer.len()) == Some(&b'/'))
}

impl PathRule {
    fn check(&self, v: &Value) -> Result<(), String> {
        let Some(p) = v.as_str() else {
            return Err("a path must be a string".into());
        };
        if !is_normal_path(p) {
            return Err(
                "a path must be absolute and normal (no empty, `.` or `..` component, no trailing `/`)"
                    .into(),
            );
        }
        let Some(root) = self.roots.iter().find(|r| is_under(p, r)) else {
            return Err("the path is not under an allowed root".into());
        };
        if self.no_symlinks {
            no_links_below(root, p)?;
        }
        Ok(())
    }
}

/// `lstat`s `root` and every component of `p` beneath it.
fn no_links_below(root: &str, p: &str) -> Result<(), String> {
    let mut at = root.to_owned();
    let rest = p.get(root.len()..).unwrap_or("");
    let comps = std::iter::once("").chain(rest.split('/').filter(|c| !c.is_empty()));
    for c in comps {
        if !c.is_empty() {
            if !at.ends_with('/') {
                at.push('/');
            }
            at.push_str(c);
        }
        match std::fs::symlink_metadata(Path::new(&at)) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err("a component of the path is a symbolic link".into())
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(_) => return Err("a component of the path cannot be examined".into()),
        }
    }
    Ok(())
}

impl ArgumentRule {
    /// Checks a present argument; the error says which constraint failed,
    /// never the value.
    pub(crate) fn check(&self, v: &Value) -> Result<(), String> {
        if let Some(e) = &self.equals {
            if e != v {
                return Err("is not the value the profile requires (`equals`)".into());
            }
        }
        if let Some(set) = &self.one_of {
            if !set.contains(v) {
                return Err("is not one of the allowed values (`one_of`)".into());
            }
        }
        if let Some(pre) = &self.prefix {
            if !v.as_str().is_some_and(|s| s.starts_with(pre.as_str())) {
                return Err("is not a string with the required prefix (`prefix`)".into());
            }
        }
        if let Some(re) = &self.pattern {
            if !v.as_str().is_some_and(|s| re.is_match(s)) {
                return Err("is not a string matching the pattern (`pattern`)".into());
            }
        }
        if let Some((min, max)) = self.range {
            let Some(x) = v.as_f64() else {
                return Err("is not a number (`range`)".into());
            };
            // Profile bounds are integers within ±2^53: exact as f64.
            let out = min.is_some_and(|m| x < m as f64) || max.is_some_and(|m| x > m as f64);
            if out {
                return Err("is outside the allowed range (`range`)".into());
            }
        }
        if let Some((min, max)) = self.length {
            let n = match v {
                Value::String(s) => s.chars().count() as u64,
                Value::Array(a) => a.len() as u64,
                _ => return Err("is not a string or an array (`length`)".into()),
            };
            if min.is_some_and(|m| n < m) || max.is_some_and(|m| n > m) {
                return Err("has a length outside the allowed bounds (`length`)".into());
            }
        }
        if let Some(p) = &self.path {
            p.check(v).map_err(|e| format!("{e} (`path`)"))?;
        }
        if let Some(items) = &self.items {
            let Some(a) = v.as_array() else {
                return Err("is not an array (`items`)".into());
            };
            for (i, item) in a.iter().enumerate() {
                items.check(item).map_err(|e| format!("element {i} {e}"))?;
            }
        }
        Ok(())
    }

    /// Every root of a path rule here or in nested `items`.
    pub(crate) fn path_roots(&self, out: &mut Vec<String>) {
        if let Some(p) = &self.path {
            out.extend(p.roots.iter().cloned());
        }
        if let Some(i) = &self.items {
            i.path_roots(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule() -> ArgumentRule {
        ArgumentRule {
            required: false,
            equals: None,
            one_of: None,
            prefix: None,
            pattern: None,
            range: None,
            length: None,
            path: None,
            items: None,
        }
    }

    #[test]
    fn each_constraint() {
        let r = ArgumentRule {
            pattern: Some(compile_pattern("[a-z]+").expect("compiles")),
            ..rule()
        };
        assert!(r.check(&json!("abc")).is_ok());
        assert!(r.check(&json!("abc1")).is_err(), "whole match");
        assert!(r.check(&json!(1)).is_err());
        let r = ArgumentRule {
            range: Some((Some(1), Some(3))),
            ..rule()
        };
        assert!(r.check(&json!(2.5)).is_ok());
        assert!(r.check(&json!(3.5)).is_err());
        let r = ArgumentRule {
            length: Some((None, Some(2))),
            ..rule()
        };
        assert!(r.check(&json!("éé")).is_ok());
        assert!(r.check(&json!([1, 2, 3])).is_err());
        assert!(compile_pattern("(").is_err());
        assert!(compile_pattern("a{1000}{1000}").is_err());
    }

    #[test]
    fn paths() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = t.path().to_str().expect("utf-8").to_owned();
        std::fs::create_dir(t.path().join("d")).expect("mkdir");
        std::os::unix::fs::symlink("/etc", t.path().join("d/l")).expect("symlink");
        let r = PathRule {
            roots: vec![root.clone()],
            no_symlinks: true,
        };
        assert!(r.check(&json!(format!("{root}/d/new"))).is_ok());
        assert!(r.check(&json!(root.clone())).is_ok());
        assert!(r.check(&json!(format!("{root}/d/../x"))).is_err());
        assert!(r.check(&json!(format!("{root}/./d"))).is_err());
        assert!(r.check(&json!(format!("{root}x/d"))).is_err());
        assert!(r.check(&json!("/etc/passwd")).is_err());
        assert!(r.check(&json!(format!("{root}/d/l/passwd"))).is_err());
        assert!(r.check(&json!(format!("{root}/d/l"))).is_err());
        assert!(r.check(&json!("d/x")).is_err());
        assert!(is_under("/a/b", "/a") && !is_under("/ab", "/a") && is_under("/x", "/"));
    }
}
