//! A session's end: the exit report the sandbox init writes on the sync
//! descriptor, and the [`Remains`] a finished session leaves until its
//! record is durable.

use crate::launch::TAG_EXIT;
use crate::outcome::ExitStatus;
use crate::sys::fd;
use crate::sys::process;
use crate::sys::Errno;
use std::os::fd::{AsFd, OwnedFd};

const EXIT_FRAME: usize = 1 + 1 + 4 + 8 + 8;

pub(super) struct Inside {
    pub(super) exit: ExitStatus,
    pub(super) disk_peak: u64,
    pub(super) pids_peak: u64,
}

/// What is left of a finished session until its record is durable: the
/// session cgroup (empty, counters already read) and, when the outcome was
/// final before the sandbox init had finished exiting, the init to reap.
/// Dropping it removes the cgroup and then reaps the init.
#[derive(Debug)]
#[must_use = "dropping the remains removes the session's cgroup"]
pub struct Remains {
    pub(super) cgroup: Option<crate::cgroup::Cgroup>,
    pub(super) init: Option<libc::pid_t>,
}

impl Remains {
    /// Removes the cgroup now, and leaves the init (which has reported the
    /// end and is exiting: every process of the agent is gone) to be reaped
    /// by whoever inherits it. For a process that exits right after, such
    /// as `glove exec`, this saves waiting for the kernel to tear down the
    /// sandbox's namespaces.
    pub fn finish_without_reaping(mut self) {
        self.cgroup.take();
        crate::sys::trace::mark("cgroup removed");
        self.init = None;
    }

    /// For a process about to exit (`glove exec`): like
    /// [`Remains::finish_without_reaping`], but the cgroup (empty, its
    /// counters read) is removed by a detached helper process once this
    /// process has exited, so that the exit does not wait for the kernel to
    /// take it down either. It is removed here when no helper can be
    /// started. A caller that goes on running must not use this (the cgroup
    /// would stay until it exits, and the helper unreaped).
    pub fn finish_detached(mut self) {
        if let Some(cg) = self.cgroup.take() {
            cg.remove_detached();
        }
        crate::sys::trace::mark("cgroup removal started");
        self.init = None;
    }
}

impl Drop for Remains {
    fn drop(&mut self) {
        self.cgroup.take();
        if let Some(pid) = self.init.take() {
            let _ = process::wait(pid);
        }
    }
}

pub(super) fn read_exit(sync: &OwnedFd) -> Result<Option<Inside>, Errno> {
    let mut frame = [0u8; EXIT_FRAME];
    if fd::read_full(sync.as_fd(), &mut frame)? < EXIT_FRAME || frame[0] != TAG_EXIT {
        return Ok(None);
    }
    let value = i32::from_le_bytes([frame[2], frame[3], frame[4], frame[5]]);
    let mut disk = [0u8; 8];
    disk.copy_from_slice(&frame[6..14]);
    let mut pids = [0u8; 8];
    pids.copy_from_slice(&frame[14..22]);
    Ok(Some(Inside {
        exit: if frame[1] == 0 {
            ExitStatus::Exited { code: value }
        } else {
            ExitStatus::Signaled { signal: value }
        },
        disk_peak: u64::from_le_bytes(disk),
        pids_peak: u64::from_le_bytes(pids),
    }))
}
