//! One assembly for a session, whichever door it came through: `glove
//! exec` and `glove run` (flags and an MCP profile) or gloved's managed
//! start (a validated policy and an admitted plan).
//!
//! The steps are always these, in this order:
//!
//! 1. **spec** — the door makes the launch spec (a [`SpecParts`]);
//! 2. **attachments** — [`assemble`] prepares each part the door asked for
//!    ([`Inputs`]): it reads what the part needs (brokered credentials,
//!    trust roots, the MCP profile), makes its channel or sockets, and
//!    changes the spec (environment, egress ports, trust files, sockets,
//!    the relay, the harness configurations);
//! 3. **build** — the door builds the sandbox ([`Door::build`]), the agent
//!    held when a part must start first; a door that records durable
//!    transitions records the launch binding here;
//! 4. **start** — the parts start (threads, which a build in this process
//!    must not see): the egress proxy on its channel, the MCP mediator with
//!    its upstreams ready and their tools pinned;
//! 5. **release** — the door lets the agent run ([`Door::release`]);
//! 6. **finish** — [`Started::finish`] stops the parts and returns their
//!    [`Reports`], which the door records: an outcome line (`glove exec`,
//!    `glove run`) or a receipt (gloved).
//!
//! A failure at any step stops what was started; its reports come back
//! with the error ([`Failed`]) so the door records them too. An
//! attachment's error ([`AttachError`]) has one stable code whichever door
//! hit it; its detail may name host paths, so a door that answers a remote
//! controller shows only its summary ([`AttachError::public`]).
//!
//! The parts are a closed set: [`egress`], [`mcp`] and the credential
//! [`lease`]s. A new kind of part (retained stages, exposures, forwarding)
//! is a new module here and a new member of [`Inputs`], never a step of
//! its own in a door.

pub mod egress;
pub mod lease;
pub mod local;
pub mod mcp;
pub mod retained;

use glove_sandbox::spec::{Bind, EgressSpec, LaunchSpec, RetainedMount, SeedFile};
use glove_sandbox::wire::SpecWire;
use glove_types::ids::SessionId;
use glove_types::{ErrorCode, Rejection};
use std::os::fd::OwnedFd;

/// A fault of one part, with one code on both doors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttachError {
    code: ErrorCode,
    summary: String,
    detail: String,
}

impl AttachError {
    /// `summary` names no host path (a remote controller may see it);
    /// `detail` may.
    pub(crate) fn new(code: ErrorCode, summary: &str, detail: impl std::fmt::Display) -> Self {
        AttachError {
            code,
            summary: summary.to_owned(),
            detail: format!("{summary}: {detail}"),
        }
    }

    /// The stable code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// For the person at this machine: the code and everything known.
    pub fn local(&self) -> Rejection {
        Rejection::new(self.code, self.detail.clone())
    }

    /// For a remote controller: the code and a message without host paths
    /// (the service's log has the detail).
    pub fn public(&self) -> Rejection {
        Rejection::new(self.code, self.summary.clone())
    }

