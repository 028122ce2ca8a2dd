//! Writing journal files: the image of a new or rewritten file, its
//! exclusive creation beside the old one, and the repair of a torn tail.

use super::*;

/// Encodes a header and records into a file image, checking the bounds.
pub(super) fn build_image<'a>(
    spec: &JournalSpec,
    header: &Header,
    records: impl IntoIterator<Item = (u16, &'a [u8])>,
) -> Result<(Vec<u8>, u64, [u8; 32]), JournalError> {
    let mut image = header.encode().to_vec();
    let mut head = header.digest;
    let mut count = 0u64;
    for (kind, payload) in records {
        if !spec.carries(kind) {
            return Err(JournalError::KindRefused { kind });
        }
        if payload.len() as u64 > u64::from(spec.max_payload) {
            return Err(JournalError::RecordTooLarge {
                len: payload.len() as u64,
                max: u64::from(spec.max_payload),
            });
        }
        count += 1;
        head = encode_record(&mut image, &header.salt, &head, kind, count, payload);
    }
    if count > spec.max_records {
        return Err(JournalError::Full(Bound::Records));
    }
    if image.len() as u64 > spec.max_bytes {
        return Err(JournalError::Full(Bound::Bytes));
    }
    Ok((image, count, head))
}

/// Writes a complete new file beside `name`, locks and syncs it, renames it
/// into place (refusing to replace unless `replace`), and syncs the directory.
pub(super) fn write_new(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    image: &[u8],
    replace: bool,
) -> Result<(OwnedFd, u64), JournalError> {
    let tmp = placement::sibling_name(name, "new")?;
    let fd = placement::create_in(dir.as_fd(), &tmp)?;
    let staged = (|| {
        placement::lock(fd.as_fd())?;
        placement::write_all_at(fd.as_fd(), image, 0).map_err(JournalError::io(IoOp::Write))?;
        fs::fsync(&fd).map_err(JournalError::io(IoOp::Sync))
    })();
    if let Err(e) = staged {
        placement::unlink_in(dir.as_fd(), &tmp);
        return Err(e);
    }
    crate::crash_point::reached("journal_new_synced");
    if let Err(e) = placement::rename_in(dir.as_fd(), &tmp, name, !replace) {
        placement::unlink_in(dir.as_fd(), &tmp);
        return Err(e);
    }
    crate::crash_point::reached("journal_new_renamed");
    placement::sync_dir(dir.as_fd())?;
    Ok((fd, image.len() as u64))
}

pub(super) fn repair_torn(
    dir: &OwnedFd,
    fd: &OwnedFd,
    name: &std::ffi::OsStr,
    dir_path: &Path,
    image: &[u8],
    torn: TornTail,
) -> Result<TornRepair, JournalError> {
    let start = usize::try_from(torn.offset).unwrap_or(image.len());
    let tail = image.get(start..).unwrap_or(&[]);
    let r: [u8; 8] = placement::random()?;
    let mut saved = name.to_os_string();
    saved.push(format!(
        ".torn.{}.{}",
        torn.offset,
        glove_types::digest::to_hex(&r)
    ));
    let copy = placement::create_in(dir.as_fd(), &saved)?;
    placement::write_all_at(copy.as_fd(), tail, 0).map_err(JournalError::io(IoOp::Write))?;
    fs::fsync(&copy).map_err(JournalError::io(IoOp::Sync))?;
    placement::sync_dir(dir.as_fd())?;
    fs::ftruncate(fd, torn.offset).map_err(JournalError::io(IoOp::Truncate))?;
    fs::fsync(fd).map_err(JournalError::io(IoOp::Sync))?;
    Ok(TornRepair {
        offset: torn.offset,
        len: torn.len,
        saved_as: dir_path.join(saved),
    })
}
