//! The files and directories `glove setup` makes: private directories
//! (through the service's own placement checks), and files that are never
//! overwritten: written beside their name, synced, then renamed into place
//! only if the name is still free, and the directory synced.

use crate::protected::{self, Requirements};
use glove_control::placement;
use glove_types::codes::cli::{SETUP_FILE_EXISTS, SETUP_IO};
use glove_types::Rejection;
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{self, Mode, OFlags, RenameFlags, CWD};
use std::io::Write;
use std::path::{Path, PathBuf};

/// What setup did with one thing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Action {
    /// Made now.
    Created,
    /// Already there and sound; left as it was.
    Unchanged,
    /// Replaced, the old one kept aside (`--rotate-keys`).
    Rotated,
    /// Not made here (the note says why and what to do).
    Skipped,
}

/// One line of the report.
#[derive(Clone, Debug, serde::Serialize)]
pub(super) struct Item {
    /// What it is (`config directory`, `receipt key`, …).
    pub(super) what: &'static str,
    /// Where.
    pub(super) path: String,
    /// What happened.
    pub(super) action: Action,
    /// A remark for a person.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) note: Option<String>,
}

fn io(path: &Path, what: &str, e: impl std::fmt::Display) -> Rejection {
    Rejection::new(SETUP_IO, format!("cannot {what} {}: {e}", path.display()))
}

/// Makes `path` a private directory (mode 0700, owned by you, not a
/// symbolic link), creating missing ancestors with the default mode; an
/// existing one is checked as the service checks it, never changed.
pub(super) fn private_dir(path: &Path, what: &'static str) -> Result<(OwnedFd, Action), Rejection> {
    let existed = placement::lstat_opt(path).is_some();
    if !existed {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io(parent, "create", e))?;
        }
    }
    let fd = placement::ensure_dir(path, what)?;
    let action = if existed {
        Action::Unchanged
    } else {
        Action::Created
    };
    Ok((fd, action))
}

/// Whether `path` exists (a symbolic link counts).
pub(super) fn exists(path: &Path) -> bool {
    placement::lstat_opt(path).is_some()
}

/// Writes `bytes` as `dir/name` with `mode`, only if `name` is free:
/// `Ok(false)` when it already exists (nothing written).
pub(super) fn create_new(
    dir: &OwnedFd,
    path: &Path,
    bytes: &[u8],
    mode: u32,
) -> Result<bool, Rejection> {
    let name = path
        .file_name()
        .ok_or_else(|| io(path, "name", "no file name"))?;
    let tmp = format!(".{}.new-{}", name.to_string_lossy(), std::process::id());
    let _ = fs::unlinkat(dir.as_fd(), tmp.as_str(), fs::AtFlags::empty());
    let fd = fs::openat(
        dir.as_fd(),
        tmp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| io(path, "create a temporary file beside", e))?;
    let written = (|| -> std::io::Result<()> {
        fs::fchmod(fd.as_fd(), Mode::from_raw_mode(mode))?;
        let mut f = std::fs::File::from(fd);
        f.write_all(bytes)?;
        f.sync_all()
    })();
    let placed = written.map_err(|e| io(path, "write", e)).and_then(|()| {
        fs::renameat_with(
            dir.as_fd(),
            tmp.as_str(),
            dir.as_fd(),
            name,
            RenameFlags::NOREPLACE,
        )
        .map(|()| true)
        .or_else(|e| {
            if e == rustix::io::Errno::EXIST {
                Ok(false)
            } else {
                Err(io(path, "rename into", e))
            }
        })
    });
    if !matches!(placed, Ok(true)) {
        let _ = fs::unlinkat(dir.as_fd(), tmp.as_str(), fs::AtFlags::empty());
    }
    let created = placed?;
    fs::fsync(dir.as_fd()).map_err(|e| io(path, "sync the directory of", e))?;
    Ok(created)
}

/// Renames `path` aside to `path.old-<unix seconds>` (never over another
/// file) and returns the new name.
pub(super) fn move_aside(path: &Path) -> Result<PathBuf, Rejection> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut aside = PathBuf::from(format!("{}.old-{secs}", path.display()));
    for n in 1..100 {
        match fs::renameat_with(CWD, path, CWD, &aside, RenameFlags::NOREPLACE) {
            Ok(()) => return Ok(aside),
            Err(rustix::io::Errno::EXIST) => {
                aside = PathBuf::from(format!("{}.old-{secs}-{n}", path.display()));
            }
            Err(e) => return Err(io(path, "move aside", e)),
        }
    }
    Err(Rejection::new(
        SETUP_FILE_EXISTS,
        format!("{} has too many old copies beside it", path.display()),
    ))
}

/// Reads an existing protected file (mode 0600, owned by you, one link,
/// not a symbolic link), bounded.
pub(super) fn read_protected(path: &Path, max_bytes: u64) -> Result<Vec<u8>, Rejection> {
    protected::read(
        path,
        Requirements {
            max_bytes,
            mode: 0o600,
        },
    )
}

/// 32 bytes from the OS RNG as 64 hex digits and a newline.
pub(super) fn new_hex_key() -> Result<Vec<u8>, Rejection> {
    let b = crate::control::auth::random_bytes::<32>()?;
    Ok(format!("{}\n", glove_types::digest::to_hex(&b)).into_bytes())
}

/// Whether `bytes` is a key file as `gloved` reads it: 64 lowercase hex
/// digits and an optional newline.
pub(super) fn is_hex_key(bytes: &[u8]) -> bool {
    let b = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    b.len() == 64
        && b.iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}
