//! Retained workspaces: the manifest of a tree, taken through descriptors,
//! and the diff between two manifests with its renderings.
//!
//! * [`manifest`] — [`take`](manifest::take): the walk that makes a
//!   [`Manifest`](glove_types::manifest::Manifest) of the tree below a held
//!   directory, every entry opened beneath its parent;
//! * [`diff`] — [`compare`](diff::compare): what changed between the
//!   baseline (taken at staging) and the final manifest;
//! * [`content`] — reading a changed file's old bytes (the host source,
//!   only while they still match the baseline) and new bytes (the stage),
//!   and telling text from binary;
//! * [`render`] — `glove diff`'s three renderings: a `git diff --stat`
//!   summary, a JSON document and a `git apply`-able patch.
//!
//! Messages name paths relative to the workspace root, never host paths.

use glove_fs::Errno;
use glove_types::codes::workspace::*;
use glove_types::{ErrorCode, Rejection};
use std::fmt;

pub mod content;
pub mod diff;
pub mod known;
pub mod manifest;
pub mod render;

#[cfg(test)]
mod tests;

/// Why a workspace could not be walked, read or rendered.
#[derive(Debug)]
#[non_exhaustive]
pub enum WorkspaceError {
    /// A filesystem operation failed.
    Io {
        /// The entry, relative to the root (`.` for the root).
        path: String,
        /// The operation.
        op: &'static str,
        /// The kernel's error.
        errno: Errno,
    },
    /// A mount point below the root.
    MountPoint {
        /// The entry.
        path: String,
    },
    /// A name that is not UTF-8.
    NonUtf8Name {
        /// The directory holding it.
        parent: String,
    },
    /// More entries than the bound.
    TooManyEntries {
        /// The bound.
        max: usize,
    },
    /// A path with more components than the bound.
    TooDeep {
        /// The directory whose entries would be too deep.
        parent: String,
    },
    /// A path longer than the bound.
    PathTooLong {
        /// The directory holding it.
        parent: String,
    },
    /// More bytes to hash than the bound, or one file larger than a
    /// manifest records.
    TooLarge {
        /// The entry that went over.
        path: String,
    },
    /// An entry changed while it was read.
    Changed {
        /// The entry.
        path: String,
    },
    /// The manifest broke its definition.
    Manifest(Rejection),
    /// The patch cannot carry these changes.
    PatchIncomplete(Vec<render::Unrepresented>),
}

impl WorkspaceError {
    /// The stable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            WorkspaceError::Io { .. } => WORKSPACE_WALK_FAILED,
            WorkspaceError::MountPoint { .. } => WORKSPACE_MOUNT_POINT,
            WorkspaceError::NonUtf8Name { .. } => WORKSPACE_NON_UTF8_NAME,
            WorkspaceError::TooManyEntries { .. } => WORKSPACE_TOO_MANY_ENTRIES,
            WorkspaceError::TooDeep { .. } => WORKSPACE_TOO_DEEP,
            WorkspaceError::PathTooLong { .. } => WORKSPACE_PATH_TOO_LONG,
            WorkspaceError::TooLarge { .. } => WORKSPACE_TOO_LARGE,
            WorkspaceError::Changed { .. } => WORKSPACE_CHANGED_DURING_WALK,
            WorkspaceError::Manifest(r) => r.code(),
            WorkspaceError::PatchIncomplete(_) => WORKSPACE_PATCH_INCOMPLETE,
        }
    }

    /// The error as a code and a message (paths relative to the root).
    pub fn to_rejection(&self) -> Rejection {
        match self {
            WorkspaceError::Manifest(r) => r.clone(),
            other => Rejection::new(other.code(), other.to_string()),
        }
    }

    pub(crate) fn io<'a>(path: &'a str, op: &'static str) -> impl Fn(Errno) -> WorkspaceError + 'a {
        move |errno| WorkspaceError::Io {
            path: display(path).to_owned(),
            op,
            errno,
        }
    }
}

/// `.` for the root's empty relative path.
pub(crate) fn display(path: &str) -> &str {
    if path.is_empty() {
        "."
    } else {
        path
    }
}

impl fmt::Display for WorkspaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkspaceError::Io { path, op, errno } => write!(f, "{op} {path:?}: {errno}"),
            WorkspaceError::MountPoint { path } => write!(f, "{path:?} is a mount point"),
            WorkspaceError::NonUtf8Name { parent } => {
                write!(f, "{parent:?} holds a name that is not UTF-8")
            }
            WorkspaceError::TooManyEntries { max } => write!(f, "more than {max} entries"),
            WorkspaceError::TooDeep { parent } => {
                write!(f, "entries of {parent:?} are nested too deep")
            }
            WorkspaceError::PathTooLong { parent } => {
                write!(f, "{parent:?} holds a name whose path is too long")
            }
            WorkspaceError::TooLarge { path } => {
                write!(f, "the files are larger than the bound at {path:?}")
            }
            WorkspaceError::Changed { path } => write!(f, "{path:?} changed while it was read"),
            WorkspaceError::Manifest(r) => write!(f, "{}", r.message()),
            WorkspaceError::PatchIncomplete(list) => {
                write!(f, "a git patch cannot carry:")?;
                for u in list {
                    write!(f, " {:?} ({});", u.path, u.reason.describe())?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for WorkspaceError {}
