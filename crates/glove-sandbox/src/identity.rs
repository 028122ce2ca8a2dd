//! Process identity for recovery: boot id + pid + start time + cgroup.
//!
//! A pid alone can be reused; the boot id, the start time in clock ticks
//! since boot and the cgroup together name one process of one boot. A
//! restarted service signals a recorded process only when all four still
//! match.

use crate::error::SandboxError;
use serde::{Deserialize, Serialize};

/// The identity of one process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessIdentity {
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
    /// The pid in the service's pid namespace.
    pub pid: i32,
    /// Field 22 of `/proc/<pid>/stat`: start time in clock ticks since boot.
    pub start_time_ticks: u64,
    /// The process's cgroup paths, one line per hierarchy, as
    /// `/proc/<pid>/cgroup` lists them.
    pub cgroup: String,
}

fn io(what: &str, e: std::io::Error) -> SandboxError {
    SandboxError::Io {
        detail: format!("{what}: {e}"),
    }
}

/// This boot's id.
pub fn boot_id() -> Result<String, SandboxError> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .map_err(|e| io("boot id", e))
}

/// Parses the start time (field 22) out of a `/proc/<pid>/stat` line. The
/// command name (field 2) may hold spaces and parentheses, so fields are
/// counted after its last `)`.
pub fn parse_start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

impl ProcessIdentity {
    /// Reads the identity of `pid` now.
    pub fn of(pid: i32) -> Result<Self, SandboxError> {
        let stat =
            std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| io("stat", e))?;
        let start = parse_start_time(&stat).ok_or_else(|| SandboxError::Io {
            detail: format!("cannot parse /proc/{pid}/stat"),
        })?;
        let cgroup =
            std::fs::read_to_string(format!("/proc/{pid}/cgroup")).map_err(|e| io("cgroup", e))?;
        Ok(ProcessIdentity {
            boot_id: boot_id()?,
            pid,
            start_time_ticks: start,
            cgroup,
        })
    }

    /// Whether the recorded process is still the same one.
    pub fn still_matches(&self) -> bool {
        ProcessIdentity::of(self.pid).is_ok_and(|now| &now == self)
    }
}

/// A process held through a pidfd, so a signal reaches the process that
/// was checked and never a later holder of its pid.
///
/// Recovery opens the handle first, reads the identity through it
/// ([`PidHandle::identity`]: `/proc/<pid>` read after the open, and refused
/// when the held process has exited by then, since the pid may name
/// another process by now), compares it with the recorded one, and only
/// then signals through the same handle ([`PidHandle::kill`]). A process
/// that exits between the check and the signal makes the signal fail
/// (`ESRCH`); it can never land on a reused pid.
#[derive(Debug)]
pub struct PidHandle {
    fd: std::os::fd::OwnedFd,
    pid: i32,
}

impl PidHandle {
    /// Opens a pidfd for the process that holds `pid` now.
    pub fn open(pid: i32) -> Result<PidHandle, SandboxError> {
        let p = rustix::process::Pid::from_raw(pid).ok_or_else(|| SandboxError::Io {
            detail: format!("pidfd_open: invalid pid {pid}"),
        })?;
        let fd = rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty())
            .map_err(|e| io("pidfd_open", e.into()))?;
        Ok(PidHandle { fd, pid })
    }

    /// The pid the handle was opened for.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Whether the held process has exited (the pidfd is readable).
    pub fn has_exited(&self) -> bool {
        self.wait_exit(std::time::Duration::ZERO)
    }

    /// The identity of the held process: `/proc/<pid>` read after the open,
    /// refused when the held process has exited by the end of the read.
    /// While it lives the pid is its own, so what was read is its identity.
    pub fn identity(&self) -> Result<ProcessIdentity, SandboxError> {
        let id = ProcessIdentity::of(self.pid)?;
        if self.has_exited() {
            return Err(SandboxError::Io {
                detail: format!("process {} exited while its identity was read", self.pid),
            });
        }
        Ok(id)
    }

    /// Sends SIGKILL to the held process through the pidfd.
    pub fn kill(&self) -> Result<(), SandboxError> {
        rustix::process::pidfd_send_signal(&self.fd, rustix::process::Signal::KILL)
            .map_err(|e| io("pidfd_send_signal", e.into()))
    }

    /// Waits up to `timeout` for the held process to exit; true once it has.
    pub fn wait_exit(&self, timeout: std::time::Duration) -> bool {
        use rustix::event::{poll, PollFd, PollFlags};
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let ts = rustix::time::Timespec {
                tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(left.subsec_nanos()),
            };
            let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
            match poll(&mut fds, Some(&ts)) {
                Ok(0) => return false,
                Ok(_) => return !fds[0].revents().is_empty(),
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return false,
            }
        }
    }
}

/// The identity a resolved executable is pinned with
/// ([`crate::spec::LaunchSpec::executable_pin`]): device, inode and change
/// time (`st_ctime` in nanoseconds), as `dev:ino:ctime_ns`. A replacement
/// (another inode) or any change to the file (write, chmod, link) since it
/// was resolved gives another identity.
pub fn file_identity(dev: u64, ino: u64, ctime_ns: i128) -> String {
    format!("{dev}:{ino}:{ctime_ns}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_handle_signals_the_process_it_holds_and_nothing_after_it_is_gone() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id() as i32;
        let h = PidHandle::open(pid).expect("pidfd");
        assert_eq!(h.pid(), pid);
        let id = h.identity().expect("identity through the handle");
        assert_eq!(id, ProcessIdentity::of(pid).expect("identity"));
        assert!(!h.has_exited());
        h.kill().expect("SIGKILL through the pidfd");
        assert!(h.wait_exit(std::time::Duration::from_secs(10)), "it died");
        child.wait().expect("reap");
        // Reaped: whatever holds the pid now, the handle reaches nothing
        // and vouches for no identity.
        assert!(h.kill().is_err(), "a signal after the end must fail");
        assert!(h.identity().is_err());
        assert!(PidHandle::open(0).is_err());
    }

    #[test]
    fn start_time_survives_odd_names() {
        let line = "42 (a) b ) c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_start_time(line), Some(987654));
        assert_eq!(parse_start_time("garbage"), None);
        assert_eq!(parse_start_time("1 (x) S"), None);
    }

    #[test]
    fn own_identity_matches_itself() {
        let me = ProcessIdentity::of(std::process::id() as i32).expect("identity");
        assert!(me.still_matches());
        let mut other = me.clone();
        other.start_time_ticks += 1;
        assert!(!other.still_matches());
        let mut other = me;
        other.boot_id = "00000000-0000-0000-0000-000000000000".into();
        assert!(!other.still_matches());
    }
}
