//! The managed door of the assembly ([`crate::assembly::Door`]): a
//! launcher process builds and releases the sandbox, and each step's
//! durable transition is recorded on the way — the launch binding
//! (`starting`) before the agent may run, its process identity
//! (`running`) once it does.

use super::binding::launch_binding;
use super::identity::lifecycle_identity;
use super::launcher::{drain_until_end, expect_frame, LauncherLink};
use super::receipt::ReceiptFacts;
use super::{life, lock, Runtime};
use crate::assembly::{Door, WireSpec};
use crate::error::ControlError;
use crate::ports::Transitions;
use glove_lifecycle::{AnySession, Preparing, Running, Session, Starting, VerifiedStart};
use glove_sandbox::wire::{FromLauncher, Started, ToLauncher};
use glove_types::codes::control::CONTROL_SHUTTING_DOWN;
use glove_types::ids::SessionId;
use glove_types::ErrorCode;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// Where a managed start stands.
pub(super) enum Stage<'id> {
    Preparing(Session<'id, Preparing>),
    Starting(Session<'id, Starting>),
    Running(Session<'id, Running>),
    /// Consumed by a transition that did not complete (an internal fault).
    Gone,
}

impl Stage<'_> {
    /// The session as the dynamic world sees it.
    pub(super) fn into_any(self) -> Option<AnySession> {
        match self {
            Stage::Preparing(s) => Some(s.into()),
            Stage::Starting(s) => Some(s.into()),
            Stage::Running(s) => Some(s.into()),
            Stage::Gone => None,
        }
    }
}

/// Why the managed door stopped.
pub(super) enum DoorFault {
    /// The session fails with this code and message (and a receipt).
    Session(ErrorCode, String),
    /// An internal fault: returned as it is.
    Control(ControlError),
}

impl From<ControlError> for DoorFault {
    fn from(e: ControlError) -> Self {
        DoorFault::Control(e)
    }
}

/// A released managed sandbox.
pub(super) struct Released {
    pub(super) link: Box<dyn LauncherLink>,
    pub(super) info: Box<Started>,
    /// When the release was sent: a refinement evaluation's wall latency
    /// starts here.
    pub(super) at: std::time::Instant,
}

/// The managed door.
pub(super) struct ManagedDoor<'r, 'id> {
    pub(super) rt: &'r Arc<Runtime>,
    pub(super) id: &'r SessionId,
    pub(super) stage: Stage<'id>,
    pub(super) verified: Option<VerifiedStart>,
    pub(super) facts: ReceiptFacts,
}

impl<'id> ManagedDoor<'_, 'id> {
    /// Sends the spec, checks the launcher's facts against it, records
    /// `starting` with the launch binding and where the launcher is.
    fn build_inner(
        &mut self,
        link: &mut Box<dyn LauncherLink>,
        spec: WireSpec,
    ) -> Result<(), DoorFault> {
        let WireSpec {
            wire,
            channel,
            retained,
            exposures,
        } = spec;
        let frame = ToLauncher::Spec(Box::new(wire.clone()));
        let fds: Vec<OwnedFd> = channel
            .into_iter()
            .chain(retained)
            .chain(exposures)
            .collect();
        let sent = if fds.is_empty() {
            link.send(&frame)
        } else {
            link.send_with_fds(&frame, fds)
        };
        let reply = sent.and_then(|()| link.recv());
        let prepared = expect_frame(reply, |f| match f {
            FromLauncher::Prepared(p) => Ok(p),
            other => Err(other),
        })
        .map_err(|(code, m)| DoorFault::Session(code, m))?;
        let binding = launch_binding(&wire, &prepared)
            .map_err(|r| DoorFault::Session(r.code(), r.message().into()))?;
        self.facts.binding = Some(binding.digest());
        // The binding is durable before the agent may run.
        let Stage::Preparing(preparing) = self.take_stage() else {
            return Err(DoorFault::Control(ControlError::Internal("session stage")));
        };
        let verified = self
            .verified
            .take()
            .ok_or(ControlError::Internal("start authorization"))?;
        let logged = {
            let mut store = lock(&self.rt.store)?;
            preparing.log_start(binding, verified, &mut Transitions::new(&mut store))
        };
        let p = match logged {
            Ok(p) => p,
            Err(e) => {
                self.stage = Stage::Preparing(preparing);
                return Err(DoorFault::Session(e.code(), e.code().meaning().into()));
            }
        };
        self.stage = Stage::Starting(preparing.start(p).map_err(|e| life(e.error()))?);
        // Before the agent may run: where its launcher is, so recovery can
        // end a sandbox whose running record never became durable (the
        // sandbox init dies with its launcher).
        self.rt
            .record_launcher(self.id, link.pid())
            .map_err(|r| DoorFault::Session(r.code(), r.message().into()))?;
        self.rt.test_pause("after_start_record");
        // Shutdown began while the sandbox was prepared: it is not released
        // (shutdown waits for this start to finish, so the session cannot
        // slip past its stop).
        if self.rt.is_closing() {
            return Err(DoorFault::Session(
                CONTROL_SHUTTING_DOWN,
                "the service shut down before the session was released".into(),
            ));
        }
        Ok(())
    }

    /// Takes the stage out for a transition, leaving [`Stage::Gone`].
    fn take_stage(&mut self) -> Stage<'id> {
        std::mem::replace(&mut self.stage, Stage::Gone)
    }
}

