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

#[cfg(test)]
mod tests {
    use super::*;

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
