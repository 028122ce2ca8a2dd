//! The authenticated anchor file kept beside a journal.
//!
//! A journal cut at a record boundary, or put back to an older copy, looks
//! like a journal that was never longer. So the owner of a journal (the
//! session store, the receipt journal) keeps its [`Anchor`] in
//! `<journal>.anchor`, refreshes it after every durable append, and hands it
//! to replay on open, which then refuses a journal shorter than the anchor
//! or diverging from it. The file is small, fixed-size, bound to the
//! journal id, and authenticated with the receipt key under a domain of its
//! own per journal kind, so an anchor is never accepted for another
//! journal, for another purpose, or after a change by anyone without the
//! key. It is only ever written from durable state
//! ([`crate::Journal::anchor`] counts only what a completed sync covered),
//! and always atomically (a new sibling, `fsync`, rename, directory
//! `fsync`).
//!
//! Layout (156 bytes, integers little-endian):
//!
//! ```text
//!   0   8  magic "GLOVEANC"
//!   8   2  version (1)
//!  10   2  slots in use: 1, or 2 while a rewrite is in flight
//!  12  16  journal id
//!  28  48  slot 0, the current anchor: records (u64), byte length (u64),
//!          head digest (32)
//!  76  48  slot 1, the anchor of the file a rewrite is about to put in
//!          place (all zeros when only one slot is in use)
//! 124  32  HMAC-SHA-256(receipt key, domain || 0x00 || bytes 0..124)
//! ```
//!
//! Rewrites (receipt compaction) change the whole file, salt included, so
//! no single anchor describes both the old and the new file. The writer
//! first stores both (slot 0 the old file, slot 1 the new one), then
//! renames the new file in place, then stores the new anchor alone. A crash
//! at any point leaves a file that matches one of the slots, and
//! [`AnchorRecord::candidates`] gives replay both to try.
//!
//! Deleting the anchor is not something a reader can tell from a journal
//! that never had one; owners therefore refuse to create a journal where an
//! anchor (or another piece of evidence) is still present
//! (`journal_missing_but_anchored`), and never delete one themselves.

use crate::anchor::Anchor;
use crate::error::{CorruptKind, JournalError};
use crate::format::HEADER_LEN;
use crate::placement;
use crate::receipt::ReceiptKey;
use rustix::fd::{AsFd, OwnedFd};
use std::ffi::{OsStr, OsString};
use std::path::Path;
use subtle::ConstantTimeEq;

/// The MAC domain of the session store's anchor file.
pub const STORE_ANCHOR_DOMAIN: &[u8] = b"glove-session-store-anchor-v2";
/// The MAC domain of the apply journal's anchor file.
pub const APPLY_ANCHOR_DOMAIN: &[u8] = b"glove-apply-journal-anchor-v1";
/// The MAC domain of the path-exposure journal's anchor file.
pub const EXPOSURE_ANCHOR_DOMAIN: &[u8] = b"glove-exposure-journal-anchor-v1";
/// The MAC domain of the receipt journal's anchor file.
pub const RECEIPT_ANCHOR_DOMAIN: &[u8] = b"glove-receipt-journal-anchor-v1";

const MAGIC: &[u8; 8] = b"GLOVEANC";
const VERSION: u16 = 1;
const SLOT_LEN: usize = 48;
const BODY_LEN: usize = 28 + 2 * SLOT_LEN;
/// The exact size of an anchor file.
pub const ANCHOR_FILE_LEN: usize = BODY_LEN + 32;

/// What an anchor file says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnchorRecord {
    /// The journal the anchor belongs to.
    pub journal_id: [u8; 16],
    /// The anchor of the journal in place.
    pub current: Anchor,
    /// While a rewrite is in flight: the anchor of the file about to
    /// replace it.
    pub next: Option<Anchor>,
}

impl AnchorRecord {
    /// The anchors a journal at this name may match, current first.
    pub fn candidates(&self) -> impl Iterator<Item = &Anchor> + '_ {
        core::iter::once(&self.current).chain(self.next.iter())
    }
}

fn put_slot(b: &mut Vec<u8>, a: Option<&Anchor>) {
    match a {
        Some(a) => {
            b.extend_from_slice(&a.records.to_le_bytes());
            b.extend_from_slice(&a.byte_len.to_le_bytes());
            b.extend_from_slice(&a.head);
        }
        None => b.extend_from_slice(&[0u8; SLOT_LEN]),
    }
}

