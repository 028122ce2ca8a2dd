// This file is over 600 lines because it is one end-to-end battery on `glove exec` (streams, statuses, copies, terminals, the six limits) sharing one set of sandbox helpers.
//! `glove exec` end to end in a real sandbox: streams, exit statuses, the
//! default profile, copies, terminals and each of the six limits.

mod common;

use common::{glove, glove_with_env, is_root, need, outcome, sandbox_ok, As};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn streams_and_exit_statuses() {
    if !sandbox_ok(As::Caller) {
        return;
    }
    let out = glove(
        As::Caller,
        &[
            "exec",
            "--",
            "/bin/sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(text(&out.stdout), "out\n");
    assert_eq!(text(&out.stderr), "err\n");

    let out = glove(
        As::Caller,
        &["exec", "--", "/bin/sh", "-c", "kill -TERM $$"],
        None,
    );
    assert_eq!(out.status.code(), Some(128 + 15));

    let out = glove(As::Caller, &["exec", "--", "cat"], Some(b"piped input\n"));
    assert_eq!(text(&out.stdout), "piped input\n");
    assert_eq!(out.status.code(), Some(0));

    let out = glove(
        As::Caller,
        &["exec", "--json", "--", "/bin/sh", "-c", "exit 7"],
        None,
    );
    let (v, _) = outcome(&out);
    assert_eq!(v["exit"], serde_json::json!({"kind": "exited", "code": 7}));
    assert_eq!(v["ended_by"], serde_json::Value::Null);
    assert_eq!(out.status.code(), Some(7));
}

#[test]
fn launch_failures_have_codes() {
    if !sandbox_ok(As::Caller) {
        return;
    }
    let out = glove(As::Caller, &["exec", "--", "no-such-command-glove"], None);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).starts_with("error[sandbox_spec_invalid]"),
        "{}",
        text(&out.stderr)
    );
    let out = glove(As::Caller, &["exec", "--", "/workspace/missing"], None);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).starts_with("error[sandbox_exec_failed]"),
        "{}",
        text(&out.stderr)
    );
    let out = glove(
        As::Caller,
        &["exec", "--ro-bind", "/no/such/path", "--", "/bin/true"],
        None,
    );
    assert_eq!(out.status.code(), Some(125));
    let out = glove(
        As::Caller,
        &["exec", "--memory", "12Q", "--", "/bin/true"],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn nothing_inherited_and_explicit_env() {
    if !sandbox_ok(As::Caller) {
        return;
    }
    std::env::set_var("GLOVE_TEST_LEAK", "leaked");
    let out = glove(
        As::Caller,
        &["exec", "--env", "FOO=bar", "--", "/usr/bin/env"],
        None,
    );
    let env = text(&out.stdout);
    assert!(!env.contains("GLOVE_TEST_LEAK"), "{env}");
    assert!(env.contains("FOO=bar\n"), "{env}");
    assert!(env.contains("HOME=/home/agent\n"), "{env}");
}

#[test]
fn etc_from_a_snapshot_matches_etc_copied_in() {
    if !sandbox_ok(As::Caller) {
        return;
    }
    // Names and contents of every file, then a write attempt.
    let script = "cd /etc && for f in * ssl/*; do \
        if [ -f \"$f\" ]; then echo \"$f $(md5sum < \"$f\")\"; else echo \"$f/\"; fi; done; \
        (echo x > /etc/passwd) 2>/dev/null || echo refused; \
        (echo x > /etc/new) 2>/dev/null || echo refused; \
        grep -c ' /etc ' /proc/self/mountinfo || true";
    let cache = tempfile::tempdir().expect("tempdir");
    let dir = cache.path().join("glove/etc");
    let run = |value: &std::ffi::OsStr| {
        let out = glove_with_env(
            As::Caller,
            &["exec", "--", "/bin/sh", "-c", script],
            None,
            &[("GLOVE_ETC_SNAPSHOTS", value)],
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let copied = run("off".as_ref());
    let from_snapshot = run(dir.as_os_str());
    let (copied_files, copied_mounts) = copied.rsplit_once("refused\n").expect("copied");
    let (snap_files, snap_mounts) = from_snapshot.rsplit_once("refused\n").expect("snapshot");
    assert_eq!(copied_files, snap_files);
    assert!(copied_files.contains("passwd ") && copied_files.contains("ssl/openssl.cnf"));
    // Copied: /etc is part of the root; from a snapshot: one bind mount.
    assert_eq!((copied_mounts, snap_mounts), ("0\n", "1\n"));
    let made: Vec<_> = std::fs::read_dir(&dir).expect("snapshots").collect();
    assert_eq!(made.len(), 1, "{made:?}");
    // A second launch uses the same snapshot.
    assert_eq!(run(dir.as_os_str()), from_snapshot);
    assert_eq!(std::fs::read_dir(&dir).expect("snapshots").count(), 1);

    let bad = glove_with_env(
        As::Caller,
        &["exec", "--json", "--", "/bin/true"],
        None,
        &[("GLOVE_ETC_SNAPSHOTS", "relative/dir".as_ref())],
    );
    assert_eq!(bad.status.code(), Some(125));
    assert!(
        text(&bad.stdout).contains("sandbox_spec_invalid"),
        "{}",
        text(&bad.stdout)
    );
}

#[test]
fn network_namespaces_from_the_pool_serve_one_sandbox_each() {
    use glove_sandbox::net_pool;
    use std::os::unix::fs::PermissionsExt;
    if !sandbox_ok(As::Caller) || !need(is_root(), "the network namespace pool needs root") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("glove/netns");
    // A copy of glove of this test's own: the helpers that refill the pool
    // after each launch run that binary, so the test can wait for them.
    let bin = tmp.path().join("glove-pool-test");
    // (A link, not a copy: a copy's write descriptor, inherited by a
    // process another test forks meanwhile, would make it busy.)
    std::fs::hard_link(&common::kit().glove, &bin)
        .or_else(|_| std::fs::copy(&common::kit().glove, &bin).map(drop))
        .expect("link glove");
    let helpers_done = || {
        for _ in 0..500 {
            let running = std::fs::read_dir("/proc")
                .expect("proc")
                .flatten()
                .any(|e| std::fs::read_link(e.path().join("exe")).is_ok_and(|x| x == bin));
            if !running {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("the refill helpers did not finish");
    };
    struct Cleanup(std::path::PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = net_pool::drain(&self.0);
            let _ = std::process::Command::new("umount")
                .args(["--recursive", "--lazy"])
                .arg(&self.0)
                .status();
        }
    }
    let _cleanup = Cleanup(dir.clone());
    let script = "readlink /proc/self/ns/net; sed 1,2d /proc/self/net/dev | cut -d: -f1; sleep 1";
    let run = |pool: &std::ffi::OsStr| {
        let out = std::process::Command::new(&bin)
            .args(["exec", "--", "/bin/sh", "-c", script])
            .env("GLOVE_NET_POOL", pool)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run glove");
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let s = text(&out.stdout);
        let mut lines = s.lines();
        let ns = lines.next().expect("namespace").to_owned();
        let links: Vec<String> = lines.map(|l| l.trim().to_owned()).collect();
        assert_eq!(links, ["lo"], "only a loopback link");
        ns
    };
    let inode = |ns: &str| -> u64 {
        ns.strip_prefix("net:[")
            .and_then(|r| r.strip_suffix(']'))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("not a namespace: {ns}"))
    };
    let host = std::fs::read_link("/proc/self/ns/net").expect("host namespace");
    let host = inode(host.to_str().expect("utf-8"));

    // An empty pool: the launch makes its own namespace; the pool is
    // filled after it.
    let own = inode(&run(dir.as_os_str()));
    assert_ne!(own, host);
    helpers_done();
    let ready = net_pool::ready_namespaces(&dir);
    assert_eq!(ready.len(), net_pool::TARGET, "{ready:?}");
    // The next launch takes one of them, which is gone afterwards (its
    // bind released during the launch), and the pool is filled again.
    let pooled = inode(&run(dir.as_os_str()));
    let taken: Vec<_> = ready.iter().filter(|(_, ino)| *ino == pooled).collect();
    assert_eq!(taken.len(), 1, "{pooled} not in {ready:?}");
    assert!(!taken[0].0.exists());
    helpers_done();
    let names: Vec<String> = std::fs::read_dir(&dir)
        .expect("pool")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), net_pool::TARGET, "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("net-")), "{names:?}");

    // Launches at once: no two sandboxes share a namespace (they overlap
    // in time, so no inode is reused either), and the pool never holds
    // more than its slots.
    for _ in 0..2 {
        let at_once: Vec<u64> = std::thread::scope(|s| {
            let runs: Vec<_> = (0..6)
                .map(|_| s.spawn(|| inode(&run(dir.as_os_str()))))
                .collect();
            runs.into_iter().map(|r| r.join().expect("run")).collect()
        });
        let mut distinct = at_once.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), at_once.len(), "{at_once:?}");
        assert!(!at_once.contains(&host));
        helpers_done();
        let ready = net_pool::ready_namespaces(&dir);
        assert!(
            (net_pool::TARGET..=net_pool::MAX_ENTRIES).contains(&ready.len()),
            "{ready:?}"
        );
    }

    // A pool directory others may write to is not used: the launch makes
    // its own namespace and the entries stay untouched.
    let before = net_pool::ready_namespaces(&dir);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let own = inode(&run(dir.as_os_str()));
    helpers_done();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    assert!(before.iter().all(|(_, ino)| *ino != own));
    assert_eq!(net_pool::ready_namespaces(&dir), before);

    let bad = glove_with_env(
        As::Caller,
        &["exec", "--json", "--", "/bin/true"],
        None,
        &[("GLOVE_NET_POOL", "relative/dir".as_ref())],
    );
    assert_eq!(bad.status.code(), Some(125));
    assert!(text(&bad.stdout).contains("sandbox_spec_invalid"));
}