impl<'id> Door for ManagedDoor<'_, 'id> {
    type Spec = WireSpec;
    type Built = Box<dyn LauncherLink>;
    type Running = Released;
    type Error = DoorFault;

    /// The launcher always holds the agent (`hold_for_release` is set in
    /// every managed spec).
    fn build(&mut self, spec: WireSpec, _hold: bool) -> Result<Self::Built, DoorFault> {
        let mut link = self
            .rt
            .launcher
            .spawn()
            .map_err(|r| DoorFault::Session(r.code(), r.message().into()))?;
        match self.build_inner(&mut link, spec) {
            Ok(()) => Ok(link),
            Err(e) => {
                link.close();
                Err(e)
            }
        }
    }

    fn abort(&mut self, link: Self::Built) {
        link.close();
    }

    /// Releases the agent, reads its process identity and records
    /// `running`.
    fn release(&mut self, mut link: Self::Built) -> Result<Released, DoorFault> {
        let at = std::time::Instant::now();
        let started = link.send(&ToLauncher::Release).and_then(|()| link.recv());
        let info = match expect_frame(started, |f| match f {
            FromLauncher::Started(s) => Ok(s),
            other => Err(other),
        }) {
            Ok(s) => s,
            Err((code, message)) => {
                link.close();
                return Err(DoorFault::Session(code, message));
            }
        };
        let identity = match lifecycle_identity(&info.init) {
            Ok(i) => i,
            Err(r) => {
                let _ = link.send(&ToLauncher::Stop(0));
                link.kill_and_wait();
                return Err(DoorFault::Session(r.code(), r.message().into()));
            }
        };
        self.rt.test_pause("after_release");
        let Stage::Starting(starting) = self.take_stage() else {
            link.close();
            return Err(DoorFault::Control(ControlError::Internal("session stage")));
        };
        let logged = match lock(&self.rt.store) {
            Ok(mut store) => starting.log_run(identity, &mut Transitions::new(&mut store)),
            Err(e) => {
                self.stage = Stage::Starting(starting);
                link.close();
                return Err(DoorFault::Control(e));
            }
        };
        match logged {
            Ok(p) => {
                self.stage = Stage::Running(starting.run(p).map_err(|e| life(e.error()))?);
                Ok(Released { link, info, at })
            }
            Err(e) => {
                // The agent runs but its identity is not durable: end it now
                // rather than leave it to its limits.
                self.stage = Stage::Starting(starting);
                let _ = link.send(&ToLauncher::Stop(0));
                let _ = drain_until_end(link.as_mut());
                link.close();
                Err(DoorFault::Session(e.code(), e.code().meaning().into()))
            }
        }
    }
}
