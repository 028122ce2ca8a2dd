//! The recorded process identity: boot id, pid, start time, cgroup inode.

use glove_types::codes::control::*;
use glove_types::Rejection;
use std::path::Path;

/// An observed process, as the lifecycle's `ObservedProcess` port: the
/// launcher read the init's boot id, pid and start time from `/proc` when
/// it released it, and the service stats the inode of the cgroup directory
/// named there. The lifecycle makes the recorded identity from this and
/// from nothing else.
struct ObservedInit<'a> {
    init: &'a glove_sandbox::identity::ProcessIdentity,
    cgroup_id: u64,
}

impl glove_lifecycle::ObservedProcess for ObservedInit<'_> {
    fn boot_id(&self) -> &str {
        &self.init.boot_id
    }
    fn pid(&self) -> u32 {
        u32::try_from(self.init.pid).unwrap_or(0)
    }
    fn start_time_ticks(&self) -> u64 {
        self.init.start_time_ticks
    }
    fn cgroup_id(&self) -> u64 {
        self.cgroup_id
    }
}

/// The identity the lifecycle records: boot id, pid, start time and the
/// inode of the init's cgroup directory.
pub(super) fn lifecycle_identity(
    id: &glove_sandbox::identity::ProcessIdentity,
) -> Result<glove_lifecycle::ProcessIdentity, Rejection> {
    let cg = cgroup_inode(&id.cgroup)
        .ok_or_else(|| Rejection::new(SESSION_LAUNCH_FAILED, "cannot read the sandbox cgroup"))?;
    glove_lifecycle::ProcessIdentity::observed(&ObservedInit {
        init: id,
        cgroup_id: cg,
    })
    .map_err(|e| Rejection::new(e.code(), e.code().meaning()))
}

/// The inode of the process's cgroup directory named in a
/// `/proc/PID/cgroup` text: the unified hierarchy's on cgroup v2, else the
/// `pids` controller's (the one the launcher's v1 cgroup always joins).
pub(super) fn cgroup_inode(text: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let dir = if v2 {
        let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
        format!("/sys/fs/cgroup{}", path.trim_end())
    } else {
        let path = text.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, ctl, path) = (parts.next()?, parts.next()?, parts.next()?);
            ctl.split(',').any(|c| c == "pids").then_some(path)
        })?;
        format!("/sys/fs/cgroup/pids{}", path.trim_end())
    };
    std::fs::metadata(dir).ok().map(|m| m.ino())
}

/// Whether the recorded identity names a live process now (boot id, pid,
/// start time and cgroup inode all equal).
pub fn identity_matches(id: &glove_lifecycle::ProcessIdentity) -> bool {
    let Ok(now) =
        glove_sandbox::identity::ProcessIdentity::of(i32::try_from(id.pid()).unwrap_or(0))
    else {
        return false;
    };
    init_matches(id, &now)
}

/// Whether `now` (read for the recorded pid) is the recorded init.
pub(super) fn init_matches(
    id: &glove_lifecycle::ProcessIdentity,
    now: &glove_sandbox::identity::ProcessIdentity,
) -> bool {
    now.boot_id == id.boot_id()
        && now.start_time_ticks == id.start_time_ticks()
        && cgroup_inode(&now.cgroup) == Some(id.cgroup_id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forged_identity_does_not_match() {
        let me = glove_sandbox::identity::ProcessIdentity::of(std::process::id() as i32)
            .expect("identity");
        let Some(cg) = cgroup_inode(&me.cgroup) else {
            eprintln!("skipping: no cgroup v2 path for this process");
            return;
        };
        let real = lifecycle_identity(&me).expect("valid");
        assert!(identity_matches(&real));
        // Forged observations: the port is the one way to an identity.
        let observed = |boot_id: &str, start_time_ticks, cgroup_id| {
            let init = glove_sandbox::identity::ProcessIdentity {
                boot_id: boot_id.to_owned(),
                start_time_ticks,
                ..me.clone()
            };
            glove_lifecycle::ProcessIdentity::observed(&ObservedInit {
                init: &init,
                cgroup_id,
            })
        };
        for forged in [
            observed(&me.boot_id, me.start_time_ticks + 1, cg),
            observed(&me.boot_id, me.start_time_ticks, cg + 1),
            observed(
                "00000000-0000-0000-0000-000000000001",
                me.start_time_ticks,
                cg,
            ),
        ] {
            assert!(!identity_matches(&forged.expect("valid")));
        }
    }
}
