//! Launch-spec validation and the single-threaded rule. (The sandbox itself
//! is exercised end to end through `glove exec` in glove-bin's tests: a
//! test harness is multi-threaded, so it cannot launch in-process.)

use glove_sandbox::profile::{exec_spec, ExecRequest};
use glove_sandbox::spec::{Bind, CopyIn, LaunchSpec};
use glove_sandbox::SandboxError;
use glove_types::codes::sandbox::{
    SANDBOX_BIND_SHADOWED, SANDBOX_MULTITHREADED, SANDBOX_SPEC_INVALID,
};
use proptest::prelude::*;

fn base() -> LaunchSpec {
    exec_spec(ExecRequest::new(vec!["/bin/true".into()])).expect("default spec")
}

fn invalid(f: impl FnOnce(&mut LaunchSpec)) {
    let mut s = base();
    f(&mut s);
    let e = s.validate().expect_err("must be rejected");
    assert_eq!(e.code(), SANDBOX_SPEC_INVALID, "{e}");
}

#[test]
fn default_spec_is_valid() {
    base().validate().expect("valid");
}

fn bind(source: &str, target: &str) -> Bind {
    Bind {
        source: source.into(),
        target: target.into(),
    }
}

#[test]
fn a_grant_or_bundle_over_a_pinned_executable_is_refused() {
    use glove_sandbox::spec::{BundleMount, Grant, GrantMode};
    let pinned = |s: &mut LaunchSpec| {
        s.executable = "/opt/h/bin/codex".into();
        s.executable_pin = Some("1:2:3".into());
    };
    let mut ok = base();
    pinned(&mut ok);
    ok.validate().expect("a pin alone is valid");
    for target in ["/opt/h", "/opt/h/bin", "/opt/h/bin/codex", "/opt"] {
        invalid(|s| {
            pinned(s);
            s.grants.push(Grant {
                host_path: "/srv/w".into(),
                target: target.into(),
                mode: GrantMode::ReadOnly,
                create_if_missing: false,
            });
        });
        invalid(|s| {
            pinned(s);
            s.bundles.push(BundleMount {
                root: "/srv/b".into(),
                sha256: "ab".repeat(32),
                target: target.into(),
            });
        });
    }
    // Beside it is fine.
    let mut beside = base();
    pinned(&mut beside);
    beside.grants.push(Grant {
        host_path: "/srv/w".into(),
        target: "/opt/work".into(),
        mode: GrantMode::ReadOnly,
        create_if_missing: false,
    });
    beside.validate().expect("a grant beside the pin");
}

