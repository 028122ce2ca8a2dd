//! Placement checks for the service's directories and the few files it
//! writes itself (the bootstrap secret, the remote backend's SSH files).
//!
//! Directories (runtime, materialization root, library bundle root, the
//! parents of journals): an absolute path, not a symbolic link, a
//! directory, owned by the service user, mode exactly 0700. Checks run on
//! an open descriptor (`O_DIRECTORY | O_NOFOLLOW`), and the descriptor is
//! returned so a caller can pin the directory's identity.
//!
//! The opens and checks are `glove_fs`'s (the one descriptor-relative
//! discipline the journals and the sandbox share); this module gives their
//! faults the control codes and the messages an operator reads.
//!
//! Files written here go through `glove_journal::atomic::write_file`: a
//! sibling created with `O_EXCL | O_NOFOLLOW` and mode 0600 relative to the
//! directory descriptor, synced, renamed over the final name, and the
//! directory synced.

use glove_fs::{Errno, Fault};
use glove_types::codes::control::*;
use glove_types::Rejection;
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs;
use std::path::Path;

use glove_fs::euid;

/// Requires `path` to be absolute.
pub fn require_absolute(path: &Path, what: &str) -> Result<(), Rejection> {
    if path.is_absolute() {
        Ok(())
    } else {
        Err(Rejection::new(
            CONTROL_PATH_NOT_ABSOLUTE,
            format!("{what} {} is not an absolute path", path.display()),
        ))
    }
}

/// Opens and checks a protected directory (see the module docs).
pub fn open_dir(path: &Path, what: &str) -> Result<OwnedFd, Rejection> {
    require_absolute(path, what)?;
    let shown = path.display();
    let fd = glove_fs::unconfined::open_dir(path, false).map_err(|e| match e {
        Errno::NOENT => Rejection::new(
            CONTROL_DIR_NOT_FOUND,
            format!("{what} {shown} does not exist"),
        ),
        Errno::NOTDIR | Errno::LOOP => Rejection::new(
            CONTROL_DIR_NOT_DIRECTORY,
            format!("{what} {shown} is not a directory (or is a symbolic link)"),
        ),
        e => Rejection::new(CONTROL_DIR_IO, format!("cannot open {what} {shown}: {e}")),
    })?;
    let facts = glove_fs::facts(fd.as_fd())
        .map_err(|e| Rejection::new(CONTROL_DIR_IO, format!("cannot stat {what} {shown}: {e}")))?;
    facts.private_dir(0o700).map_err(|f| match f {
        Fault::WrongOwner { uid } => Rejection::new(
            CONTROL_DIR_WRONG_OWNER,
            format!(
                "{what} {shown} is owned by uid {uid}, not by the service user (uid {})",
                euid()
            ),
        ),
        Fault::BadMode { mode } => Rejection::new(
            CONTROL_DIR_BAD_MODE,
            format!("{what} {shown} has mode {mode:04o}; it must be 0700"),
        ),
        Fault::NotDirectory | Fault::NotRegular | Fault::LinkCount { .. } => Rejection::new(
            CONTROL_DIR_NOT_DIRECTORY,
            format!("{what} {shown} is not a directory"),
        ),
    })?;
    Ok(fd)
}

/// Creates the directory with mode 0700 when it is missing (its parent
/// must exist), then checks it.
pub fn ensure_dir(path: &Path, what: &str) -> Result<OwnedFd, Rejection> {
    require_absolute(path, what)?;
    // The mode is set exactly after the make (the umask may clear bits).
    match glove_fs::unconfined::mkdir(path, 0o700) {
        Ok(()) => tracing::info!(path = ?path, "created {what}"),
        Err(Errno::EXIST) => {}
        Err(Errno::NOENT) => {
            return Err(Rejection::new(
                CONTROL_DIR_NOT_FOUND,
                format!("the parent of {what} {} does not exist", path.display()),
            ))
        }
        Err(e) => {
            return Err(Rejection::new(
                CONTROL_DIR_IO,
                format!("cannot create {what} {}: {e}", path.display()),
            ))
        }
    }
    open_dir(path, what)
}

/// Checks the parent directory of a file path (journals, exposure files).
pub fn check_parent(path: &Path, what: &str) -> Result<(), Rejection> {
    require_absolute(path, what)?;
    let parent = path.parent().unwrap_or(Path::new("/"));
    open_dir(parent, &format!("the directory of {what}")).map(drop)
}

/// Checks an existing file's placement without reading it: not a symbolic
/// link, a regular file, owned by the service user, mode 0600, one link.
pub fn check_file(path: &Path, what: &str) -> Result<(), Rejection> {
    use glove_types::codes::file::*;
    let shown = path.display();
    let facts = glove_fs::unconfined::facts(path).map_err(|e| match e {
        Errno::NOENT => Rejection::new(FILE_NOT_FOUND, format!("{what} {shown} does not exist")),
        e => Rejection::new(FILE_IO, format!("cannot stat {what} {shown}: {e}")),
    })?;
    if facts.kind == glove_fs::FileType::Symlink {
        return Err(Rejection::new(
            FILE_SYMLINK,
            format!("{what} {shown} is a symbolic link"),
        ));
    }
    facts.private_file(0o600).map_err(|f| match f {
        Fault::WrongOwner { uid } => Rejection::new(
            FILE_WRONG_OWNER,
            format!("{what} {shown} is owned by uid {uid}, not by the service user"),
        ),
        Fault::BadMode { mode } => Rejection::new(
            FILE_BAD_MODE,
            format!("{what} {shown} has mode {mode:04o}; it must be 0600"),
        ),
        Fault::LinkCount { links } => Rejection::new(
            FILE_LINK_COUNT,
            format!("{what} {shown} has {links} hard links; it must have one"),
        ),
        Fault::NotRegular | Fault::NotDirectory => Rejection::new(
            FILE_NOT_REGULAR,
            format!("{what} {shown} is not a regular file"),
        ),
    })
}

/// Atomically writes `contents` as `name` (mode 0600) in the directory
/// `dir`, synced: through [`glove_journal::atomic::write_file`], the one
/// helper every durable file write of the service uses.
pub fn write_private(dir: &OwnedFd, name: &str, contents: &[u8]) -> Result<(), Rejection> {
    glove_journal::atomic::write_file(dir.as_fd(), std::ffi::OsStr::new(name), contents)
        .map_err(|e| Rejection::new(CONTROL_SECRET_IO, format!("cannot write {name}: {e}")))
}

/// Removes `name` from `dir`; a missing file is fine.
pub fn remove(dir: &OwnedFd, name: &str) -> Result<(), Rejection> {
    match glove_fs::unlink_in(dir.as_fd(), std::ffi::OsStr::new(name)) {
        Ok(()) => Ok(()),
        Err(e) => Err(Rejection::new(
            CONTROL_SOCKET_IO,
            format!("cannot remove {name}: {e}"),
        )),
    }
}

/// `stat` of a path without following a final symbolic link, `None` if it
/// does not exist.
pub fn lstat_opt(path: &Path) -> Option<fs::Stat> {
    fs::lstat(path).ok()
}
