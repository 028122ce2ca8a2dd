//! Path grants and library bundles, done by the sandbox init inside its own
//! mount namespace (so the descriptors it holds belong to that namespace and
//! can be bound from). Host paths are opened under `/oldroot` with
//! `openat2(RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`; everything below
//! an opened root with `RESOLVE_BENEATH | RESOLVE_NO_XDEV` as well. A symlink
//! anywhere, a special file, a grant that would expose a protected path, or
//! a bundle whose type, mode, link count, owner, size, identity or digest is
//! wrong fails the launch before the agent exists. A verified bundle is
//! projected as a read-only copy of exactly the bytes that were hashed.

use crate::launch::PreparedFacts;
use crate::spec::{BundleMount, Grant, GrantMode, MAX_BUNDLE_BYTES};
use crate::sys::at as sys_at;
use crate::sys::resolve::{self, Meta};
use crate::sys::{mount, Errno};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// A grant as resolved: the identity of the directory that was opened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolvedGrant {
    /// Target inside the sandbox.
    pub target: String,
    /// Device of the host directory (absent for a copy started empty).
    pub dev: Option<u64>,
    /// Inode of the host directory.
    pub ino: Option<u64>,
}

/// A bundle as verified.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolvedBundle {
    /// Target inside the sandbox.
    pub target: String,
    /// The digest that was recomputed and matched.
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
}

type Step = (String, Errno);

fn fail(what: String, e: Errno) -> Step {
    (what, e)
}

