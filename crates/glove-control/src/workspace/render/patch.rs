//! The changes as a patch in git's format, which `git apply` accepts.
//!
//! A git patch carries text content and the owner-execute bit of regular
//! files, nothing else: git writes files 0644 or 0755 (under its umask),
//! makes directories as files need them and removes them when emptied. So
//! the patch holds every change it can carry exactly, and
//! [`Patch::unrepresented`] lists every change it cannot, with the
//! reason: binary content (no `GIT binary patch` section is written: git
//! needs full blob ids for one, which the manifest does not record), a
//! link or special file, a file added or re-moded to anything but 0644 or
//! 0755, a directory that is only a directory change (empty, or another
//! mode), attributes or links (`hardlink`, `sparse`, `xattr`), a change of
//! the root's mode, or a source file changed since staging (its old text
//! is unknown, so no hunk is written for it). [`Patch::complete`] refuses
//! such a patch with `workspace_patch_incomplete`; `glove diff --patch`
//! uses it, and `glove apply` carries what a patch cannot.
//!
//! A file whose content changed is recreated by `git apply` with git's
//! mode rules (0644, or 0755 when its owner-execute bit is set), not
//! with its exact mode; deletions state the mode git would see.

use super::super::content::{body, line_diff, Body, Trees};
use super::super::diff::{Change, ChangeKind, Changes};
use super::super::WorkspaceError;
use super::{quote, GREEN, RED, RESET};
use glove_types::manifest::{Entry, EntryKind};
use serde::Serialize;
use similar::udiff::UnifiedHunkHeader;
use similar::ChangeTag;

const BOLD: &str = "\x1b[1m";
const CYAN: &str = "\x1b[36m";

/// Why a change is not in the patch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum UnrepresentedReason {
    /// Binary content (or a file over 1 MiB).
    Binary,
    /// A symbolic link on either side.
    Symlink,
    /// A FIFO, socket or device on either side.
    SpecialFile,
    /// A mode git cannot write (anything but 0644 and 0755 for a file;
    /// any directory mode change, the root's included).
    Mode,
    /// A directory change no file change implies (an empty directory
    /// added or removed).
    DirectoryOnly,
    /// A hard link, sparse file or extended attribute change.
    Attributes,
    /// The source file changed since staging; its old text is unknown.
    SourceChanged,
}

impl UnrepresentedReason {
    /// A one-line explanation for people.
    pub const fn describe(self) -> &'static str {
        match self {
            UnrepresentedReason::Binary => "binary content",
            UnrepresentedReason::Symlink => "a symbolic link",
            UnrepresentedReason::SpecialFile => "a special file",
            UnrepresentedReason::Mode => "a mode git cannot write",
            UnrepresentedReason::DirectoryOnly => "a directory with no file change",
            UnrepresentedReason::Attributes => "hard links, sparseness or extended attributes",
            UnrepresentedReason::SourceChanged => "the source changed since staging",
        }
    }
}

/// A change the patch does not carry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unrepresented {
    /// The entry's path (`.` for the root).
    pub path: String,
    /// Why.
    pub reason: UnrepresentedReason,
}

/// A rendered patch and what it leaves out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Patch {
    /// The patch text (empty when nothing is carried).
    pub text: String,
    /// What the patch does not carry, sorted by path.
    pub unrepresented: Vec<Unrepresented>,
}

impl Patch {
    /// The text, if the patch carries every change; otherwise the
    /// `workspace_patch_incomplete` refusal naming what it cannot.
    pub fn complete(self) -> Result<String, WorkspaceError> {
        if self.unrepresented.is_empty() {
            Ok(self.text)
        } else {
            Err(WorkspaceError::PatchIncomplete(self.unrepresented))
        }
    }
}

/// git's mode of a regular file: 100755 when the owner may execute it.
fn git_mode(mode: u32) -> &'static str {
    if mode & 0o100 != 0 {
        "100755"
    } else {
        "100644"
    }
}

fn writable_mode(mode: u32) -> bool {
    mode == 0o644 || mode == 0o755
}

struct Out {
    text: String,
    colour: bool,
}

impl Out {
    fn line(&mut self, colour: &str, s: &str) {
        // On a terminal (colour), the agent's bytes are shown, not obeyed:
        // a control character (ESC, CR, …; tab excepted) could hide lines
        // from the person reviewing. A patch for `git apply` (no colour)
        // keeps every byte.
        let shown: std::borrow::Cow<'_, str> = if self.colour {
            crate::workspace::render::visible(s)
        } else {
            std::borrow::Cow::Borrowed(s)
        };
        if self.colour && !colour.is_empty() {
            self.text.push_str(colour);
            self.text.push_str(&shown);
            self.text.push_str(RESET);
        } else {
            self.text.push_str(&shown);
        }
        self.text.push('\n');
    }

    fn name_line(&mut self, lead: &str, name: &str) {
        // As git: a tab after a name holding a space ends it unambiguously.
        let tab = if name.contains(' ') { "\t" } else { "" };
        self.line(BOLD, &format!("{lead} {name}{tab}"));
    }
}

