// This file is over 600 lines because it is one battery driving `glove-launcher` over its socket, sharing one set of protocol helpers.
//! `glove-launcher` driven over its socket, as `gloved` drives it: spec,
//! started, output, input, resize, stop, exit.

mod common;

use glove_sandbox::outcome::ExitStatus;
use glove_sandbox::profile::{exec_spec, ExecRequest};
use glove_sandbox::spec::AgentCommand;
use glove_sandbox::wire::{Decoder, FromLauncher, SpecWire, ToLauncher};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Session {
    child: Child,
    sock: UnixStream,
    decoder: Decoder,
    output: Vec<u8>,
}

fn start(command: &[&str], pty: bool) -> Session {
    start_with(command, pty, |_| {})
}

fn start_with(command: &[&str], pty: bool, edit: impl FnOnce(&mut SpecWire)) -> Session {
    let spec = exec_spec(ExecRequest {
        pty: pty.then_some((24, 80)),
        ..ExecRequest::new(command.iter().map(|s| s.to_string()).collect())
    })
    .expect("spec");
    let mut wire = SpecWire::from_spec(&spec).expect("wire");
    edit(&mut wire);
    let (mine, theirs) = UnixStream::pair().expect("socketpair");
    let child = Command::new(env!("CARGO_BIN_EXE_glove-launcher"))
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn launcher");
    mine.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut s = Session {
        child,
        sock: mine,
        decoder: Decoder::default(),
        output: Vec::new(),
    };
    s.send(ToLauncher::Spec(Box::new(wire)));
    s
}

impl Session {
    /// Closes our end (the launcher waits for that after the outcome) and
    /// waits for the launcher.
    fn close_and_wait(self) -> Option<i32> {
        let Session {
            mut child, sock, ..
        } = self;
        let _ = sock.shutdown(std::net::Shutdown::Both);
        drop(sock);
        child.wait().expect("wait").code()
    }

    fn send(&mut self, m: ToLauncher) {
        self.sock.write_all(&m.encode()).expect("send");
    }

    /// Reads frames until `stop` says so; collects output.
    fn until(&mut self, mut stop: impl FnMut(&FromLauncher, &[u8]) -> bool) -> FromLauncher {
        let mut buf = [0u8; 8192];
        loop {
            while let Some(m) = self.decoder.next_from_launcher().expect("valid frame") {
                if let FromLauncher::Output(b) = &m {
                    self.output.extend_from_slice(b);
                }
                if stop(&m, &self.output) {
                    return m;
                }
            }
            // A read with a timeout is never restarted after a signal
            // (signal(7)): an EINTR is only a retry.
            let n = match self.sock.read(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => r.expect("read (30 s timeout)"),
            };
            assert!(
                n > 0,
                "launcher closed the socket; output so far {:?}",
                String::from_utf8_lossy(&self.output)
            );
            self.decoder.push(&buf[..n]);
        }
    }
}

#[test]
fn interactive_session_over_the_socket() {
    if !common::sandbox_ok(common::As::Caller) {
        return;
    }
    let mut s = start(
        &[
            "/bin/sh",
            "-c",
            "stty size; echo ready; read x; echo got-$x; exit 4",
        ],
        true,
    );
    let started = s.until(|m, _| matches!(m, FromLauncher::Started(_) | FromLauncher::Failed(_)));
    let FromLauncher::Started(info) = started else {
        panic!("launch failed: {started:?}")
    };
    assert!(info.init.still_matches());
    s.until(|_, out| String::from_utf8_lossy(out).contains("ready"));
    assert!(String::from_utf8_lossy(&s.output).contains("24 80"));
    s.send(ToLauncher::Resize(30, 100));
    s.send(ToLauncher::Stdin(b"abc\n".to_vec()));
    let end = s.until(|m, _| matches!(m, FromLauncher::Exited(_)));
    let FromLauncher::Exited(outcome) = end else {
        unreachable!()
    };
    assert!(
        String::from_utf8_lossy(&s.output).contains("got-abc"),
        "{:?}",
        String::from_utf8_lossy(&s.output)
    );
    assert_eq!(outcome.exit, ExitStatus::Exited { code: 4 });
    assert!(!outcome.stopped);
    // The session cgroup outlives the outcome until the service closes the
    // socket (it records the outcome durably first).
    let cgroup_dir = info.init.cgroup.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrl, path) = (parts.next()?, parts.next()?, parts.next()?);
        (ctrl == "pids" && path.contains("glove-")).then(|| format!("/sys/fs/cgroup/pids{path}"))
    });
    if let Some(dir) = &cgroup_dir {
        assert!(
            std::path::Path::new(dir).exists(),
            "cgroup removed before the socket closed"
        );
    }
    // The init reports the end and then exits: it is gone soon after (a
    // loaded machine may take a moment to run its exit).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while info.init.still_matches() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        !info.init.still_matches(),
        "the sandbox init is gone after the exit"
    );
    assert_eq!(s.close_and_wait(), Some(0));
    if let Some(dir) = &cgroup_dir {
        assert!(
            !std::path::Path::new(dir).exists(),
            "cgroup left behind after the socket closed"
        );
    }
}

