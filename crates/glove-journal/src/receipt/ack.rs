//! The acknowledged-head file: a second, durable anchor beside the journal.
//!
//! `<journal>.ack` holds the last head the consumer acknowledged, bound to
//! the journal id and authenticated with the receipt key. It is replaced
//! atomically (new sibling, `fsync`, rename, directory `fsync`).
//!
//! ```text
//!  0  8  magic "GLOVEACK"
//!  8  2  version (1)
//! 10 16  journal id
//! 26  8  acknowledged sequence number (LE)
//! 34 32  chain value at that sequence number
//! 66 32  HMAC(key, "glove-receipt-ack-v1" 0x00 || bytes 0..66)
//! ```

use super::mac::{ReceiptHead, ReceiptKey, ACK_DOMAIN};
use crate::error::{CorruptKind, JournalError};
use crate::placement;
use rustix::fd::AsFd;
use std::ffi::{OsStr, OsString};
use subtle::ConstantTimeEq;

const MAGIC: &[u8; 8] = b"GLOVEACK";
pub(crate) const LEN: usize = 98;

pub(crate) fn ack_name(journal_name: &OsStr) -> OsString {
    let mut s = journal_name.to_os_string();
    s.push(".ack");
    s
}

pub(crate) fn encode(key: &ReceiptKey, journal_id: &[u8; 16], head: &ReceiptHead) -> Vec<u8> {
    let mut b = Vec::with_capacity(LEN);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(journal_id);
    b.extend_from_slice(&head.seq.to_le_bytes());
    b.extend_from_slice(&head.chain);
    let mac = key.mac(ACK_DOMAIN, &[&b]);
    b.extend_from_slice(&mac);
    b
}

pub(crate) fn decode(
    key: &ReceiptKey,
    journal_id: &[u8; 16],
    b: &[u8],
) -> Result<ReceiptHead, JournalError> {
    let bad = || JournalError::corrupt(CorruptKind::ReceiptAckFileInvalid, 0);
    if b.len() != LEN {
        return Err(bad());
    }
    let (body, mac) = b.split_at(66);
    let ok: bool = key.mac(ACK_DOMAIN, &[body]).ct_eq(mac).into();
    if !ok
        || &body[..8] != MAGIC
        || body[8..10] != 1u16.to_le_bytes()
        || &body[10..26] != journal_id
    {
        return Err(bad());
    }
    let seq = u64::from_le_bytes(body[26..34].try_into().map_err(|_| bad())?);
    let chain = body[34..66].try_into().map_err(|_| bad())?;
    Ok(ReceiptHead { seq, chain })
}

/// Reads the ack file beside the journal; `None` when there is none.
pub(crate) fn read(
    dir: &std::path::Path,
    journal_name: &OsStr,
    key: &ReceiptKey,
    journal_id: &[u8; 16],
) -> Result<Option<ReceiptHead>, JournalError> {
    let dirfd = placement::open_dir(dir)?;
    let fd = match placement::open_in(dirfd.as_fd(), &ack_name(journal_name), false) {
        Ok(fd) => fd,
        Err(JournalError::NotFound) => return Ok(None),
        Err(e) => return Err(e),
    };
    let size = placement::check_file(fd.as_fd())?;
    if size != LEN as u64 {
        return Err(JournalError::corrupt(CorruptKind::ReceiptAckFileInvalid, 0));
    }
    let bytes = placement::read_exact(fd.as_fd(), size)?;
    decode(key, journal_id, &bytes).map(Some)
}

/// Durably replaces the ack file.
pub(crate) fn write(
    dir: &std::path::Path,
    journal_name: &OsStr,
    key: &ReceiptKey,
    journal_id: &[u8; 16],
    head: &ReceiptHead,
) -> Result<(), JournalError> {
    let dirfd = placement::open_dir(dir)?;
    placement::replace_file(
        dirfd.as_fd(),
        &ack_name(journal_name),
        &encode(key, journal_id, head),
    )
}

/// Whether something is at the ack file's name (evidence a new journal
/// must not be created over).
pub(crate) fn exists(dir: &std::path::Path, journal_name: &OsStr) -> Result<bool, JournalError> {
    let dirfd = placement::open_dir(dir)?;
    Ok(rustix::fs::statat(
        &dirfd,
        ack_name(journal_name),
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .is_ok())
}
