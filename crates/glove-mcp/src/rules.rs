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
//! | `pattern` | a string the regular expression matches **whole** (see below; the `regex` crate's syntax, linear time, at most 1 KiB of pattern and 1 MiB compiled) |
//! | `range` | a number within `{min, max}` (inclusive, integers in the profile) |
//! | `length` | a string of `{min, max}` Unicode scalar values or an array of that many elements |
//! | `path` | a string naming a path under one of `roots`, see below |
//! | `items` | an array whose every element satisfies this nested rule (at most 4 deep) |
//!
//! **Patterns** match the whole value: the pattern must compile on its
//! own (so it cannot close the group it is put in: `ok)|(.*` is refused)
//! and is then matched as `\A(?:…)\z`. `\A` and `\z` are the ends of the
//! text whatever flags the pattern sets, so `(?m)` cannot turn them into
//! line boundaries.
//!
//! **Paths.** The value must already be in normal form: absolute, no
//! empty, `.` or `..` component, no trailing `/`, no NUL, at most 4096
//! bytes — nothing is resolved lexically, so nothing can be smuggled past
//! the check by spelling. It must be one of `roots` or lie beneath one
//! (component-wise).
//!
//! With `no_symlinks: true` the root and every component beneath it are
//! looked up on the host **verbatim** with `lstat`, and a symbolic link
//! anywhere refuses the call. A path may end in components that do not
//! exist (a file about to be created) only when (a) every missing
//! component is ASCII and (b) the last existing directory holds no entry
//! whose name is not ASCII; a root that does not exist refuses the call.
//! The reason is Unicode equivalence: a server may match a missing name
//! to a canonically equivalent entry and follow it — server-filesystem
//! compares names in NFC, so `é` spelled in NFD reaches the NFC entry,
//! and even the ASCII `K` reaches an entry spelled with U+212A KELVIN
//! SIGN. ASCII names are their own normal forms, and with no non-ASCII
//! sibling there is no other entry an ASCII name can be equivalent to, so
//! under (a) and (b) the server can only create the name, not follow an
//! entry the walk did not see. The mediator carries no Unicode tables;
//! this rule refuses some harmless paths (a new file beside `café`)
//! rather than guess. A name found verbatim is what the server uses too
//! (server-filesystem tries the exact name first).
//!
//! The check is made at call time: a link created between the check and
//! the upstream's use of the path is not seen (the upstream runs with the
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