fn get_slot(s: &[u8]) -> Option<Anchor> {
    let records = u64::from_le_bytes(s.get(0..8)?.try_into().ok()?);
    let byte_len = u64::from_le_bytes(s.get(8..16)?.try_into().ok()?);
    let head = s.get(16..48)?.try_into().ok()?;
    // Every journal holds at least its header.
    (byte_len >= HEADER_LEN as u64).then_some(Anchor {
        records,
        byte_len,
        head,
    })
}

/// Encodes an anchor file.
pub fn encode(key: &ReceiptKey, domain: &[u8], rec: &AnchorRecord) -> Vec<u8> {
    let mut b = Vec::with_capacity(ANCHOR_FILE_LEN);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    let slots: u16 = if rec.next.is_some() { 2 } else { 1 };
    b.extend_from_slice(&slots.to_le_bytes());
    b.extend_from_slice(&rec.journal_id);
    put_slot(&mut b, Some(&rec.current));
    put_slot(&mut b, rec.next.as_ref());
    let mac = key.mac(domain, &[&b]);
    b.extend_from_slice(&mac);
    b
}

/// Strictly decodes an anchor file: exact length, the MAC (constant time)
/// before anything else is trusted, then magic, version, slot count, an
/// all-zero unused slot and plausible byte lengths. Never panics.
pub fn decode(key: &ReceiptKey, domain: &[u8], b: &[u8]) -> Result<AnchorRecord, JournalError> {
    let bad = || JournalError::corrupt(CorruptKind::AnchorFileInvalid, 0);
    if b.len() != ANCHOR_FILE_LEN {
        return Err(bad());
    }
    let (body, mac) = b.split_at(BODY_LEN);
    let ok: bool = key.mac(domain, &[body]).ct_eq(mac).into();
    if !ok || body.get(..8) != Some(&MAGIC[..]) || body.get(8..10) != Some(&VERSION.to_le_bytes()) {
        return Err(bad());
    }
    let slots = body.get(10..12).ok_or_else(bad)?;
    let journal_id = body
        .get(12..28)
        .ok_or_else(bad)?
        .try_into()
        .map_err(|_| bad())?;
    let slot0 = body.get(28..28 + SLOT_LEN).ok_or_else(bad)?;
    let slot1 = body.get(28 + SLOT_LEN..BODY_LEN).ok_or_else(bad)?;
    let current = get_slot(slot0).ok_or_else(bad)?;
    let next = match slots {
        [1, 0] if slot1.iter().all(|x| *x == 0) => None,
        [2, 0] => Some(get_slot(slot1).ok_or_else(bad)?),
        _ => return Err(bad()),
    };
    Ok(AnchorRecord {
        journal_id,
        current,
        next,
    })
}

/// Where a journal's anchor file is and how it is keyed.
pub struct AnchorFile {
    dir: OwnedFd,
    name: OsString,
    key: ReceiptKey,
    domain: &'static [u8],
}

impl core::fmt::Debug for AnchorFile {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AnchorFile")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The anchor file's name beside a journal called `journal_name`.
pub fn anchor_name(journal_name: &OsStr) -> OsString {
    let mut s = journal_name.to_os_string();
    s.push(".anchor");
    s
}

/// Stores `rec` in `file`; a failure poisons the journal it anchors
/// (`failed`), whose appends are then refused by [`refuse_if_poisoned`]: a
/// record on disk that its anchor does not count must not be followed by
/// more.
pub(crate) fn store_or_poison(
    file: &AnchorFile,
    failed: &mut bool,
    rec: &AnchorRecord,
) -> Result<(), JournalError> {
    file.store(rec).inspect_err(|_| *failed = true)
}

/// `journal_poisoned` once an anchor write has failed.
pub(crate) fn refuse_if_poisoned(failed: bool) -> Result<(), JournalError> {
    if failed {
        return Err(JournalError::Poisoned);
    }
    Ok(())
}

impl AnchorFile {
    /// The anchor file `<journal>.anchor` beside `journal` (whose directory
    /// must pass the journal placement checks), keyed with `key` under
    /// `domain`.
    pub fn beside(
        journal: &Path,
        key: ReceiptKey,
        domain: &'static [u8],
    ) -> Result<AnchorFile, JournalError> {
        let (dir, name) = placement::split(journal);
        Ok(AnchorFile {
            dir: placement::open_dir(&dir)?,
            name: anchor_name(name),
            key,
            domain,
        })
    }

