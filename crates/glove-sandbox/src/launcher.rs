//! The launcher: a single-threaded process that a multi-threaded service
//! starts once per session with one inherited socket. It reads the spec,
//! launches the sandbox, relays the agent's streams as frames
//! ([`crate::wire`]), enforces every limit, and reports the outcome.
//!
//! If the service goes away (the socket closes), the launcher keeps
//! supervising: limits stay enforced and the session ends on its own, or is
//! found and stopped by the restarted service through its recorded
//! identity.

use crate::identity::ProcessIdentity;
use crate::spec::AgentCommand;
use crate::supervise::{Command, InputEnd, Settings, Stream, StreamIo};
use crate::sys::fd;
use crate::wire::{Decoder, Failure, FromLauncher, Started, ToLauncher};
use crate::SandboxError;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

/// Exit status of a launcher whose launch failed.
pub const EXIT_LAUNCH_FAILED: i32 = 125;
/// Exit status of a launcher that could not read its spec.
pub const EXIT_PROTOCOL: i32 = 2;

struct Relay {
    sock: OwnedFd,
    decoder: Decoder,
    /// False once the service stopped reading or closed the socket.
    alive: bool,
}

impl Relay {
    fn send(&mut self, msg: &FromLauncher) {
        if self.alive && fd::write_all(self.sock.as_fd(), &msg.encode()).is_err() {
            self.alive = false;
        }
    }
}

impl StreamIo for Relay {
    fn input(&self) -> Option<BorrowedFd<'_>> {
        Some(self.sock.as_fd())
    }

    fn decode_input(&mut self, bytes: &[u8], out: &mut Vec<Command>) {
        self.decoder.push(bytes);
        loop {
            match self.decoder.next_to_launcher() {
                Ok(Some(ToLauncher::Stdin(b))) => out.push(Command::Input(b)),
                Ok(Some(ToLauncher::Resize(r, c))) => out.push(Command::Resize(r, c)),
                Ok(Some(ToLauncher::Signal(s))) => out.push(Command::Signal(s)),
                Ok(Some(ToLauncher::Stop(ms))) => out.push(Command::Stop { grace_ms: ms }),
                // Already running: a late release changes nothing.
                Ok(Some(ToLauncher::Release)) => {}
                // A second spec, or a command for an agent that already
                // runs the spec's, is a protocol error: stop the session.
                Ok(Some(ToLauncher::Spec(_) | ToLauncher::ReleaseWith(_))) | Err(_) => {
                    out.push(Command::Stop { grace_ms: 0 });
                    break;
                }
                Ok(None) => break,
            }
        }
    }

    fn input_end(&self) -> InputEnd {
        InputEnd::KeepRunning
    }

    fn output(&mut self, _stream: Stream, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.send(&FromLauncher::Output(bytes.to_vec()));
        }
    }
}

/// Reads the spec frame, and the descriptors that come with it: exactly
/// as many as the spec names ([`crate::wire::SpecWire::into_spec_with`]),
/// the egress channel a Unix `SOCK_SEQPACKET` socket, each retained mount
/// the root directory of an ext4 file system.
fn read_spec(sock: &OwnedFd, decoder: &mut Decoder) -> Result<(bool, crate::LaunchSpec), String> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut fds: Vec<OwnedFd> = Vec::new();
    loop {
        match decoder.next_to_launcher() {
            Ok(Some(ToLauncher::Spec(s))) => {
                if fds.len() != s.descriptors_expected() {
                    return Err(format!(
                        "{} descriptors came with a spec that needs {}",
                        fds.len(),
                        s.descriptors_expected()
                    ));
                }
                let exposures = s.exposure_targets.len();
                let mounts = if s.egress_ports.is_some() {
                    match fds.first().map(|c| fd::socket_kind(c.as_fd())) {
                        Some(Ok((libc::SOCK_SEQPACKET, libc::AF_UNIX))) => {}
                        _ => return Err("the egress channel is not a Unix seqpacket socket".into()),
                    }
                    &fds[1..]
                } else {
                    &fds[..]
                };
                let (mounts, sources) = mounts.split_at(mounts.len().saturating_sub(exposures));
                for x in sources {
                    if crate::sys::resolve::meta(x.as_fd()).map(|m| m.is_dir()) != Ok(true) {
                        return Err("an exposure source is not a directory".into());
                    }
                }
                for m in mounts {
                    const EXT4_SUPER_MAGIC: i64 = 0xEF53;
                    let is_dir = crate::sys::resolve::meta(m.as_fd()).map(|x| x.is_dir());
                    let magic = crate::sys::at::fs_magic(m.as_fd());
                    if is_dir != Ok(true) || magic != Ok(EXT4_SUPER_MAGIC) {
                        return Err(
                            "a retained mount is not the root of an ext4 file system".into()
                        );
                    }
                }
                let hold = s.hold_for_release;
                return s.into_spec_with(fds).map(|spec| (hold, spec));
            }
            Ok(Some(_)) => return Err("the first frame must be the spec".into()),
            Err(e) => return Err(e.to_string()),
            Ok(None) => {}
        }
        if fds.len() > 1 + crate::spec::MAX_RETAINED + crate::spec::MAX_EXPOSURES {
            return Err("too many descriptors came with the spec".into());
        }
        match fd::recv_collecting(sock.as_fd(), &mut buf, &mut fds) {
            Ok(0) => return Err("the service closed the socket before sending a spec".into()),
            Ok(n) => decoder.push(&buf[..n]),
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

/// What the service said to a held launch.
enum Go {
    /// Run the spec's command.
    Release,
    /// Run this command instead.
    ReleaseWith(Box<AgentCommand>),
    /// Withdrawn.
    Stop,
}

/// Waits for `Release`, `ReleaseWith` or `Stop` from the service.
fn wait_release(relay: &mut Relay) -> Result<Go, SandboxError> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match relay.decoder.next_to_launcher() {
            Ok(Some(ToLauncher::Release)) => return Ok(Go::Release),
            Ok(Some(ToLauncher::ReleaseWith(c))) => return Ok(Go::ReleaseWith(c)),
            Ok(Some(ToLauncher::Stop(_))) => return Ok(Go::Stop),
            Ok(Some(_)) => continue,
            Err(e) => {
                return Err(SandboxError::Io {
                    detail: e.to_string(),
                })
            }
            Ok(None) => {}
        }
        match fd::read(relay.sock.as_fd(), &mut buf) {
            Ok(0) => return Ok(Go::Stop),
            Ok(n) => relay.decoder.push(&buf[..n]),
            Err(e) => {
                return Err(SandboxError::Io {
                    detail: format!("read: {e}"),
                })
            }
        }
    }
}

