//! Removing host paths from what upstream servers say when they fail.
//!
//! The SDK servers put host paths in their error messages (FACTS: "Error
//! messages carry host paths"). Before an upstream JSON-RPC error message,
//! or an `isError: true` tool result, reaches the agent, every path-like
//! run is replaced by `<path>` unless it lies under one of the server's
//! allowed roots (the roots of its path rules), which the agent may name
//! anyway. For an `isError` result that is **every string in it**
//! ([`strip_value`]): `content[].text`, an embedded resource's `uri` and
//! `text`, `structuredContent` at any depth, object keys included (two
//! keys that become one keep the first value). Base64 data (`blob`,
//! image `data`) is treated as text, not decoded.
//!
//! A *word* is a maximal run of characters other than whitespace, quotes
//! and brackets (`"'` `` ` `` `()[]{}<>,;`). In a word, a `/` **starts a
//! path** when it is the word's first character or follows a character
//! that does not continue a name — anything but a letter, a digit, `.`,
//! `_` or `/` — so `x=/etc/a`, `PATH=/a:/etc/b`, `x|/etc/c`, `“/etc/d”`,
//! `file:///etc/e` all start paths, while `and/or` and `a.b/c` do not.
//! A path runs to the next start or the end of the word; characters at
//! its end that are not a letter, digit, `_`, `-`, `~` or `/` (a full
//! stop, a colon, a closing quote) are left after the `<path>`. A path
//! is kept only when, read lexically, it has no `..` and is a root or
//! beneath one. In a word that is a URI of another scheme than `file`
//! with an authority of host characters and an optional numeric port
//! (`test://static-text`, `https://example.org:8443/a/b`) the scheme, the
//! authority and the URI's own path are not paths, but a path embedded
//! after them (`?f=/etc/x`) is; `file:` URIs, `x:///…` and malformed
//! authorities are read as paths. This is a heuristic for messages, not a parser: it errs
//! towards removing (`v1.0-/x` loses its `/x`); relative paths are left.

use crate::rules::is_under;
use serde_json::Value;

const DELIMS: &[char] = &[
    '"', '\'', '`', '(', ')', '[', ']', '{', '}', '<', '>', ',', ';',
];

fn is_delim(c: char) -> bool {
    c.is_whitespace() || DELIMS.contains(&c)
}

/// Whether a `/` after `c` continues a name rather than starting a path.
fn continues(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '.' | '_' | '/')
}

/// Whether `c` may end a path (others at its end are left after `<path>`).
fn ends_path(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '~' | '/')
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

