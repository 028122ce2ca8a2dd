//! Trusted anchors: what a caller remembers about a journal outside it.
//!
//! A journal cut at a record boundary looks exactly like a journal that was
//! never longer. A caller that must notice such a cut keeps an [`Anchor`]
//! (taken from [`crate::Journal::anchor`] after a durable append) somewhere
//! the journal's own storage cannot roll back, and hands it to open. Replay
//! then fails closed when the file is shorter than the anchor says, or when
//! the records at the anchored position do not end at the anchored length
//! with the anchored head digest.

use glove_types::digest::to_hex;

/// A trusted summary of a journal prefix.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Anchor {
    /// How many records the prefix holds.
    pub records: u64,
    /// The byte length of the file at the end of that prefix.
    pub byte_len: u64,
    /// The chained digest of the prefix's last record (the header digest
    /// for an empty prefix).
    pub head: [u8; 32],
}

impl core::fmt::Debug for Anchor {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "Anchor {{ records: {}, byte_len: {}, head: {} }}",
            self.records,
            self.byte_len,
            to_hex(&self.head)
        )
    }
}
