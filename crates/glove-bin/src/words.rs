//! Limits and sizes in words for people: `the wall-time limit (500 ms)`,
//! `1.5 GiB`.

use glove_sandbox::outcome::Limit;
use glove_types::policy::ResourceLimits;

/// A byte count in binary units: `512 MiB`, `1.5 GiB`, `1000 bytes`.
pub fn bytes_in_words(b: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (size, unit) in UNITS {
        if b >= size {
            let v = b as f64 / size as f64;
            return if b % size == 0 {
                format!("{} {unit}", b / size)
            } else {
                format!("{v:.1} {unit}")
            };
        }
    }
    format!("{b} bytes")
}

/// Milliseconds as `500 ms`, `2 s`, `1.5 s`.
pub fn ms_in_words(ms: u64) -> String {
    if ms >= 1000 && ms % 1000 == 0 {
        format!("{} s", ms / 1000)
    } else if ms >= 1000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{ms} ms")
    }
}

/// A limit and its value in words: `the wall-time limit (500 ms)`.
pub fn limit_in_words(limit: Limit, limits: &ResourceLimits) -> String {
    match limit {
        Limit::CpuTime => format!("the CPU-time limit ({})", ms_in_words(limits.cpu_time_ms)),
        Limit::Memory => format!("the memory limit ({})", bytes_in_words(limits.memory_bytes)),
        Limit::Pids => format!("the process limit ({} processes)", limits.pids),
        Limit::WallTime => format!("the wall-time limit ({})", ms_in_words(limits.wall_time_ms)),
        Limit::Disk => format!("the disk limit ({})", bytes_in_words(limits.disk_bytes)),
        Limit::TerminalOutput => format!(
            "the terminal-output limit ({})",
            bytes_in_words(limits.terminal_output_bytes)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_read_as_words() {
        let l = ResourceLimits {
            cpu_time_ms: 1500,
            memory_bytes: 512 << 20,
            pids: 16,
            wall_time_ms: 500,
            disk_bytes: 3 << 29,
            terminal_output_bytes: 1000,
        };
        assert_eq!(
            limit_in_words(Limit::WallTime, &l),
            "the wall-time limit (500 ms)"
        );
        assert_eq!(
            limit_in_words(Limit::CpuTime, &l),
            "the CPU-time limit (1.5 s)"
        );
        assert_eq!(
            limit_in_words(Limit::Memory, &l),
            "the memory limit (512 MiB)"
        );
        assert_eq!(limit_in_words(Limit::Disk, &l), "the disk limit (1.5 GiB)");
        assert_eq!(
            limit_in_words(Limit::Pids, &l),
            "the process limit (16 processes)"
        );
        assert_eq!(
            limit_in_words(Limit::TerminalOutput, &l),
            "the terminal-output limit (1000 bytes)"
        );
    }
}
