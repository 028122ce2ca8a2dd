//! Protected files: the policy and other operator-owned inputs.
//!
//! A protected file must be a regular file (the final component is not
//! followed if it is a symlink), owned by the effective user, mode `0600`,
//! with exactly one hard link and at most the given size. It is read through
//! one descriptor; after the read the descriptor's metadata is compared with
//! the metadata before the read, and the path is looked up again to check it
//! still names the same file. Any difference fails closed.

use glove_types::codes::file::*;
use glove_types::Rejection;
use rustix::fs::{fstat, lstat, open, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;
use std::io::Read;
use std::path::Path;

/// What a protected read requires besides the common checks.
#[derive(Clone, Copy, Debug)]
pub struct Requirements {
    /// Largest accepted size, in bytes.
    pub max_bytes: u64,
    /// Required permission bits (`0o600` for policies).
    pub mode: u32,
}

impl Requirements {
    /// The policy file's requirements: mode 0600, at most 1 MiB.
    pub const POLICY: Requirements = Requirements {
        max_bytes: glove_types::policy::MAX_POLICY_BYTES as u64,
        mode: 0o600,
    };
}

fn same_identity(a: &Stat, b: &Stat) -> bool {
    a.st_dev == b.st_dev
        && a.st_ino == b.st_ino
        && a.st_size == b.st_size
        && a.st_mode == b.st_mode
        && a.st_uid == b.st_uid
        && a.st_nlink == b.st_nlink
        && a.st_mtime == b.st_mtime
        && a.st_mtime_nsec == b.st_mtime_nsec
        && a.st_ctime == b.st_ctime
        && a.st_ctime_nsec == b.st_ctime_nsec
}

fn check(st: &Stat, req: Requirements, shown: &str) -> Result<(), Rejection> {
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(Rejection::new(
            FILE_NOT_REGULAR,
            format!("{shown} is not a regular file"),
        ));
    }
    let euid = rustix::process::geteuid().as_raw();
    if st.st_uid != euid {
        return Err(Rejection::new(
            FILE_WRONG_OWNER,
            format!(
                "{shown} is owned by uid {}, not by the caller (uid {euid})",
                st.st_uid
            ),
        ));
    }
    let perm = st.st_mode & 0o7777;
    if perm != req.mode {
        return Err(Rejection::new(
            FILE_BAD_MODE,
            format!("{shown} has mode {perm:04o}; it must be {:04o}", req.mode),
        ));
    }
    if st.st_nlink != 1 {
        return Err(Rejection::new(
            FILE_LINK_COUNT,
            format!(
                "{shown} has {} hard links; it must have exactly one",
                st.st_nlink
            ),
        ));
    }
    let size = u64::try_from(st.st_size).unwrap_or(u64::MAX);
    if size > req.max_bytes {
        return Err(Rejection::new(
            FILE_TOO_LARGE,
            format!("{shown} is {size} bytes; the bound is {}", req.max_bytes),
        ));
    }
    Ok(())
}

/// Reads `path` as a protected file.
pub fn read(path: &Path, req: Requirements) -> Result<Vec<u8>, Rejection> {
    let shown = path.display().to_string();
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
    let fd = open(path, flags, Mode::empty()).map_err(|e| match e {
        Errno::NOENT => Rejection::new(FILE_NOT_FOUND, format!("{shown} does not exist")),
        Errno::LOOP => Rejection::new(FILE_SYMLINK, format!("{shown} is a symbolic link")),
        other => Rejection::new(FILE_IO, format!("cannot open {shown}: {other}")),
    })?;
    let io = |e: Errno| Rejection::new(FILE_IO, format!("cannot stat {shown}: {e}"));
    let before = fstat(&fd).map_err(io)?;
    check(&before, req, &shown)?;
    let mut file = std::fs::File::from(fd);
    let mut buf = Vec::new();
    (&mut file)
        .take(req.max_bytes + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Rejection::new(FILE_IO, format!("cannot read {shown}: {e}")))?;
    let after = fstat(&file).map_err(io)?;
    let again = lstat(path).map_err(io)?;
    let read_len = u64::try_from(buf.len()).unwrap_or(u64::MAX);
    let size = u64::try_from(after.st_size).unwrap_or(u64::MAX);
    if !same_identity(&before, &after)
        || again.st_dev != after.st_dev
        || again.st_ino != after.st_ino
        || read_len != size
    {
        return Err(Rejection::new(
            FILE_CHANGED,
            format!("{shown} changed while it was read; replace it atomically and retry"),
        ));
    }
    Ok(buf)
}