#[test]
fn stop_terminates_and_reports() {
    if !common::sandbox_ok(common::As::Caller) {
        return;
    }
    let mut s = start(&["/bin/sh", "-c", "echo up; exec sleep 100"], false);
    s.until(|_, out| String::from_utf8_lossy(out).contains("up"));
    s.send(ToLauncher::Stop(2000));
    let end = s.until(|m, _| matches!(m, FromLauncher::Exited(_)));
    let FromLauncher::Exited(outcome) = end else {
        unreachable!()
    };
    assert!(outcome.stopped);
    assert_eq!(
        outcome.exit,
        ExitStatus::Signaled {
            signal: libc_sigterm()
        }
    );
    assert_eq!(s.close_and_wait(), Some(0));
}

#[test]
fn launch_failure_is_a_failed_frame() {
    if !common::sandbox_ok(common::As::Caller) {
        return;
    }
    let mut s = start(&["/workspace/missing-binary"], false);
    let m = s.until(|m, _| matches!(m, FromLauncher::Failed(_) | FromLauncher::Started(_)));
    let FromLauncher::Failed(f) = m else {
        panic!("expected a failure, got {m:?}")
    };
    assert_eq!(f.code, "sandbox_exec_failed");
    assert_eq!(s.close_and_wait(), Some(125));
}

#[test]
fn garbage_instead_of_a_spec_is_refused() {
    let (mut mine, theirs) = UnixStream::pair().expect("pair");
    let mut child = Command::new(env!("CARGO_BIN_EXE_glove-launcher"))
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .spawn()
        .expect("spawn");
    mine.write_all(&[2, 3, 0, 0, 0, b'a', b'b', b'c'])
        .expect("write");
    assert_eq!(child.wait().expect("wait").code(), Some(2));
}

fn libc_sigterm() -> i32 {
    15
}

fn run_to_end(s: &mut Session) -> FromLauncher {
    s.until(|m, _| matches!(m, FromLauncher::Exited(_) | FromLauncher::Failed(_)))
}

/// A launch held before release, its sandbox built.
fn held(command: &[&str]) -> Session {
    let mut s = start_with(command, false, |w| w.hold_for_release = true);
    let m = s.until(|m, _| {
        matches!(
            m,
            FromLauncher::Prepared(_) | FromLauncher::Failed(_) | FromLauncher::Started(_)
        )
    });
    assert!(matches!(m, FromLauncher::Prepared(_)), "{m:?}");
    assert!(s.output.is_empty());
    s
}

/// A temporary directory the sandbox's identity can read.
fn readable_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let host = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(host.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    host
}

fn failure_code(m: &FromLauncher) -> String {
    match m {
        FromLauncher::Failed(f) => format!("{}: {}", f.code, f.message),
        other => format!("not a failure: {other:?}"),
    }
}

