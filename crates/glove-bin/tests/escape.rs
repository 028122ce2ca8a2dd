//! The escape battery: each way out of the sandbox, tried from inside by a
//! probe, must be contained and the outcome reported correctly. Runs as the
//! caller and, when the caller is root, again as an unprivileged user.

mod common;

use common::{glove, kit, outcome, probe, python_ok, sandbox_ok, As};

fn contained(who: As, case: &str, extra: &[&str], limits: &[&str]) {
    let mut args = vec![case];
    args.extend_from_slice(extra);
    let (v, text, out) = probe(who, limits, &args);
    assert!(
        text.contains(&format!("CONTAINED {case}")),
        "{who:?} {case}: {text} / {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(v["exit"]["code"], 0, "{who:?} {case}: {v}");
}

fn battery(who: As) {
    if !sandbox_ok(who) || !python_ok() {
        return;
    }
    let host_secret = tempfile::tempdir().expect("tempdir");
    let secret = host_secret.path().join("secret");
    std::fs::write(&secret, "host secret").expect("write");
    let secret = secret.display().to_string();
    let pid = std::process::id().to_string();

    for case in [
        "denied_syscalls",
        "sockets",
        "network",
        "mount",
        "namespaces",
        "ptrace",
        "readonly",
        "proc_sys",
        "keys_bpf_uring",
        "hostname",
        "privileges",
        "fds",
    ] {
        contained(who, case, &[], &[]);
    }
    let host_name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    contained(who, "host_files", &[&secret], &[]);
    contained(who, "processes", &[&pid], &[]);
    contained(who, "tiocsti", &[], &["--pty"]);

    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default(),
        host_name,
        "the host's hostname changed"
    );

    // A descriptor the caller leaked into glove does not reach the agent.
    let k = kit();
    let script = format!(
        "exec 7</etc/hostname; exec 9>/dev/null; exec {} exec --json --ro-bind {}:/probe/escape.py -- /usr/bin/python3 /probe/escape.py fds",
        k.glove.display(),
        k.probe.display()
    );
    let out = match who {
        As::Caller => std::process::Command::new("/bin/sh")
            .args(["-c", &script])
            .output(),
        As::Nobody => std::process::Command::new("/usr/bin/setpriv")
            .args([
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                "--",
                "/bin/sh",
                "-c",
                &script,
            ])
            .current_dir(&k.root)
            .output(),
    }
    .expect("run");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("CONTAINED fds"),
        "leaked descriptor: {out:?}"
    );

    // Exceeding the disk quota: ENOSPC inside, reported as reached.
    let (v, text, _) = probe(who, &["--disk", "1M"], &["disk_fill"]);
    assert!(text.contains("CONTAINED disk_fill"), "{text}");
    assert!(
        v["limits_reached"]
            .as_array()
            .is_some_and(|a| a.contains(&"disk".into())),
        "{v}"
    );

    // CPU burn ends on the CPU limit.
    let (v, _, out) = probe(who, &["--cpu-ms", "400"], &["cpu_burn"]);
    assert_eq!(v["ended_by"], "cpu_time", "{v}");
    assert_eq!(out.status.code(), Some(201));

    // Terminal flood ends on the output limit, and no more than the limit
    // reached the caller.
    let (v, text, out) = probe(who, &["--output", "64K"], &["flood"]);
    assert_eq!(v["ended_by"], "terminal_output", "{v}");
    assert!(
        text.len() <= 64 * 1024 + 1,
        "forwarded {} bytes",
        text.len()
    );
    assert_eq!(out.status.code(), Some(206));

    // Fork bomb: contained; with cgroups the pids limit is reported.
    let (v, _, _) = probe(who, &["--pids", "32", "--wall-ms", "1500"], &["fork_bomb"]);
    assert!(
        v["ended_by"] == "wall_time" || v["ended_by"] == "cpu_time",
        "{v}"
    );
    if v["enforcement"]["pids"] != "rlimit" {
        assert!(
            v["limits_reached"]
                .as_array()
                .is_some_and(|a| a.contains(&"pids".into())),
            "{v}"
        );
        assert!(v["usage"]["pids_peak"].as_u64().unwrap_or(0) <= 32, "{v}");
    }

    // Memory bomb: killed by the cgroup, or refused by the rlimit.
    let (v, _, _) = probe(who, &["--memory", "96M"], &["memory_bomb"]);
    if v["enforcement"]["memory"] == "rlimit" {
        assert_ne!(v["exit"]["code"], 0, "{v}");
    } else {
        assert_eq!(v["ended_by"], "memory", "{v}");
        assert!(
            v["usage"]["peak_memory_bytes"].as_u64().unwrap_or(u64::MAX) <= 96 << 20,
            "{v}"
        );
    }

    // Sleeping past the wall time.
    let out = glove(
        who,
        &[
            "exec",
            "--json",
            "--wall-ms",
            "300",
            "--",
            "/bin/sleep",
            "30",
        ],
        None,
    );
    let (v, _) = outcome(&out);
    assert_eq!(v["ended_by"], "wall_time", "{v}");
    assert_eq!(out.status.code(), Some(204));
}

#[test]
fn escape_battery_as_caller() {
    battery(As::Caller);
}

#[test]
fn escape_battery_unprivileged() {
    battery(As::Nobody);
}
