//! The launcher client: the [`Launcher`] port, the real `glove-launcher`
//! behind it ([`ProcessLauncher`]), its frames, and the startup probe.
//!
//! The runtime reaches launchers only through [`Launcher`] and
//! [`LauncherLink`], so its start, stop and failure logic is tested against
//! a recording fake as well as against the real sandbox.

use glove_sandbox::outcome::ExitStatus;
use glove_sandbox::spec::Enforcement;
use glove_sandbox::wire::{Decoder, FromLauncher, SpecWire, ToLauncher};
use glove_types::codes::control::*;
use glove_types::{ErrorCode, Rejection};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Starts launchers: one per session.
pub trait Launcher: Send + Sync {
    /// Starts the launcher of one session.
    fn spawn(&self) -> Result<Box<dyn LauncherLink>, Rejection>;
}

/// The runtime's end of one launcher: frames out and in, and the process.
pub trait LauncherLink: Send {
    /// Sends one frame.
    fn send(&mut self, m: &ToLauncher) -> Result<(), String>;
    /// Sends one frame (the spec) with descriptors attached to its bytes
    /// (the sandbox's end of the egress channel, the retained mounts).
    fn send_with_fds(&mut self, m: &ToLauncher, fds: Vec<OwnedFd>) -> Result<(), String> {
        drop(fds);
        let _ = m;
        Err("this launcher takes no descriptors".into())
    }
    /// The next frame; an error when the launcher is gone or the read
    /// deadline (while preparing and starting) passed.
    fn recv(&mut self) -> Result<FromLauncher, String>;
    /// A second sending handle, for requests while the session thread
    /// reads.
    fn writer(&self) -> Result<Box<dyn LauncherWriter>, String>;
    /// The launcher's process id (recorded for recovery).
    fn pid(&self) -> u32;
    /// No read deadline from now on: the session runs as long as its
    /// limits let it.
    fn unbounded(&mut self);
    /// Closes the channel and reaps the launcher process in the background.
    fn close(self: Box<Self>);
    /// Kills the launcher and waits for it to exit: its sandbox init dies
    /// with it (parent-death signal), so nothing of the session can still
    /// run or give a lease back. For a launcher that can no longer be
    /// talked to, before the session's leases are released.
    fn kill_and_wait(self: Box<Self>) {
        self.close();
    }
}

/// A sending handle of a [`LauncherLink`].
pub trait LauncherWriter: Send {
    /// Sends one frame.
    fn send(&mut self, m: &ToLauncher) -> Result<(), String>;
    /// Closes the connection for good, for the launcher as well (it exits
    /// and its sandbox init is reaped), once the session's end is durable.
    fn close(&mut self) {}
}

/// The real launcher: the `glove-launcher` executable, one process per
/// session, spoken to over one end of a socket pair (its standard input).
#[derive(Clone, Debug)]
pub struct ProcessLauncher {
    path: std::path::PathBuf,
}

impl ProcessLauncher {
    /// The launcher at `path`.
    pub fn new(path: &Path) -> ProcessLauncher {
        ProcessLauncher {
            path: path.to_owned(),
        }
    }
}

impl Launcher for ProcessLauncher {
    fn spawn(&self) -> Result<Box<dyn LauncherLink>, Rejection> {
        let (sock, child) = spawn_launcher(&self.path)?;
        Ok(Box::new(ProcessLink {
            sock,
            dec: Decoder::default(),
            child,
        }))
    }
}

struct ProcessLink {
    sock: UnixStream,
    dec: Decoder,
    child: std::process::Child,
}

impl LauncherLink for ProcessLink {
    fn send(&mut self, m: &ToLauncher) -> Result<(), String> {
        self.sock.write_all(&m.encode()).map_err(|e| e.to_string())
    }

    fn send_with_fds(&mut self, m: &ToLauncher, owned: Vec<OwnedFd>) -> Result<(), String> {
        use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
        use std::os::fd::AsFd;
        const MOST: usize = 1 + glove_sandbox::spec::MAX_RETAINED;
        if owned.len() > MOST {
            return Err("too many descriptors for one spec".into());
        }
        let bytes = m.encode();
        let fds: Vec<_> = owned.iter().map(|f| f.as_fd()).collect();
        let mut space =
            [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MOST))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err("the control buffer is too small".into());
        }
        let sent = loop {
            match rustix::net::sendmsg(
                &self.sock,
                &[std::io::IoSlice::new(&bytes)],
                &mut control,
                SendFlags::NOSIGNAL,
            ) {
                Ok(n) => break n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.to_string()),
            }
        };
        // The descriptors went with the first bytes; the rest follows.
        self.sock
            .write_all(&bytes[sent..])
            .map_err(|e| e.to_string())
    }

    fn recv(&mut self) -> Result<FromLauncher, String> {
        read_frame(&mut self.sock, &mut self.dec)
    }

    fn writer(&self) -> Result<Box<dyn LauncherWriter>, String> {
        let s = self.sock.try_clone().map_err(|e| e.to_string())?;
        Ok(Box::new(SocketWriter(s)))
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn unbounded(&mut self) {
        let _ = self.sock.set_read_timeout(None);
    }

    fn close(self: Box<Self>) {
        let ProcessLink { sock, child, .. } = *self;
        drop(sock);
        reap(child);
    }

    fn kill_and_wait(self: Box<Self>) {
        let ProcessLink {
            sock, mut child, ..
        } = *self;
        // The child is ours and unreaped: its pid cannot have been reused.
        let _ = child.kill();
        let _ = child.wait();
        drop(sock);
    }
}

