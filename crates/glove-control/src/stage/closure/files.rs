//! Reopening listed files (each checked against its listed identity),
//! copying while hashing, and the store's modes and syncs.

use super::*;

/// An error opening something listed: a link or a non-directory where a
/// directory was listed means the tree changed under us.
pub(super) fn opened_error(shown: &Path, e: rustix::io::Errno) -> Rejection {
    match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR | rustix::io::Errno::NOENT => {
            changed(shown, "or a directory above it was moved or replaced")
        }
        e => io("cannot open", shown, &e.into()),
    }
}

/// Reopens a listed file beneath its held root and checks that it is the
/// file listed (device, inode, size, modification time) and, in a source,
/// still readable by others.
pub(super) fn reopen(roots: &[OwnedFd], src: &Origin, walk: Walk) -> Result<File, Rejection> {
    let root = roots.get(src.root).ok_or_else(|| {
        io(
            "cannot open",
            &src.shown,
            &std::io::ErrorKind::NotFound.into(),
        )
    })?;
    // O_NONBLOCK: a FIFO swapped in must not block the open.
    let fd = open_beneath(
        root.as_fd(),
        &src.rel,
        OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK,
    )
    .map_err(|e| opened_error(&src.shown, e))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| io("cannot inspect", &src.shown, &e.into()))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(changed(&src.shown, "is no longer a regular file"));
    }
    if Identity::of(&st) != src.id {
        return Err(changed(&src.shown, "is another file, or was modified,"));
    }
    if walk == Walk::Source {
        check_readable(st.st_mode & 0o7777, false, &src.shown)?;
    }
    Ok(File::from(fd))
}

/// Reads exactly `size` bytes of `from` (more or fewer is a change),
/// writing them to `to` when given; returns their SHA-256.
pub(super) fn copy_hashing(
    from: &mut File,
    mut to: Option<&mut File>,
    size: u64,
    src: &Path,
    progress: &dyn Progress,
) -> Result<[u8; 32], Rejection> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut seen = 0u64;
    loop {
        let n = from
            .read(&mut buf)
            .map_err(|e| io("cannot read", src, &e))?;
        if n == 0 {
            break;
        }
        seen += n as u64;
        if seen > size {
            break;
        }
        h.update(&buf[..n]);
        if let Some(t) = to.as_deref_mut() {
            t.write_all(&buf[..n])
                .map_err(|e| io("cannot write a copy of", src, &e))?;
        }
        progress.advance(n as u64);
    }
    if seen != size {
        return Err(Rejection::new(
            STAGE_SOURCE_CHANGED,
            format!("{} changed size while it was staged", src.display()),
        ));
    }
    Ok(h.finalize().into())
}

pub(crate) fn set_mode(p: &Path, mode: u32) -> Result<(), Rejection> {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .map_err(|e| io("cannot chmod", p, &e))
}

pub(crate) fn sync_dir(p: &Path) -> Result<(), Rejection> {
    File::open(p)
        .and_then(|f| f.sync_all())
        .map_err(|e| io("cannot sync", p, &e))
}