#[test]
fn grants_read_only_copy_and_refusals() {
    use glove_sandbox::spec::{Grant, GrantMode};
    if !common::sandbox_ok(common::As::Caller) {
        return;
    }
    let host = readable_tempdir();
    let src = host.path().join("project");
    std::fs::create_dir(&src).expect("mkdir");
    std::fs::write(src.join("a.txt"), "hello\n").expect("write");
    std::fs::create_dir(src.join("sub")).expect("mkdir");
    std::fs::write(src.join("sub/b.txt"), "nested\n").expect("write");
    std::os::unix::fs::symlink("/etc/hostname", src.join("link")).expect("symlink");
    let srcs = src.display().to_string();
    let grant = |mode, target: &str| Grant {
        host_path: srcs.clone(),
        target: target.into(),
        mode,
        create_if_missing: false,
    };

    // Read-only: visible, not writable.
    let g = grant(GrantMode::ReadOnly, "/srv/ro");
    let mut s = start_with(&["/bin/sh", "-c", "cat /srv/ro/a.txt /srv/ro/sub/b.txt; readlink /srv/ro/link; (echo x > /srv/ro/new) 2>/dev/null || echo refused"], false, |w| w.grants.push(g));
    let end = run_to_end(&mut s);
    assert!(
        matches!(end, FromLauncher::Exited(_)),
        "{}",
        failure_code(&end)
    );
    assert_eq!(
        String::from_utf8_lossy(&s.output),
        "hello\nnested\n/etc/hostname\nrefused\n"
    );

    // Copy: writable inside, the host is untouched, the quota holds.
    let g = grant(
        GrantMode::EphemeralCopy {
            max_bytes: 256 * 1024,
        },
        "/srv/copy",
    );
    let mut s = start_with(
        &["/bin/sh", "-c", "echo changed > /srv/copy/a.txt; cat /srv/copy/a.txt; readlink /srv/copy/link; head -c 1000000 /dev/zero > /srv/copy/big 2>/dev/null || echo quota"],
        false,
        |w| w.grants.push(g),
    );
    let end = run_to_end(&mut s);
    assert!(
        matches!(end, FromLauncher::Exited(_)),
        "{}",
        failure_code(&end)
    );
    assert_eq!(
        String::from_utf8_lossy(&s.output),
        "changed\n/etc/hostname\nquota\n"
    );
    assert_eq!(
        std::fs::read_to_string(src.join("a.txt")).expect("read"),
        "hello\n"
    );

    // A symbolic link anywhere in the granted path is refused.
    let via_link = host.path().join("via");
    std::os::unix::fs::symlink("/etc", &via_link).expect("symlink");
    let g = Grant {
        host_path: via_link.display().to_string(),
        target: "/srv/etc".into(),
        mode: GrantMode::ReadOnly,
        create_if_missing: false,
    };
    let mut s = start_with(&["/bin/true"], false, |w| w.grants.push(g));
    let end = run_to_end(&mut s);
    assert!(
        failure_code(&end).starts_with("sandbox_grant_refused"),
        "{}",
        failure_code(&end)
    );

    // A grant that would expose a protected directory (or its parent).
    let run_dir = src.join("sub");
    for exposed in [src.clone(), run_dir.clone()] {
        let g = Grant {
            host_path: exposed.display().to_string(),
            target: "/srv/p".into(),
            mode: GrantMode::ReadOnly,
            create_if_missing: false,
        };
        let protected = run_dir.display().to_string();
        let mut s = start_with(&["/bin/true"], false, |w| {
            w.grants.push(g);
            w.protected_paths.push(protected);
        });
        let end = run_to_end(&mut s);
        assert!(
            failure_code(&end).starts_with("sandbox_grant_refused"),
            "{}",
            failure_code(&end)
        );
    }

    // A special file where a directory is expected.
    let g = Grant {
        host_path: "/dev/null".into(),
        target: "/srv/null".into(),
        mode: GrantMode::ReadOnly,
        create_if_missing: false,
    };
    let mut s = start_with(&["/bin/true"], false, |w| w.grants.push(g));
    let end = run_to_end(&mut s);
    assert!(
        failure_code(&end).starts_with("sandbox_grant_refused"),
        "{}",
        failure_code(&end)
    );
}

#[test]
fn bundles_are_verified_before_mounting() {
    use glove_sandbox::spec::BundleMount;
    use sha2::{Digest, Sha256};
    use std::os::unix::fs::PermissionsExt;
    if !common::sandbox_ok(common::As::Caller) {
        return;
    }
    let base = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let root = base.path().join("bundles");
    std::fs::create_dir(&root).expect("mkdir");
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let body = b"skill bundle contents\n";
    let hex = glove_types::digest::to_hex(&Sha256::digest(body));
    let file = root.join(&hex);
    std::fs::write(&file, body).expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let bundle = |sha: &str| BundleMount {
        root: root.display().to_string(),
        sha256: sha.into(),
        target: "/opt/lib/bundle".into(),
    };

    let b = bundle(&hex);
    let mut s = start_with(
        &[
            "/bin/sh",
            "-c",
            "cat /opt/lib/bundle; (echo x > /opt/lib/bundle) 2>/dev/null || echo ro",
        ],
        false,
        |w| w.bundles.push(b),
    );
    let prepared = s.until(|m, _| matches!(m, FromLauncher::Prepared(_) | FromLauncher::Failed(_)));
    let FromLauncher::Prepared(facts) = prepared else {
        panic!("{}", failure_code(&prepared))
    };
    assert_eq!(facts.bundles[0].sha256, hex);
    let end = run_to_end(&mut s);
    assert!(
        matches!(end, FromLauncher::Exited(_)),
        "{}",
        failure_code(&end)
    );
    assert_eq!(
        String::from_utf8_lossy(&s.output),
        "skill bundle contents\nro\n"
    );

    // Wrong digest name, content not matching, a symlink, a bad mode.
    let other = "ab".repeat(32);
    let cases: Vec<Box<dyn Fn()>> = vec![
        Box::new(|| {}),
        Box::new(|| std::fs::write(root.join(&other), b"not this content").expect("write")),
        Box::new(|| {
            let _ = std::fs::remove_file(root.join(&other));
            std::os::unix::fs::symlink(&file, root.join(&other)).expect("symlink");
        }),
        Box::new(|| {
            let _ = std::fs::remove_file(root.join(&other));
            std::fs::copy(&file, root.join(&other)).expect("copy");
            std::fs::set_permissions(root.join(&other), std::fs::Permissions::from_mode(0o644))
                .expect("chmod");
        }),
    ];
    for (i, prepare) in cases.iter().enumerate() {
        if i > 0 {
            prepare();
        }
        let b = bundle(&other);
        let mut s = start_with(&["/bin/true"], false, |w| w.bundles.push(b));
        let end = run_to_end(&mut s);
        assert!(
            failure_code(&end).starts_with("sandbox_bundle_refused"),
            "case {i}: {}",
            failure_code(&end)
        );
    }
}

