//! The status channel between the supervisor and the init: frame tags, the release command, prepared facts and errors.

use super::agent::EXEC_STARTED;
use super::{io_err, PreparedFacts};
use crate::error::SandboxError;
use crate::spec::AgentCommand;
use crate::sys::process::{self};
use crate::sys::{fd, Errno};
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

pub(crate) const TAG_GO: u8 = b'G';
pub(crate) const TAG_ERROR: u8 = b'E';
pub(crate) const TAG_PTY: u8 = b'P';
pub(crate) const TAG_EXIT: u8 = b'X';
pub(crate) const TAG_PREPARED: u8 = b'B';
pub(crate) const TAG_RELEASE: u8 = b'A';
pub(crate) const TAG_JOINED: u8 = b'J';
/// JOINED flags (second byte): no cgroup, apply the rlimit fallback.
pub(super) const RELEASE_FALLBACK: u8 = 1;
/// RELEASE flags (second byte): a command follows (`u32` LE length,
/// [`ExecCmd::encode`]).
pub(super) const RELEASE_COMMAND: u8 = 2;

/// The agent's command as `execve` takes it.
pub(super) struct ExecCmd {
    pub(super) exe: CString,
    pub(super) argv: Vec<CString>,
    pub(super) envp: Vec<CString>,
}

/// Largest command payload a release may carry.
pub(super) const MAX_RELEASE_COMMAND: usize =
    crate::spec::MAX_COMMAND_BYTES + 2 * crate::spec::MAX_ARGS + 4096;

impl ExecCmd {
    pub(super) fn new(exe: &str, args: &[String], env: &[String]) -> Result<Self, SandboxError> {
        let cs = |s: &str| {
            CString::new(s).map_err(|_| SandboxError::Spec {
                detail: "NUL in string".into(),
            })
        };
        Ok(ExecCmd {
            exe: cs(exe)?,
            argv: std::iter::once(exe)
                .chain(args.iter().map(String::as_str))
                .map(cs)
                .collect::<Result<_, _>>()?,
            envp: env.iter().map(|s| cs(s)).collect::<Result<_, _>>()?,
        })
    }

    /// What a release sends the init: argument and environment counts
    /// (`u32` LE each), then the executable, the arguments and the
    /// environment, each NUL-terminated.
    pub(super) fn encode(cmd: &AgentCommand) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(cmd.arguments.len() as u32).to_le_bytes());
        out.extend_from_slice(&(cmd.environment.len() as u32).to_le_bytes());
        for s in std::iter::once(&cmd.executable)
            .chain(&cmd.arguments)
            .chain(&cmd.environment)
        {
            out.extend_from_slice(s.as_bytes());
            out.push(0);
        }
        out
    }

    /// The inverse of [`ExecCmd::encode`]; `None` for anything else.
    pub(super) fn decode(bytes: &[u8]) -> Option<Self> {
        let count = |at: usize| -> Option<usize> {
            let b = bytes.get(at..at + 4)?;
            let n = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
            (n <= crate::spec::MAX_ARGS).then_some(n)
        };
        let (argc, envc) = (count(0)?, count(4)?);
        let mut rest = bytes.get(8..)?;
        let mut strings = Vec::with_capacity(1 + argc + envc);
        for _ in 0..1 + argc + envc {
            let end = rest.iter().position(|b| *b == 0)?;
            strings.push(CString::new(&rest[..end]).ok()?);
            rest = &rest[end + 1..];
        }
        if !rest.is_empty() {
            return None;
        }
        let envp = strings.split_off(1 + argc);
        Some(ExecCmd {
            exe: strings.first()?.clone(),
            argv: strings,
            envp,
        })
    }
}

/// Sends RELEASE (with `command`, if any) and hands the agent the write end
/// of a new close-on-exec pipe with it; returns the read end. The agent's
/// `execve` closes the write end, so end-of-file on the read end says the
/// agent runs; a byte says it failed (the init then sends ERROR). This
/// tells the supervisor without waking the init first.
pub(super) fn send_release(
    sync: &OwnedFd,
    command: Option<&AgentCommand>,
) -> Result<OwnedFd, Errno> {
    let (exec_r, exec_w) = fd::pipe()?;
    fd::send_fds(sync.as_fd(), TAG_RELEASE, &[exec_w.as_raw_fd()])?;
    drop(exec_w);
    let mut msg = vec![0u8];
    if let Some(c) = command {
        let body = ExecCmd::encode(c);
        msg[0] |= RELEASE_COMMAND;
        msg.extend_from_slice(&(body.len() as u32).to_le_bytes());
        msg.extend_from_slice(&body);
    }
    fd::write_all(sync.as_fd(), &msg)?;
    Ok(exec_r)
}

/// Waits until every write end of the exec-status pipe is closed (the
/// agent's by its `execve` or its exit) without waking for the bytes
/// written before that, then reads them: true exactly when the agent
/// reached its `execve` and nothing reported a failure after.
pub(super) fn exec_outcome(exec_status: &OwnedFd) -> Result<bool, Errno> {
    loop {
        // No events asked for: only the hang-up (or an error) wakes us.
        let mut entry = [fd::PollEntry {
            fd: exec_status.as_raw_fd(),
            events: 0,
            revents: 0,
        }];
        fd::poll(&mut entry, -1)?;
        if entry[0].revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            break;
        }
    }
    let mut got = [0u8; 8];
    let n = fd::read_full(exec_status.as_fd(), &mut got)?;
    Ok(&got[..n] == EXEC_STARTED)
}

