//! cgroups: one directory per session under the caller's own cgroup, for
//! memory (no swap), pids and CPU accounting.
//!
//! cgroup v2 (a delegated parent with the `memory`, `pids` and `cpu`
//! controllers enabled) is the production path; cgroup v1 (separate
//! `memory`, `pids` and `cpuacct` hierarchies, as on the development
//! machines) works too. Only directories this module created are touched, and
//! they are removed when the handle is dropped.

use crate::error::SandboxError;
use std::fs;
use std::io::ErrorKind;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

const ROOT: &str = "/sys/fs/cgroup";

/// Which cgroup version a handle uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Version {
    /// Unified hierarchy.
    V2,
    /// Legacy per-controller hierarchies.
    V1,
}

/// A session cgroup.
#[derive(Debug)]
pub struct Cgroup {
    version: Version,
    /// v2: one directory. v1: memory, pids, cpuacct directories.
    dirs: Vec<PathBuf>,
    /// Counter files opened ahead ([`Cgroup::open_counters`]), read with
    /// `pread` instead of being opened on every read.
    open: Vec<(PathBuf, fs::File)>,
    /// A removal helper started ahead ([`Cgroup::prepare_detached_removal`]).
    remover: Option<crate::sys::process::Remover>,
}

/// Counters read after the session.
#[derive(Clone, Copy, Debug, Default)]
pub struct CgroupStats {
    /// CPU time, nanoseconds.
    pub cpu_ns: u64,
    /// Peak memory, bytes.
    pub memory_peak: u64,
    /// OOM kills inside the cgroup.
    pub oom_kills: u64,
    /// Times the memory limit was hit.
    pub memory_failcnt: u64,
    /// Times a fork was refused by `pids.max`.
    pub pids_max_events: u64,
    /// Peak number of tasks when the kernel records it (v2 `pids.peak`).
    pub pids_peak: Option<u64>,
}

/// The `cpu.max` period, microseconds.
pub const CPU_PERIOD_US: u64 = 100_000;

fn err(detail: impl Into<String>) -> SandboxError {
    SandboxError::Cgroup {
        detail: detail.into(),
    }
}

fn write(path: &Path, value: &str) -> Result<(), SandboxError> {
    write_file(path, value).map_err(|e| err(format!("write {value} to {}: {e}", path.display())))
}

/// Writes `value` to an existing control file (never creating one: a
/// missing file is `NotFound`).
fn write_file(path: &Path, value: &str) -> std::io::Result<()> {
    use std::io::Write;
    fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(value.as_bytes())
}

fn parse_u64(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

fn parse_keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// The caller's own cgroup path for a v1 controller, or for v2 (`""`).
fn own_path(controller: &str) -> Option<String> {
    own_path_in(&fs::read_to_string("/proc/self/cgroup").ok()?, controller)
}

/// [`own_path`] in the text of `/proc/self/cgroup`.
fn own_path_in(text: &str, controller: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit = if controller.is_empty() {
            ctrls.is_empty()
        } else {
            ctrls.split(',').any(|c| c == controller)
        };
        hit.then(|| path.to_owned())
    })
}

fn is_cgroup2(path: &str) -> bool {
    crate::sys::mount::fs_magic(path) == Some(0x6367_7270)
}

impl Cgroup {
    /// Creates a session cgroup named `name` with the given limits, trying
    /// v2 first, then v1.
    pub fn create(name: &str, memory_bytes: u64, pids: u64) -> Result<Cgroup, SandboxError> {
        match Self::create_v2(name, memory_bytes, pids) {
            Ok(c) => Ok(c),
            Err(v2) => Self::create_v1(name, memory_bytes, pids)
                .map_err(|v1| err(format!("cgroup v2: {v2}; cgroup v1: {v1}"))),
        }
    }

    /// Creates the session cgroup in a delegated cgroup v2 parent.
    pub fn create_v2(name: &str, memory_bytes: u64, pids: u64) -> Result<Cgroup, SandboxError> {
        if !is_cgroup2(ROOT) {
            return Err(err("/sys/fs/cgroup is not a cgroup2 mount"));
        }
        let own = own_path("").ok_or_else(|| err("no v2 entry in /proc/self/cgroup"))?;
        // Beside the supervisor's leaf in a delegated subtree
        // (`crate::cgroup_leaf`), else under the caller's own cgroup.
        let parent =
            crate::cgroup_leaf::session_parent(&Path::new(ROOT).join(own.trim_start_matches('/')));
        let controllers =
            fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
        for c in ["memory", "pids", "cpu"] {
            if !controllers.split_whitespace().any(|x| x == c) {
                return Err(err(format!(
                    "controller {c} is not delegated to {}",
                    parent.display()
                )));
            }
        }
        let dir = parent.join(name);
        fs::create_dir(&dir).map_err(|e| err(format!("mkdir {}: {e}", dir.display())))?;
        let cg = Cgroup {
            version: Version::V2,
            dirs: vec![dir.clone()],
            open: Vec::new(),
            remover: None,
        };
        write(&dir.join("memory.max"), &memory_bytes.to_string())?;
        write(&dir.join("memory.swap.max"), "0")?;
        write(&dir.join("pids.max"), &pids.to_string())?;
        Ok(cg)
    }