#[test]
fn held_launch_runs_only_after_release() {
    if !common::sandbox_ok(common::As::Caller) {
        return;
    }
    let echo = ["/bin/sh", "-c", "echo ran"];
    let command = |exe: &str, args: &[&str], env: &[&str]| AgentCommand {
        executable: exe.into(),
        arguments: args.iter().map(|a| a.to_string()).collect(),
        environment: env.iter().map(|e| e.to_string()).collect(),
    };
    let ends_with = |s: &mut Session, m: ToLauncher| {
        s.send(m);
        failure_code(&run_to_end(s))
    };

    let mut s = held(&echo);
    let end = ends_with(&mut s, ToLauncher::Release);
    assert!(end.starts_with("not a failure: Exited"), "{end}");
    assert_eq!(String::from_utf8_lossy(&s.output), "ran\n");

    // Released with another command: that one runs, with its own
    // arguments and environment, in the sandbox built for the spec.
    let mut s = held(&echo);
    let warm = command(
        "/bin/sh",
        &["-c", "echo \"warm $GREETING\"; hostname"],
        &["GREETING=hello"],
    );
    let end = ends_with(&mut s, ToLauncher::ReleaseWith(Box::new(warm)));
    assert!(end.starts_with("not a failure: Exited"), "{end}");
    assert_eq!(String::from_utf8_lossy(&s.output), "warm hello\nglove\n");

    // A command that breaks the spec's rules is refused, and nothing runs.
    for bad in [
        command("bin/sh", &[], &[]),
        command("/bin/sh", &[], &["1X=y"]),
    ] {
        let mut s = held(&echo);
        let end = ends_with(&mut s, ToLauncher::ReleaseWith(Box::new(bad)));
        assert!(end.starts_with("sandbox_spec_invalid: "), "{end}");
        assert!(s.output.is_empty());
    }

    // A missing executable is reported as such.
    let mut s = held(&echo);
    let missing = command("/usr/bin/no-such-program", &[], &[]);
    let end = ends_with(&mut s, ToLauncher::ReleaseWith(Box::new(missing)));
    assert!(
        end.starts_with("sandbox_exec_failed: ") && end.contains("/usr/bin/no-such-program"),
        "{end}"
    );

    // Withdrawn before release: nothing runs.
    let mut s = held(&echo);
    let end = ends_with(&mut s, ToLauncher::Stop(0));
    assert!(end.starts_with("sandbox_io_failed: "), "{end}");
    assert!(s.output.is_empty());
}

#[test]
fn host_files_are_copied_read_only_and_bad_sources_refused() {
    use glove_sandbox::spec::Bind;
    use std::os::unix::fs::PermissionsExt;
    if !common::sandbox_ok(common::As::Caller) {
        return;
    }
    let host = readable_tempdir();
    let file = host.path().join("conf");
    std::fs::write(&file, "copied\n").expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    // An absolute link is resolved as on the host, not against the view.
    let link = host.path().join("link");
    std::os::unix::fs::symlink(&file, &link).expect("symlink");
    let big = host.path().join("big");
    std::fs::write(&big, vec![b'x'; (1 << 20) + 1]).expect("write");
    let path = |p: &std::path::Path| p.display().to_string();
    let bind = |source: String, target: &str| Bind {
        source,
        target: target.into(),
    };

    let (a, b) = (
        bind(path(&file), "/etc/glove-a"),
        bind(path(&link), "/opt/x/glove-b"),
    );
    let mut s = start_with(
        &[
            "/bin/sh",
            "-c",
            "cat /etc/glove-a /opt/x/glove-b; stat -c %a /etc/glove-a; (echo x > /etc/glove-a) 2>/dev/null || echo refused",
        ],
        false,
        |w| w.host_files.extend([a, b]),
    );
    let end = run_to_end(&mut s);
    assert!(
        matches!(end, FromLauncher::Exited(_)),
        "{}",
        failure_code(&end)
    );
    assert_eq!(
        String::from_utf8_lossy(&s.output),
        "copied\ncopied\n444\nrefused\n"
    );
    s.close_and_wait();

    for (source, why) in [
        (path(host.path()), "Invalid argument"),
        (path(&big), "File too large"),
        (path(&host.path().join("missing")), "No such file"),
    ] {
        let f = bind(source.clone(), "/etc/glove-bad");
        let mut s = start_with(&["/bin/true"], false, |w| w.host_files.push(f));
        let end = run_to_end(&mut s);
        let text = failure_code(&end);
        assert!(
            text.starts_with("sandbox_setup_failed: ")
                && text.contains(&source)
                && text.contains(why),
            "{source}: {text}"
        );
        s.close_and_wait();
    }
}

