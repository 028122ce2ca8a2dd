//! The contents behind a change: old bytes from the host source (only
//! while they still match the baseline entry), new bytes from the stage,
//! and whether they are text.
//!
//! A side is text when it is valid UTF-8 without a NUL byte and at most
//! [`TEXT_MAX`] bytes; a change is shown as text only when every side
//! present is. Files are opened beneath the held roots
//! ([`glove_fs::beneath`]: no link in any component, no mount crossed), as
//! `O_PATH` first and reopened readable only when `fstat` says they are
//! regular files, and read at most one byte past their recorded size.

use super::diff::Change;
use super::WorkspaceError;
use glove_fs::beneath::{self, open_beneath};
use glove_fs::{Errno, OFlags};
use glove_types::manifest::{Entry, EntryKind};
use glove_types::Sha256Digest;
use rustix::fd::{AsFd, BorrowedFd};
use rustix::fs::{fstat, FileType};
use similar::{Algorithm, ChangeTag, TextDiff};
use std::time::{Duration, Instant};

/// Largest file shown as text; larger files are binary.
pub const TEXT_MAX: u64 = 1 << 20;

/// How long one file's line diff may search for a minimal diff before it
/// settles for a larger (still correct) one.
const DIFF_DEADLINE: Duration = Duration::from_secs(2);

/// The two trees a change's contents come from.
#[derive(Clone, Copy, Debug)]
pub struct Trees<'a> {
    /// The host source directory (the baseline's tree as it is now).
    pub source: BorrowedFd<'a>,
    /// The stage's root (mounted read-only).
    pub stage: BorrowedFd<'a>,
}

/// What a change's content is, as the renderings show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// No content to show: a directory, link or special file, or only the
    /// mode or flags changed.
    None,
    /// Text on every side present (an absent side is empty).
    Text {
        /// The old text.
        old: String,
        /// The new text.
        new: String,
    },
    /// Binary (or larger than [`TEXT_MAX`]) on some side.
    Binary,
    /// The source file no longer matches the baseline: its old content is
    /// unknown.
    SourceChanged,
}

impl Body {
    /// Lines inserted and deleted (0, 0 unless text).
    pub fn line_counts(&self) -> (usize, usize) {
        let Body::Text { old, new } = self else {
            return (0, 0);
        };
        let diff = line_diff(old, new);
        let (mut ins, mut del) = (0, 0);
        for c in diff.iter_all_changes() {
            match c.tag() {
                ChangeTag::Insert => ins += 1,
                ChangeTag::Delete => del += 1,
                ChangeTag::Equal => {}
            }
        }
        (ins, del)
    }
}

/// The line diff of two texts, Myers with a deadline.
pub(crate) fn line_diff<'a>(old: &'a str, new: &'a str) -> TextDiff<'a, 'a, 'a, str> {
    TextDiff::configure()
        .algorithm(Algorithm::Myers)
        .deadline(Instant::now() + DIFF_DEADLINE)
        .diff_lines(old, new)
}

fn file(e: &Option<Entry>) -> Option<&Entry> {
    e.as_ref().filter(|e| e.kind == EntryKind::File)
}

/// The content of `change` from `trees`.
pub fn body(change: &Change, trees: &Trees<'_>) -> Result<Body, WorkspaceError> {
    if !change.content_changed() {
        return Ok(Body::None);
    }
    let (old, new) = (file(&change.before), file(&change.after));
    if old.is_none() && new.is_none() {
        return Ok(Body::None);
    }
    if old.into_iter().chain(new).any(|e| e.size > TEXT_MAX) {
        return Ok(Body::Binary);
    }
    let old_bytes = match old {
        None => Vec::new(),
        Some(e) => match read_verified(trees.source, e)? {
            Some(b) => b,
            None => return Ok(Body::SourceChanged),
        },
    };
    let new_bytes = match new {
        None => Vec::new(),
        Some(e) => read_verified(trees.stage, e)?.ok_or_else(|| WorkspaceError::Changed {
            path: e.path.clone(),
        })?,
    };
    match (text(old_bytes), text(new_bytes)) {
        (Some(old), Some(new)) => Ok(Body::Text { old, new }),
        _ => Ok(Body::Binary),
    }
}

fn text(bytes: Vec<u8>) -> Option<String> {
    if bytes.contains(&0) {
        return None;
    }
    String::from_utf8(bytes).ok()
}

/// The bytes of the regular file `entry.path` beneath `root` if they still
/// are exactly the entry's (size and digest); `None` if the file is gone,
/// is no longer a regular file, or holds other bytes.
pub fn read_verified(
    root: BorrowedFd<'_>,
    entry: &Entry,
) -> Result<Option<Vec<u8>>, WorkspaceError> {
    let path = entry.path.as_str();
    let gone = |e: Errno| matches!(e, Errno::NOENT | Errno::LOOP | Errno::NOTDIR | Errno::XDEV);
    let at = match open_beneath(root, path, OFlags::PATH) {
        Ok(fd) => fd,
        Err(e) if gone(e) => return Ok(None),
        Err(e) => return Err(WorkspaceError::io(path, "open")(e)),
    };
    let st = fstat(&at).map_err(WorkspaceError::io(path, "fstat"))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
        || u64::try_from(st.st_size).ok() != Some(entry.size)
    {
        return Ok(None);
    }
    let fd = match open_beneath(root, path, OFlags::RDONLY | OFlags::NONBLOCK) {
        Ok(fd) => fd,
        Err(e) if gone(e) => return Ok(None),
        Err(e) => return Err(WorkspaceError::io(path, "open")(e)),
    };
    let again = fstat(&fd).map_err(WorkspaceError::io(path, "fstat"))?;
    if again.st_dev != st.st_dev || again.st_ino != st.st_ino {
        return Ok(None);
    }
    let want = usize::try_from(entry.size).unwrap_or(usize::MAX);
    let mut out = vec![0u8; want.saturating_add(1).min(TEXT_MAX as usize + 1)];
    let mut len = 0;
    while len < out.len() {
        let n = beneath::read(fd.as_fd(), out.get_mut(len..).unwrap_or(&mut []))
            .map_err(WorkspaceError::io(path, "read"))?;
        if n == 0 {
            break;
        }
        len += n;
    }
    out.truncate(len);
    if len != want || Some(Sha256Digest::of(&out)) != entry.digest {
        return Ok(None);
    }
    Ok(Some(out))
}