    /// Limits the cgroup's CPU rate to `millicpus` thousandths of a CPU:
    /// a quota over a 100 ms period (`cpu.max` in v2; in v1 a fourth
    /// directory in the `cpu` hierarchy, which the agent joins with the
    /// others, with `cpu.cfs_period_us` and `cpu.cfs_quota_us`).
    pub fn set_cpu_rate(&mut self, name: &str, millicpus: u64) -> Result<(), SandboxError> {
        let quota_us = millicpus.saturating_mul(CPU_PERIOD_US) / 1000;
        match self.version {
            Version::V2 => write(
                &self.dirs[0].join("cpu.max"),
                &format!("{quota_us} {CPU_PERIOD_US}"),
            ),
            Version::V1 => {
                let own = fs::read_to_string("/proc/self/cgroup")
                    .map_err(|e| err(format!("read /proc/self/cgroup: {e}")))?;
                let own = own_path_in(&own, "cpu").ok_or_else(|| err("no v1 cpu hierarchy"))?;
                let base = Path::new(ROOT).join("cpu");
                let dir = base.join(own.trim_start_matches('/')).join(name);
                // Where `cpu` and `cpuacct` are one hierarchy (mounted
                // together, as systemd does), the session's cpuacct
                // directory is already this one.
                let same = |a: &Path, b: &Path| {
                    use std::os::unix::fs::MetadataExt;
                    match (fs::metadata(a), fs::metadata(b)) {
                        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
                        _ => false,
                    }
                };
                let dir = match self.dirs.get(2) {
                    Some(acct) if same(&dir.with_file_name(""), &acct.with_file_name("")) => {
                        acct.clone()
                    }
                    _ => {
                        fs::create_dir(&dir)
                            .map_err(|e| err(format!("mkdir {}: {e}", dir.display())))?;
                        // Removed with the others from here on.
                        self.dirs.push(dir.clone());
                        dir
                    }
                };
                write(&dir.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())?;
                write(&dir.join("cpu.cfs_quota_us"), &quota_us.to_string())
            }
        }
    }