#[test]
fn rules() {
    invalid(|s| s.executable = "relative/path".into());
    invalid(|s| s.network_pool = Some("relative/pool".into()));
    for ports in [
        vec![],
        vec![80],
        vec![3128, 3128],
        (2000..2018).collect::<Vec<u16>>(),
    ] {
        invalid(|s| {
            let (_, inside) = glove_sandbox::egress_channel().expect("channel");
            s.egress = Some(glove_sandbox::spec::EgressSpec {
                channel: inside,
                ports,
            })
        });
    }
    invalid(|s| s.network_pool = Some("/run/../pool".into()));
    invalid(|s| s.working_directory = "/a/../b".into());
    invalid(|s| s.arguments.push("a\0b".into()));
    invalid(|s| s.environment.push("1BAD=x".into()));
    invalid(|s| s.environment.push("NOEQUALS".into()));
    invalid(|s| s.read_only_binds.push(bind("/usr", "/proc/x")));
    invalid(|s| s.read_only_binds.push(bind("/usr", "/dev")));
    invalid(|s| s.sockets.push(bind("/run/x.sock", "/proc/x.sock")));
    invalid(|s| {
        s.sockets
            .push(bind("relative.sock", "/run/glove/mcp/a.sock"))
    });
    invalid(|s| s.sockets.push(bind("/run/x.sock", "/tmp/a.sock")));
    invalid(|s| {
        s.sockets.push(bind("/run/x.sock", "/run/glove/mcp/a.sock"));
        s.sockets.push(bind("/run/y.sock", "/run/glove/mcp/a.sock"));
    });
    // Grants and bundles are made before the writable directories too.
    let mut s = base();
    s.grants.push(glove_sandbox::spec::Grant {
        host_path: "/srv".into(),
        target: "/workspace/data".into(),
        mode: glove_sandbox::spec::GrantMode::ReadOnly,
        create_if_missing: false,
    });
    let e = s.validate().expect_err("a grant below /workspace");
    assert_eq!(e.code(), SANDBOX_BIND_SHADOWED, "{e}");
    let mut s = base();
    s.bundles.push(glove_sandbox::spec::BundleMount {
        root: "/srv/bundles".into(),
        sha256: "0".repeat(64),
        target: "/tmp/lib.so".into(),
    });
    let e = s.validate().expect_err("a bundle below /tmp");
    assert_eq!(e.code(), SANDBOX_BIND_SHADOWED, "{e}");
    for target in ["/tmp", "/tmp/x", "/workspace/a/b", "/home/agent"] {
        let mut s = base();
        s.read_only_binds.push(bind("/usr", target));
        let e = s.validate().expect_err("hidden by a writable directory");
        assert_eq!(e.code(), SANDBOX_BIND_SHADOWED, "{target}: {e}");
    }
    invalid(|s| s.writable_dirs.push("/oldroot".into()));
    invalid(|s| {
        s.copy_in.push(CopyIn {
            source: "/srv".into(),
            target: "/usr/x".into(),
        })
    });
    // The host's /proc is where the scratch file system is built (the same
    // copy from elsewhere is fine).
    let mut ok = base();
    ok.copy_in.push(CopyIn {
        source: "/srv".into(),
        target: "/workspace/x".into(),
    });
    ok.validate().expect("a copy into /workspace is valid");
    invalid(|s| {
        s.copy_in.push(CopyIn {
            source: "/proc/self".into(),
            target: "/workspace/x".into(),
        })
    });
    invalid(|s| s.limits.disk_bytes = 1024);
    invalid(|s| s.limits.pids = 0);
    invalid(|s| s.hostname = "bad host".into());
    invalid(|s| s.files.push(("/etc/big".into(), vec![0; 2 << 20])));
    invalid(|s| s.host_files.push(bind("/proc/self/environ", "/etc/x")));
    invalid(|s| s.host_files.push(bind("/etc/hosts", "/etc/passwd")));
    invalid(|s| s.host_files.push(bind("etc/relative", "/etc/x")));
    invalid(|s| s.arguments = vec!["x".into(); 5000]);
    // Links and files below a mount (a bind, a writable directory).
    invalid(|s| s.files.push(("/usr/share/x".into(), b"x".to_vec())));
    invalid(|s| s.host_files.push(bind("/etc/hosts", "/tmp/hosts")));
    invalid(|s| s.symlinks.push(("/workspace/l".into(), "/etc".into())));
}

#[test]
fn launch_refuses_a_multithreaded_caller() {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let keep = std::thread::spawn(move || {
        let _ = rx.recv();
    });
    let r = glove_sandbox::launch(base());
    let _ = tx.send(());
    let _ = keep.join();
    match r {
        Err(e @ SandboxError::Multithreaded { .. }) => assert_eq!(e.code(), SANDBOX_MULTITHREADED),
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("a multi-threaded launch was accepted"),
    }
}

proptest! {
    #[test]
    fn validation_never_panics(exe in ".{0,40}", cwd in ".{0,40}", arg in ".{0,40}", env in ".{0,40}",
                               target in ".{0,40}", host in ".{0,80}") {
        let mut s = base();
        s.executable = exe;
        s.working_directory = cwd;
        s.arguments.push(arg);
        s.environment.push(env);
        s.writable_dirs.push(target);
        s.hostname = host;
        let _ = s.validate();
    }
}
