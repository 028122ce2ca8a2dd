//! `glove daemon` against a real systemd: a user manager (`systemd
//! --user`) of an unprivileged uid, started by the test, drives the unit
//! `glove daemon install --now` writes; `glove daemon status` then reaches
//! gloved's socket through the capabilities call.
//!
//! These machines are not booted with systemd, so the manager gets what a
//! systemd host gives a user session, and nothing more, in namespaces of
//! its own (no host-wide state is changed):
//!
//! * a cgroup of the test's own (a directory made under the test's cgroup
//!   in the cgroup2 hierarchy, owned by the uid: what logind's
//!   `user@.service` delegation does), entered before a new cgroup
//!   namespace, so the manager sees it as its root and never the host's;
//! * a private mount namespace with `/run` a fresh tmpfs holding
//!   `/run/systemd/system` (a user manager refuses to start without it:
//!   "system has not been booted with systemd") and `/run/systemd/unit-root`
//!   (made by PID 1 on a systemd host; a unit with `PrivateMounts=` fails
//!   with 226/NAMESPACE without it), and `/sys/fs/cgroup` a tmpfs with that
//!   namespace's cgroup2 on it (the v1 hierarchies are hidden, so the
//!   manager creates nothing in them);
//! * a private `$XDG_RUNTIME_DIR`, `$HOME` and `$XDG_CONFIG_HOME`.
//!
//! The manager runs as that uid (`setpriv`), as a real user's does. Needs
//! root (to make the cgroup, the namespaces and switch uid), `systemd`,
//! `unshare` and `setpriv`; skips saying why without them, fails under
//! `GLOVE_REQUIRE_SANDBOX=1`.

use super::daemon::{gloved, key_hex, need, protected_write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const SYSTEMD: &str = "/lib/systemd/systemd";

/// The cgroup2 mount point and this process's cgroup in it.
fn own_cgroup2() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mounts.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let point = pre.split(' ').nth(4)?;
        (post.starts_with("cgroup2 ") && point.starts_with("/sys/fs/cgroup"))
            .then(|| point.to_owned())
    })?;
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(Path::new(&mount).join(path.trim_start_matches('/')))
}

fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::chown(p, Some(uid), Some(uid)).expect("chown");
}

fn mkdir(p: &Path, mode: u32, uid: u32) {
    std::fs::create_dir_all(p).expect("mkdir");
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    chown(p, uid);
}

/// The user manager, stopped and its cgroup removed on drop.
struct Manager {
    child: Child,
    cgroup: PathBuf,
    log: PathBuf,
}

