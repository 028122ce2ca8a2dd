//! Removing host paths from what upstream servers say when they fail.
//!
//! The SDK servers put host paths in their error messages (FACTS: "Error
//! messages carry host paths"). Before an upstream JSON-RPC error message,
//! or the text of an `isError: true` tool result, reaches the agent, every
//! word that looks like an absolute path is replaced by `<path>` unless it
//! lies under one of the server's allowed roots (the roots of its path
//! rules), which the agent may name anyway.
//!
//! A *word* is a maximal run of characters other than whitespace, quotes
//! and brackets (`"'` `` ` `` `()[]{}<>,;`). A word holds a path when it is
//! `/…`, or has a `/` right after a `:` or `=` (`file:///etc/x`,
//! `path=/etc/x`); the path runs to the end of the word, less trailing
//! `.` and `:`. It is kept only when, read lexically, it has no `..` and
//! is a root or beneath one. This is a heuristic for messages, not a
//! parser: it errs towards removing.

use crate::rules::is_under;

const DELIMS: &[char] = &[
    '"', '\'', '`', '(', ')', '[', ']', '{', '}', '<', '>', ',', ';',
];

fn is_delim(c: char) -> bool {
    c.is_whitespace() || DELIMS.contains(&c)
}

/// `s` with host paths outside `roots` replaced by `<path>`.
pub fn strip_paths(s: &str, roots: &[String]) -> String {
    let mut out = String::with_capacity(s.len());
    let mut word = String::new();
    for c in s.chars() {
        if is_delim(c) {
            out.push_str(&word_out(&word, roots));
            word.clear();
            out.push(c);
        } else {
            word.push(c);
        }
    }
    out.push_str(&word_out(&word, roots));
    out
}

fn word_out(w: &str, roots: &[String]) -> String {
    let start = if w.starts_with('/') {
        Some(0)
    } else {
        w.char_indices()
            .find(|(i, c)| {
                *c == '/' && *i > 0 && matches!(w.as_bytes().get(i - 1), Some(b':') | Some(b'='))
            })
            .map(|(i, _)| i)
    };
    let Some(start) = start else {
        return w.to_owned();
    };
    let (head, path) = w.split_at(start);
    let trimmed = path.trim_end_matches(['.', ':']);
    let tail = &path[trimmed.len()..];
    // A lone "/" (as in "a / b") is not a path.
    if trimmed.trim_start_matches('/').is_empty() {
        return w.to_owned();
    }
    if keep(trimmed, roots) {
        return w.to_owned();
    }
    format!("{head}<path>{tail}")
}

fn keep(path: &str, roots: &[String]) -> bool {
    let comps: Vec<&str> = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if comps.contains(&"..") {
        return false;
    }
    let normal = format!("/{}", comps.join("/"));
    roots.iter().any(|r| is_under(&normal, r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_outside_keeps_inside() {
        let roots = vec!["/srv/work".to_owned()];
        assert_eq!(
            strip_paths(
                "Access denied - path outside allowed directories: /etc/passwd not in /srv/work",
                &roots
            ),
            "Access denied - path outside allowed directories: <path> not in /srv/work"
        );
        assert_eq!(
            strip_paths("ENOENT: no such file, open '/home/u/x.js'.", &roots),
            "ENOENT: no such file, open '<path>'."
        );
        assert_eq!(
            strip_paths("at file:///usr/lib/node/x.js:10:5", &roots),
            "at file:<path>"
        );
        assert_eq!(
            strip_paths("path=/srv/work/a.txt ok", &roots),
            "path=/srv/work/a.txt ok"
        );
        assert_eq!(strip_paths("/srv/work/../etc", &roots), "<path>");
        assert_eq!(strip_paths("/srv/workshop", &roots), "<path>");
        assert_eq!(strip_paths("and/or 1 / 2", &roots), "and/or 1 / 2");
    }
}