#[test]
fn default_profile_exposes_only_what_programs_need() {
    if !sandbox_ok(As::Caller) {
        return;
    }
    let out = glove(
        As::Caller,
        &[
            "exec",
            "--",
            "/bin/sh",
            "-c",
            "ls -A /etc; echo ---; ls -A /; echo ---; ls -A /tmp /workspace /home/agent; hostname",
        ],
        None,
    );
    let s = text(&out.stdout);
    let mut parts = s.split("---\n");
    let etc: Vec<&str> = parts.next().unwrap_or_default().lines().collect();
    for secret in [
        "shadow",
        "gshadow",
        "ssh",
        "sudoers",
        "sudoers.d",
        "machine-id",
    ] {
        assert!(!etc.contains(&secret), "/etc/{secret} is exposed: {etc:?}");
    }
    assert!(
        etc.contains(&"passwd") && etc.contains(&"ld.so.cache"),
        "{etc:?}"
    );
    let root: Vec<&str> = parts.next().unwrap_or_default().lines().collect();
    for hidden in [
        "root", "srv", "work", "var", "opt", "oldroot", "boot", "sys",
    ] {
        assert!(!root.contains(&hidden), "/{hidden} is exposed: {root:?}");
    }
    assert!(s.trim_end().ends_with("glove"), "{s}");
}

