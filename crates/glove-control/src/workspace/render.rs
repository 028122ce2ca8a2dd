//! `glove diff`'s renderings of [`Changes`]: a `git diff --stat`-like
//! summary ([`render_stat`]), a JSON document ([`render_json`], shape in
//! its docs) and a `git apply`-able patch ([`render_patch`], in
//! [`patch`]). Paths that hold a control character, a quote, a backslash
//! or a non-ASCII byte are written as git writes them (C-style quoted,
//! octal escapes), so no name reaches a terminal raw.

use super::content::{body, Body, Trees};
use super::diff::{Change, ChangeKind, Changes};
use super::WorkspaceError;
use glove_types::manifest::{Entry, EntryKind};
use serde_json::{json, Value};
use std::borrow::Cow;

pub mod patch;

pub use patch::{render_patch, Patch, Unrepresented, UnrepresentedReason};

/// The JSON document's format name.
pub const JSON_FORMAT: &str = "glove.workspace-diff-v1";

const GREEN: &str = "\x1b[32m";
const RED: &str = "\x1b[31m";
const RESET: &str = "\x1b[m";

/// `path` as git writes it: unchanged, or C-style quoted (`"…"` with `\t`,
/// `\n`, `\"`, `\\`, … and `\ooo` for other control and non-ASCII bytes)
/// when it holds any such byte. `prefix` (`a/`, `b/`) goes inside the
/// quotes.
pub fn quote(prefix: &str, path: &str) -> Cow<'static, str> {
    let needs = |b: u8| b < 0x20 || b == b'"' || b == b'\\' || b >= 0x7f;
    if !path.bytes().any(needs) {
        return Cow::Owned(format!("{prefix}{path}"));
    }
    let mut out = String::from("\"");
    out.push_str(prefix);
    for b in path.bytes() {
        match b {
            b'\x07' => out.push_str("\\a"),
            b'\x08' => out.push_str("\\b"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            b'\x0b' => out.push_str("\\v"),
            b'\x0c' => out.push_str("\\f"),
            b'\r' => out.push_str("\\r"),
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b if needs(b) => out.push_str(&format!("\\{b:03o}")),
            b => out.push(char::from(b)),
        }
    }
    out.push('"');
    Cow::Owned(out)
}

fn kind_name(e: &Entry) -> &'static str {
    match e.kind {
        EntryKind::Dir => "directory",
        EntryKind::File => "file",
        EntryKind::Symlink => "symlink",
        EntryKind::Other => "special file",
    }
}

/// The stat column for a change whose body is not text.
fn describe(c: &Change, body: &Body) -> String {
    let mut parts = Vec::new();
    match body {
        Body::Binary => {
            let size = |e: &Option<Entry>| {
                e.as_ref()
                    .filter(|e| e.kind == EntryKind::File)
                    .map_or(0, |e| e.size)
            };
            parts.push(format!(
                "Bin {} -> {} bytes",
                size(&c.before),
                size(&c.after)
            ));
        }
        Body::SourceChanged => parts.push("source changed since staging; not compared".into()),
        Body::Text { .. } | Body::None => {}
    }
    match (c.kind(), &c.before, &c.after) {
        (ChangeKind::Added, _, Some(a)) if a.kind != EntryKind::File => {
            parts.push(format!("new {}", kind_name(a)));
        }
        (ChangeKind::Removed, Some(b), _) if b.kind != EntryKind::File => {
            parts.push(format!("{} removed", kind_name(b)));
        }
        (ChangeKind::TypeChanged, Some(b), Some(a)) => {
            parts.push(format!("{} -> {}", kind_name(b), kind_name(a)));
        }
        (ChangeKind::Modified, Some(b), Some(a)) => {
            if b.kind == EntryKind::Symlink && c.content_changed() {
                parts.push("symlink target changed".into());
            }
            if c.mode_changed() {
                parts.push(format!("mode {:04o} -> {:04o}", b.mode, a.mode));
            }
            if c.flags_changed() {
                parts.push(format!("flags {} -> {}", flags(b), flags(a)));
            }
        }
        _ => {}
    }
    parts.join(", ")
}

fn flags(e: &Entry) -> String {
    let mut f = Vec::new();
    if e.hardlink {
        f.push("hardlink");
    }
    if e.sparse {
        f.push("sparse");
    }
    if e.xattr {
        f.push("xattr");
    }
    if f.is_empty() {
        "none".into()
    } else {
        f.join("+")
    }
}