    /// The detail (for a log).
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

/// What a part changes in a launch spec, on either door's spec type.
pub trait SpecParts {
    /// Sets `NAME=value`, replacing an entry of the same name (a part's
    /// variable wins over one the spec had).
    fn set_env(&mut self, entry: String);
    /// The sandbox's end of the egress channel and the ports it listens on.
    fn set_egress(&mut self, ports: Vec<u16>, channel: OwnedFd);
    /// A file the sandbox gets at `path`, replacing one at the same path.
    fn put_file(&mut self, path: String, text: String);
    /// A host socket bound into the sandbox.
    fn bind_socket(&mut self, bind: Bind);
    /// A host file bound read-only into the sandbox.
    fn bind_read_only(&mut self, bind: Bind);
    /// A directory of the agent's home made before the agent runs.
    fn seed_dir(&mut self, dir: String);
    /// A file of the agent's home, replacing one at the same path.
    fn seed_file(&mut self, file: SeedFile);
    /// A retained workspace's mount, attached by the sandbox at its target.
    fn add_retained(&mut self, mount: RetainedMount);
}

fn set_env_in(env: &mut Vec<String>, entry: String) {
    let name = entry.split('=').next().unwrap_or_default().to_owned();
    env.retain(|x| x.split('=').next() != Some(name.as_str()));
    env.push(entry);
}

impl SpecParts for LaunchSpec {
    fn set_env(&mut self, entry: String) {
        set_env_in(&mut self.environment, entry);
    }
    fn set_egress(&mut self, ports: Vec<u16>, channel: OwnedFd) {
        self.egress = Some(EgressSpec { channel, ports });
    }
    fn put_file(&mut self, path: String, text: String) {
        self.files.retain(|(p, _)| p != &path);
        self.files.push((path, text.into_bytes()));
    }
    fn bind_socket(&mut self, bind: Bind) {
        self.sockets.push(bind);
    }
    fn bind_read_only(&mut self, bind: Bind) {
        self.read_only_binds.push(bind);
    }
    fn seed_dir(&mut self, dir: String) {
        if !self.seed_dirs.contains(&dir) {
            self.seed_dirs.push(dir);
        }
    }
    fn seed_file(&mut self, file: SeedFile) {
        self.seed_files.retain(|f| f.path != file.path);
        self.seed_files.push(file);
    }
    fn add_retained(&mut self, mount: RetainedMount) {
        // The image replaces a scratch directory at the same place.
        self.writable_dirs.retain(|w| *w != mount.target);
        self.retained.push(mount);
    }
}

/// A spec sent to a launcher process: the wire form, and the descriptors
/// that travel beside it (the egress channel's sandbox end, the retained
/// workspaces' mounts).
pub struct WireSpec {
    /// The spec's wire form.
    pub wire: SpecWire,
    /// The sandbox's end of the egress channel, if any.
    pub channel: Option<OwnedFd>,
    /// The retained workspaces' mounts, in the order of
    /// `wire.retained_targets`.
    pub retained: Vec<OwnedFd>,
    /// The exposed projects' descriptors, in the order of
    /// `wire.exposure_targets`.
    pub exposures: Vec<OwnedFd>,
}

impl SpecParts for WireSpec {
    fn set_env(&mut self, entry: String) {
        set_env_in(&mut self.wire.environment, entry);
    }
    fn set_egress(&mut self, ports: Vec<u16>, channel: OwnedFd) {
        self.wire.egress_ports = Some(ports);
        self.channel = Some(channel);
    }
    fn put_file(&mut self, path: String, text: String) {
        self.wire.files.retain(|(p, _)| p != &path);
        self.wire.files.push((path, text));
    }
    fn bind_socket(&mut self, bind: Bind) {
        self.wire.sockets.push(bind);
    }
    fn bind_read_only(&mut self, bind: Bind) {
        self.wire.read_only_binds.push(bind);
    }
    fn seed_dir(&mut self, dir: String) {
        if !self.wire.seed_dirs.contains(&dir) {
            self.wire.seed_dirs.push(dir);
        }
    }
    fn seed_file(&mut self, file: SeedFile) {
        self.wire.seed_files.retain(|f| f.path != file.path);
        self.wire.seed_files.push(file);
    }
    fn add_retained(&mut self, mount: RetainedMount) {
        self.wire.writable_dirs.retain(|w| *w != mount.target);
        self.wire.retained_targets.push(mount.target);
        self.retained.push(mount.mount);
    }
}

/// The parts a door asks for.
pub struct Inputs {
    /// The session's id: it names the journals.
    pub session_id: SessionId,
    /// Audited egress; `None` is offline.
    pub egress: Option<egress::EgressInput>,
    /// MCP mediation; `None` is no MCP server.
    pub mcp: Option<mcp::McpInput>,
    /// Credential leases, acquired and in the spec already (they are
    /// locked until the session's end is recorded).
    pub leases: Vec<lease::LeaseHold>,
    /// Retained workspaces.
    pub retained: Vec<retained::RetainedInput>,
}

/// How a door builds and releases a sandbox.
pub trait Door {
    /// The spec the door builds from.
    type Spec: SpecParts;
    /// A built sandbox (held, or already running when nothing had to start
    /// first).
    type Built;
    /// A released sandbox.
    type Running;
    /// The door's own fault.
    type Error;
    /// Builds the sandbox; `hold` asks that the agent wait for
    /// [`Door::release`].
    fn build(&mut self, spec: Self::Spec, hold: bool) -> Result<Self::Built, Self::Error>;
    /// Ends a built sandbox that will not be released.
    fn abort(&mut self, built: Self::Built);
    /// Lets the agent run.
    fn release(&mut self, built: Self::Built) -> Result<Self::Running, Self::Error>;
}

/// Why [`assemble`] stopped: a part's fault or the door's.
#[derive(Debug)]
pub enum Fault<E> {
    /// A part could not be prepared or started.
    Attachment(AttachError),
    /// The door could not build or release.
    Door(E),
}

/// [`assemble`]'s failure: what went wrong, and the reports of the parts
/// (those that started report what they saw; leases are read back).
pub struct Failed<E> {
    /// The fault.
    pub fault: Fault<E>,
    /// What the parts report.
    pub reports: Reports,
}

/// What launching gives: the released sandbox and its started parts, or
/// the failure with the parts' reports.
pub type Launched<D> = Result<(<D as Door>::Running, Started), Box<Failed<<D as Door>::Error>>>;

/// The parts of a released session.
pub struct Started {
    egress: Option<egress::Running>,
    mcp: Option<mcp::Running>,
    leases: Vec<lease::LeaseHold>,
    retained: Vec<retained::Prepared>,
}

/// What the parts report at the end.
#[derive(Debug, Default)]
pub struct Reports {
    /// The proxy's summary (or why it has none).
    pub egress: Option<egress::EgressReport>,
    /// The mediator's summary (or why it has none).
    pub mcp: Option<mcp::McpReport>,
    /// Each lease's version after the session (or why it was not read
    /// back), in the order of [`Inputs::leases`]; the locks are held until
    /// this is dropped.
    pub leases: Vec<lease::LeaseEnd>,
    /// Each retained workspace as frozen (or why it could not be), in the
    /// order of [`Inputs::retained`]; empty when the agent never ran (the
    /// stages were discarded).
    pub retained: Vec<retained::RetainedReport>,
}

/// The prepared parts of a session whose sandbox is not built yet.
pub struct Attachments {
    session_id: SessionId,
    egress: Option<egress::Prepared>,
    mcp: Option<mcp::Prepared>,
    leases: Vec<lease::LeaseHold>,
    retained: Vec<retained::Prepared>,
}

impl Attachments {
    /// Step 2: prepares each part the door asked for on `spec` (see the
    /// module docs). On a fault nothing is left behind but the leases,
    /// handed back unread with the error.
    pub fn prepare(
        inputs: Inputs,
        spec: &mut impl SpecParts,
    ) -> Result<Attachments, Box<(AttachError, Reports)>> {
        let Inputs {
            session_id,
            egress,
            mcp,
            leases,
            retained: retained_inputs,
        } = inputs;
        let fail = |e, leases| Box::new((e, lease::finish_all(leases, false)));
        mark("parts: prepare");
        let egress = match egress.map(|e| egress::Prepared::prepare(e, spec)) {
            Some(Err(e)) => return Err(fail(e, leases)),
            Some(Ok(p)) => Some(p),
            None => None,
        };
        mark("egress prepared");
        let mcp = match mcp.map(|m| mcp::Prepared::prepare(m, spec)) {
            Some(Err(e)) => return Err(fail(e, leases)),
            Some(Ok(p)) => Some(p),
            None => None,
        };
        mark("mcp prepared");
        let mut retained = Vec::new();
        for r in retained_inputs {
            match retained::Prepared::prepare(r, &session_id, spec) {
                Ok(p) => retained.push(p),
                Err(e) => {
                    retained.into_iter().for_each(retained::Prepared::discard);
                    return Err(fail(e, leases));
                }
            }
        }
        mark("workspace staged");
        Ok(Attachments {
            session_id,
            egress,
            mcp,
            leases,
            retained,
        })
    }