#[test]
fn rw_copy_is_a_copy_without_following_links() {
    if !sandbox_ok(As::Caller) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("a.txt"), "hello\n").expect("write");
    std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
    std::fs::write(dir.path().join("sub/b.txt"), "nested\n").expect("write");
    std::os::unix::fs::symlink("/etc/hostname", dir.path().join("link")).expect("symlink");
    let d = dir.path().display().to_string();
    let out = glove(
        As::Caller,
        &[
            "exec",
            "--rw-copy",
            &d,
            "--",
            "/bin/sh",
            "-c",
            "cat a.txt sub/b.txt; readlink link; echo new > new.txt; echo changed > a.txt; ls",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "hello\nnested\n/etc/hostname\na.txt\nlink\nnew.txt\nsub\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).expect("read"),
        "hello\n"
    );
    assert!(!dir.path().join("new.txt").exists());

    // The copy counts against the disk quota.
    std::fs::write(dir.path().join("big"), vec![0u8; 2 << 20]).expect("write");
    let out = glove(
        As::Caller,
        &["exec", "--disk", "1M", "--rw-copy", &d, "--", "/bin/true"],
        None,
    );
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).starts_with("error[sandbox_copy_failed]"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn terminal_mode() {
    if !sandbox_ok(As::Caller) {
        return;
    }
    let out = glove(
        As::Caller,
        &[
            "exec",
            "--pty",
            "--json",
            "--",
            "/bin/sh",
            "-c",
            "tty; [ -t 0 ] && [ -t 1 ] && echo both-tty; stty size",
        ],
        None,
    );
    let (v, s) = outcome(&out);
    assert!(s.contains("/dev/pts/0"), "{s}");
    assert!(s.contains("both-tty"), "{s}");
    assert!(s.contains("24 80"), "{s}");
    assert!(
        v["usage"]["terminal_bytes"].as_u64().unwrap_or(0) > 0,
        "{v}"
    );
}

#[test]
fn six_limits_are_enforced_and_reported() {
    if !sandbox_ok(As::Caller) {
        return;
    }
    let run = |limits: &[&str], cmd: &str| {
        let mut a = vec!["exec", "--json"];
        a.extend_from_slice(limits);
        a.extend_from_slice(&["--", "/bin/sh", "-c", cmd]);
        let out = glove(As::Caller, &a, None);
        let (v, _) = outcome(&out);
        (v, out.status.code())
    };
    let (v, code) = run(&["--cpu-ms", "300"], "while :; do :; done");
    assert_eq!(
        (v["ended_by"].as_str(), code),
        (Some("cpu_time"), Some(201)),
        "{v}"
    );
    assert!(
        v["usage"]["cpu_time_ms"].as_u64().unwrap_or(0) >= 300,
        "{v}"
    );

    // Without --json, a person is told which limit and its value.
    let out = glove(
        As::Caller,
        &["exec", "--wall-ms", "300", "--", "sleep", "20"],
        None,
    );
    assert_eq!(out.status.code(), Some(204));
    assert!(
        text(&out.stderr)
            .contains("the wall-time limit (300 ms) ended the command (exit status 204)"),
        "{}",
        text(&out.stderr)
    );

    let (v, code) = run(&["--wall-ms", "300"], "sleep 20");
    assert_eq!(
        (v["ended_by"].as_str(), code),
        (Some("wall_time"), Some(204)),
        "{v}"
    );
    assert!(
        v["usage"]["wall_time_ms"].as_u64().unwrap_or(0) >= 300,
        "{v}"
    );

    let (v, code) = run(&["--output", "10K"], "yes");
    assert_eq!(
        (v["ended_by"].as_str(), code),
        (Some("terminal_output"), Some(206)),
        "{v}"
    );
    assert!(
        v["usage"]["terminal_bytes"].as_u64().unwrap_or(0) > 10 * 1024,
        "{v}"
    );

    let (v, code) = run(
        &["--disk", "256K"],
        "head -c 1000000 /dev/zero > /tmp/f; echo $?",
    );
    assert_eq!(code, Some(0));
    assert!(
        v["limits_reached"]
            .as_array()
            .is_some_and(|a| a.contains(&"disk".into())),
        "{v}"
    );
    assert!(
        v["usage"]["disk_bytes"].as_u64().unwrap_or(u64::MAX) <= 256 * 1024,
        "{v}"
    );

    let (v, _) = run(
        &["--pids", "8", "--wall-ms", "3000"],
        "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 2 & done; wait",
    );
    if v["enforcement"]["pids"] != "rlimit" {
        assert!(
            v["limits_reached"]
                .as_array()
                .is_some_and(|a| a.contains(&"pids".into())),
            "{v}"
        );
        assert!(
            v["usage"]["pids_peak"].as_u64().unwrap_or(u64::MAX) <= 8,
            "{v}"
        );
    }
    let (v, code) = run(
        &["--memory", "32M"],
        "exec /usr/bin/python3 -c 'x = bytearray(200 << 20)'",
    );
    if v["enforcement"]["memory"] != "rlimit" {
        assert_eq!(
            (v["ended_by"].as_str(), code),
            (Some("memory"), Some(202)),
            "{v}"
        );
    }
}

#[test]
fn strict_limits_refuse_without_cgroups() {
    if !sandbox_ok(As::Caller) {
        return;
    }
    let out = glove(
        As::Caller,
        &["exec", "--strict-limits", "--json", "--", "/bin/true"],
        None,
    );
    if is_root() {
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let (v, _) = outcome(&out);
        assert!(
            v["enforcement"]["memory"]
                .as_str()
                .is_some_and(|m| m.starts_with("cgroup")),
            "{v}"
        );
    } else {
        assert_eq!(out.status.code(), Some(125));
    }
    if is_root() && sandbox_ok(As::Nobody) {
        let out = glove(
            As::Nobody,
            &["exec", "--strict-limits", "--", "/bin/true"],
            None,
        );
        assert_eq!(out.status.code(), Some(125));
        assert!(
            text(&out.stderr).starts_with("error[sandbox_limit_unenforceable]"),
            "{}",
            text(&out.stderr)
        );
    }
}

/// The sandbox has a network namespace of its own (made by the init's
/// helper, not inherited), and once `glove exec` has exited none of its
/// cgroups remain (removed by a detached helper right after `glove exec`
/// exits), although it waits neither for that nor for the sandbox init's
/// namespace teardown (the init leaves the cgroup once the agent runs).
#[test]
fn own_network_namespace_and_no_cgroup_left_behind() {
    if !sandbox_ok(As::Caller) {
        return;
    }
    let host_net = std::fs::read_link("/proc/self/ns/net").expect("own net ns");
    // Five at once: the sessions' cgroups are made and removed concurrently.
    let children: Vec<std::process::Child> = (0..5)
        .map(|_| {
            std::process::Command::new(&common::kit().glove)
            .args([
                "exec",
                "--",
                "/bin/sh",
                "-c",
                "readlink /proc/self/ns/net; cat /proc/self/net/dev; echo; set -- /proc/[0-9]*; echo $#",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn glove")
        })
        .collect();
    for child in children {
        let pid = child.id();
        let out = child.wait_with_output().expect("wait");
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        let mut lines = stdout.lines();
        let inside = lines.next().expect("namespace line");
        assert!(inside.starts_with("net:["), "{stdout}");
        assert_ne!(inside, host_net.to_string_lossy(), "host network namespace");
        // Only the loopback device exists there.
        let rest: Vec<&str> = lines.skip(2).collect();
        let blank = rest.iter().position(|l| l.is_empty()).expect("blank line");
        let devices: Vec<&str> = rest[..blank]
            .iter()
            .filter_map(|l| l.split(':').next())
            .map(str::trim)
            .collect();
        assert_eq!(devices, ["lo"], "{stdout}");
        // Only the shell (the glob is expanded by the shell itself): the
        // init, and its network helper while it lives, are not the
        // agent's to see (`hidepid=invisible`).
        assert_eq!(rest.get(blank + 1).copied(), Some("1"), "{stdout}");

        if !is_root() {
            continue;
        }
        let prefix = format!("glove-{pid}-");
        let own_memory = std::fs::read_to_string("/proc/self/cgroup")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_owned()))
            })
            .unwrap_or_default();
        let dirs = [
            format!("/sys/fs/cgroup/memory{own_memory}"),
            "/sys/fs/cgroup/pids".to_owned(),
            "/sys/fs/cgroup/cpuacct".to_owned(),
            "/sys/fs/cgroup".to_owned(),
        ];
        let left = || -> Vec<String> {
            dirs.iter()
                .filter_map(|d| std::fs::read_dir(d).ok().map(|e| (d, e)))
                .flat_map(|(d, entries)| {
                    entries
                        .flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|n| n.starts_with(&prefix))
                        .map(move |n| format!("{d}/{n}"))
                })
                .collect()
        };
        // Removed by a helper `glove exec` leaves behind: within moments,
        // not necessarily before it exits.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while !left().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(left(), Vec::<String>::new(), "left behind");
    }
}

/// The agent is started pinned to the init's CPU (cheaper than waking the
/// other one) and widens its mask again at once: it may use every CPU the
/// caller may.
#[test]
fn agent_keeps_the_callers_cpus() {
    if !sandbox_ok(As::Caller) {
        return;
    }
    let allowed = |status: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(|v| v.trim().to_owned())
            .unwrap_or_default()
    };
    let mine = allowed(&std::fs::read_to_string("/proc/self/status").expect("status"));
    assert!(!mine.is_empty());
    for _ in 0..5 {
        let out = glove(
            As::Caller,
            &["exec", "--", "/bin/cat", "/proc/self/status"],
            None,
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert_eq!(allowed(&text(&out.stdout)), mine);
    }
}