struct SocketWriter(UnixStream);

impl LauncherWriter for SocketWriter {
    fn send(&mut self, m: &ToLauncher) -> Result<(), String> {
        self.0.write_all(&m.encode()).map_err(|e| e.to_string())
    }

    fn close(&mut self) {
        // A shutdown ends the socket itself, not only this descriptor: the
        // launcher reads its end even though other descriptors remain.
        let _ = self.0.shutdown(std::net::Shutdown::Both);
    }
}

/// Reads frames until the launcher reports the end (or goes away).
pub(super) fn drain_until_end(link: &mut dyn LauncherLink) -> Result<(), String> {
    loop {
        match link.recv()? {
            FromLauncher::Exited(_) | FromLauncher::Failed(_) => return Ok(()),
            _ => {}
        }
    }
}

/// What the wire and the receipt say of a launcher's failure: the
/// sandbox's own code — the one `glove exec` gives for the same fault
/// (`session_launch_failed` only for a code the catalogue does not know) —
/// and a fixed sentence. The launcher's own message can name host paths (a
/// bind source, a grant's directory), so it goes to the log only.
pub(super) fn launch_failure(f: &glove_sandbox::wire::Failure) -> (ErrorCode, String) {
    tracing::warn!(code = %f.code, "the launcher failed: {}", f.message);
    // Only a sandbox code: a launcher's frame cannot name a service code
    // (`session_launcher_lost` would change how the session is ended).
    let code = ErrorCode::from_code(&f.code)
        .filter(|c| c.as_str().starts_with("sandbox_"))
        .unwrap_or(SESSION_LAUNCH_FAILED);
    (
        code,
        format!(
            "{}: the sandbox could not be built or run; the gloved log has the details",
            f.code
        ),
    )
}

/// How long the launcher may take to prepare or start a sandbox.
pub(super) const LAUNCH_TIMEOUT: Duration = Duration::from_secs(60);
/// Launches `/bin/true` under strict enforcement through the launcher and
/// checks that it exits 0 with memory and pids in a cgroup and no limit
/// left to an rlimit fallback.
pub fn probe(launcher: &Path) -> Result<(), Rejection> {
    let bad = |m: String| Rejection::new(SESSION_RUNTIME_UNAVAILABLE, m);
    let spec = glove_sandbox::profile::exec_spec(glove_sandbox::profile::ExecRequest {
        strict_limits: true,
        ..glove_sandbox::profile::ExecRequest::new(vec!["/bin/true".into()])
    })
    .map_err(|e| bad(format!("probe spec: {e}")))?;
    let mut wire = SpecWire::from_spec(&spec).ok_or_else(|| bad("probe spec".into()))?;
    wire.enforcement = Enforcement::Strict;
    let (sock, child) = spawn_launcher(launcher).map_err(|e| bad(e.message().into()))?;
    let verdict = probe_over(sock, wire);
    // The socket is closed by now, so the launcher finishes; it is reaped
    // here and leaves no zombie behind for the service's lifetime.
    reap_within(child, PROBE_REAP_TIMEOUT);
    verdict
}

/// How long the probe's launcher gets to exit after its verdict before it
/// is killed (and then reaped).
pub(super) const PROBE_REAP_TIMEOUT: Duration = Duration::from_secs(10);