    /// Creates the session cgroup in the v1 memory, pids and cpuacct hierarchies.
    pub fn create_v1(name: &str, memory_bytes: u64, pids: u64) -> Result<Cgroup, SandboxError> {
        let mut cg = Cgroup {
            version: Version::V1,
            dirs: Vec::new(),
            open: Vec::new(),
            remover: None,
        };
        let own = fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| err(format!("read /proc/self/cgroup: {e}")))?;
        for ctrl in ["memory", "pids", "cpuacct"] {
            let own =
                own_path_in(&own, ctrl).ok_or_else(|| err(format!("no v1 {ctrl} hierarchy")))?;
            let base = Path::new(ROOT).join(ctrl);
            let dir = base.join(own.trim_start_matches('/')).join(name);
            if let Err(e) = fs::create_dir(&dir) {
                // Said precisely when the hierarchy itself is missing.
                return Err(if base.join("cgroup.procs").exists() {
                    err(format!("mkdir {}: {e}", dir.display()))
                } else {
                    err(format!("{} is not mounted", base.display()))
                });
            }
            cg.dirs.push(dir);
        }
        let mem = &cg.dirs[0];
        let limit = memory_bytes.to_string();
        write(&mem.join("memory.limit_in_bytes"), &limit)?;
        // Swap is accounted when this file exists: memory plus swap gets the
        // same limit. And the cgroup is told not to swap.
        match write_file(&mem.join("memory.memsw.limit_in_bytes"), &limit) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => {
                return Err(err(format!(
                    "write {limit} to {}: {e}",
                    mem.join("memory.memsw.limit_in_bytes").display()
                )))
            }
        }
        let _ = write_file(&mem.join("memory.swappiness"), "0");
        write(&cg.dirs[1].join("pids.max"), &pids.to_string())?;
        Ok(cg)
    }

    /// The text of a control file: through the descriptor opened ahead if
    /// there is one, else opened now.
    fn text(&self, path: &Path) -> Option<String> {
        use std::os::unix::fs::FileExt;
        let Some((_, f)) = self.open.iter().find(|(p, _)| p == path) else {
            return fs::read_to_string(path).ok();
        };
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = f.read_at(&mut buf, out.len() as u64).ok()?;
            if n == 0 || out.len() + n > 1 << 20 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        String::from_utf8(out).ok()
    }

    fn read_u64(&self, path: &Path) -> Option<u64> {
        parse_u64(&self.text(path)?)
    }

    fn keyed(&self, path: &Path, key: &str) -> Option<u64> {
        parse_keyed(&self.text(path)?, key)
    }

    /// Opens the counter files read while the session runs and at its end
    /// (CPU time, tasks, peaks, events), so that each later read is one
    /// `pread`. Files that cannot be opened are read by path as before.
    pub fn open_counters(&mut self) {
        let names: &[(usize, &str)] = match self.version {
            Version::V2 => &[
                (0, "cpu.stat"),
                (0, "pids.current"),
                (0, "memory.peak"),
                (0, "memory.events"),
                (0, "pids.events"),
                (0, "pids.peak"),
            ],
            Version::V1 => &[
                (2, "cpuacct.usage"),
                (1, "pids.current"),
                (0, "memory.max_usage_in_bytes"),
                (0, "memory.oom_control"),
                (0, "memory.failcnt"),
                (1, "pids.events"),
            ],
        };
        for (dir, name) in names {
            let Some(d) = self.dirs.get(*dir) else {
                continue;
            };
            let path = d.join(name);
            if self.open.iter().any(|(p, _)| *p == path) {
                continue;
            }
            if let Ok(f) = fs::File::open(&path) {
                self.open.push((path, f));
            }
        }
    }

    /// For a caller that will exit right after the session
    /// ([`Cgroup::remove_detached`]): starts the helper that will remove
    /// the cgroup now, while the session runs, so that the end costs
    /// nothing. The helper also removes the cgroup if this process dies
    /// first. False when it could not be started.
    /// The helper then makes the network namespace pool entries `refill`
    /// ([`crate::net_pool::Claim::refill`]).
    pub fn prepare_detached_removal(&mut self, refill: &crate::net_pool::Refill) -> bool {
        if self.remover.is_none() {
            self.remover = crate::sys::process::Remover::start(&self.dirs, refill);
        }
        self.remover.is_some()
    }

    /// The cgroup version in use.
    pub fn version(&self) -> Version {
        self.version
    }

    /// An open v2 directory for `CLONE_INTO_CGROUP`.
    pub fn v2_dir(&self) -> Option<&Path> {
        (self.version == Version::V2).then(|| self.dirs[0].as_path())
    }

    /// The `tasks` file of every hierarchy of this (v1) cgroup, opened for
    /// writing by this process. A thread that writes `0` to one moves
    /// itself, which the kernel does without the global lock a
    /// `cgroup.procs` write takes (that lock waits for an RCU grace period
    /// when no other migration is in flight: ~20 ms on an idle machine).
    /// The permission check uses the opener's credentials, so the sandbox's
    /// agent can move itself with them before it drops its own.
    pub fn self_join_files(&self) -> Result<Vec<OwnedFd>, SandboxError> {
        if self.version != Version::V1 {
            return Err(err("only cgroup v1 members join through tasks"));
        }
        self.dirs
            .iter()
            .map(|d| {
                let path = d.join("tasks");
                fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map(OwnedFd::from)
                    .map_err(|e| err(format!("open {}: {e}", path.display())))
            })
            .collect()
    }

    /// Moves `pid` into every hierarchy of this cgroup.
    pub fn add(&self, pid: i32) -> Result<(), SandboxError> {
        for d in &self.dirs {
            write(&d.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// CPU time so far, nanoseconds.
    pub fn cpu_ns(&self) -> Option<u64> {
        match self.version {
            Version::V2 => self
                .keyed(&self.dirs[0].join("cpu.stat"), "usage_usec")
                .map(|u| u.saturating_mul(1000)),
            Version::V1 => self.read_u64(&self.dirs[2].join("cpuacct.usage")),
        }
    }

    /// Pages of the session that were evicted and then needed again
    /// (`workingset_refault_*` of `memory.stat`): a working set that does
    /// not fit the memory limit shows as a steady stream of refaults.
    pub fn memory_refaults(&self) -> Option<u64> {
        let text = self.text(&self.dirs[0].join("memory.stat"))?;
        match (
            parse_keyed(&text, "workingset_refault_file"),
            parse_keyed(&text, "workingset_refault_anon"),
        ) {
            (None, None) => parse_keyed(&text, "workingset_refault"),
            (f, a) => Some(f.unwrap_or(0).saturating_add(a.unwrap_or(0))),
        }
    }

    /// Current number of tasks.
    pub fn pids_current(&self) -> Option<u64> {
        let d = match self.version {
            Version::V2 => &self.dirs[0],
            Version::V1 => &self.dirs[1],
        };
        self.read_u64(&d.join("pids.current"))
    }

    /// Kills every task (v2 `cgroup.kill`; v1 by listing the tasks).
    pub fn kill_all(&self) {
        match self.version {
            Version::V2 => {
                let _ = fs::write(self.dirs[0].join("cgroup.kill"), "1");
            }
            Version::V1 => {
                if let Ok(text) = fs::read_to_string(self.dirs[1].join("cgroup.procs")) {
                    for pid in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                        let _ = crate::sys::process::kill(pid, libc::SIGKILL);
                    }
                }
            }
        }
    }

    /// Reads the final counters.
    pub fn stats(&self) -> CgroupStats {
        match self.version {
            Version::V2 => {
                let d = &self.dirs[0];
                CgroupStats {
                    cpu_ns: self.cpu_ns().unwrap_or(0),
                    memory_peak: self.read_u64(&d.join("memory.peak")).unwrap_or(0),
                    oom_kills: self
                        .keyed(&d.join("memory.events"), "oom_kill")
                        .unwrap_or(0),
                    memory_failcnt: self.keyed(&d.join("memory.events"), "max").unwrap_or(0),
                    pids_max_events: self.keyed(&d.join("pids.events"), "max").unwrap_or(0),
                    pids_peak: self.read_u64(&d.join("pids.peak")),
                }
            }
            Version::V1 => {
                let m = &self.dirs[0];
                CgroupStats {
                    cpu_ns: self.cpu_ns().unwrap_or(0),
                    memory_peak: self
                        .read_u64(&m.join("memory.max_usage_in_bytes"))
                        .unwrap_or(0),
                    oom_kills: self
                        .keyed(&m.join("memory.oom_control"), "oom_kill")
                        .unwrap_or(0),
                    memory_failcnt: self.read_u64(&m.join("memory.failcnt")).unwrap_or(0),
                    pids_max_events: self
                        .keyed(&self.dirs[1].join("pids.events"), "max")
                        .unwrap_or(0),
                    pids_peak: None,
                }
            }
        }
    }
}

/// Removes the session cgroups a launcher left behind when it was killed:
/// the directories named `glove-<creator_pid>-*` (the names `launch`
/// gives them) under this process's own cgroup in each hierarchy Glove
/// uses. Whatever is still inside is killed first (the sandbox init dies
/// with its launcher, so normally nothing is); each directory is retried
/// until `wait` has passed. Returns how many directories were removed.
pub fn remove_abandoned(creator_pid: i32, wait: std::time::Duration) -> usize {
    let prefix = format!("glove-{creator_pid}-");
    let mut parents: Vec<PathBuf> = Vec::new();
    if is_cgroup2(ROOT) {
        if let Some(own) = own_path("") {
            parents.push(crate::cgroup_leaf::session_parent(
                &Path::new(ROOT).join(own.trim_start_matches('/')),
            ));
        }
    } else {
        for ctrl in ["memory", "pids", "cpuacct"] {
            if let Some(own) = own_path(ctrl) {
                parents.push(Path::new(ROOT).join(ctrl).join(own.trim_start_matches('/')));
            }
        }
    }
    let deadline = std::time::Instant::now() + wait;
    let mut removed = 0;
    for parent in parents {
        let Ok(entries) = fs::read_dir(&parent) else {
            continue;
        };
        for e in entries.flatten() {
            if !e
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix))
            {
                continue;
            }
            if remove_dir_retrying(&e.path(), deadline) {
                removed += 1;
            }
        }
    }
    removed
}