impl Drop for Manager {
    fn drop(&mut self) {
        // Everything the manager started is in its cgroup.
        let _ = std::fs::write(self.cgroup.join("cgroup.kill"), "1");
        let _ = self.child.kill();
        let _ = self.child.wait();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.cgroup.exists() && Instant::now() < deadline {
            remove_tree(&self.cgroup);
            if self.cgroup.exists() {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

struct User {
    uid: u32,
    home: PathBuf,
    config_home: PathBuf,
    runtime: PathBuf,
}

impl User {
    /// `glove <args>` as the user, with only its own environment.
    fn glove(&self, args: &[&str]) -> Output {
        Command::new("/usr/bin/setpriv")
            .arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.uid))
            .args(["--clear-groups", "/usr/bin/env", "-i", "PATH=/usr/bin:/bin"])
            .arg(format!("HOME={}", self.home.display()))
            .arg(format!("XDG_CONFIG_HOME={}", self.config_home.display()))
            .arg(format!("XDG_RUNTIME_DIR={}", self.runtime.display()))
            .arg(super::daemon::kit_glove())
            .args(args)
            .output()
            .expect("run glove")
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let out = self.glove(args);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{args:?}: {e}: {} / {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }
}

fn start_manager(base: &Path, user: &User, cgroup: &Path) -> Manager {
    mkdir(cgroup, 0o755, 0);
    for f in [
        "",
        "cgroup.procs",
        "cgroup.subtree_control",
        "cgroup.threads",
    ] {
        chown(&cgroup.join(f), user.uid);
    }
    let inner = base.join("manager.sh");
    std::fs::write(
        &inner,
        format!(
            "#!/bin/sh\nset -e\n\
             mount -t tmpfs -o mode=0755 tmpfs /run\n\
             mkdir -p /run/systemd/system /run/systemd/unit-root\n\
             mount -t tmpfs -o mode=0755 tmpfs /sys/fs/cgroup\n\
             mount -t cgroup2 cgroup2 /sys/fs/cgroup\n\
             exec /usr/bin/setpriv --reuid={uid} --regid={uid} --clear-groups \
             /usr/bin/env -i PATH=/usr/bin:/bin HOME={home} XDG_CONFIG_HOME={cfg} \
             XDG_RUNTIME_DIR={rt} SYSTEMD_LOG_TARGET=console {SYSTEMD} --user\n",
            uid = user.uid,
            home = user.home.display(),
            cfg = user.config_home.display(),
            rt = user.runtime.display(),
        ),
    )
    .expect("write");
    std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let log = base.join("manager.log");
    let out = std::fs::File::create(&log).expect("log");
    let child = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {}/cgroup.procs && exec /usr/bin/unshare -m -C --propagation private {}",
            cgroup.display(),
            inner.display()
        ))
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("dup"))
        .stderr(out)
        .spawn()
        .expect("spawn the manager");
    let mut m = Manager {
        child,
        cgroup: cgroup.to_path_buf(),
        log,
    };
    // The manager is up when its private socket is there (what
    // `systemctl --user` connects to).
    let private = user.runtime.join("systemd/private");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !private.exists() {
        if let Ok(Some(s)) = m.child.try_wait() {
            panic!(
                "systemd --user exited ({s}): {}",
                std::fs::read_to_string(&m.log).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "systemd --user did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
    m
}

#[test]
fn install_now_runs_gloved_under_a_real_systemd_user_manager() {
    let root = rustix::process::geteuid().is_root();
    if !need(
        root,
        "not root: cannot make a cgroup and namespaces for a user manager",
    ) || !need(
        [
            SYSTEMD,
            "/usr/bin/systemctl",
            "/usr/bin/unshare",
            "/usr/bin/setpriv",
        ]
        .iter()
        .all(|p| Path::new(p).exists()),
        "systemd, systemctl, unshare or setpriv is not installed",
    ) {
        return;
    }
    let Some(own) = own_cgroup2() else {
        assert!(
            !super::daemon::required(),
            "GLOVE_REQUIRE_SANDBOX=1 but no cgroup2 is mounted"
        );
        eprintln!("skipping: no cgroup2 mount under /sys/fs/cgroup");
        return;
    };
    let dir = tempfile::Builder::new()
        .prefix("daemon-systemd-")
        .tempdir_in(super::daemon::safe_base())
        .expect("tempdir");
    let base = dir.path();
    std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let uid = 61_000 + std::process::id() % 1000;
    let home = base.join("home");
    let user = User {
        uid,
        config_home: home.join(".config"),
        runtime: base.join("run"),
        home,
    };
    mkdir(&user.home, 0o700, uid);
    mkdir(&user.config_home, 0o700, uid);
    mkdir(&user.runtime, 0o700, uid);
    let glove_dir = user.config_home.join("glove");
    let state = user.home.join(".local/state/glove");
    mkdir(&glove_dir, 0o700, uid);
    mkdir(&state, 0o700, uid);
    chown(&user.home.join(".local"), uid);
    let key = glove_dir.join("receipt.key");
    protected_write(&key, &key_hex());
    chown(&key, uid);
    let cfg = glove_dir.join("gloved.json");
    let socket_dir = user.runtime.join("glove");
    protected_write(
        &cfg,
        &format!(
            "{{\"receipt_journal\":\"{}\",\"receipt_key\":\"{}\",\"runtime_dir\":\"{}\"}}",
            state.join("receipts.journal").display(),
            key.display(),
            socket_dir.display()
        ),
    );
    chown(&cfg, uid);
    let cgroup = own.join(format!("glove-daemon-test-{}", std::process::id()));
    let manager = start_manager(base, &user, &cgroup);

    let v = user.json(&["daemon", "install", "--now", "--json"]);
    assert_eq!(v["changed"], true, "{v}");
    assert_eq!(v["scope"], "user", "{v}");
    assert_eq!(v["gloved"], gloved().display().to_string(), "{v}");
    let unit = user.config_home.join("systemd/user/glove.service");
    assert_eq!(v["unit"], unit.display().to_string(), "{v}");

    // Type=exec: started means exec'd; the socket follows. Wait for the
    // capabilities to come back through `status`.
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        let s = user.json(&["daemon", "status", "--json"]);
        if s.get("capabilities").is_some() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "gloved did not answer: {s}\n{}",
            std::fs::read_to_string(&manager.log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status["state"]["active_state"], "active", "{status}");
    assert_eq!(status["state"]["unit_file_state"], "enabled", "{status}");
    let methods = status["capabilities"]["methods"]
        .as_array()
        .expect("methods");
    assert!(methods.iter().any(|m| m == "capabilities"), "{status}");
    let pid = status["state"]["main_pid"].as_u64().expect("main pid");
    let text = user.glove(&["daemon", "status"]);
    let shown = String::from_utf8_lossy(&text.stdout);
    assert!(shown.contains("active (running)"), "{shown}");
    assert!(shown.contains("service: protocol version"), "{shown}");

    // The unit's settings, seen from outside: no namespace of its own for
    // the user unit (a user manager's user namespace would hide who owns
    // the launch paths; each session makes its own), no new privileges,
    // a delegated cgroup of the user's.
    let proc_ = |f: &str| std::fs::read_to_string(format!("/proc/{pid}/{f}")).expect("proc");
    let ns = |p: String, n: &str| std::fs::read_link(format!("/proc/{p}/ns/{n}")).expect("ns");
    let manager_pid = manager.child.id().to_string();
    assert_eq!(ns(pid.to_string(), "user"), ns(manager_pid.clone(), "user"));
    assert_eq!(ns(pid.to_string(), "mnt"), ns(manager_pid, "mnt"));
    assert!(proc_("environ")
        .split('\0')
        .any(|e| e == "GLOVE_CGROUP_DELEGATED=1"));
    assert!(proc_("status").contains("NoNewPrivs:\t1"));
    let cg = proc_("cgroup");
    let cg = cg
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .expect("v2 line");
    let unit_cgroup = cgroup.join("app.slice/glove.service");
    assert_eq!(std::fs::metadata(&unit_cgroup).expect("cgroup").uid(), uid);
    // With the controllers delegated (a cgroup v2 host), gloved moves into
    // its leaf and enables them for the sessions beside it; without them
    // (here: every controller is bound to a v1 hierarchy) it stays put.
    let available = std::fs::read_to_string(unit_cgroup.join("cgroup.controllers")).expect("read");
    let delegated = ["cpu", "memory", "pids"]
        .iter()
        .all(|c| available.split_whitespace().any(|x| x == *c));
    if delegated {
        assert!(
            cg.ends_with("/app.slice/glove.service/glove-supervisor"),
            "{cg}"
        );
        let enabled =
            std::fs::read_to_string(unit_cgroup.join("cgroup.subtree_control")).expect("read");
        for c in ["cpu", "memory", "pids"] {
            assert!(enabled.split_whitespace().any(|x| x == c), "{enabled}");
        }
    } else {
        eprintln!("no controllers reach the unit's cgroup ({available:?}): gloved stays in it");
        assert!(cg.ends_with("/app.slice/glove.service"), "{cg}");
        assert!(!unit_cgroup.join("glove-supervisor").exists());
    }

    // Idempotent; stop; start; uninstall.
    let v = user.json(&["daemon", "install", "--now", "--json"]);
    assert_eq!(v["changed"], false, "{v}");
    let v = user.json(&["daemon", "stop", "--json"]);
    assert_eq!(v["state"]["active_state"], "inactive", "{v}");
    assert!(
        !socket_dir.join("gloved.sock").exists(),
        "gloved removes its socket on SIGTERM"
    );
    let v = user.json(&["daemon", "start", "--json"]);
    assert_eq!(v["state"]["active_state"], "active", "{v}");
    let v = user.json(&["daemon", "uninstall", "--json"]);
    assert_eq!(v["removed"], true, "{v}");
    assert!(!unit.exists());
    let v = user.json(&["daemon", "status", "--json"]);
    assert_eq!(v["unit_file"], "absent", "{v}");
    assert_eq!(v["state"]["active_state"], "inactive", "{v}");
    drop(manager);
    assert!(!cgroup.exists(), "the test's cgroup is removed");
}