/// `s` with every control character but tab written as a visible escape
/// (`\x1b`, `\r`, …), for a terminal.
pub fn visible(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c.is_control() && c != '\t') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\t' => out.push(c),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A `git diff --stat`-like summary: one line per changed path (`+N -M`
/// for text, `Bin A -> B bytes` for binary, otherwise what changed), then
/// `N paths changed, X insertions(+), Y deletions(-)`. ANSI colour only
/// when `colour`.
pub fn render_stat(
    changes: &Changes,
    trees: &Trees<'_>,
    colour: bool,
) -> Result<String, WorkspaceError> {
    let mut rows: Vec<(Cow<'static, str>, String)> = Vec::new();
    let (mut total_ins, mut total_del) = (0usize, 0usize);
    let paint = |s: String, c: &str| {
        if colour {
            format!("{c}{s}{RESET}")
        } else {
            s
        }
    };
    if let Some((b, a)) = changes.root_mode {
        rows.push((".".into(), format!("mode {b:04o} -> {a:04o}")));
    }
    for c in &changes.changes {
        let body = body(c, trees)?;
        let mut col = String::new();
        if let Body::Text { .. } = body {
            let (ins, del) = body.line_counts();
            total_ins += ins;
            total_del += del;
            col = format!(
                "{} {}",
                paint(format!("+{ins}"), GREEN),
                paint(format!("-{del}"), RED)
            );
        }
        let rest = describe(c, &body);
        if !rest.is_empty() {
            if !col.is_empty() {
                col.push_str(", ");
            }
            col.push_str(&rest);
        }
        rows.push((quote("", &c.path), col));
    }
    let width = rows
        .iter()
        .map(|(p, _)| p.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (p, col) in &rows {
        let pad = width.saturating_sub(p.chars().count());
        out.push_str(&format!(" {p}{} | {col}\n", " ".repeat(pad)));
    }
    let n = rows.len();
    out.push_str(&format!(
        " {n} {} changed, {total_ins} insertion{}(+), {total_del} deletion{}(-)\n",
        if n == 1 { "path" } else { "paths" },
        if total_ins == 1 { "" } else { "s" },
        if total_del == 1 { "" } else { "s" },
    ));
    Ok(out)
}

/// The changes as a JSON document of this stable shape:
///
/// ```text
/// { "format": "glove.workspace-diff-v1",
///   "summary": { "changed": N, "insertions": X, "deletions": Y },
///   "root_mode": null | { "before": 493, "after": 448 },
///   "changes": [ { "path": "src/a.rs",
///                  "change": "added" | "removed" | "modified" | "type_changed",
///                  "content_changed": bool, "mode_changed": bool, "flags_changed": bool,
///                  "before": ENTRY | null, "after": ENTRY | null,
///                  "content": null
///                           | { "type": "text", "insertions": N, "deletions": M }
///                           | { "type": "binary" }
///                           | { "type": "source_changed" } } ],
///   "blockers": [ { "path": "bin/tool", "reason": "special_mode_bits",
///                   "description": "the setuid, setgid or sticky bit" } ] }
/// ```
///
/// `ENTRY` is the manifest entry as the manifest encodes it (`path`,
/// `kind`, `mode` as an integer, `size`, `digest` or null, `hardlink`,
/// `sparse`, `xattr`); `changes` are sorted bytewise by path; `content`
/// is null when no file content changed; `blockers` are the stage's, each
/// reason of each entry once.
pub fn render_json(changes: &Changes, trees: &Trees<'_>) -> Result<Value, WorkspaceError> {
    let (mut total_ins, mut total_del) = (0usize, 0usize);
    let mut list = Vec::with_capacity(changes.changes.len());
    for c in &changes.changes {
        let body = body(c, trees)?;
        let content = match &body {
            Body::None => Value::Null,
            Body::Text { .. } => {
                let (ins, del) = body.line_counts();
                total_ins += ins;
                total_del += del;
                json!({"type": "text", "insertions": ins, "deletions": del})
            }
            Body::Binary => json!({"type": "binary"}),
            Body::SourceChanged => json!({"type": "source_changed"}),
        };
        list.push(json!({
            "path": c.path,
            "change": c.kind().as_str(),
            "content_changed": c.content_changed(),
            "mode_changed": c.mode_changed(),
            "flags_changed": c.flags_changed(),
            "before": c.before,
            "after": c.after,
            "content": content,
        }));
    }
    let blockers: Vec<Value> = changes
        .blockers
        .iter()
        .map(|b| {
            json!({
                "path": b.path,
                "reason": b.reason.as_str(),
                "description": b.reason.describe(),
            })
        })
        .collect();
    let changed = list.len() + usize::from(changes.root_mode.is_some());
    Ok(json!({
        "format": JSON_FORMAT,
        "summary": {"changed": changed, "insertions": total_ins, "deletions": total_del},
        "root_mode": changes.root_mode.map(|(b, a)| json!({"before": b, "after": a})),
        "changes": list,
        "blockers": blockers,
    }))
}
