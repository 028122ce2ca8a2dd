//! [`JournalSpec`]: the fixed facts a journal is opened with.

use crate::format::{JournalKind, HEADER_LEN};

/// The kind, bounds and record kinds of one journal.
///
/// The same spec must be used to create, open and replay a journal: the
/// header's kind is checked against [`JournalSpec::kind`], every stored
/// record against the bounds and the list of record kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalSpec {
    /// Written in the header and checked on open.
    pub kind: JournalKind,
    /// Largest file size in bytes, header included.
    pub max_bytes: u64,
    /// Largest number of records.
    pub max_records: u64,
    /// Largest payload of one record, in bytes.
    pub max_payload: u32,
    /// The record kinds this journal carries; anything else is corrupt.
    pub record_kinds: &'static [u16],
}

impl JournalSpec {
    /// Whether the journal carries this record kind.
    pub fn carries(&self, kind: u16) -> bool {
        self.record_kinds.contains(&kind)
    }

    /// The smallest valid file: a header and no records.
    pub const fn empty_len() -> u64 {
        HEADER_LEN as u64
    }
}
