//! What changed between two manifests of one workspace: the baseline taken
//! at staging and the final one of the stage.

use glove_types::manifest::{Blocker, Entry, Manifest};
use std::cmp::Ordering;

/// How an entry changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    /// Only in the stage.
    Added,
    /// Only in the baseline.
    Removed,
    /// In both, of the same kind, with another content, mode or flags
    /// (see [`Change::content_changed`], [`Change::mode_changed`],
    /// [`Change::flags_changed`]).
    Modified,
    /// In both, of another kind (a file become a directory, …).
    TypeChanged,
}

impl ChangeKind {
    /// The snake_case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Removed => "removed",
            ChangeKind::Modified => "modified",
            ChangeKind::TypeChanged => "type_changed",
        }
    }
}

/// One changed entry: its baseline and stage forms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The entry's path.
    pub path: String,
    /// In the baseline (`None` when added).
    pub before: Option<Entry>,
    /// In the stage (`None` when removed).
    pub after: Option<Entry>,
}

impl Change {
    /// How it changed.
    pub fn kind(&self) -> ChangeKind {
        match (&self.before, &self.after) {
            (None, _) => ChangeKind::Added,
            (Some(_), None) => ChangeKind::Removed,
            (Some(b), Some(a)) if b.kind != a.kind => ChangeKind::TypeChanged,
            (Some(_), Some(_)) => ChangeKind::Modified,
        }
    }

    /// The content differs (size or digest), or it was added or removed
    /// with content (a file or link).
    pub fn content_changed(&self) -> bool {
        match (&self.before, &self.after) {
            (Some(b), Some(a)) => b.kind != a.kind || b.size != a.size || b.digest != a.digest,
            (Some(e), None) | (None, Some(e)) => e.kind.has_digest(),
            (None, None) => false,
        }
    }

    /// Both are of the same kind and the permission bits differ.
    pub fn mode_changed(&self) -> bool {
        matches!((&self.before, &self.after), (Some(b), Some(a)) if b.kind == a.kind && b.mode != a.mode)
    }

    /// Both are of the same kind and a flag (`hardlink`, `sparse`,
    /// `xattr`) differs.
    pub fn flags_changed(&self) -> bool {
        matches!((&self.before, &self.after), (Some(b), Some(a)) if b.kind == a.kind
            && (b.hardlink, b.sparse, b.xattr) != (a.hardlink, a.sparse, a.xattr))
    }
}

/// Everything that changed, sorted bytewise by path, with the root's
/// modes and the stage's blockers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Changes {
    /// The changed entries.
    pub changes: Vec<Change>,
    /// The root directory's mode before and after, when it changed.
    pub root_mode: Option<(u32, u32)>,
    /// What apply cannot carry in the stage ([`Manifest::blockers`] of the
    /// stage manifest).
    pub blockers: Vec<Blocker>,
}

impl Changes {
    /// Nothing changed.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty() && self.root_mode.is_none()
    }
}

/// Compares the baseline manifest with the stage's.
pub fn compare(baseline: &Manifest, stage: &Manifest) -> Changes {
    let (b, s) = (baseline.entries(), stage.entries());
    let (mut i, mut j) = (0, 0);
    let mut changes = Vec::new();
    loop {
        let order = match (b.get(i), s.get(j)) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some(x), Some(y)) => x.path.as_bytes().cmp(y.path.as_bytes()),
        };
        let (before, after) = match order {
            Ordering::Less => {
                i += 1;
                (b.get(i - 1), None)
            }
            Ordering::Greater => {
                j += 1;
                (None, s.get(j - 1))
            }
            Ordering::Equal => {
                i += 1;
                j += 1;
                (b.get(i - 1), s.get(j - 1))
            }
        };
        if let (Some(x), Some(y)) = (before, after) {
            if x == y {
                continue;
            }
        }
        let Some(path) = before.or(after).map(|e| e.path.clone()) else {
            break;
        };
        changes.push(Change {
            path,
            before: before.cloned(),
            after: after.cloned(),
        });
    }
    let root_mode = (baseline.root_mode() != stage.root_mode())
        .then(|| (baseline.root_mode(), stage.root_mode()));
    Changes {
        changes,
        root_mode,
        blockers: stage.blockers(),
    }
}
