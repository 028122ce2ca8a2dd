//! Copying a host directory into the sandbox's scratch, inside the sandbox's
//! mount namespace, without following links: directories are recreated,
//! regular files copied, symbolic links recreated as links (never
//! followed), anything else refused. The scratch tmpfs quota bounds the
//! copy; running out is `ENOSPC`.

use crate::sys::Errno;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

/// Deepest directory nesting copied.
pub(crate) const MAX_DEPTH: usize = 128;

fn errno(e: &std::io::Error) -> Errno {
    Errno(e.raw_os_error().unwrap_or(libc::EIO))
}

/// Copies `src` (a directory) to `dst` (created if missing); every created
/// entry is given to `owner` (uid, gid) when set.
pub(crate) fn copy_tree(
    src: &str,
    dst: &str,
    owner: Option<(u32, u32)>,
) -> Result<(), (String, Errno)> {
    copy_dir(Path::new(src), Path::new(dst), 0, owner)
}

fn give(path: &Path, owner: Option<(u32, u32)>) -> Result<(), (String, Errno)> {
    match owner {
        Some((u, g)) => crate::sys::mount::lchown(&path.display().to_string(), u, g)
            .map_err(|e| (format!("chown {}", path.display()), e)),
        None => Ok(()),
    }
}

fn copy_dir(
    src: &Path,
    dst: &Path,
    depth: usize,
    owner: Option<(u32, u32)>,
) -> Result<(), (String, Errno)> {
    if depth > MAX_DEPTH {
        return Err(("directory nesting too deep".into(), Errno(libc::ELOOP)));
    }
    let meta = fs::symlink_metadata(src).map_err(|e| (format!("{}", src.display()), errno(&e)))?;
    if !meta.is_dir() {
        return Err((
            format!("{} is not a directory", src.display()),
            Errno(libc::ENOTDIR),
        ));
    }
    fs::create_dir_all(dst).map_err(|e| (format!("mkdir {}", dst.display()), errno(&e)))?;
    let mode = meta.permissions().mode() & 0o777;
    let _ = fs::set_permissions(dst, fs::Permissions::from_mode(mode | 0o700));
    give(dst, owner)?;
    let entries = fs::read_dir(src).map_err(|e| (format!("read {}", src.display()), errno(&e)))?;
    for entry in entries {
        let entry = entry.map_err(|e| (format!("read {}", src.display()), errno(&e)))?;
        let from = entry.path();
        let to = dst.join(entry.file_name());
        let ft = entry
            .file_type()
            .map_err(|e| (format!("{}", from.display()), errno(&e)))?;
        if ft.is_dir() {
            copy_dir(&from, &to, depth + 1, owner)?;
        } else if ft.is_symlink() {
            let target = fs::read_link(&from)
                .map_err(|e| (format!("readlink {}", from.display()), errno(&e)))?;
            symlink(&target, &to).map_err(|e| (format!("symlink {}", to.display()), errno(&e)))?;
            give(&to, owner)?;
        } else if ft.is_file() {
            fs::copy(&from, &to).map_err(|e| (format!("copy {}", from.display()), errno(&e)))?;
            give(&to, owner)?;
        } else {
            return Err((
                format!("{} is a special file", from.display()),
                Errno(libc::EPERM),
            ));
        }
    }
    Ok(())
}