/// Renders `changes` as a git patch (see the module docs), colouring it
/// with ANSI sequences only when `colour`.
pub fn render_patch(
    changes: &Changes,
    trees: &Trees<'_>,
    colour: bool,
) -> Result<Patch, WorkspaceError> {
    let mut out = Out {
        text: String::new(),
        colour,
    };
    let mut missing = Vec::new();
    if changes.root_mode.is_some() {
        missing.push(Unrepresented {
            path: ".".into(),
            reason: UnrepresentedReason::Mode,
        });
    }
    for (i, c) in changes.changes.iter().enumerate() {
        let mut skip = |reason| {
            missing.push(Unrepresented {
                path: c.path.clone(),
                reason,
            })
        };
        let kinds = [&c.before, &c.after].map(|e| e.as_ref().map(|e| e.kind));
        if kinds.contains(&Some(EntryKind::Symlink)) {
            skip(UnrepresentedReason::Symlink);
            continue;
        }
        if kinds.contains(&Some(EntryKind::Other)) {
            skip(UnrepresentedReason::SpecialFile);
            continue;
        }
        if c.flags_changed()
            || c.after
                .as_ref()
                .is_some_and(|a| a.hardlink || a.sparse || a.xattr)
        {
            skip(UnrepresentedReason::Attributes);
            continue;
        }
        if let Some(reason) = directory_part(c, &changes.changes[i + 1..]) {
            skip(reason);
            continue;
        }
        let old = c.before.as_ref().filter(|e| e.kind == EntryKind::File);
        let new = c.after.as_ref().filter(|e| e.kind == EntryKind::File);
        if old.is_none() && new.is_none() {
            continue;
        }
        if let Some(n) = new {
            let mode_matters = old.is_none() || c.mode_changed();
            if mode_matters && !writable_mode(n.mode) {
                skip(UnrepresentedReason::Mode);
                continue;
            }
            if c.mode_changed() && old.is_some_and(|o| git_mode(o.mode) == git_mode(n.mode)) {
                skip(UnrepresentedReason::Mode);
                continue;
            }
        }
        let body = body(c, trees)?;
        match body {
            Body::Binary => skip(UnrepresentedReason::Binary),
            Body::SourceChanged => skip(UnrepresentedReason::SourceChanged),
            Body::None | Body::Text { .. } => file_patch(&mut out, c, old, new, &body),
        }
    }
    missing.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    Ok(Patch {
        text: out.text,
        unrepresented: missing,
    })
}

/// For a change with a directory on one side: why the patch cannot carry
/// the directory part, if it cannot. A directory added is carried when a
/// file is added beneath it and its mode is 0755 (git makes it so under
/// the usual umask); one removed, when every entry beneath it is removed
/// and a file among them (git removes directories it empties).
fn directory_part(c: &Change, later: &[Change]) -> Option<UnrepresentedReason> {
    let dir = |e: &Option<Entry>| e.as_ref().is_some_and(|e| e.kind == EntryKind::Dir);
    if !dir(&c.before) && !dir(&c.after) {
        return None;
    }
    if c.kind() == ChangeKind::Modified {
        return Some(UnrepresentedReason::Mode);
    }
    let prefix = format!("{}/", c.path);
    let below = || later.iter().take_while(|x| x.path.starts_with(&prefix));
    let is_file = |e: &Option<Entry>| e.as_ref().is_some_and(|e| e.kind == EntryKind::File);
    if dir(&c.after) {
        if c.after.as_ref().is_some_and(|a| a.mode != 0o755) {
            return Some(UnrepresentedReason::Mode);
        }
        if !below().any(|x| x.before.is_none() && is_file(&x.after)) {
            return Some(UnrepresentedReason::DirectoryOnly);
        }
    }
    if dir(&c.before) && !below().any(|x| x.after.is_none() && is_file(&x.before)) {
        return Some(UnrepresentedReason::DirectoryOnly);
    }
    None
}

fn file_patch(out: &mut Out, c: &Change, old: Option<&Entry>, new: Option<&Entry>, body: &Body) {
    let (a, b) = (quote("a/", &c.path), quote("b/", &c.path));
    out.line(BOLD, &format!("diff --git {a} {b}"));
    match (old, new) {
        (None, Some(n)) => out.line(BOLD, &format!("new file mode {}", git_mode(n.mode))),
        (Some(o), None) => out.line(BOLD, &format!("deleted file mode {}", git_mode(o.mode))),
        (Some(o), Some(n)) if git_mode(o.mode) != git_mode(n.mode) => {
            out.line(BOLD, &format!("old mode {}", git_mode(o.mode)));
            out.line(BOLD, &format!("new mode {}", git_mode(n.mode)));
        }
        _ => {}
    }
    let Body::Text { old: ot, new: nt } = body else {
        return;
    };
    if ot == nt {
        return;
    }
    out.name_line("---", if old.is_some() { &a } else { "/dev/null" });
    out.name_line("+++", if new.is_some() { &b } else { "/dev/null" });
    let diff = line_diff(ot, nt);
    for group in diff.grouped_ops(3) {
        if group.is_empty() {
            continue;
        }
        out.line(CYAN, &UnifiedHunkHeader::new(&group).to_string());
        for op in &group {
            for ch in diff.iter_changes(op) {
                let (sign, colour) = match ch.tag() {
                    ChangeTag::Equal => (' ', ""),
                    ChangeTag::Delete => ('-', RED),
                    ChangeTag::Insert => ('+', GREEN),
                };
                let value = ch.value();
                let line = value.strip_suffix('\n').unwrap_or(value);
                out.line(colour, &format!("{sign}{line}"));
                if !value.ends_with('\n') {
                    out.line("", "\\ No newline at end of file");
                }
            }
        }
    }
}