pub use crate::sys::fd::adopt_inherited_fd;

/// Serves one session on `sock`; returns the process exit status.
pub fn serve(sock: OwnedFd) -> i32 {
    let mut decoder = Decoder::default();
    let (hold, spec) = match read_spec(&sock, &mut decoder) {
        Ok(s) => s,
        Err(detail) => {
            let e = SandboxError::Io { detail };
            let _ = fd::write_all(
                sock.as_fd(),
                &FromLauncher::Failed(Failure {
                    code: e.code().as_str().into(),
                    message: e.to_string(),
                })
                .encode(),
            );
            return EXIT_PROTOCOL;
        }
    };
    let mut relay = Relay {
        sock,
        decoder,
        alive: true,
    };
    let failed = |relay: &mut Relay, e: &SandboxError| {
        relay.send(&FromLauncher::Failed(Failure {
            code: e.code().as_str().into(),
            message: e.to_string(),
        }));
        EXIT_LAUNCH_FAILED
    };
    let prepared = match crate::prepare(spec) {
        Ok(p) => p,
        Err(e) => return failed(&mut relay, &e),
    };
    relay.send(&FromLauncher::Prepared(Box::new(prepared.facts().clone())));
    let mut command = None;
    if hold {
        match wait_release(&mut relay) {
            Ok(Go::Release) => {}
            Ok(Go::ReleaseWith(c)) => command = Some(c),
            Ok(Go::Stop) => {
                prepared.abort();
                let e = SandboxError::Io {
                    detail: "the service withdrew the launch before release".into(),
                };
                return failed(&mut relay, &e);
            }
            Err(e) => {
                prepared.abort();
                return failed(&mut relay, &e);
            }
        }
    }
    let released = match &command {
        Some(c) => prepared.release_command(c),
        None => prepared.release(),
    };
    let running = match released {
        Ok(r) => r,
        Err(e) => return failed(&mut relay, &e),
    };
    match ProcessIdentity::of(running.init_pid()) {
        Ok(init) => relay.send(&FromLauncher::Started(Box::new(Started {
            init,
            launcher_pid: std::process::id() as i32,
            enforcement: *running.mechanisms(),
        }))),
        Err(e) => {
            let _ = running.signal(libc::SIGKILL);
            relay.send(&FromLauncher::Failed(Failure {
                code: e.code().as_str().into(),
                message: e.to_string(),
            }));
            return EXIT_LAUNCH_FAILED;
        }
    }
    match running.supervise_keeping(&mut relay, Settings::default()) {
        Ok((outcome, remains)) => {
            relay.send(&FromLauncher::Exited(Box::new(outcome)));
            // Keep the (empty) cgroup until the service has recorded the
            // outcome: it closes the socket once the receipt is durable.
            wait_for_close(&mut relay);
            drop(remains);
            0
        }
        Err(e) => {
            relay.send(&FromLauncher::Failed(Failure {
                code: e.code().as_str().into(),
                message: e.to_string(),
            }));
            EXIT_LAUNCH_FAILED
        }
    }
}

/// Reads (and ignores) frames until the service closes the socket, for at
/// most [`CLOSE_WAIT`].
fn wait_for_close(relay: &mut Relay) {
    if !relay.alive {
        return;
    }
    let deadline = std::time::Instant::now() + CLOSE_WAIT;
    let mut buf = [0u8; 4096];
    while std::time::Instant::now() < deadline {
        let mut entries = [fd::PollEntry {
            fd: relay.sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let left = deadline
            .saturating_duration_since(std::time::Instant::now())
            .as_millis()
            .min(1000) as i32;
        match fd::poll(&mut entries, left) {
            Ok(0) => continue,
            Ok(_) => match fd::read(relay.sock.as_fd(), &mut buf) {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            },
            Err(_) => return,
        }
    }
}

/// Longest wait for the service to close the socket after the outcome.
pub const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);