pub(super) fn read_facts(sync: &OwnedFd) -> Result<PreparedFacts, SandboxError> {
    let mut len = [0u8; 4];
    read_exact(sync, &mut len)?;
    let n = u32::from_le_bytes(len) as usize;
    if n > 1 << 20 {
        return Err(SandboxError::Io {
            detail: "prepared report too large".into(),
        });
    }
    let mut body = vec![0u8; n];
    read_exact(sync, &mut body)?;
    glove_types::canon::decode(&body, 1 << 20, glove_types::canon::Form::Strict).map_err(|e| {
        SandboxError::Io {
            detail: format!("prepared report: {e}"),
        }
    })
}

pub(super) fn read_exact(sync: &OwnedFd, buf: &mut [u8]) -> Result<(), SandboxError> {
    match fd::read_full(sync.as_fd(), buf) {
        Ok(n) if n == buf.len() => Ok(()),
        Ok(_) => Err(SandboxError::Io {
            detail: "status channel closed".into(),
        }),
        Err(e) => Err(io_err("status channel", e)),
    }
}

pub(super) fn read_error_body(sync: &OwnedFd, exe: &str) -> SandboxError {
    let mut head = [0u8; 6];
    let _ = fd::read_full(sync.as_fd(), &mut head);
    let len = usize::from(u16::from_le_bytes([head[0], head[1]]));
    let errno = i32::from_le_bytes([head[2], head[3], head[4], head[5]]);
    let mut step = vec![0u8; len.min(256)];
    let got = fd::read_full(sync.as_fd(), &mut step).unwrap_or(0);
    let step = String::from_utf8_lossy(&step[..got]).into_owned();
    let detail = Errno(errno).to_string();
    if step == "execve" {
        SandboxError::Exec {
            executable: exe.to_owned(),
            detail,
        }
    } else if step.starts_with("grant ") {
        SandboxError::Grant {
            detail: format!("{step} ({detail})"),
        }
    } else if step.starts_with("pinned executable ") {
        SandboxError::ExecutableChanged {
            detail: format!("{step} ({detail})"),
        }
    } else if step.starts_with("lease ") {
        SandboxError::Lease {
            detail: format!("{step} ({detail})"),
        }
    } else if step.starts_with("bundle ") {
        SandboxError::Bundle {
            detail: format!("{step} ({detail})"),
        }
    } else if step == "cgroup join" {
        SandboxError::Cgroup {
            detail: format!("the agent could not join the session cgroup: {detail}"),
        }
    } else if step.starts_with("socket ") {
        SandboxError::SocketExposed {
            detail: format!("{step} ({detail})"),
        }
    } else if step.starts_with("copy") {
        SandboxError::Copy {
            detail: format!("{step}: {detail}"),
        }
    } else {
        SandboxError::Setup { step, detail }
    }
}

/// Sends an error frame and leaves.
pub(super) fn fail(sync: &OwnedFd, step: &str, e: Errno) -> ! {
    let mut msg = vec![TAG_ERROR];
    msg.extend_from_slice(&(step.len() as u16).to_le_bytes());
    msg.extend_from_slice(&e.0.to_le_bytes());
    msg.extend_from_slice(step.as_bytes());
    let _ = fd::write_all(sync.as_fd(), &msg);
    process::exit_now(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn as_strings(c: &ExecCmd) -> (String, Vec<String>, Vec<String>) {
        let s = |c: &CString| c.to_string_lossy().into_owned();
        (
            s(&c.exe),
            c.argv.iter().map(s).collect(),
            c.envp.iter().map(s).collect(),
        )
    }

    proptest! {
        /// What a release sends is what the init runs: `argv[0]` is the
        /// executable, then the arguments; the environment as given.
        #[test]
        fn release_command_round_trips(
            exe in "/[a-z/]{0,20}",
            args in prop::collection::vec("[^\\x00]{0,12}", 0..6),
            env in prop::collection::vec("[A-Z]{1,4}=[^\\x00]{0,8}", 0..6),
        ) {
            let cmd = AgentCommand { executable: exe.clone(), arguments: args.clone(), environment: env.clone() };
            let got = ExecCmd::decode(&ExecCmd::encode(&cmd)).expect("decodes");
            let mut argv = vec![exe.clone()];
            argv.extend(args);
            prop_assert_eq!(as_strings(&got), (exe, argv, env));
        }

        /// Any bytes: a command or `None`, never a panic; trailing or
        /// missing strings are refused.
        #[test]
        fn release_command_decoder_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = ExecCmd::decode(&bytes);
        }
    }

    #[test]
    fn release_command_decoder_refuses_malformed_input() {
        let cmd = AgentCommand {
            executable: "/bin/echo".into(),
            arguments: vec!["a".into()],
            environment: vec!["X=1".into()],
        };
        let good = ExecCmd::encode(&cmd);
        assert!(ExecCmd::decode(&good).is_some());
        let mut trailing = good.clone();
        trailing.extend_from_slice(b"junk");
        assert!(ExecCmd::decode(&trailing).is_none());
        assert!(ExecCmd::decode(&good[..good.len() - 1]).is_none());
        let mut huge = good.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(ExecCmd::decode(&huge).is_none());
        assert!(ExecCmd::decode(&[]).is_none());
    }
}