/// Every string in `v`, object keys included, through [`strip_paths`]
/// (see the module docs).
pub fn strip_value(v: &mut Value, roots: &[String]) {
    match v {
        Value::String(s) => *s = strip_paths(s, roots),
        Value::Array(items) => {
            for item in items {
                strip_value(item, roots);
            }
        }
        Value::Object(m) => {
            let old = std::mem::take(m);
            for (k, mut item) in old {
                strip_value(&mut item, roots);
                m.entry(strip_paths(&k, roots)).or_insert(item);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// Where the path of a URI of another scheme than `file` begins, when `w`
/// is one with an authority of host characters and an optional numeric
/// port (`test://static-text`, `https://example.org:8443/x`): everything
/// up to there is not a host path. `None` for anything else (`file:`,
/// `x:///…`, `h:/…`, `x://y|/…`).
fn remote_uri_end(w: &str) -> Option<usize> {
    let (scheme, rest) = w.split_once("://")?;
    let mut cs = scheme.chars();
    let scheme_ok = cs.next().is_some_and(|c| c.is_ascii_alphabetic())
        && cs.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && !scheme.eq_ignore_ascii_case("file");
    let auth_len = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..auth_len];
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (authority, None),
    };
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
    (scheme_ok && host_ok && port_ok).then(|| scheme.len() + 3 + auth_len)
}

fn word_out(w: &str, roots: &[String]) -> String {
    // In a remote URI the scheme, the authority and the path's first `/`
    // are not path starts; a path embedded later (`?f=/etc/x`) still is.
    let from = remote_uri_end(w).map_or(0, |e| e + 1);
    let mut starts = Vec::new();
    let mut prev: Option<char> = None;
    for (i, c) in w.char_indices() {
        if i >= from && c == '/' && prev.is_none_or(|p| !continues(p)) {
            starts.push(i);
        }
        prev = Some(c);
    }
    let Some(&first) = starts.first() else {
        return w.to_owned();
    };
    let mut out = w[..first].to_owned();
    for (n, &at) in starts.iter().enumerate() {
        let end = starts.get(n + 1).copied().unwrap_or(w.len());
        out.push_str(&path_out(&w[at..end], roots));
    }
    out
}

/// One path run (starting with `/`): kept, or `<path>` and its tail.
fn path_out(run: &str, roots: &[String]) -> String {
    let path = run.trim_end_matches(|c: char| !ends_path(c));
    let tail = &run[path.len()..];
    // A lone "/" (as in "a / b") is not a path.
    if path.trim_start_matches('/').is_empty() || keep(path, roots) {
        return run.to_owned();
    }
    format!("<path>{tail}")
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

/// Whether `c` is invisible or controls how text is shown rather than
/// being text: C0 controls other than tab, newline and carriage return
/// (ESC among them), DEL, C1 controls (CSI, OSC, …), zero-width and other
/// invisible format characters (U+00AD, U+034F, U+061C, U+115F-U+1160,
/// U+17B4-U+17B5, U+180B-U+180F, U+200B-U+200F, U+2060-U+206F, U+3164,
/// U+FEFF, U+FFA0, U+FFF9-U+FFFB), the line and paragraph separators
/// (U+2028, U+2029), bidirectional embeddings, overrides and isolates
/// (U+202A-U+202E, U+2066-U+2069), Egyptian hieroglyph format controls
/// (U+13430-U+1343F), shorthand format controls (U+1BCA0-U+1BCA3),
/// musical symbol format controls (U+1D173-U+1D17A), Unicode tags
/// (U+E0000-U+E007F), the supplementary variation selectors
/// (U+E0100-U+E01EF), and private-use code points (U+E000-U+F8FF,
/// planes 15 and 16), which can carry text no one sees or that each
/// reader shows differently. The variation selectors U+FE00-U+FE0F are
/// not hidden on their own (emoji need U+FE0F); [`hidden_character`]
/// refuses them in runs instead.
pub fn is_hidden(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{8}' | '\u{b}' | '\u{c}' | '\u{e}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
        | '\u{ad}' | '\u{34f}' | '\u{61c}' | '\u{115f}'..='\u{1160}' | '\u{17b4}'..='\u{17b5}'
        | '\u{180b}'..='\u{180f}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{206f}' | '\u{3164}' | '\u{e000}'..='\u{f8ff}' | '\u{feff}'
        | '\u{ffa0}' | '\u{fff9}'..='\u{fffb}' | '\u{13430}'..='\u{1343f}'
        | '\u{1bca0}'..='\u{1bca3}' | '\u{1d173}'..='\u{1d17a}'
        | '\u{e0000}'..='\u{e007f}' | '\u{e0100}'..='\u{e01ef}'
        | '\u{f0000}'..='\u{10ffff}')
}

/// Whether `c` is one of the variation selectors U+FE00-U+FE0F.
pub fn is_variation_selector(c: char) -> bool {
    matches!(c, '\u{fe00}'..='\u{fe0f}')
}

/// The first hidden character of `s`: one [`is_hidden`] says is, or a
/// variation selector (U+FE00-U+FE0F) that does not follow a character of
/// its own — at the start, or after another variation selector — since a
/// run of them can spell data no one sees while one after a character
/// (an emoji's U+FE0F) only picks its glyph.
fn hidden_in(s: &str) -> Option<char> {
    let mut prev: Option<char> = None;
    for c in s.chars() {
        if is_hidden(c) || (is_variation_selector(c) && prev.is_none_or(is_variation_selector)) {
            return Some(c);
        }
        prev = Some(c);
    }
    None
}

/// The first invisible or control character ([`is_hidden`], or a
/// variation selector out of place) in any string or object key of `v`,
/// if any.
pub fn hidden_character(v: &Value) -> Option<char> {
    match v {
        Value::String(s) => hidden_in(s),
        Value::Array(items) => items.iter().find_map(hidden_character),
        Value::Object(m) => m
            .iter()
            .find_map(|(k, item)| hidden_in(k).or_else(|| hidden_character(item))),
        Value::Null | Value::Bool(_) | Value::Number(_) => None,
    }
}

/// Renders terminal control sequences in every string and object key of
/// `v` harmless, as `glove exec` renders agent output
/// ([`glove_types::neutralize::neutralize`]: SGR colours pass, every other
/// escape and control becomes caret notation).
pub fn neutralize_value(v: &mut Value) {
    fn text(s: &str) -> String {
        if !s.chars().any(|c| c.is_control()) {
            return s.to_owned();
        }
        // Valid UTF-8 in, text (caret notation for controls) out.
        String::from_utf8_lossy(&glove_types::neutralize::neutralize(s.as_bytes())).into_owned()
    }
    match v {
        Value::String(s) => *s = text(s),
        Value::Array(items) => items.iter_mut().for_each(neutralize_value),
        Value::Object(m) => {
            let old = std::mem::take(m);
            for (k, mut item) in old {
                neutralize_value(&mut item);
                m.entry(text(&k)).or_insert(item);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fourth review, finding 7: the line and paragraph separators,
    /// hieroglyph, shorthand and musical format controls, private-use
    /// code points and runs of variation selectors passed the check.
    #[test]
    fn hidden_characters_include_the_fourth_reviews_gaps() {
        for c in [
            '\u{2028}',
            '\u{2029}',
            '\u{13430}',
            '\u{1343f}',
            '\u{1bca0}',
            '\u{1bca3}',
            '\u{1d173}',
            '\u{1d17a}',
            '\u{e000}',
            '\u{f8ff}',
            '\u{f0000}',
            '\u{ffffd}',
            '\u{100000}',
            '\u{10fffd}',
        ] {
            assert!(is_hidden(c), "{:?}", c.escape_unicode().to_string());
            let v = serde_json::json!({ "description": format!("a{c}b") });
            assert_eq!(hidden_character(&v), Some(c));
        }
        for ok in [
            "plain",
            "caf\u{e9}",
            "\u{2764}\u{fe0f} love",
            "\u{1f44d}\u{fe0f}",
            "a\u{fe0e}",
        ] {
            assert_eq!(hidden_character(&serde_json::json!(ok)), None, "{ok}");
        }
        // Variation selectors in a run, or with nothing before them.
        for bad in [
            "a\u{fe0f}\u{fe0f}",
            "\u{fe01}x",
            "x\u{fe00}\u{fe01}\u{fe02}",
        ] {
            assert!(
                hidden_character(&serde_json::json!(bad)).is_some(),
                "{bad:?}"
            );
            assert!(
                hidden_character(&serde_json::json!({ bad: 1 })).is_some(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn uris_of_other_schemes_are_not_paths() {
        let roots: Vec<String> = vec![];
        assert_eq!(
            strip_paths("Resource test://static-text not found", &roots),
            "Resource test://static-text not found"
        );
        assert_eq!(
            strip_paths("see https://example.org/a/b", &roots),
            "see https://example.org/a/b"
        );
        assert_eq!(
            strip_paths("open file:///etc/shadow failed", &roots),
            "open file:<path> failed"
        );
        assert_eq!(strip_paths("x:///etc/shadow", &roots), "x:<path>");
        assert_eq!(
            strip_paths("https://h:/home/a/.ssh/id", &roots),
            "https:<path>:<path>"
        );
        assert_eq!(strip_paths("x://y|/etc/shadow", &roots), "x:<path>|<path>");
        assert_eq!(
            strip_paths("http://localhost:5173/src?f=/etc/shadow", &roots),
            "http://localhost:5173/src?f=<path>"
        );
    }

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

    /// Review finding: paths after `|`, typographic quotes or `-`, and a
    /// second path after `:` or `=` behind a kept one, got through.
    #[test]
    fn every_delimiter_starts_a_path() {
        let roots = vec!["/srv/work".to_owned()];
        let cases = [
            ("x|/etc/a", "x|<path>"),
            ("\u{201c}/etc/b\u{201d}", "\u{201c}<path>\u{201d}"),
            ("-/etc/c", "-<path>"),
            ("PATH=/srv/work/bin:/etc/d", "PATH=/srv/work/bin:<path>"),
            ("/srv/work/a=/etc/e", "/srv/work/a=<path>"),
            ("/srv/work/a,/etc/f", "/srv/work/a,<path>"),
            ("key:\"/etc/g\"", "key:\"<path>\""),
            ("(/etc/h)", "(<path>)"),
            ("{\"p\":\"/etc/i\"}", "{\"p\":\"<path>\"}"),
            ("a=b:/etc/j.", "a=b:<path>."),
            ("see /etc/k: denied", "see <path>: denied"),
            ("@/etc/l", "@<path>"),
            (
                "text/plain a.b/c and/or v1/x",
                "text/plain a.b/c and/or v1/x",
            ),
            ("/srv/work/x_y.z/q-r~", "/srv/work/x_y.z/q-r~"),
            ("/srv/work/x-/q", "/srv/work/x-<path>"),
        ];
        for (input, want) in cases {
            assert_eq!(strip_paths(input, &roots), want, "{input}");
        }
    }

    #[test]
    fn every_string_of_a_value() {
        let roots = vec!["/srv/work".to_owned()];
        let mut v = serde_json::json!({
            "content": [{"type": "resource", "resource": {"uri": "file:///etc/a", "text": "open /etc/b"}}],
            "structuredContent": {"/etc/c": ["at /etc/d"], "/etc/e": 1, "ok": "/srv/work/f", "n": 2}
        });
        strip_value(&mut v, &roots);
        assert_eq!(
            v,
            serde_json::json!({
                "content": [{"type": "resource", "resource": {"uri": "file:<path>", "text": "open <path>"}}],
                "structuredContent": {"<path>": ["at <path>"], "ok": "/srv/work/f", "n": 2}
            })
        );
    }
}