/// Removes one cgroup directory; while something is still inside, kills
/// it (the tasks its `cgroup.procs` lists) and retries every 2 ms until
/// `deadline`. True when this call removed it.
fn remove_dir_retrying(dir: &Path, deadline: std::time::Instant) -> bool {
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return true,
            Err(e) if e.kind() == ErrorKind::NotFound => return false,
            Err(_) if std::time::Instant::now() < deadline => {
                if let Ok(text) = fs::read_to_string(dir.join("cgroup.procs")) {
                    for pid in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                        let _ = crate::sys::process::kill(pid, libc::SIGKILL);
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            Err(_) => return false,
        }
    }
}

impl Cgroup {
    /// For a caller about to exit: the (empty) cgroup is removed by a
    /// detached helper process (the one started ahead, or a new one) once
    /// this process has exited, so the exit waits for nothing; removed here
    /// if no helper can be started. The counter files stay open until the
    /// exit (an open control file does not keep a cgroup from being
    /// removed).
    pub fn remove_detached(mut self) {
        let remover = self
            .remover
            .take()
            .or_else(|| crate::sys::process::Remover::start(&self.dirs, &Default::default()));
        if let Some(r) = remover {
            r.at_exit();
            self.dirs.clear();
            std::mem::forget(std::mem::take(&mut self.open));
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        self.open.clear();
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(100);
        for d in &self.dirs {
            remove_dir_retrying(d, deadline);
        }
    }
}