/// Compiles a pattern for whole-value matching, bounded (see the module
/// docs: it must compile alone, then is anchored with `\A(?:…)\z`).
pub(crate) fn compile_pattern(src: &str) -> Result<Regex, String> {
    if src.len() > MAX_PATTERN_BYTES {
        return Err(format!("a pattern is at most {MAX_PATTERN_BYTES} bytes"));
    }
    let build = |s: &str| {
        RegexBuilder::new(s)
            .size_limit(MAX_PATTERN_COMPILED)
            .dfa_size_limit(MAX_PATTERN_COMPILED)
            .nest_limit(32)
            .build()
            .map_err(|e| match e {
                regex::Error::CompiledTooBig(_) => "the pattern compiles too large".to_owned(),
                _ => "the pattern does not compile".to_owned(),
            })
    };
    // Alone first: a pattern that is not a whole regular expression by
    // itself could close the group below and escape the anchors.
    build(src)?;
    build(&format!("\\A(?:{src})\\z"))
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

/// `lstat`s `root` and every component of `p` beneath it, verbatim; a
/// missing tail must be ASCII in a directory of ASCII names (see the
/// module docs).
fn no_links_below(root: &str, p: &str) -> Result<(), String> {
    let examine = |at: &str| match std::fs::symlink_metadata(Path::new(at)) {
        Ok(m) if m.file_type().is_symlink() => {
            Err("a component of the path is a symbolic link".to_owned())
        }
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(_) => Err("a component of the path cannot be examined".to_owned()),
    };
    if !examine(root)? {
        return Err("the root of the path rule does not exist".into());
    }
    let mut at = root.to_owned();
    let rest = p.get(root.len()..).unwrap_or("");
    let comps: Vec<&str> = rest.split('/').filter(|c| !c.is_empty()).collect();
    for (i, c) in comps.iter().enumerate() {
        let parent = at.clone();
        if !at.ends_with('/') {
            at.push('/');
        }
        at.push_str(c);
        if !examine(&at)? {
            return missing_tail(&parent, &comps[i..]);
        }
    }
    Ok(())
}

/// `tail` does not exist in the directory `parent`: allowed only when no
/// entry of `parent` could be a Unicode-equivalent spelling of it.
fn missing_tail(parent: &str, tail: &[&str]) -> Result<(), String> {
    if !tail.iter().all(|c| c.is_ascii()) {
        return Err(
            "a component that does not exist verbatim is not ASCII (Unicode spellings are not compared)"
                .into(),
        );
    }
    let unreadable = || "a directory of the path cannot be examined".to_owned();
    let entries = std::fs::read_dir(Path::new(parent)).map_err(|_| unreadable())?;
    for e in entries {
        let e = e.map_err(|_| unreadable())?;
        if !e.file_name().as_encoded_bytes().is_ascii() {
            return Err(
                "a component does not exist and its directory holds a name that is not ASCII (it could be an equivalent spelling)"
                    .into(),
            );
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

    /// Review finding: `^(?:{src})$` let `ok)|(.*` close the group and
    /// match anything.
    #[test]
    fn a_pattern_cannot_escape_its_anchors() {
        assert!(compile_pattern("ok)|(.*").is_err());
        assert!(compile_pattern("a)|(?:b").is_err());
        let whole = |p: &str, v: &str| compile_pattern(p).expect("compiles").is_match(v);
        assert!(whole("ok|no", "no") && !whole("ok|no", "nope") && !whole("ok|no", "xok"));
        // Flags cannot turn the anchors into line boundaries.
        assert!(!whole("(?m)ok", "ok\nanything"));
        assert!(!whole("(?m)^ok$", "ok\nanything"));
        assert!(!whole("(?m:ok$)", "ok\nanything"));
        assert!(!whole("ok", "ok\n"));
        // A verbose-mode comment would swallow the closing anchor: refused.
        assert!(compile_pattern("(?x)ok #").is_err());
    }

    /// Review finding: a component spelled in NFD when the host entry is
    /// NFC ended the lstat walk, while server-filesystem matched the NFC
    /// entry and followed its link.
    #[test]
    fn no_symlinks_refuses_spellings_it_cannot_compare() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = t.path().to_str().expect("utf-8").to_owned();
        let outside = tempfile::tempdir().expect("tempdir");
        let mk = |p: &str| std::fs::create_dir(t.path().join(p)).expect("mkdir");
        let link = |p: &str| {
            std::os::unix::fs::symlink(outside.path(), t.path().join(p)).expect("symlink")
        };
        mk("n");
        link("n/\u{e9}"); // "é", NFC
        mk("k");
        link("k/lin\u{212a}"); // KELVIN SIGN, NFC-equivalent to "K"
        mk("plain");
        mk("plain/sub");
        mk("named");
        mk("named/caf\u{e9}");
        let r = PathRule {
            roots: vec![root.clone()],
            no_symlinks: true,
        };
        let ok = |p: String| r.check(&json!(p)).is_ok();
        assert!(!ok(format!("{root}/n/\u{e9}/x")), "the NFC link itself");
        assert!(
            !ok(format!("{root}/n/e\u{301}/x")),
            "NFD spelling of a link"
        );
        assert!(!ok(format!("{root}/n/e\u{301}")));
        assert!(!ok(format!("{root}/k/linK")), "ASCII beside a Kelvin sign");
        assert!(!ok(format!("{root}/k/linK/x")));
        // New ASCII names in ASCII-only directories are fine, at any depth.
        assert!(ok(format!("{root}/plain/new.txt")));
        assert!(ok(format!("{root}/plain/sub/new/deeper.txt")));
        assert!(ok(format!("{root}/plain/sub")));
        // A missing name that is not ASCII is refused, anywhere in the tail.
        assert!(!ok(format!("{root}/plain/caf\u{e9}")));
        assert!(!ok(format!("{root}/plain/new/d\u{e9}j\u{e0}")));
        // A non-ASCII name that exists verbatim is walked through.
        assert!(ok(format!("{root}/named/caf\u{e9}")));
        assert!(ok(format!("{root}/named/caf\u{e9}/new.txt")));
        // ... but its directory has a non-ASCII name: no new name beside it.
        assert!(!ok(format!("{root}/named/cafe")));
        // A root that does not exist.
        let gone = PathRule {
            roots: vec![format!("{root}/gone")],
            no_symlinks: true,
        };
        assert!(gone.check(&json!(format!("{root}/gone/x"))).is_err());
        // Without no_symlinks nothing is looked up.
        let lax = PathRule {
            roots: vec![root.clone()],
            no_symlinks: false,
        };
        assert!(lax.check(&json!(format!("{root}/n/e\u{301}/x"))).is_ok());
    }
}
