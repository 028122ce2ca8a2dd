//! Canonical absolute paths, as the policy schema uses them.
//!
//! A canonical path starts with `/`, has no empty, `.` or `..` component, no
//! trailing `/`, no NUL, and is at most [`MAX_PATH_LEN`] bytes. These checks
//! are lexical: they say nothing about the host file system, which the
//! runtime opens component by component without following links.

use crate::codes::policy::{POLICY_PATH_INVALID, POLICY_PATH_RESTRICTED, POLICY_PATH_ROOT};
use crate::error::Rejection;

/// Longest accepted path, in bytes.
pub const MAX_PATH_LEN: usize = 4096;

/// Host roots that a path alias may never expose (nor anything beneath them).
pub const RESTRICTED_HOST_ROOTS: &[&str] = &["/boot", "/dev", "/etc", "/proc", "/run", "/sys"];

/// Sandbox roots that a target may never shadow (nor anything beneath them).
pub const RESTRICTED_TARGET_ROOTS: &[&str] = &["/dev", "/proc", "/sys"];

/// Checks that `p` is canonical and absolute; `/` itself is refused.
pub fn check_canonical(p: &str) -> Result<(), Rejection> {
    let invalid = |why: &str| Rejection::new(POLICY_PATH_INVALID, format!("path {p:?} {why}"));
    if p.len() > MAX_PATH_LEN {
        return Err(Rejection::new(
            POLICY_PATH_INVALID,
            format!("path is longer than {MAX_PATH_LEN} bytes"),
        ));
    }
    if p.contains('\0') {
        return Err(invalid("contains NUL"));
    }
    if p == "/" {
        return Err(Rejection::new(POLICY_PATH_ROOT, "path must not be '/'"));
    }
    let Some(rest) = p.strip_prefix('/') else {
        return Err(invalid("is not absolute"));
    };
    for comp in rest.split('/') {
        match comp {
            "" => return Err(invalid("has an empty component or a trailing '/'")),
            "." | ".." => return Err(invalid("has a '.' or '..' component")),
            _ => {}
        }
    }
    Ok(())
}

/// Whether `a` equals `b` or one lies beneath the other (component-wise).
pub fn overlaps(a: &str, b: &str) -> bool {
    is_within(a, b) || is_within(b, a)
}

/// Whether `inner` equals `outer` or lies beneath it (component-wise).
pub fn is_within(inner: &str, outer: &str) -> bool {
    inner == outer
        || (inner.len() > outer.len()
            && inner.starts_with(outer)
            && inner.as_bytes().get(outer.len()) == Some(&b'/'))
}

/// Refuses `p` when it overlaps a restricted root: equal to one, beneath
/// one, or an ancestor of one (which would expose it).
pub fn check_not_restricted(p: &str, roots: &[&str]) -> Result<(), Rejection> {
    match roots.iter().find(|r| overlaps(p, r)) {
        Some(r) => Err(Rejection::new(
            POLICY_PATH_RESTRICTED,
            format!("path {p:?} overlaps the restricted root {r}"),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_paths() {
        for ok in ["/a", "/usr/bin/true", "/a.b/c-d"] {
            assert!(check_canonical(ok).is_ok(), "{ok}");
        }
        assert_eq!(check_canonical("/").unwrap_err().code(), POLICY_PATH_ROOT);
        for bad in ["", "a", "/a/", "//a", "/a//b", "/a/./b", "/a/../b", "/a\0"] {
            assert_eq!(
                check_canonical(bad).unwrap_err().code(),
                POLICY_PATH_INVALID,
                "{bad:?}"
            );
        }
        assert!(check_canonical(&format!("/{}", "a".repeat(MAX_PATH_LEN))).is_err());
    }

    #[test]
    fn overlap_is_component_wise() {
        assert!(overlaps("/a", "/a"));
        assert!(overlaps("/a", "/a/b"));
        assert!(overlaps("/a/b", "/a"));
        assert!(!overlaps("/a", "/ab"));
        assert!(!overlaps("/a/b", "/a/c"));
        assert!(check_not_restricted("/srv/x", RESTRICTED_HOST_ROOTS).is_ok());
        assert!(check_not_restricted("/etc/ssh", RESTRICTED_HOST_ROOTS).is_err());
        assert!(check_not_restricted("/proc", RESTRICTED_HOST_ROOTS).is_err());
    }
}
