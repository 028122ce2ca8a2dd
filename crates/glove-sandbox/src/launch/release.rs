//! The supervisor's side of a built sandbox: [`Prepared`] (what the init
//! resolved, and the agent not yet started) and its release or abort.

use super::status::{exec_outcome, read_error_body, send_release, TAG_ERROR};
use super::{io_err, Running};
use crate::error::SandboxError;
use crate::outcome::Enforcement as Mechanisms;
use crate::spec::AgentCommand;
use crate::sys::{fd, trace};
use std::os::fd::{AsFd, OwnedFd};
use std::time::Instant;

/// What the init resolved while building the sandbox, reported before the
/// agent runs so that the caller can commit to it (the launch binding).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreparedFacts {
    /// Each grant with the identity of the directory that was opened.
    pub grants: Vec<crate::grants::ResolvedGrant>,
    /// Each bundle with its verified digest.
    pub bundles: Vec<crate::grants::ResolvedBundle>,
}

/// A sandbox that is completely built, with the agent not yet started.
#[derive(Debug)]
#[must_use = "a prepared sandbox must be released or aborted"]
pub struct Prepared {
    pub(super) running: Running,
    pub(super) facts: PreparedFacts,
    pub(super) executable: String,
    /// The release was already sent: the read end of the agent's
    /// exec-status pipe.
    pub(super) released: Option<OwnedFd>,
}

impl Prepared {
    /// What was resolved.
    pub fn facts(&self) -> &PreparedFacts {
        &self.facts
    }

    /// The init's pid.
    pub fn init_pid(&self) -> i32 {
        self.running.init_pid
    }

    /// How each limit is enforced.
    pub fn mechanisms(&self) -> &Mechanisms {
        &self.running.mechanisms
    }

    /// Lets the agent run; returns once it has been `execve`d.
    pub fn release(self) -> Result<Running, SandboxError> {
        self.release_inner(None)
    }

    /// Lets the agent run `command` instead of the spec's executable,
    /// arguments and environment (checked by the same rules); returns once
    /// it has been `execve`d. A sandbox can so be built before it is known
    /// what will run in it, and the launch then costs only this call. A
    /// refused command tears the sandbox down.
    pub fn release_command(self, command: &AgentCommand) -> Result<Running, SandboxError> {
        if let Err(e) = command.validate() {
            self.abort();
            return Err(e);
        }
        if self.released.is_some() {
            self.abort();
            return Err(SandboxError::Spec {
                detail: "this sandbox was released already".into(),
            });
        }
        self.release_inner(Some(command))
    }

    fn release_inner(self, command: Option<&AgentCommand>) -> Result<Running, SandboxError> {
        let Prepared {
            mut running,
            executable,
            released,
            ..
        } = self;
        let executable = command.map_or(executable, |c| c.executable.clone());
        let fail = |r: &Running, e: SandboxError| {
            r.kill_now();
            e
        };
        let exec_status = match released {
            Some(r) => r,
            None => match send_release(&running.sync, command) {
                Ok(r) => r,
                // The init is gone; it may have said why first.
                Err(e) => {
                    let mut tag = [0u8; 1];
                    let why = match fd::read_full(running.sync.as_fd(), &mut tag) {
                        Ok(1) if tag[0] == TAG_ERROR => read_error_body(&running.sync, &executable),
                        _ => io_err("release", e),
                    };
                    return Err(fail(&running, why));
                }
            },
        };
        trace::mark("release sent");
        match exec_outcome(&exec_status) {
            Ok(true) => {}
            Ok(false) => {
                // The agent did not execve; the init says why.
                let mut tag = [0u8; 1];
                let e = match fd::read_full(running.sync.as_fd(), &mut tag) {
                    Ok(1) if tag[0] == TAG_ERROR => read_error_body(&running.sync, &executable),
                    _ => SandboxError::Io {
                        detail: "the sandbox init ended before the agent ran".into(),
                    },
                };
                return Err(fail(&running, e));
            }
            Err(e) => return Err(fail(&running, io_err("exec status", e))),
        }
        running.started = Instant::now();
        trace::mark("agent runs");
        Ok(running)
    }

    /// Tears the sandbox down without running the agent.
    pub fn abort(self) {
        self.running.kill_now();
    }
}
