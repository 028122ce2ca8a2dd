//! Talking to systemd: `systemctl` run directly (argv, never a shell),
//! always on the one fixed unit, each call bounded in time and in how much
//! of its output is kept.

use super::unit::{Scope, UNIT_NAME};
use glove_types::codes::daemon::*;
use glove_types::Rejection;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The `systemctl` used unless a test names another.
pub const SYSTEMCTL: &str = "/usr/bin/systemctl";

/// Bytes kept of each of systemctl's output streams.
const MAX_OUTPUT: u64 = 64 * 1024;

/// How long one call may take. A stop may wait for gloved's own shutdown
/// (up to the unit's `TimeoutStopSec=30`), so the stopping verbs get more.
pub fn bound(verb: &str) -> Duration {
    match verb {
        "stop" | "disable" | "restart" => Duration::from_secs(45),
        "start" | "enable" => Duration::from_secs(30),
        _ => Duration::from_secs(15),
    }
}

/// How to reach one manager.
#[derive(Clone, Debug)]
pub struct Systemctl {
    /// The executable.
    pub program: PathBuf,
    /// User or system manager.
    pub scope: Scope,
}

/// What one call printed.
#[derive(Debug)]
pub struct Ran {
    /// Standard output (at most [`MAX_OUTPUT`] bytes, lossily decoded).
    pub stdout: String,
}

/// Whether the manager of `scope` looks reachable, before asking it
/// anything: the system manager marks a systemd boot with
/// `/run/systemd/system` (what `sd_booted()` tests); a user manager
/// listens on `$XDG_RUNTIME_DIR/systemd/private`, which `systemctl --user`
/// connects to.
pub fn reachable(scope: Scope) -> Result<(), String> {
    match scope {
        Scope::System => {
            if Path::new("/run/systemd/system").is_dir() {
                Ok(())
            } else {
                Err(
                    "this machine was not booted with systemd (/run/systemd/system is missing)"
                        .into(),
                )
            }
        }
        Scope::User => {
            let Some(rt) = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) else {
                return Err(
                    "XDG_RUNTIME_DIR is not set, so there is no user manager to reach".into(),
                );
            };
            let private = rt.join("systemd/private");
            use std::os::unix::fs::FileTypeExt;
            match std::fs::symlink_metadata(&private) {
                Ok(m) if m.file_type().is_socket() => Ok(()),
                _ => Err(format!(
                    "no systemd user manager is listening ({} is missing)",
                    private.display()
                )),
            }
        }
    }
}

/// Whether systemctl's complaint means it could not reach the manager.
fn says_unreachable(stderr: &str) -> bool {
    [
        "Failed to connect to bus",
        "not been booted with systemd",
        "Failed to get D-Bus connection",
        "No medium found",
    ]
    .iter()
    .any(|s| stderr.contains(s))
}

fn drain(r: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        if let Some(r) = r {
            let mut r = r.take(MAX_OUTPUT);
            let _ = r.read_to_end(&mut out);
            // Keep draining so that the child never blocks on a full pipe.
            let _ = std::io::copy(&mut r.into_inner(), &mut std::io::sink());
        }
        String::from_utf8_lossy(&out).into_owned()
    })
}

impl Systemctl {
    /// Runs `systemctl [--user] --no-ask-password <args…>`, waiting at
    /// most `bound(args[0])`; a non-zero exit is an error carrying
    /// systemctl's own message.
    pub fn run(&self, args: &[&str]) -> Result<Ran, Rejection> {
        let verb = args.first().copied().unwrap_or("");
        let mut cmd = Command::new(&self.program);
        if self.scope == Scope::User {
            cmd.arg("--user");
        }
        cmd.arg("--no-ask-password")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let shown = format!(
            "systemctl {}{}",
            if self.scope == Scope::User {
                "--user "
            } else {
                ""
            },
            args.join(" ")
        );
        let mut child = cmd.spawn().map_err(|e| {
            Rejection::new(
                DAEMON_SYSTEMCTL_FAILED,
                format!("cannot run {} ({shown}): {e}", self.program.display()),
            )
        })?;
        let out = drain(child.stdout.take());
        let err = drain(child.stderr.take());
        let deadline = Instant::now() + bound(verb);
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Ok(s),
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break Err(Rejection::new(
                        DAEMON_SYSTEMCTL_TIMEOUT,
                        format!(
                            "{shown} did not finish within {} s and was killed",
                            bound(verb).as_secs()
                        ),
                    ));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break Err(Rejection::new(
                        DAEMON_SYSTEMCTL_FAILED,
                        format!("cannot wait for {shown}: {e}"),
                    ));
                }
            }
        };
        let stdout = out.join().unwrap_or_default();
        let stderr = err.join().unwrap_or_default();
        let status = status?;
        if status.success() {
            return Ok(Ran { stdout });
        }
        let said = stderr.trim();
        let code = if says_unreachable(said) {
            DAEMON_SYSTEMD_UNREACHABLE
        } else {
            DAEMON_SYSTEMCTL_FAILED
        };
        Err(Rejection::new(
            code,
            format!(
                "{shown} failed ({status}){}{said}",
                if said.is_empty() { "" } else { ": " }
            ),
        ))
    }

    /// `systemctl show` of the unit: the properties asked for, as pairs.
    pub fn show(&self, props: &[&str]) -> Result<Vec<(String, String)>, Rejection> {
        let p = format!("--property={}", props.join(","));
        let ran = self.run(&["show", &p, "--", UNIT_NAME])?;
        Ok(parse_show(&ran.stdout))
    }
}

/// `KEY=value` lines (the form of `systemctl show`).
pub fn parse_show(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn show_output_parses_and_unreachable_is_recognised() {
        let v = parse_show("ActiveState=active\nSubState=running\nMainPID=42\nbogus\n");
        assert_eq!(v.len(), 3);
        assert_eq!(v[2], ("MainPID".into(), "42".into()));
        assert!(says_unreachable(
            "System has not been booted with systemd as init system (PID 1). Can't operate.\nFailed to connect to bus: Host is down"
        ));
        assert!(!says_unreachable("Unit glove.service not found."));
    }
}