/// The children of `pid` (from `/proc`).
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// An agent that dies while it waits for the release is a failed launch,
/// not a started one that happened to end at once.
#[test]
fn agent_killed_before_release_fails_the_launch() {
    if !common::sandbox_ok(common::As::Caller) {
        return;
    }
    let mut s = held(&["/bin/sh", "-c", "echo ran"]);
    let init = children(s.child.id());
    assert_eq!(
        init.len(),
        1,
        "the launcher has one child, the init: {init:?}"
    );
    let agent = children(init[0]);
    assert_eq!(
        agent.len(),
        1,
        "the init has one child, the agent: {agent:?}"
    );
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &agent[0].to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    s.send(ToLauncher::Release);
    let end = s.until(|m, _| {
        matches!(
            m,
            FromLauncher::Started(_) | FromLauncher::Exited(_) | FromLauncher::Failed(_)
        )
    });
    let text = failure_code(&end);
    assert!(
        text.starts_with("sandbox_setup_failed: ") && text.contains("before execve"),
        "{text}"
    );
    assert!(s.output.is_empty());
    s.close_and_wait();
}

#[test]
fn a_bind_source_reached_through_a_link_is_refused_not_followed() {
    use glove_sandbox::spec::Bind;
    if !common::sandbox_ok(common::As::Caller) {
        return;
    }
    // A link where the caller saw a directory: the init opens the source
    // without following links, so the launch fails instead of binding
    // whatever the link now names.
    let host = readable_tempdir();
    let real = host.path().join("real");
    std::fs::create_dir(&real).expect("mkdir");
    std::fs::write(real.join("inside"), "x").expect("write");
    let link = host.path().join("link");
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    for source in [link.clone(), link.join("inside")] {
        let source = source.display().to_string();
        let mut s = start_with(&["/bin/true"], false, |w| {
            w.read_only_binds.push(Bind {
                source: source.clone(),
                target: "/mnt/x".into(),
            })
        });
        let m = run_to_end(&mut s);
        let text = failure_code(&m);
        assert!(
            text.starts_with("sandbox_setup_failed") && text.contains("bind source"),
            "{source}: {text}"
        );
    }
    // The real directory binds.
    let source = real.display().to_string();
    let mut s = start_with(&["/bin/cat", "/mnt/x/inside"], false, |w| {
        w.read_only_binds.push(Bind {
            source: source.clone(),
            target: "/mnt/x".into(),
        })
    });
    let m = run_to_end(&mut s);
    assert!(matches!(m, FromLauncher::Exited(_)), "{m:?}");
    assert_eq!(s.output, b"x");
}

#[test]
fn a_copy_target_through_a_link_an_earlier_copy_made_is_refused() {
    use glove_sandbox::spec::CopyIn;
    if !common::sandbox_ok(common::As::Caller) {
        return;
    }
    // The first copy recreates a link that points into the host's tree as
    // the init sees it (under /oldroot); the second copy's target lies
    // through that link. Followed by name, the second copy wrote into the
    // host directory (as root, for a privileged launch).
    let host = readable_tempdir();
    let victim = host.path().join("victim");
    std::fs::create_dir(&victim).expect("mkdir");
    let a = host.path().join("a");
    std::fs::create_dir(&a).expect("mkdir");
    std::os::unix::fs::symlink(format!("/oldroot{}", victim.display()), a.join("l"))
        .expect("symlink");
    let b = host.path().join("b");
    std::fs::create_dir(&b).expect("mkdir");
    std::fs::write(b.join("planted"), "x").expect("write");
    let (a_src, b_src) = (a.display().to_string(), b.display().to_string());
    let mut s = start_with(&["/bin/true"], false, |w| {
        w.copy_in = vec![
            CopyIn {
                source: a_src.clone(),
                target: "/workspace/a".into(),
            },
            CopyIn {
                source: b_src.clone(),
                target: "/workspace/a/l/x".into(),
            },
        ];
    });
    let m = run_to_end(&mut s);
    let text = failure_code(&m);
    assert!(text.starts_with("sandbox_copy_failed"), "{text}");
    assert_eq!(
        std::fs::read_dir(&victim).expect("victim").count(),
        0,
        "the copy wrote into the host directory"
    );
}

