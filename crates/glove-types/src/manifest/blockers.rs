//! What apply cannot carry. Apply copies single-link, non-sparse regular
//! files and directories without extended attributes (ACLs included) and
//! without the setuid, setgid or sticky bit; every other entry is named
//! here with each reason it is refused for.

use super::{EntryKind, Manifest};
use serde::Serialize;

/// Why apply cannot carry an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BlockerReason {
    /// A symbolic link.
    Symlink,
    /// A FIFO, socket or device.
    SpecialFile,
    /// A file with more than one hard link.
    HardLink,
    /// A sparse file.
    Sparse,
    /// An extended attribute or ACL.
    ExtendedAttribute,
    /// The setuid, setgid or sticky bit.
    SpecialModeBits,
}

impl BlockerReason {
    /// The snake_case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            BlockerReason::Symlink => "symlink",
            BlockerReason::SpecialFile => "special_file",
            BlockerReason::HardLink => "hard_link",
            BlockerReason::Sparse => "sparse",
            BlockerReason::ExtendedAttribute => "extended_attribute",
            BlockerReason::SpecialModeBits => "special_mode_bits",
        }
    }

    /// A one-line explanation for people.
    pub const fn describe(self) -> &'static str {
        match self {
            BlockerReason::Symlink => "a symbolic link",
            BlockerReason::SpecialFile => "a special file (FIFO, socket or device)",
            BlockerReason::HardLink => "a file with more than one hard link",
            BlockerReason::Sparse => "a sparse file",
            BlockerReason::ExtendedAttribute => "an ACL or extended attribute",
            BlockerReason::SpecialModeBits => "the setuid, setgid or sticky bit",
        }
    }
}

/// One entry apply cannot carry, and why. An entry with several reasons
/// has one blocker each.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Blocker {
    /// The entry's path; `.` for the root directory itself.
    pub path: String,
    /// Why.
    pub reason: BlockerReason,
}

pub(super) fn of(m: &Manifest) -> Vec<Blocker> {
    let mut out = Vec::new();
    if m.root_mode & 0o7000 != 0 {
        out.push(Blocker {
            path: ".".into(),
            reason: BlockerReason::SpecialModeBits,
        });
    }
    for e in &m.entries {
        let mut push = |reason| {
            out.push(Blocker {
                path: e.path.clone(),
                reason,
            })
        };
        match e.kind {
            EntryKind::Symlink => push(BlockerReason::Symlink),
            EntryKind::Other => push(BlockerReason::SpecialFile),
            EntryKind::Dir | EntryKind::File => {}
        }
        if e.hardlink {
            push(BlockerReason::HardLink);
        }
        if e.sparse {
            push(BlockerReason::Sparse);
        }
        if e.xattr {
            push(BlockerReason::ExtendedAttribute);
        }
        if e.kind != EntryKind::Symlink && e.special_bits() {
            push(BlockerReason::SpecialModeBits);
        }
    }
    out
}
