//! Protected files: the policy and other operator-owned inputs.
//!
//! A protected file must be a regular file (the final component is not
//! followed if it is a symlink), owned by the effective user, mode `0600`,
//! with exactly one hard link and at most the given size. It is read through
//! one descriptor; after the read the descriptor's metadata is compared with
//! the metadata before the read, and the path is looked up again to check it
//! still names the same file. Any difference fails closed.

use glove_fs::Errno;
use glove_types::codes::file::*;
use glove_types::Rejection;
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

/// Reads `path` as a protected file (through
/// `glove_fs::unconfined::read_protected`, the shared discipline; this
/// gives its faults the file codes and an operator's messages).
pub fn read(path: &Path, req: Requirements) -> Result<Vec<u8>, Rejection> {
    use glove_fs::unconfined::ReadFault as R;
    use glove_fs::Fault as F;
    let shown = path.display();
    glove_fs::unconfined::read_protected(path, req.mode, req.max_bytes).map_err(|f| match f {
        R::Open(Errno::NOENT) => Rejection::new(FILE_NOT_FOUND, format!("{shown} does not exist")),
        R::Open(Errno::LOOP) => Rejection::new(FILE_SYMLINK, format!("{shown} is a symbolic link")),
        R::Open(e) => Rejection::new(FILE_IO, format!("cannot open {shown}: {e}")),
        R::Placement(F::NotRegular | F::NotDirectory) => {
            Rejection::new(FILE_NOT_REGULAR, format!("{shown} is not a regular file"))
        }
        R::Placement(F::WrongOwner { uid }) => Rejection::new(
            FILE_WRONG_OWNER,
            format!(
                "{shown} is owned by uid {uid}, not by the caller (uid {})",
                glove_fs::euid()
            ),
        ),
        R::Placement(F::BadMode { mode }) => Rejection::new(
            FILE_BAD_MODE,
            format!("{shown} has mode {mode:04o}; it must be {:04o}", req.mode),
        ),
        R::Placement(F::LinkCount { links }) => Rejection::new(
            FILE_LINK_COUNT,
            format!("{shown} has {links} hard links; it must have exactly one"),
        ),
        R::TooLarge { size } => Rejection::new(
            FILE_TOO_LARGE,
            format!("{shown} is {size} bytes; the bound is {}", req.max_bytes),
        ),
        R::Io(e) => Rejection::new(FILE_IO, format!("cannot read {shown}: {e}")),
        R::Changed => Rejection::new(
            FILE_CHANGED,
            format!("{shown} changed while it was read; replace it atomically and retry"),
        ),
    })
}