/// The identity `glove_sandbox::identity::file_identity` gives a host file.
fn identity_of(p: &std::path::Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).expect("stat");
    glove_sandbox::identity::file_identity(
        m.dev(),
        m.ino(),
        i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
    )
}

fn write_mode(p: &std::path::Path, body: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(p, body).expect("write");
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

#[test]
fn a_pinned_executable_runs_and_a_swapped_one_is_refused() {
    if !common::sandbox_ok(common::As::Caller) {
        return;
    }
    // Not below /tmp, which is a writable directory inside.
    let host = common::safe_tempdir();
    let exe = host.path().join("agent");
    write_mode(&exe, "#!/bin/sh\necho pinned\n", 0o755);
    let exes = exe.display().to_string();
    let pin = identity_of(&exe);

    // The pinned file is bound over its path (no bind of its directory is
    // needed) and runs.
    let mut s = start_with(&[&exes], false, |w| w.executable_pin = Some(pin.clone()));
    let end = run_to_end(&mut s);
    assert!(
        matches!(end, FromLauncher::Exited(_)),
        "{}",
        failure_code(&end)
    );
    assert_eq!(String::from_utf8_lossy(&s.output), "pinned\n");
    s.close_and_wait();

    // Swapped after it was resolved (a new file renamed over the name):
    // the launch fails, nothing runs.
    let other = host.path().join("other");
    write_mode(&other, "#!/bin/sh\necho swapped\n", 0o755);
    std::fs::rename(&other, &exe).expect("swap");
    let mut s = start_with(&[&exes], false, |w| w.executable_pin = Some(pin.clone()));
    let end = run_to_end(&mut s);
    let text = failure_code(&end);
    assert!(text.starts_with("sandbox_executable_changed: "), "{text}");
    assert!(s.output.is_empty());
    s.close_and_wait();

    // Changed in place (same inode, new contents): refused as well.
    let pin = identity_of(&exe);
    std::thread::sleep(Duration::from_millis(20));
    write_mode(&exe, "#!/bin/sh\necho edited\n", 0o755);
    let mut s = start_with(&[&exes], false, |w| w.executable_pin = Some(pin.clone()));
    let text = failure_code(&run_to_end(&mut s));
    assert!(text.starts_with("sandbox_executable_changed: "), "{text}");
    s.close_and_wait();

    // A link where the file was is not followed.
    std::fs::remove_file(&exe).expect("rm");
    std::os::unix::fs::symlink("/bin/true", &exe).expect("symlink");
    let mut s = start_with(&[&exes], false, |w| w.executable_pin = Some(pin));
    let text = failure_code(&run_to_end(&mut s));
    assert!(text.starts_with("sandbox_executable_changed: "), "{text}");
    s.close_and_wait();
}

/// A launch of `exe` (with `args`) pinned to its identity now, its
/// directory also bound read-only at the same path; held for the release
/// when `hold`.
fn pinned_in_bound_dir(exe: &std::path::Path, args: &[&str], hold: bool) -> Session {
    let dir = exe.parent().expect("a directory").display().to_string();
    let exes = exe.display().to_string();
    let pin = identity_of(exe);
    let command: Vec<&str> = std::iter::once(exes.as_str())
        .chain(args.iter().copied())
        .collect();
    start_with(&command, false, |w| {
        w.executable_pin = Some(pin);
        w.hold_for_release = hold;
        w.read_only_binds.push(glove_sandbox::spec::Bind {
            source: dir.clone(),
            target: dir,
        });
    })
}

/// A pinned executable inside a directory that is also bound is bound over
/// the file that directory already shows there. That file is never opened
/// for writing, which fails (ETXTBSY) while any host process runs it: two
/// sessions of one staged harness at once hit exactly that.
#[test]
fn a_pinned_executable_that_a_host_process_runs_still_launches() {
    if !common::sandbox_ok(common::As::Caller) {
        return;
    }
    let host = common::safe_tempdir();
    let exe = host.path().join("agent");
    std::fs::copy("/bin/sleep", &exe).expect("copy");
    // Another test thread's fork can hold the copy's write handle until its
    // own exec (ETXTBSY here too): a few tries.
    let mut tries = 0;
    let busy = loop {
        match Command::new(&exe).arg("60").spawn() {
            Ok(c) => break c,
            Err(e)
                if e.raw_os_error() == Some(rustix::io::Errno::TXTBSY.raw_os_error())
                    && tries < 50 =>
            {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("run it on the host: {e}"),
        }
    };
    struct Kill(Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _busy = Kill(busy);
    // What the test is about: this kernel refuses a writer while the file
    // runs (if it did not, the old code would have passed too).
    let writer = std::fs::OpenOptions::new().write(true).open(&exe);
    assert_eq!(
        writer.err().and_then(|e| e.raw_os_error()),
        Some(rustix::io::Errno::TXTBSY.raw_os_error()),
        "this kernel lets a running executable be opened for writing"
    );
    let mut s = pinned_in_bound_dir(&exe, &["0"], false);
    let end = run_to_end(&mut s);
    assert!(
        matches!(&end, FromLauncher::Exited(o) if matches!(o.exit, ExitStatus::Exited { code: 0 })),
        "{}",
        failure_code(&end)
    );
    s.close_and_wait();
}

/// A pinned executable inside a directory that is also bound, replaced on
/// the host while the launch is held: the rename carries the pin's bind
/// away with the old file, so the path would reach the new one. The agent
/// checks the identity again right before its `execve` and refuses.
#[test]
fn a_pinned_executable_replaced_on_the_host_during_a_held_launch_is_refused() {
    if !common::sandbox_ok(common::As::Caller) {
        return;
    }
    let host = common::safe_tempdir();
    let exe = host.path().join("agent");
    write_mode(&exe, "#!/bin/sh\necho pinned\n", 0o755);
    let mut s = pinned_in_bound_dir(&exe, &[], true);
    let m = s.until(|m, _| {
        matches!(
            m,
            FromLauncher::Prepared(_) | FromLauncher::Failed(_) | FromLauncher::Started(_)
        )
    });
    assert!(matches!(m, FromLauncher::Prepared(_)), "{m:?}");
    let other = host.path().join("other");
    write_mode(&other, "#!/bin/sh\necho swapped\n", 0o755);
    std::fs::rename(&other, &exe).expect("swap");
    s.send(ToLauncher::Release);
    let end = run_to_end(&mut s);
    let text = failure_code(&end);
    assert!(text.starts_with("sandbox_executable_changed: "), "{text}");
    assert!(
        s.output.is_empty(),
        "{}",
        String::from_utf8_lossy(&s.output)
    );
    s.close_and_wait();
}

#[test]
fn seeded_home_and_a_lease_given_and_taken_back() {
    use glove_sandbox::spec::{LeaseFile, SeedFile};
    use sha2::Digest;
    if !common::sandbox_ok(common::As::Caller) {
        return;
    }
    let host = readable_tempdir();
    let lease = host.path().join("lease");
    write_mode(&lease, "token-1\n", 0o600);
    let returned = host.path().join("returned");
    write_mode(&returned, "", 0o600);
    let script = "set -e; cd /home/agent; \
        stat -c '%u %a %n' .codex .codex/skills .codex/skills/review .codex/skills/review/SKILL.md .codex/skills/review/run.sh .codex/auth.json; \
        cat .codex/skills/review/SKILL.md; ./.codex/skills/review/run.sh; \
        echo state > .codex/state.json; cat .codex/auth.json; echo token-2 > .codex/auth.json; \
        grep -c /home/agent/.codex/auth.json /proc/self/mountinfo || true";
    let lease_file = LeaseFile {
        source: lease.display().to_string(),
        returned: returned.display().to_string(),
        target: "/home/agent/.codex/auth.json".into(),
    };
    let l = lease_file.clone();
    let mut s = start_with(&["/bin/sh", "-c", script], false, |w| {
        w.seed_dirs = vec![
            "/home/agent/.codex".into(),
            "/home/agent/.codex/skills".into(),
        ];
        w.seed_files = vec![
            SeedFile {
                path: "/home/agent/.codex/skills/review/SKILL.md".into(),
                text: "---\nname: review\n---\n".into(),
                executable: false,
            },
            SeedFile {
                path: "/home/agent/.codex/skills/review/run.sh".into(),
                text: "#!/bin/sh\necho ran\n".into(),
                executable: true,
            },
        ];
        w.leases = vec![l];
    });
    let end = run_to_end(&mut s);
    assert!(
        matches!(end, FromLauncher::Exited(_)),
        "{}",
        failure_code(&end)
    );
    let out = String::from_utf8_lossy(&s.output).into_owned();
    assert_eq!(
        out,
        "1000 755 .codex\n1000 755 .codex/skills\n1000 755 .codex/skills/review\n\
         1000 644 .codex/skills/review/SKILL.md\n1000 755 .codex/skills/review/run.sh\n\
         1000 600 .codex/auth.json\n\
         ---\nname: review\n---\nran\ntoken-1\n0\n",
        "the lease is a file of the agent's own, not a mount: {out}"
    );
    s.close_and_wait();
    // The lease itself is untouched; what the agent left comes back with
    // its digest.
    assert_eq!(std::fs::read_to_string(&lease).expect("lease"), "token-1\n");
    let back = std::fs::read(&returned).expect("returned");
    let (content, digest) = back.split_at(back.len() - 32);
    assert_eq!(content, b"token-2\n");
    assert_eq!(digest, sha2::Sha256::digest(content).as_slice());

    // Replaced inside by a link to a file elsewhere, or grown past the
    // bound: nothing comes back.
    for script in [
        "cd /home/agent/.codex && rm auth.json && ln -s /etc/passwd auth.json",
        "head -c 1100000 /dev/zero > /home/agent/.codex/auth.json",
    ] {
        write_mode(&returned, "", 0o600);
        let l = lease_file.clone();
        let mut s = start_with(&["/bin/sh", "-c", script], false, |w| {
            w.seed_dirs = vec!["/home/agent/.codex".into()];
            w.leases = vec![l];
        });
        let end = run_to_end(&mut s);
        assert!(
            matches!(end, FromLauncher::Exited(_)),
            "{script}: {}",
            failure_code(&end)
        );
        s.close_and_wait();
        assert_eq!(std::fs::read(&returned).expect("returned"), b"", "{script}");
    }

    // A lease or return file reached through a link, or with a second
    // link, is refused.
    let link = host.path().join("lease-link");
    std::os::unix::fs::symlink(&lease, &link).expect("symlink");
    let hard = host.path().join("lease-hard");
    std::fs::hard_link(&lease, &hard).expect("hard link");
    let rlink = host.path().join("returned-link");
    std::os::unix::fs::symlink(&returned, &rlink).expect("symlink");
    let p = |x: &std::path::Path| x.display().to_string();
    for (source, ret) in [
        (p(&link), p(&returned)),
        (p(&hard), p(&returned)),
        (p(&lease), p(&rlink)),
    ] {
        std::fs::remove_file(&hard).ok();
        if source.ends_with("lease-hard") {
            std::fs::hard_link(&lease, &hard).expect("hard link");
        }
        let l = LeaseFile {
            source: source.clone(),
            returned: ret.clone(),
            target: "/home/agent/.codex/auth.json".into(),
        };
        let mut s = start_with(&["/bin/true"], false, |w| w.leases = vec![l]);
        let text = failure_code(&run_to_end(&mut s));
        assert!(
            text.starts_with("sandbox_lease_refused: "),
            "{source} {ret}: {text}"
        );
        s.close_and_wait();
    }
}

#[test]
fn a_cpu_rate_is_the_session_cgroups_cpu_max() {
    if !common::sandbox_ok(common::As::Caller) {
        return;
    }
    let mut s = start_with(&["/bin/true"], false, |w| {
        w.hold_for_release = true;
        w.cpu_rate_millicpus = Some(250);
    });
    let m = s.until(|m, _| matches!(m, FromLauncher::Prepared(_) | FromLauncher::Failed(_)));
    assert!(
        matches!(m, FromLauncher::Prepared(_)),
        "{}",
        failure_code(&m)
    );
    let init = children(s.child.id());
    assert_eq!(init.len(), 1, "{init:?}");
    let agent = children(init[0]);
    assert_eq!(agent.len(), 1, "{agent:?}");
    // The held agent's cgroup: v2 `cpu.max`, or the v1 cpu hierarchy's CFS quota.
    let cg = std::fs::read_to_string(format!("/proc/{}/cgroup", agent[0])).expect("cgroup");
    let entry = |prefix: &str| {
        cg.lines()
            .find_map(|l| {
                l.split_once(':')
                    .map(|(_, r)| r)
                    .and_then(|r| r.strip_prefix(prefix))
            })
            .map(str::to_owned)
    };
    let v2 = entry(":").filter(|p| p != "/");
    let v1 = entry("cpu:").filter(|p| p != "/");
    match (v2, v1) {
        (_, Some(p)) => {
            let read = |f: &str| {
                std::fs::read_to_string(format!("/sys/fs/cgroup/cpu{p}/{f}")).expect("cpu file")
            };
            assert_eq!(read("cpu.cfs_quota_us").trim(), "25000", "{p}");
            assert_eq!(read("cpu.cfs_period_us").trim(), "100000", "{p}");
        }
        (Some(p), None) => {
            let max =
                std::fs::read_to_string(format!("/sys/fs/cgroup{p}/cpu.max")).expect("cpu.max");
            assert_eq!(max.trim(), "25000 100000", "{p}");
        }
        (None, None) => panic!("the agent is in no session cgroup: {cg}"),
    }
    s.send(ToLauncher::Release);
    let end = run_to_end(&mut s);
    assert!(
        matches!(end, FromLauncher::Exited(_)),
        "{}",
        failure_code(&end)
    );
    s.close_and_wait();
}