    /// Whether the agent must be held at the build until the parts start
    /// (an MCP mediator must be ready before the agent runs; the proxy's
    /// connections wait on its channel).
    pub fn hold(&self) -> bool {
        self.mcp.is_some()
    }

    /// Steps 3 to 5: has `door` build the sandbox from `spec`, starts the
    /// parts, has `door` release it. A failure stops what was started and
    /// hands back the parts' reports (the leases unread).
    pub fn launch<D: Door>(self, door: &mut D, spec: D::Spec) -> Launched<D> {
        let hold = self.hold();
        let Attachments {
            session_id,
            egress,
            mcp,
            leases,
            retained,
        } = self;
        let fail = |fault, reports| Box::new(Failed { fault, reports });
        let discard =
            |r: Vec<retained::Prepared>| r.into_iter().for_each(retained::Prepared::discard);
        let built = match door.build(spec, hold) {
            Ok(b) => b,
            Err(e) => {
                discard(retained);
                return Err(fail(Fault::Door(e), lease::finish_all(leases, false)));
            }
        };
        mark("sandbox built");
        // Started once the sandbox is built (a build in this process needs
        // it single-threaded; the agent's connections wait on the channel).
        let egress = match egress.map(|e| e.start(&session_id)) {
            Some(Err(e)) => {
                door.abort(built);
                discard(retained);
                return Err(fail(Fault::Attachment(e), lease::finish_all(leases, false)));
            }
            Some(Ok(r)) => Some(r),
            None => None,
        };
        mark("egress started");
        let mcp = match mcp.map(|m| m.start(&session_id)) {
            Some(Err(e)) => {
                door.abort(built);
                discard(retained);
                let mut reports = lease::finish_all(leases, false);
                reports.egress = egress.map(egress::Running::finish);
                return Err(fail(Fault::Attachment(e), reports));
            }
            Some(Ok(r)) => Some(r),
            None => None,
        };
        mark("mcp started");
        let started = Started {
            egress,
            mcp,
            leases,
            retained,
        };
        match door.release(built) {
            Ok(running) => Ok((running, started)),
            Err(e) => Err(fail(Fault::Door(e), started.abandon())),
        }
    }

