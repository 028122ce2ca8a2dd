//! The local door ([`super::Door`]) of `glove exec` and `glove run`: the
//! sandbox is built and released by this process.

use super::Door;
use glove_sandbox::spec::LaunchSpec;
use glove_sandbox::SandboxError;
use glove_types::codes::sandbox::SANDBOX_IO_FAILED;
use glove_types::ids::SessionId;
use glove_types::Rejection;

/// Builds the sandbox in this process. Without a part to start first it
/// launches at once (the agent runs as soon as it is built, the faster
/// path); otherwise the agent is held until [`Door::release`].
pub struct LocalDoor;

/// A sandbox built by [`LocalDoor`].
pub enum Built {
    /// Launched at once.
    Running(glove_sandbox::Running),
    /// Held for its release.
    Held(glove_sandbox::Prepared),
}

impl Door for LocalDoor {
    type Spec = LaunchSpec;
    type Built = Built;
    type Running = glove_sandbox::Running;
    type Error = SandboxError;

    fn build(&mut self, spec: LaunchSpec, hold: bool) -> Result<Built, SandboxError> {
        if hold {
            glove_sandbox::prepare(spec).map(Built::Held)
        } else {
            glove_sandbox::launch(spec).map(Built::Running)
        }
    }

    fn abort(&mut self, built: Built) {
        match built {
            Built::Running(r) => {
                let _ = r.signal(9); // SIGKILL
            }
            Built::Held(p) => p.abort(),
        }
    }

    fn release(&mut self, built: Built) -> Result<glove_sandbox::Running, SandboxError> {
        match built {
            Built::Running(r) => Ok(r),
            Built::Held(p) => p.release(),
        }
    }
}

/// A new session id for a local command: `<prefix>-` and 16 random hex
/// digits (`exec-…`, `run-…`); it names the session's journals.
pub fn session_id(prefix: &str) -> Result<SessionId, Rejection> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b)
        .map_err(|e| Rejection::new(SANDBOX_IO_FAILED, format!("random: {e}")))?;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    SessionId::new(format!("{prefix}-{hex}"))
}
