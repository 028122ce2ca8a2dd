//! [`JournalView`]: the read-only view of a journal a guarded writer owns.

use super::Journal;
use crate::anchor::Anchor;
use crate::commit::CommitStats;
use crate::spec::JournalSpec;
use std::path::Path;

/// A read-only view of a journal that a guarded writer owns (the session
/// store, whose records only the lifecycle appends, and the receipt
/// journal, whose records carry the receipt MAC): its size, count, anchor
/// and identity, never a way to append, queue, flush or rewrite.
#[derive(Clone, Copy, Debug)]
pub struct JournalView<'a>(&'a Journal);

impl<'a> JournalView<'a> {
    pub(crate) fn new(journal: &'a Journal) -> Self {
        JournalView(journal)
    }

    /// See [`Journal::len_bytes`].
    pub fn len_bytes(&self) -> u64 {
        self.0.len_bytes()
    }

    /// See [`Journal::record_count`].
    pub fn record_count(&self) -> u64 {
        self.0.record_count()
    }

    /// See [`Journal::anchor`].
    pub fn anchor(&self) -> Anchor {
        self.0.anchor()
    }

    /// See [`Journal::journal_id`].
    pub fn journal_id(&self) -> [u8; 16] {
        self.0.journal_id()
    }

    /// See [`Journal::is_poisoned`].
    pub fn is_poisoned(&self) -> bool {
        self.0.is_poisoned()
    }

    /// See [`Journal::has_room`].
    pub fn has_room(&self, payload_lens: &[usize]) -> bool {
        self.0.has_room(payload_lens)
    }

    /// See [`Journal::commit_stats`].
    pub fn commit_stats(&self) -> CommitStats {
        self.0.commit_stats()
    }

    /// See [`Journal::spec`].
    pub fn spec(&self) -> &'a JournalSpec {
        self.0.spec()
    }

    /// See [`Journal::path`].
    pub fn path(&self) -> &'a Path {
        self.0.path()
    }
}
