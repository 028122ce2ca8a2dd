//! A service in a delegated cgroup v2 subtree (systemd `Delegate=cpu
//! memory pids`): where its sessions' cgroups go.
//!
//! systemd hands the unit its cgroup with the controllers *available*
//! (`cgroup.controllers`) but not *enabled* for children
//! (`cgroup.subtree_control`), and the service's own process sits in it. A
//! v2 cgroup with processes cannot enable controllers for its children
//! ("no internal processes"), so the service first moves itself into a
//! leaf of its own, [`LEAF`], then enables the controllers in the
//! delegated cgroup; sessions are then made beside the leaf, as its
//! siblings. Everything the service starts (launchers, supervisors)
//! inherits the leaf, so "my cgroup is the leaf" is how any of them finds
//! the delegated parent again.
//!
//! Only the leaf's parent is ever used above the caller's own cgroup, and
//! only when the caller's cgroup is that fixed leaf: a process elsewhere
//! (a shell's scope under a systemd slice) keeps using its own cgroup, as
//! before, never a slice above it.

use std::fs;
use std::path::{Path, PathBuf};

/// The leaf a delegated service moves itself into.
pub const LEAF: &str = "glove-supervisor";

/// The controllers sessions need in the v2 parent.
pub const CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];

fn has_all(path: &Path) -> bool {
    let text = fs::read_to_string(path).unwrap_or_default();
    CONTROLLERS
        .iter()
        .all(|c| text.split_whitespace().any(|x| x == *c))
}

/// Where sessions' v2 cgroups go for a process whose own cgroup directory
/// is `own`: the parent of the supervisor leaf when `own` is that leaf,
/// else `own`.
pub fn session_parent(own: &Path) -> PathBuf {
    match (own.file_name(), own.parent()) {
        (Some(n), Some(p)) if n == LEAF => p.to_path_buf(),
        _ => own.to_path_buf(),
    }
}

/// What [`enter_leaf`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Delegation {
    /// Nothing: the cgroup already had the controllers enabled for its
    /// children, or has none delegated (then v1 or no limits, as before).
    Unchanged,
    /// Moved into `<dir>/glove-supervisor` and enabled the controllers in
    /// `dir`, where sessions now go.
    Entered(PathBuf),
}

/// For a service whose own v2 cgroup directory is `own` and whose pid is
/// `pid`: when `own` has [`CONTROLLERS`] available but not enabled for its
/// children, moves the process into `own/glove-supervisor` and enables
/// them in `own`. Errors say which step failed; the process may then be in
/// the leaf with the controllers not enabled, which is safe: session
/// cgroups then fail over to v1 or the runtime declines to advertise
/// managed sessions (limits are never silently dropped).
pub fn enter_leaf(own: &Path, pid: u32) -> Result<Delegation, String> {
    if own.file_name().is_some_and(|n| n == LEAF)
        || has_all(&own.join("cgroup.subtree_control"))
        || !has_all(&own.join("cgroup.controllers"))
    {
        return Ok(Delegation::Unchanged);
    }
    // Only a cgroup this process has to itself: a shell's scope, or any
    // cgroup shared with other processes, is never reorganised.
    let procs = fs::read_to_string(own.join("cgroup.procs"))
        .map_err(|e| format!("read {}: {e}", own.join("cgroup.procs").display()))?;
    let mut members = procs.split_whitespace();
    if members.next() != Some(pid.to_string().as_str()) || members.next().is_some() {
        return Err(format!(
            "{} holds other processes besides this one; its controllers are left alone",
            own.display()
        ));
    }
    let leaf = own.join(LEAF);
    match fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("mkdir {}: {e}", leaf.display())),
    }
    let procs = leaf.join("cgroup.procs");
    write_existing(&procs, &pid.to_string())
        .map_err(|e| format!("move {pid} into {}: {e}", procs.display()))?;
    let enable: Vec<String> = CONTROLLERS.iter().map(|c| format!("+{c}")).collect();
    let control = own.join("cgroup.subtree_control");
    write_existing(&control, &enable.join(" "))
        .map_err(|e| format!("enable {} in {}: {e}", enable.join(" "), control.display()))?;
    Ok(Delegation::Entered(own.to_path_buf()))
}

