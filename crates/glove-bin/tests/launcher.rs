//! `glove-launcher` driven over its socket, as `gloved` drives it: spec,
//! started, output, input, resize, stop, exit.

mod common;

use glove_sandbox::outcome::ExitStatus;
use glove_sandbox::profile::{exec_spec, ExecRequest, DEFAULT_LIMITS};
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
    let spec = exec_spec(ExecRequest {
        command: command.iter().map(|s| s.to_string()).collect(),
        env: vec![],
        ro_binds: vec![],
        rw_copy: None,
        limits: DEFAULT_LIMITS,
        pty: pty.then_some((24, 80)),
        strict_limits: false,
        term: None,
    })
    .expect("spec");
    let wire = SpecWire::from_spec(&spec).expect("wire");
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
            let n = self.sock.read(&mut buf).expect("read (30 s timeout)");
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
    assert_eq!(s.child.wait().expect("wait").code(), Some(0));
    assert!(
        !info.init.still_matches(),
        "the sandbox init is gone after the exit"
    );
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
    let _ = s.child.wait();
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
    assert_eq!(s.child.wait().expect("wait").code(), Some(125));
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