/// Waits for `child` for at most `timeout`, then kills it and waits.
pub(super) fn reap_within(mut child: std::process::Child, timeout: Duration) {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return,
            Ok(None) if std::time::Instant::now() >= deadline => {
                tracing::warn!(
                    pid = child.id(),
                    "the probe's launcher did not exit; killing it"
                );
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// The probe's exchange with its launcher: the spec out, the verdict in.
pub(super) fn probe_over(mut sock: UnixStream, wire: SpecWire) -> Result<(), Rejection> {
    let bad = |m: String| Rejection::new(SESSION_RUNTIME_UNAVAILABLE, m);
    sock.write_all(&ToLauncher::Spec(Box::new(wire)).encode())
        .map_err(|e| bad(format!("probe: {e}")))?;
    let mut dec = Decoder::default();
    loop {
        match read_frame(&mut sock, &mut dec).map_err(|e| bad(format!("probe: {e}")))? {
            FromLauncher::Exited(o) => {
                use glove_sandbox::outcome::Mechanism::*;
                let e = o.enforcement;
                let cg = |m| matches!(m, CgroupV2 | CgroupV1);
                if o.exit != (ExitStatus::Exited { code: 0 }) {
                    return Err(bad(format!("probe exited with {:?}", o.exit)));
                }
                let all = [
                    e.cpu_time,
                    e.memory,
                    e.pids,
                    e.wall_time,
                    e.disk,
                    e.terminal_output,
                ];
                // Strict means the launcher's strict: memory and pids in a
                // cgroup, and no limit left to an rlimit fallback (CPU time
                // may be a cgroup or the launcher's cgroup-accounted watchdog).
                if !(cg(e.memory) && cg(e.pids)) || all.contains(&Rlimit) {
                    return Err(bad(format!("limits not enforced by cgroups: {e:?}")));
                }
                return Ok(());
            }
            FromLauncher::Failed(f) => {
                return Err(bad(format!("probe failed: {}: {}", f.code, f.message)))
            }
            _ => {}
        }
    }
}

/// A spawned launcher: our socket end, and the child (reaped by a thread).
pub(super) fn spawn_launcher(
    launcher: &Path,
) -> Result<(UnixStream, std::process::Child), Rejection> {
    let (mine, theirs) = UnixStream::pair()
        .map_err(|e| Rejection::new(SESSION_LAUNCH_FAILED, format!("socketpair: {e}")))?;
    let child = std::process::Command::new(launcher)
        .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
            theirs,
        )))
        .stdout(std::process::Stdio::null())
        .spawn()
        .map_err(|e| {
            Rejection::new(SESSION_LAUNCH_FAILED, {
                // The path stays in the log: the wire and the receipt
                // never name a host path.
                tracing::error!(launcher = ?launcher, "cannot run the launcher: {e}");
                format!("cannot run the launcher: {}", e.kind())
            })
        })?;
    mine.set_read_timeout(Some(LAUNCH_TIMEOUT))
        .map_err(|e| Rejection::new(SESSION_LAUNCH_FAILED, format!("socket: {e}")))?;
    Ok((mine, child))
}

pub(super) fn read_frame(sock: &mut UnixStream, dec: &mut Decoder) -> Result<FromLauncher, String> {
    let mut buf = [0u8; 16384];
    loop {
        if let Some(m) = dec.next_from_launcher().map_err(|e| e.to_string())? {
            return Ok(m);
        }
        let n = sock.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the launcher closed its socket".into());
        }
        dec.push(&buf[..n]);
    }
}

pub(super) fn reap(mut child: std::process::Child) {
    std::thread::spawn(move || {
        let _ = child.wait();
    });
}

/// A launcher's reply as the frame `want` accepts, or the failure to record:
/// the launcher's own failure or an unexpected frame (`session_launch_failed`),
/// or a lost launcher (`session_launcher_lost`).
pub(super) fn expect_frame<T>(
    reply: Result<FromLauncher, String>,
    want: impl FnOnce(FromLauncher) -> Result<T, FromLauncher>,
) -> Result<T, (ErrorCode, String)> {
    match reply.map(want) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(FromLauncher::Failed(f))) => Err(launch_failure(&f)),
        Ok(Err(other)) => Err((SESSION_LAUNCH_FAILED, format!("unexpected frame {other:?}"))),
        Err(e) => Err((SESSION_LAUNCHER_LOST, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glove_sandbox::wire::Failure;

    #[test]
    fn a_launcher_failure_keeps_the_sandbox_s_own_code_when_the_catalogue_knows_it() {
        let known = Failure {
            code: "sandbox_executable_changed".into(),
            message: "/home/operator/bin/agent changed".into(),
        };
        let (code, message) = launch_failure(&known);
        assert_eq!(code.as_str(), "sandbox_executable_changed");
        assert!(!message.contains("/home"), "{message}");
        let unknown = Failure {
            code: "sandbox_from_the_future".into(),
            message: String::new(),
        };
        assert_eq!(launch_failure(&unknown).0, SESSION_LAUNCH_FAILED);
        let service = Failure {
            code: "session_launcher_lost".into(),
            message: String::new(),
        };
        assert_eq!(launch_failure(&service).0, SESSION_LAUNCH_FAILED);
    }
}