fn write_existing(path: &Path, value: &str) -> std::io::Result<()> {
    use std::io::Write;
    fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(value.as_bytes())
}

/// The variable the `glove daemon` units set (`Environment=`): only a
/// service that systemd started with `Delegate=` reorganises its cgroup.
pub const DELEGATED_VARIABLE: &str = "GLOVE_CGROUP_DELEGATED";

/// [`enter_leaf`] for this process, when `/sys/fs/cgroup` is cgroup v2 and
/// [`DELEGATED_VARIABLE`] says the cgroup was delegated. Never at the root
/// of the hierarchy (or of a cgroup namespace), never through `..`.
pub fn enter_own_leaf() -> Result<Delegation, String> {
    if std::env::var(DELEGATED_VARIABLE).as_deref() != Ok("1") {
        return Ok(Delegation::Unchanged);
    }
    let root = Path::new("/sys/fs/cgroup");
    if crate::sys::mount::fs_magic("/sys/fs/cgroup") != Some(0x6367_7270) {
        return Ok(Delegation::Unchanged);
    }
    let text =
        fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    let own = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("no v2 entry in /proc/self/cgroup")?;
    let rel = own.trim_start_matches('/');
    if rel.is_empty()
        || rel
            .split('/')
            .any(|c| c == ".." || c == "." || c.is_empty())
    {
        return Err(format!(
            "own cgroup {own:?} is the root or not a plain path; its controllers are left alone"
        ));
    }
    enter_leaf(&root.join(rel), std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in tree of plain files: the decisions, not the kernel's
    /// enforcement (which needs a host with v2 controllers).
    fn tree(controllers: &str, subtree: &str) -> tempfile::TempDir {
        let t = tempfile::tempdir().expect("tempdir");
        fs::write(t.path().join("cgroup.controllers"), controllers).expect("write");
        fs::write(t.path().join("cgroup.subtree_control"), subtree).expect("write");
        fs::write(t.path().join("cgroup.procs"), "42\n").expect("write");
        t
    }

    #[test]
    fn a_delegated_cgroup_gets_a_leaf_and_its_controllers_enabled() {
        let t = tree("cpu memory pids io\n", "");
        // The kernel makes cgroup.procs in a new directory; here the test does.
        fs::create_dir(t.path().join(LEAF)).expect("mkdir");
        fs::write(t.path().join(LEAF).join("cgroup.procs"), "").expect("write");
        assert_eq!(
            enter_leaf(t.path(), 42),
            Ok(Delegation::Entered(t.path().to_path_buf()))
        );
        let procs = fs::read_to_string(t.path().join(LEAF).join("cgroup.procs")).expect("read");
        assert_eq!(procs, "42");
        let sub = fs::read_to_string(t.path().join("cgroup.subtree_control")).expect("read");
        assert_eq!(sub, "+memory +pids +cpu");
        assert_eq!(session_parent(&t.path().join(LEAF)), t.path());
    }

    #[test]
    fn nothing_happens_without_delegation_or_when_already_enabled() {
        for (c, s) in [
            ("cpu memory", ""),
            ("", ""),
            ("cpu memory pids", "cpu memory pids"),
        ] {
            let t = tree(c, s);
            assert_eq!(
                enter_leaf(t.path(), 42),
                Ok(Delegation::Unchanged),
                "{c:?} {s:?}"
            );
            assert!(!t.path().join(LEAF).exists());
        }
        // A cgroup shared with another process (a login shell's scope) is
        // left alone, with a reason.
        let t = tree("cpu memory pids", "");
        fs::write(t.path().join("cgroup.procs"), "42\n77\n").expect("write");
        assert!(enter_leaf(t.path(), 42).is_err());
        assert!(!t.path().join(LEAF).exists());
        // Without the unit's marker nothing is looked at.
        std::env::remove_var(DELEGATED_VARIABLE);
        assert_eq!(enter_own_leaf(), Ok(Delegation::Unchanged));
        // A process elsewhere keeps its own cgroup, never the one above.
        let own = Path::new("/sys/fs/cgroup/user.slice/app.slice/x.scope");
        assert_eq!(session_parent(own), own);
    }
}
