//! The managed path as a newcomer walks it, with nothing but the commands
//! the README gives: `glove setup`, `gloved --config`, `glove plan new`,
//! `glove session run` (piped input, the agent's exit status), `glove
//! session list`, `glove receipts show`; and once the receipt is written,
//! no launcher of the session is left.

use super::harness::Daemon;
use serde_json::Value;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A home below a directory with safe ancestors and the XDG variables
/// pointing into it; `glove` and `gloved` run with exactly this
/// environment (no flags naming a runtime directory).
pub(crate) struct Newcomer {
    _t: tempfile::TempDir,
    pub(crate) root: PathBuf,
}

impl Newcomer {
    pub(crate) fn new() -> Newcomer {
        let t = crate::common::safe_tempdir();
        let root = t.path().to_path_buf();
        std::fs::create_dir(root.join("run")).expect("mkdir run");
        std::fs::set_permissions(root.join("run"), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        Newcomer { _t: t, root }
    }

    pub(crate) fn env(&self, cmd: &mut Command) {
        cmd.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", &self.root)
            .env("XDG_CONFIG_HOME", self.root.join("config"))
            .env("XDG_STATE_HOME", self.root.join("state"))
            .env("XDG_RUNTIME_DIR", self.root.join("run"))
            .current_dir(&self.root);
    }

    pub(crate) fn glove(&self, args: &[&str], stdin: &[u8]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_glove"));
        self.env(&mut cmd);
        let mut child = cmd
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn glove");
        let mut input = child.stdin.take().expect("stdin");
        input.write_all(stdin).expect("write stdin");
        drop(input);
        child.wait_with_output().expect("wait glove")
    }

    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let out = self.glove(args, b"");
        assert!(
            out.status.success(),
            "glove {args:?}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    pub(crate) fn gloved(&self) -> Daemon {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gloved"));
        self.env(&mut cmd);
        let config = self.root.join("config/glove/gloved.json");
        Daemon::spawn_on_system_clock(
            cmd,
            &["--config".into(), config.display().to_string()],
            &self.root.join("run/glove"),
        )
    }
}

pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Children of `pid` whose command name is `name`.
pub(crate) fn children_named(pid: u32, name: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("proc").flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`; comm may hold spaces, so split after ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        let ppid = stat[close + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse::<u32>().ok());
        if ppid == Some(pid) && comm == name {
            out.push(p);
        }
    }
    out
}

/// Waits (bounded, on the processes' own exit) until `pid` has no child
/// named `name`; false if one is still there after 20 s.
pub(crate) fn no_children_named(pid: u32, name: &str) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        if children_named(pid, name).is_empty() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

fn session_of(plan: &Path) -> String {
    let v: Value = serde_json::from_slice(&std::fs::read(plan).expect("plan")).expect("json");
    v["session_id"].as_str().expect("session_id").to_owned()
}

#[test]
fn setup_gloved_plan_new_session_run_list_and_receipts_show() {
    if !crate::common::need(
        crate::common::is_root(),
        "managed sessions need root (or a delegated cgroup) here",
    ) {
        return;
    }
    let n = Newcomer::new();
    n.ok(&["setup"]);
    // Nothing names the runtime directory: the client finds the service
    // from the config setup wrote.
    let refused = n.glove(&["capabilities"], b"");
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("no gloved is running here"),
        "{}",
        text(&refused.stderr)
    );
    let d = n.gloved();
    // gloved raised its descriptor limit to the hard one (every exposure,
    // session and connection holds descriptors).
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", d.pid())).expect("limits");
    let files: Vec<&str> = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("Max open files")
        .split_whitespace()
        .collect();
    assert_eq!(files[3], files[4], "soft = hard: {files:?}");
    let caps = n.ok(&["capabilities", "--json"]);
    let caps: Value = serde_json::from_str(&caps).expect("json");
    assert!(caps["methods"]
        .as_array()
        .expect("methods")
        .iter()
        .any(|m| m == "start_session"));

    n.ok(&[
        "plan",
        "new",
        "--template",
        "shell",
        "--profile",
        "small",
        "--out",
        "plan.json",
    ]);
    let id = session_of(&n.root.join("plan.json"));
    let out = n.glove(
        &["session", "run", "plan.json"],
        b"echo hello from the sandbox; exit 7\n",
    );
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("hello from the sandbox"),
        "{}",
        text(&out.stdout)
    );
    // The receipt is durable (session run returned after it): the launcher
    // and its sandbox init go now, not at cleanup.
    assert!(
        no_children_named(d.pid(), "glove-launcher"),
        "a launcher outlived its session's receipt"
    );

    // A second run of the same plan is refused with a hint, not re-run.
    let again = n.glove(&["session", "run", "plan.json"], b"");
    assert_eq!(again.status.code(), Some(1));
    assert!(
        text(&again.stderr).contains("already exited"),
        "{}",
        text(&again.stderr)
    );

    let list = n.ok(&["session", "list"]);
    let line = list
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("{id} not listed: {list}"));
    assert!(line.contains("exited") && line.contains("shell"), "{line}");
    let list: Value = serde_json::from_str(&n.ok(&["session", "list", "--json"])).expect("json");
    assert_eq!(list["sessions"][0]["session_id"], id.as_str());

    let shown = n.ok(&["receipts", "show", "--session", &id]);
    assert!(shown.contains("exited with code 7"), "{shown}");

    // A session killed by a signal: 128 + N.
    n.ok(&[
        "plan",
        "new",
        "--template",
        "shell",
        "--profile",
        "small",
        "--out",
        "p2.json",
    ]);
    let out = n.glove(&["session", "run", "p2.json"], b"kill -9 $$\n");
    assert_eq!(out.status.code(), Some(137), "{}", text(&out.stderr));

    // A session created but never started (its start refused, or never
    // asked for) can be cleaned up: it ends with a receipt that says so.
    n.ok(&[
        "plan",
        "new",
        "--template",
        "shell",
        "--profile",
        "small",
        "--out",
        "p3.json",
    ]);
    let never = session_of(&n.root.join("p3.json"));
    n.ok(&["session", "create", "--plan", "p3.json"]);
    let cleaned = n.ok(&["session", "cleanup", &never, "--json"]);
    assert!(cleaned.contains("\"abandoned\":true"), "{cleaned}");
    let status = n.ok(&["session", "status", &never]);
    assert!(status.contains("failed"), "{status}");
    let shown = n.ok(&["receipts", "show", "--session", &never]);
    assert!(shown.contains("session_abandoned"), "{shown}");

    // Attach after the end: the transcript, and the same status.
    let out = n.glove(&["session", "attach", &id], b"");
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    n.ok(&["session", "cleanup", &id]);
    d.stop();
}

/// Files under `dir`, recursively, as paths relative to it.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(dir).expect("below").display().to_string());
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_refused_gloved_start_leaves_nothing_behind() {
    let n = Newcomer::new();
    n.ok(&["setup"]);
    // Every late check in turn: the start-authorization key, the apply
    // trust policy (root's setup makes one), the receipt anchor.
    let cfg = n.root.join("config/glove");
    let key = cfg.join("start-auth.key");
    let good_key = std::fs::read(&key).expect("key");
    std::fs::write(&key, b"not hex\n").expect("write");
    let before = tree(&n.root);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gloved"));
    n.env(&mut cmd);
    let out = cmd
        .args(["--config", cfg.join("gloved.json").to_str().expect("utf8")])
        .output()
        .expect("gloved");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(tree(&n.root), before, "{}", text(&out.stderr));
    std::fs::write(&key, &good_key).expect("write");

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gloved"));
    n.env(&mut cmd);
    let out = cmd
        .args(["--config", cfg.join("gloved.json").to_str().expect("utf8")])
        .args(["--receipt-anchor", "1:zz"])
        .output()
        .expect("gloved");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(tree(&n.root), before, "{}", text(&out.stderr));

    // The runtime directory it would have made is gone again.
    std::fs::remove_dir(n.root.join("run/glove")).expect("rmdir");
    let before = tree(&n.root);
    std::fs::write(&key, b"not hex\n").expect("write");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gloved"));
    n.env(&mut cmd);
    let out = cmd
        .args(["--config", cfg.join("gloved.json").to_str().expect("utf8")])
        .output()
        .expect("gloved");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(tree(&n.root), before, "{}", text(&out.stderr));
}

/// What `Delegate=` gives a service on a systemd machine, made by hand for
/// a test: cgroups of the test's own (v1 `memory` below the test's memory
/// cgroup, `pids` and `cpuacct`) owned by `uid`, removed when dropped.
pub(crate) struct Delegated {
    dirs: Vec<PathBuf>,
}

impl Delegated {
    pub(crate) fn new(uid: u32) -> Option<Delegated> {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let mem = own
            .lines()
            .find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_owned()))?;
        let name = format!("glove-test-deleg-{}-{}", std::process::id(), rand_suffix());
        let mut dirs = Vec::new();
        for (ctrl, below) in [("memory", mem.as_str()), ("pids", "/"), ("cpuacct", "/")] {
            let base = PathBuf::from("/sys/fs/cgroup")
                .join(ctrl)
                .join(below.trim_start_matches('/'));
            if !base.is_dir() {
                return None;
            }
            let d = base.join(&name);
            std::fs::create_dir(&d).ok()?;
            dirs.push(d.clone());
            for e in std::fs::read_dir(&d).ok()?.flatten() {
                std::os::unix::fs::chown(e.path(), Some(uid), Some(uid)).ok()?;
            }
            std::os::unix::fs::chown(&d, Some(uid), Some(uid)).ok()?;
        }
        Some(Delegated { dirs })
    }

    /// A shell line that moves the shell into every delegated cgroup.
    pub(crate) fn enter(&self) -> String {
        self.dirs
            .iter()
            .map(|d| format!("echo $$ > {}/cgroup.procs", d.display()))
            .collect::<Vec<_>>()
            .join(" && ")
    }
}

impl Drop for Delegated {
    fn drop(&mut self) {
        // Session cgroups below are removed by their launchers; a leftover
        // one (a failed test) goes first.
        for d in &self.dirs {
            for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    let _ = std::fs::remove_dir(e.path());
                }
            }
            let _ = std::fs::remove_dir(d);
        }
    }
}

fn rand_suffix() -> String {
    let mut b = [0u8; 4];
    getrandom::fill(&mut b).expect("random");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The unprivileged newcomer: uid 65534 with its own home, the three
/// binaries copied where it can run them, gloved inside a delegated cgroup.
pub(crate) struct Unprivileged {
    pub(crate) n: Newcomer,
    pub(crate) bin: PathBuf,
    pub(crate) uid: u32,
}

impl Unprivileged {
    pub(crate) fn new() -> Option<Unprivileged> {
        let ok = crate::common::is_root() && Path::new("/usr/bin/setpriv").exists();
        if !crate::common::need(
            ok,
            "the unprivileged newcomer needs root and setpriv to become uid 65534",
        ) {
            return None;
        }
        let uid = 65534;
        let n = Newcomer::new();
        let bin = n.root.join("bin");
        std::fs::create_dir(&bin).expect("mkdir bin");
        for (exe, name) in [
            (env!("CARGO_BIN_EXE_glove"), "glove"),
            (env!("CARGO_BIN_EXE_gloved"), "gloved"),
            (env!("CARGO_BIN_EXE_glove-launcher"), "glove-launcher"),
        ] {
            std::fs::copy(exe, bin.join(name)).expect("copy");
        }
        let home = n.root.join("home");
        std::fs::create_dir(&home).expect("mkdir home");
        for d in [&home, &n.root.join("run")] {
            std::os::unix::fs::chown(d, Some(uid), Some(uid)).expect("chown");
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        }
        Some(Unprivileged { n, bin, uid })
    }

    pub(crate) fn home(&self) -> PathBuf {
        self.n.root.join("home")
    }

    /// A command as the user, with only HOME and XDG_RUNTIME_DIR set.
    pub(crate) fn command(&self, exe: &str) -> Command {
        let mut cmd = Command::new("/usr/bin/setpriv");
        cmd.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", self.home())
            .env("XDG_RUNTIME_DIR", self.n.root.join("run"))
            .current_dir(self.home())
            .args([
                "--reuid",
                &self.uid.to_string(),
                "--regid",
                &self.uid.to_string(),
            ])
            .args(["--clear-groups", "--"])
            .arg(self.bin.join(exe));
        cmd
    }

    pub(crate) fn glove(&self, args: &[&str], stdin: &[u8]) -> Output {
        let mut child = self
            .command("glove")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn glove");
        let mut input = child.stdin.take().expect("stdin");
        input.write_all(stdin).expect("write stdin");
        drop(input);
        child.wait_with_output().expect("wait glove")
    }

    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let out = self.glove(args, b"");
        assert!(
            out.status.success(),
            "glove {args:?}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// gloved as the user, inside `cg`.
    pub(crate) fn gloved(&self, cg: &Delegated) -> Daemon {
        let inner = self.command("gloved");
        let argv: Vec<String> = std::iter::once(inner.get_program())
            .chain(inner.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let config = self.home().join(".config/glove/gloved.json");
        let mut cmd = Command::new("/bin/sh");
        cmd.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", self.home())
            .env("XDG_RUNTIME_DIR", self.n.root.join("run"))
            .current_dir(self.home())
            .arg("-c")
            .arg(format!("{} && exec \"$@\"", cg.enter()))
            .arg("sh")
            .args(&argv);
        Daemon::spawn_on_system_clock(
            cmd,
            &["--config".into(), config.display().to_string()],
            &self.n.root.join("run/glove"),
        )
    }
}

#[test]
fn an_unprivileged_newcomer_goes_from_setup_to_a_session_with_an_exposed_project() {
    let Some(u) = Unprivileged::new() else {
        return;
    };
    let Some(cg) = Delegated::new(u.uid) else {
        assert!(
            !crate::common::required(),
            "GLOVE_REQUIRE_SANDBOX=1 but no v1 memory, pids and cpuacct hierarchies to delegate"
        );
        eprintln!("skipping: no v1 memory, pids and cpuacct hierarchies to delegate");
        return;
    };
    // A project under a root setup approves for exposures.
    let src = u.home().join("src");
    let proj = src.join("proj");
    std::fs::create_dir_all(&proj).expect("mkdir");
    std::fs::write(proj.join("README"), "hello from the host project\n").expect("write");
    for p in [&src, &proj, &proj.join("README")] {
        std::os::unix::fs::chown(p, Some(u.uid), Some(u.uid)).expect("chown");
    }
    u.ok(&["setup", "--path-root", src.to_str().expect("utf8")]);
    let d = u.gloved(&cg);
    let caps: Value = serde_json::from_str(&u.ok(&["capabilities", "--json"])).expect("json");
    let methods = caps["methods"].as_array().expect("methods");
    for m in ["start_session", "exposure_catalog", "exposure_create"] {
        assert!(methods.iter().any(|x| x == m), "{m}: {caps}");
    }
    // `glove init` enrols the project; the catalog shows it, redacted.
    let init: Value =
        serde_json::from_str(&u.ok(&["init", proj.to_str().expect("utf8"), "--json"]))
            .expect("json");
    assert_eq!(init["destination"], "/work/proj", "{init}");
    let id = init["exposure"]["exposure_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let generation = init["exposure"]["generation"].as_u64().expect("generation");
    let catalog = u.ok(&["exposures", "list", "--json"]);
    assert!(catalog.contains(&id), "{catalog}");
    assert!(
        !catalog.contains("/src/proj"),
        "the catalog names no path: {catalog}"
    );

    // A plan with the exposure: the session sees the project copied in.
    let exposure = format!("{id}:{generation}:ephemeral_write");
    u.ok(&[
        "plan",
        "new",
        "--template",
        "shell",
        "--profile",
        "small",
        "--exposure",
        &exposure,
        "--out",
        "plan.json",
    ]);
    let out = u.glove(
        &["session", "run", "plan.json"],
        b"echo I am $(id -u) inside; cat /work/proj/README; echo scratch > /work/proj/new; exit 5\n",
    );
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.contains("inside") && shown.contains("hello from the host project"),
        "{shown}"
    );
    assert!(
        !proj.join("new").exists(),
        "an ephemeral copy never reaches the host tree"
    );
    assert!(no_children_named(d.pid(), "glove-launcher"));
    let receipts = u.ok(&["receipts", "show"]);
    assert!(receipts.contains("exited with code 5"), "{receipts}");

    // Revoked: a plan naming it is refused.
    u.ok(&["exposures", "revoke", &id]);
    u.ok(&[
        "plan",
        "new",
        "--template",
        "shell",
        "--profile",
        "small",
        "--exposure",
        &exposure,
        "--out",
        "plan2.json",
    ]);
    let refused = u.glove(&["session", "run", "plan2.json", "--json"], b"");
    assert_eq!(refused.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&refused.stdout).expect("json");
    assert_eq!(v["code"], "exposure_revoked", "{v}");
    d.stop();
}

/// At a terminal (a pty from `script`), Ctrl-] detaches `session run`:
/// glove exits 0, restoring the terminal, and the session goes on.
#[test]
fn ctrl_close_bracket_detaches_a_terminal_and_the_session_goes_on() {
    let has_script = Path::new("/usr/bin/script").exists();
    if !crate::common::need(
        crate::common::is_root() && has_script,
        "detaching needs root (managed sessions) and script(1) for a terminal",
    ) {
        return;
    }
    let n = Newcomer::new();
    n.ok(&["setup"]);
    let d = n.gloved();
    n.ok(&[
        "plan",
        "new",
        "--template",
        "shell",
        "--profile",
        "small",
        "--out",
        "plan.json",
    ]);
    let id = session_of(&n.root.join("plan.json"));
    let glove = env!("CARGO_BIN_EXE_glove");
    let mut cmd = Command::new("/usr/bin/script");
    n.env(&mut cmd);
    let mut child = cmd
        .args([
            "-qec",
            &format!("{glove} session run plan.json"),
            "/dev/null",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script");
    let mut input = child.stdin.take().expect("stdin");
    input
        .write_all(b"echo marker-$((6*7))\r\x1d")
        .expect("type");
    // The input stays open until glove has gone: its end is not the signal.
    let out = child.wait_with_output().expect("wait");
    drop(input);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("detached"),
        "{}",
        text(&out.stdout)
    );
    let list = n.ok(&["session", "list"]);
    let line = list.lines().find(|l| l.starts_with(&id)).expect("listed");
    assert!(line.contains("running"), "{line}");
    n.ok(&["session", "stop", &id]);
    let after = n.glove(&["session", "attach", &id, "--read-only"], b"");
    assert!(
        text(&after.stdout).contains("marker-42"),
        "{}",
        text(&after.stdout)
    );
    d.stop();
}

/// A project exposed as a retained workspace: the session works on an
/// image filled from the project's held descriptor; `glove diff` shows the
/// changes and `glove apply` brings them into the project.
#[test]
fn an_exposed_project_comes_back_through_diff_and_apply() {
    if !crate::common::need(
        crate::common::is_root(),
        "retained workspaces need root (loop devices, ext4)",
    ) {
        return;
    }
    let n = Newcomer::new();
    let proj = n.root.join("src/proj");
    std::fs::create_dir_all(&proj).expect("mkdir");
    std::fs::write(proj.join("README"), "hello\n").expect("write");
    n.ok(&[
        "setup",
        "--path-root",
        n.root.join("src").to_str().expect("utf8"),
    ]);
    let d = n.gloved();
    let init: Value =
        serde_json::from_str(&n.ok(&["init", proj.to_str().expect("utf8"), "--json"]))
            .expect("json");
    let id = init["exposure"]["exposure_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let exposure = format!("{id}:1:retained_write");
    n.ok(&[
        "plan",
        "new",
        "--template",
        "shell",
        "--profile",
        "small",
        "--exposure",
        &exposure,
        "--out",
        "plan.json",
    ]);
    let session = session_of(&n.root.join("plan.json"));
    let out = n.glove(
        &["session", "run", "plan.json"],
        b"pwd; echo changed >> README; echo added > new.txt; exit 0\n",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("/work/proj"),
        "{}",
        text(&out.stdout)
    );
    // Nothing reached the project yet.
    assert!(!proj.join("new.txt").exists());
    let diff: Value =
        serde_json::from_str(&n.ok(&["diff", &session, "--service", "--json"])).expect("json");
    assert_eq!(diff["alias"], "proj", "{diff}");
    let mut changes: Vec<String> = diff["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| {
            format!(
                "{} {}",
                c["path"].as_str().unwrap_or(""),
                c["change"].as_str().unwrap_or("")
            )
        })
        .collect();
    changes.sort();
    assert_eq!(changes, ["README modified", "new.txt added"], "{diff}");
    let applied = n.glove(&["apply", &session, "--service", "--yes"], b"");
    assert_eq!(
        applied.status.code(),
        Some(0),
        "{}{}",
        text(&applied.stdout),
        text(&applied.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(proj.join("README")).expect("read"),
        "hello\nchanged\n"
    );
    assert_eq!(
        std::fs::read_to_string(proj.join("new.txt")).expect("read"),
        "added\n"
    );

    // The apply swapped a new directory in: the exposure no longer names
    // it, and says how to grant the one there now.
    n.ok(&[
        "plan",
        "new",
        "--template",
        "shell",
        "--profile",
        "small",
        "--exposure",
        &exposure,
        "--out",
        "again.json",
    ]);
    let again = n.glove(&["session", "run", "again.json", "--json"], b"");
    assert_eq!(again.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&again.stdout).expect("json");
    assert_eq!(v["code"], "exposure_identity_changed", "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap_or("")
            .contains("glove init --replace"),
        "{v}"
    );
    let replaced: Value =
        serde_json::from_str(&n.ok(&["init", proj.to_str().expect("utf8"), "--replace", "--json"]))
            .expect("json");
    assert_eq!(replaced["exposure"]["generation"], 2, "{replaced}");
    let exposure2 = format!("{id}:2:read_only");
    n.ok(&[
        "plan",
        "new",
        "--template",
        "shell",
        "--profile",
        "small",
        "--exposure",
        &exposure2,
        "--out",
        "third.json",
    ]);
    let out = n.glove(&["session", "run", "third.json"], b"cat new.txt; exit 0\n");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("added"), "{}", text(&out.stdout));
    d.stop();
}
