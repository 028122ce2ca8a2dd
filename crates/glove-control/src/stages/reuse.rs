//! The stage's side of reusing baseline digests in the final manifest
//! (the argument is in [`crate::workspace::known`]): the stat table is
//! written beside the baseline when the stage is made, and read back, with
//! every condition checked, when it is frozen. Anything missing, malformed
//! or not as it was gives `None`: the final manifest then reads every file.

use super::{inspect, StageDir, StageRecord, BASELINE, STAT};
use crate::workspace::known::{FileStat, KnownFiles, StatTable, MAX_STAT_BYTES};
use glove_types::Rejection;
use rustix::fd::BorrowedFd;

/// Where the kernel says which boot this is.
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// This boot's id, if the kernel says.
fn boot_id() -> Option<String> {
    let s = std::fs::read_to_string(BOOT_ID).ok()?;
    let s = s.trim();
    (!s.is_empty() && s.len() <= 64).then(|| s.to_owned())
}

/// The coarse real-time clock: no ctime the kernel sets after reading it
/// is earlier (barring the clock stepped back).
fn fence() -> (i64, i64) {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
    (t.tv_sec, t.tv_nsec)
}

/// Writes the stat table of the baseline walk's `stats`; call it after the
/// walk and before the session starts. Without a boot id, nothing is
/// written (the freeze will hash everything).
pub(super) fn write_table(
    stage: &StageDir,
    stats: Vec<(String, FileStat)>,
) -> Result<(), Rejection> {
    let fence = fence();
    let Some(boot) = boot_id() else {
        return Ok(());
    };
    stage.write(STAT, &StatTable::new(&boot, fence, stats).encode())
}

/// The files the final manifest of `stage` may keep the baseline digest
/// of: the stat table, taken in this boot, on an image whose file system
/// (`image`, after the read-only mount replayed its journal) recorded no
/// error, joined with the baseline manifest the record names.
pub(super) fn known_files(
    stage: &StageDir,
    record: &StageRecord,
    image: BorrowedFd<'_>,
) -> Option<KnownFiles> {
    let bytes = stage.read(STAT, MAX_STAT_BYTES as u64).ok()?;
    let table = StatTable::decode(&bytes)?;
    if boot_id().as_deref() != Some(table.boot_id()) || !clean_superblock(image) {
        return None;
    }
    let baseline = inspect::read_manifest(stage, BASELINE, record.baseline()).ok()?;
    Some(KnownFiles::join(&table, &baseline))
}

/// Offsets in an ext4 superblock (which starts 1024 bytes into the image).
const SUPERBLOCK: u64 = 1024;
const S_MAGIC: usize = 0x38;
const S_STATE: usize = 0x3A;
const S_ERROR_COUNT: usize = 0x194;
const EXT4_MAGIC: u16 = 0xEF53;
const EXT4_ERROR_FS: u16 = 0x0002;

/// Whether the image's ext4 superblock is one with no error recorded: not
/// in the error state, an error count of zero.
pub(super) fn clean_superblock(image: BorrowedFd<'_>) -> bool {
    let mut sb = [0u8; 1024];
    match rustix::io::pread(image, &mut sb, SUPERBLOCK) {
        Ok(n) if n == sb.len() => {}
        _ => return false,
    }
    let u16_at = |o: usize| {
        sb.get(o..o + 2)
            .and_then(|b| b.try_into().ok())
            .map(u16::from_le_bytes)
    };
    let u32_at = |o: usize| {
        sb.get(o..o + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
    };
    u16_at(S_MAGIC) == Some(EXT4_MAGIC)
        && u16_at(S_STATE).is_some_and(|s| s & EXT4_ERROR_FS == 0)
        && u32_at(S_ERROR_COUNT) == Some(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fd::AsFd;

    fn image(edit: impl Fn(&mut [u8])) -> bool {
        let mut bytes = vec![0u8; 4096];
        if let Some(sb) = bytes.get_mut(1024..2048) {
            sb[S_MAGIC..S_MAGIC + 2].copy_from_slice(&EXT4_MAGIC.to_le_bytes());
            sb[S_STATE..S_STATE + 2].copy_from_slice(&1u16.to_le_bytes());
            edit(sb);
        }
        let mut f = tempfile::tempfile().expect("tmp");
        std::io::Write::write_all(&mut f, &bytes).expect("write");
        clean_superblock(f.as_fd())
    }

    #[test]
    fn only_a_superblock_without_errors_is_clean() {
        assert!(image(|_| {}));
        assert!(!image(|sb| sb[S_MAGIC] = 0));
        assert!(!image(|sb| sb[S_STATE] |= 2));
        assert!(!image(|sb| sb[S_ERROR_COUNT + 3] = 1));
        let short = tempfile::tempfile().expect("tmp");
        assert!(!clean_superblock(short.as_fd()));
    }

    #[test]
    fn the_boot_id_and_the_fence_are_read() {
        assert!(boot_id().is_some_and(|b| b.len() == 36));
        let (s, ns) = fence();
        assert!(s > 1_600_000_000 && (0..1_000_000_000).contains(&ns));
    }
}