    /// Whether something is at the anchor file's name.
    pub fn exists(&self) -> bool {
        rustix::fs::statat(&self.dir, &self.name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok()
    }

    /// Reads and verifies the anchor file; `None` when there is none.
    pub fn load(&self) -> Result<Option<AnchorRecord>, JournalError> {
        let fd = match placement::open_in(self.dir.as_fd(), &self.name, false) {
            Ok(fd) => fd,
            Err(JournalError::NotFound) => return Ok(None),
            Err(e) => return Err(e),
        };
        let size = placement::check_file(fd.as_fd())?;
        if size != ANCHOR_FILE_LEN as u64 {
            return Err(JournalError::corrupt(CorruptKind::AnchorFileInvalid, 0));
        }
        let bytes = placement::read_exact(fd.as_fd(), size)?;
        decode(&self.key, self.domain, &bytes).map(Some)
    }

    /// Durably replaces the anchor file.
    pub fn store(&self, rec: &AnchorRecord) -> Result<(), JournalError> {
        placement::replace_file(
            self.dir.as_fd(),
            &self.name,
            &encode(&self.key, self.domain, rec),
        )
    }
}

/// Opens (or replays) a journal through `open`, trying each of
/// `candidates` (the anchors an anchor file names) in order; the first one
/// the journal matches wins. A failure other than a mismatch with the
/// anchor is returned at once; when no anchor matches, the error for the
/// first one is returned.
pub(crate) fn open_matching<'a, T>(
    candidates: impl IntoIterator<Item = &'a Anchor>,
    mut open: impl FnMut(&Anchor) -> Result<T, JournalError>,
) -> Result<T, JournalError> {
    let mut first = None;
    for a in candidates {
        match open(a) {
            Ok(v) => return Ok(v),
            Err(
                e @ JournalError::Corrupt {
                    kind: CorruptKind::ShorterThanAnchor | CorruptKind::AnchorMismatch,
                    ..
                },
            ) => {
                first.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(first.unwrap_or_else(|| JournalError::corrupt(CorruptKind::AnchorMismatch, 0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ReceiptKey {
        ReceiptKey::from_bytes([3; 32])
    }

    fn rec(next: bool) -> AnchorRecord {
        AnchorRecord {
            journal_id: [9; 16],
            current: Anchor {
                records: 4,
                byte_len: 400,
                head: [1; 32],
            },
            next: next.then_some(Anchor {
                records: 2,
                byte_len: 200,
                head: [2; 32],
            }),
        }
    }

    #[test]
    fn round_trip_and_every_bit_flip_is_refused() {
        for next in [false, true] {
            let r = rec(next);
            let b = encode(&key(), STORE_ANCHOR_DOMAIN, &r);
            assert_eq!(b.len(), ANCHOR_FILE_LEN);
            assert_eq!(decode(&key(), STORE_ANCHOR_DOMAIN, &b).unwrap(), r);
            for bit in 0..b.len() * 8 {
                let mut f = b.clone();
                f[bit / 8] ^= 1 << (bit % 8);
                assert!(
                    decode(&key(), STORE_ANCHOR_DOMAIN, &f).is_err(),
                    "bit {bit}"
                );
            }
            for len in 0..b.len() {
                assert!(decode(&key(), STORE_ANCHOR_DOMAIN, &b[..len]).is_err());
            }
        }
    }

    #[test]
    fn domains_and_keys_do_not_cross() {
        let b = encode(&key(), STORE_ANCHOR_DOMAIN, &rec(false));
        let e = decode(&key(), RECEIPT_ANCHOR_DOMAIN, &b).unwrap_err();
        assert_eq!(
            e.code(),
            glove_types::codes::journal::JOURNAL_ANCHOR_FILE_INVALID
        );
        assert!(decode(&ReceiptKey::from_bytes([4; 32]), STORE_ANCHOR_DOMAIN, &b).is_err());
    }
}
