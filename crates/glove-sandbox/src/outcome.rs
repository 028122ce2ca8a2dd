//! What a sandboxed run ended with and what it used, measured from the
//! kernel's own accounting.

use serde::{Deserialize, Serialize};

/// One of the six limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// CPU time.
    CpuTime,
    /// Memory.
    Memory,
    /// Processes and threads.
    Pids,
    /// Wall-clock time.
    WallTime,
    /// Writable disk.
    Disk,
    /// Terminal output.
    TerminalOutput,
}

impl Limit {
    /// Every limit.
    pub const ALL: [Limit; 6] = [
        Limit::CpuTime,
        Limit::Memory,
        Limit::Pids,
        Limit::WallTime,
        Limit::Disk,
        Limit::TerminalOutput,
    ];

    /// The snake_case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Limit::CpuTime => "cpu_time",
            Limit::Memory => "memory",
            Limit::Pids => "pids",
            Limit::WallTime => "wall_time",
            Limit::Disk => "disk",
            Limit::TerminalOutput => "terminal_output",
        }
    }
}

/// How a limit was enforced in this run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// cgroup v2 controller.
    CgroupV2,
    /// cgroup v1 controller.
    CgroupV1,
    /// Per-process `setrlimit` (weaker: per process, not per session).
    Rlimit,
    /// The supervisor's watchdog (wall time; CPU with cgroup accounting).
    Watchdog,
    /// A size-limited tmpfs.
    TmpfsQuota,
    /// Bytes counted on the terminal or pipes by the supervisor.
    OutputCounter,
}

/// The mechanism per limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enforcement {
    /// CPU time.
    pub cpu_time: Mechanism,
    /// Memory.
    pub memory: Mechanism,
    /// Pids.
    pub pids: Mechanism,
    /// Wall time.
    pub wall_time: Mechanism,
    /// Disk.
    pub disk: Mechanism,
    /// Terminal output.
    pub terminal_output: Mechanism,
}

/// How the agent ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ExitStatus {
    /// Exited with a code.
    Exited {
        /// The code.
        code: i32,
    },
    /// Killed by a signal.
    Signaled {
        /// The signal number.
        signal: i32,
    },
}

/// Measured usage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// CPU time, milliseconds.
    pub cpu_time_ms: u64,
    /// Peak memory, bytes.
    pub peak_memory_bytes: u64,
    /// Peak number of processes in the sandbox (sampled unless the kernel
    /// records it).
    pub pids_peak: u64,
    /// Wall time, milliseconds.
    pub wall_time_ms: u64,
    /// Peak bytes used on the writable scratch.
    pub disk_bytes: u64,
    /// Bytes the agent wrote to its terminal or output pipes.
    pub terminal_bytes: u64,
}

/// The record of one run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    /// How the agent ended.
    pub exit: ExitStatus,
    /// The limit that ended the run, if one did.
    pub ended_by: Option<Limit>,
    /// Every limit that was reached (a reached limit need not end the run:
    /// a full disk or a refused fork leaves the agent running).
    pub limits_reached: Vec<Limit>,
    /// What the run used.
    pub usage: Usage,
    /// How each limit was enforced.
    pub enforcement: Enforcement,
    /// Whether the caller asked the session to stop.
    pub stopped: bool,
    /// Whether every byte the terminal produced was delivered: false when
    /// output past the terminal limit was cut, or the final drain ran out
    /// of time with output still coming. (Absent on the wire from an older
    /// launcher: read as true.)
    #[serde(default = "delivered")]
    pub output_complete: bool,
}

fn delivered() -> bool {
    true
}