    /// The session will not be built: drops the parts (the MCP runtime
    /// directory goes); the leases are handed back unread.
    pub fn abandon(self) -> Reports {
        self.retained
            .into_iter()
            .for_each(retained::Prepared::discard);
        lease::finish_all(self.leases, false)
    }
}

/// A phase mark for `GLOVE_LAUNCH_TRACE` (a no-op when it is unset; see
/// `docs/performance.md`).
fn mark(label: &str) {
    glove_sandbox::launch::trace_mark(label);
}

/// Runs steps 2 to 5 at once (see [`Attachments::prepare`] and
/// [`Attachments::launch`]).
pub fn assemble<D: Door>(door: &mut D, inputs: Inputs, mut spec: D::Spec) -> Launched<D> {
    let attachments = Attachments::prepare(inputs, &mut spec).map_err(|f| {
        let (e, reports) = *f;
        Box::new(Failed {
            fault: Fault::Attachment(e),
            reports,
        })
    })?;
    attachments.launch(door, spec)
}

impl Started {
    /// The sandbox is gone: stops the parts; their reports, each lease
    /// read back.
    pub fn finish(self) -> Reports {
        self.stop(true)
    }

    /// The session failed after its release (its agent never got to work):
    /// stops the parts; their reports, the leases kept as they were.
    pub fn abandon(self) -> Reports {
        self.stop(false)
    }

    fn stop(self, read_back: bool) -> Reports {
        let Started {
            egress,
            mcp,
            leases,
            retained,
        } = self;
        let mut reports = lease::finish_all(leases, read_back);
        reports.egress = egress.map(egress::Running::finish);
        reports.mcp = mcp.map(mcp::Running::finish);
        if read_back {
            reports.retained = retained
                .into_iter()
                .map(retained::Prepared::finish)
                .collect();
        } else {
            retained.into_iter().for_each(retained::Prepared::discard);
        }
        reports
    }
}

#[cfg(test)]
mod tests;