/// Identities (dev, ino) of `path` and every ancestor, under `/oldroot`,
/// each resolved as the host resolves it (links followed, confined to the
/// old root): a protected path reached through a link (`/var/run` ->
/// `/run`) is guarded where it really is. A path that does not exist has
/// nothing to guard; any other failure refuses the launch.
fn chain(old_root: BorrowedFd<'_>, path: &str) -> Result<Vec<(u64, u64)>, Errno> {
    let mut out = Vec::new();
    let mut cur = String::from("/");
    let root = resolve::meta(old_root)?;
    out.push((root.dev, root.ino));
    for comp in path.split('/').filter(|c| !c.is_empty()) {
        if cur.len() > 1 {
            cur.push('/');
        }
        cur.push_str(comp);
        match resolve::open_in_root(old_root, &cur, libc::O_PATH) {
            Ok(fd) => {
                let m = resolve::meta(fd.as_fd())?;
                out.push((m.dev, m.ino));
            }
            Err(Errno(libc::ENOENT)) => break,
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Applies every grant. `owner` is given the copies (privileged launch).
pub(crate) fn apply_grants(
    grants: &[Grant],
    protected: &[String],
    owner: Option<(u32, u32)>,
    facts: &mut PreparedFacts,
) -> Result<(), Step> {
    let old_root = resolve::open_no_links("/oldroot", libc::O_PATH | libc::O_DIRECTORY)
        .map_err(|e| fail("open the old root".into(), e))?;
    let mut guarded: Vec<(u64, u64)> = Vec::new();
    for p in protected {
        guarded.extend(
            chain(old_root.as_fd(), p)
                .map_err(|e| fail(format!("grant check: protected path {p}"), e))?,
        );
    }
    for g in grants {
        let what = |s: &str| format!("grant {}: {s}", g.target);
        let opened = match resolve::open_no_links(
            &format!("/oldroot{}", g.host_path),
            libc::O_PATH | libc::O_DIRECTORY,
        ) {
            Ok(fd) => Some(fd),
            Err(Errno(libc::ENOENT))
                if g.create_if_missing && matches!(g.mode, GrantMode::EphemeralCopy { .. }) =>
            {
                None
            }
            Err(Errno(libc::ELOOP)) => {
                return Err(fail(
                    what("a symbolic link in the host path"),
                    Errno(libc::ELOOP),
                ))
            }
            Err(Errno(libc::ENOTDIR)) => {
                return Err(fail(
                    what("the host path is not a directory"),
                    Errno(libc::ENOTDIR),
                ))
            }
            Err(e) => return Err(fail(what("open"), e)),
        };
        let meta = match &opened {
            Some(fd) => Some(resolve::meta(fd.as_fd()).map_err(|e| fail(what("stat"), e))?),
            None => None,
        };
        if let Some(fd) = &opened {
            if sys_at::on_kernel_fs(fd.as_fd()).map_err(|e| fail(what("statfs"), e))? {
                return Err(fail(
                    what("the host path is on a kernel file system (proc, sys, cgroup)"),
                    Errno(libc::EACCES),
                ));
            }
        }
        if let Some(m) = &meta {
            if !m.is_dir() {
                return Err(fail(
                    what("the host path is not a directory"),
                    Errno(libc::ENOTDIR),
                ));
            }
            if guarded.contains(&(m.dev, m.ino)) {
                return Err(fail(
                    what("it would expose a protected path (the control socket)"),
                    Errno(libc::EACCES),
                ));
            }
        }
        let target =
            sys_at::target_dir(&g.target, 0o755).map_err(|e| fail(what("mount target"), e))?;
        match (g.mode, &opened) {
            (GrantMode::ReadOnly, Some(fd)) => {
                crate::launch::refuse_sockets(fd.as_fd(), &format!("grant {}", g.target))?;
                sys_at::bind_tree(
                    fd.as_fd(),
                    target.as_fd(),
                    mount::MOUNT_ATTR_RDONLY | mount::MOUNT_ATTR_NOSUID | mount::MOUNT_ATTR_NODEV,
                )
                .map_err(|e| fail(what("bind"), e))?;
            }
            (GrantMode::ReadOnly, None) => return Err(fail(what("missing"), Errno(libc::ENOENT))),
            (GrantMode::EphemeralCopy { max_bytes }, _) => {
                // The copy is made into a detached tmpfs through its root
                // descriptor, then attached.
                let tmp = sys_at::tmpfs(
                    &[
                        ("size", max_bytes.to_string()),
                        (
                            "nr_inodes",
                            (max_bytes / 4096).clamp(1024, 1 << 20).to_string(),
                        ),
                        ("mode", "0755".to_owned()),
                    ],
                    mount::MOUNT_ATTR_NOSUID | mount::MOUNT_ATTR_NODEV,
                )
                .map_err(|e| fail(what("mount copy tmpfs"), e))?;
                if let Some((u, gid)) = owner {
                    sys_at::chown(tmp.as_fd(), "", u, gid).map_err(|e| fail(what("chown"), e))?;
                }
                if let Some(fd) = &opened {
                    crate::copy::copy_tree(fd.as_fd(), tmp.as_fd(), owner)
                        .map_err(|(w, e)| fail(what(&format!("copy {w}")), e))?;
                }
                sys_at::attach(tmp.as_fd(), target.as_fd())
                    .map_err(|e| fail(what("attach copy tmpfs"), e))?;
            }
        }
        facts.grants.push(ResolvedGrant {
            target: g.target.clone(),
            dev: meta.map(|m| m.dev),
            ino: meta.map(|m| m.ino),
        });
    }
    Ok(())
}

fn same_file(a: &Meta, b: &Meta) -> bool {
    a.dev == b.dev
        && a.ino == b.ino
        && a.size == b.size
        && a.mtime_ns == b.mtime_ns
        && a.ctime_ns == b.ctime_ns
        && a.nlink == b.nlink
        && a.mode == b.mode
        && a.uid == b.uid
}

/// Verifies and mounts every bundle. `owner_uid` is the launcher's user as
/// seen inside.
pub(crate) fn apply_bundles(
    bundles: &[BundleMount],
    owner_uid: u32,
    facts: &mut PreparedFacts,
) -> Result<(), Step> {
    for b in bundles {
        let what = |s: &str| format!("bundle {}: {s}", b.target);
        let root: OwnedFd = resolve::open_no_links(
            &format!("/oldroot{}", b.root),
            libc::O_PATH | libc::O_DIRECTORY,
        )
        .map_err(|e| fail(what("open the bundle root"), e))?;
        let rm = resolve::meta(root.as_fd()).map_err(|e| fail(what("stat root"), e))?;
        if !rm.is_dir() || rm.mode & 0o777 != 0o700 || rm.uid != owner_uid {
            return Err(fail(
                what("the bundle root must be a directory of mode 0700 owned by the service user"),
                Errno(libc::EACCES),
            ));
        }
        let f = resolve::open_beneath(root.as_fd(), &b.sha256, libc::O_RDONLY | libc::O_NONBLOCK)
            .map_err(|e| match e {
            Errno(libc::ELOOP) => fail(what("the bundle is a symbolic link"), e),
            other => fail(what("open the bundle"), other),
        })?;
        let m1 = resolve::meta(f.as_fd()).map_err(|e| fail(what("stat"), e))?;
        if !m1.is_file() {
            return Err(fail(what("not a regular file"), Errno(libc::EPERM)));
        }
        if m1.mode & 0o7777 != 0o600 || m1.nlink != 1 || m1.uid != owner_uid {
            return Err(fail(
                what("a bundle must be mode 0600, one link, owned by the service user"),
                Errno(libc::EACCES),
            ));
        }
        if m1.size > MAX_BUNDLE_BYTES {
            return Err(fail(what("larger than 16 MiB"), Errno(libc::EFBIG)));
        }
        let body = resolve::read_all(f.as_fd(), MAX_BUNDLE_BYTES as usize)
            .map_err(|e| fail(what("read"), e))?;
        let digest = glove_types::digest::to_hex(&Sha256::digest(&body));
        if digest != b.sha256 {
            return Err(fail(
                what("its content does not match its digest"),
                Errno(libc::EBADMSG),
            ));
        }
        let m2 = resolve::meta(f.as_fd()).map_err(|e| fail(what("stat"), e))?;
        if !same_file(&m1, &m2) || body.len() as u64 != m1.size {
            return Err(fail(
                what("it changed while it was read"),
                Errno(libc::EAGAIN),
            ));
        }
        // The agent receives exactly the bytes that were hashed: a read-only
        // file on the sandbox's (later read-only) root, not the host inode,
        // so a later change on the host cannot reach it and the host file
        // may stay private to the service user.
        let (dir, name) = sys_at::split(&b.target).map_err(|e| fail(what("target"), e))?;
        let dir = sys_at::target_dir(dir, 0o755).map_err(|e| fail(what("mkdir"), e))?;
        let out =
            sys_at::create_file(dir.as_fd(), name, 0o444).map_err(|e| fail(what("write"), e))?;
        crate::sys::fd::write_all(out.as_fd(), &body).map_err(|e| fail(what("write"), e))?;
        facts.bundles.push(ResolvedBundle {
            target: b.target.clone(),
            sha256: digest,
            size: m1.size,
        });
    }
    Ok(())
}
