//! Path exposures inside the sandbox, done by the init in its own mount
//! namespace: each project directory arrives as a descriptor the
//! supervisor opened beneath its root (`openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV`, its
//! identity checked against the exposure journal), so nothing here looks
//! a host path up. The tree below it is copied by the same no-follow
//! descriptor walk as copy grants ([`crate::copy`]) into a fresh tmpfs of
//! the lease's byte quota, which is then attached at the target — as it is
//! for an `ephemeral_write` exposure, or through a read-only clone for a
//! `read_only` one. The agent never sees the host directory itself.

use crate::spec::ExposureMount;
use crate::sys::at as sys_at;
use crate::sys::{mount, Errno};
use std::os::fd::AsFd;

type Step = (String, Errno);

/// Copies and attaches every exposure; `owner` is given the copies
/// (privileged launch).
pub(crate) fn apply_exposures(
    exposures: &[ExposureMount],
    owner: Option<(u32, u32)>,
) -> Result<(), Step> {
    for x in exposures {
        let what = |s: &str| format!("exposure {}: {s}", x.target);
        let meta = crate::sys::resolve::meta(x.source.as_fd()).map_err(|e| (what("stat"), e))?;
        if !meta.is_dir() {
            return Err((what("not a directory"), Errno(libc::ENOTDIR)));
        }
        if sys_at::on_kernel_fs(x.source.as_fd()).map_err(|e| (what("statfs"), e))? {
            return Err((what("on a kernel file system"), Errno(libc::EACCES)));
        }
        let tmp = sys_at::tmpfs(
            &[
                ("size", x.max_bytes.to_string()),
                (
                    "nr_inodes",
                    (x.max_bytes / 4096).clamp(1024, 1 << 20).to_string(),
                ),
                ("mode", "0755".to_owned()),
            ],
            mount::MOUNT_ATTR_NOSUID | mount::MOUNT_ATTR_NODEV,
        )
        .map_err(|e| (what("mount copy tmpfs"), e))?;
        if let Some((u, g)) = owner {
            sys_at::chown(tmp.as_fd(), "", u, g).map_err(|e| (what("chown"), e))?;
        }
        crate::copy::copy_tree(x.source.as_fd(), tmp.as_fd(), owner)
            .map_err(|(w, e)| (what(&format!("copy {w}")), e))?;
        let target = sys_at::target_dir(&x.target, 0o755).map_err(|e| (what("mount target"), e))?;
        if x.read_only {
            sys_at::bind_tree(
                tmp.as_fd(),
                target.as_fd(),
                mount::MOUNT_ATTR_RDONLY | mount::MOUNT_ATTR_NOSUID | mount::MOUNT_ATTR_NODEV,
            )
            .map_err(|e| (what("attach read-only copy"), e))?;
        } else {
            sys_at::attach(tmp.as_fd(), target.as_fd()).map_err(|e| (what("attach copy"), e))?;
        }
    }
    Ok(())
}
