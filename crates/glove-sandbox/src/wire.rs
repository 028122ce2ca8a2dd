//! The launcher protocol: how a multi-threaded service (`gloved`) drives a
//! single-threaded launcher process over one inherited socket.
//!
//! Every message is one frame: a type byte, a little-endian `u32` payload
//! length, then the payload (at most [`MAX_FRAME`] bytes). Data frames carry
//! raw bytes; the others carry strict JSON.
//!
//! | type | direction | payload |
//! | --- | --- | --- |
//! | 1 `Spec` | service → launcher | the launch spec (JSON, [`SpecWire`]) — first and once; with `egress_ports`, the sandbox's end of the egress channel comes attached to its bytes (`SCM_RIGHTS`) |
//! | 2 `Stdin` | service → launcher | bytes for the agent's input |
//! | 3 `Resize` | service → launcher | rows `u16` LE, columns `u16` LE |
//! | 4 `Signal` | service → launcher | signal number `i32` LE |
//! | 5 `Stop` | service → launcher | grace period in ms, `u64` LE |
//! | 6 `Release` | service → launcher | empty: let the prepared agent run |
//! | 7 `ReleaseWith` | service → launcher | JSON [`AgentCommand`]: let the prepared agent run this command instead of the spec's |
//! | 9 `Prepared` | launcher → service | JSON [`crate::launch::PreparedFacts`]: the sandbox is built, the agent not yet running |
//! | 10 `Started` | launcher → service | JSON [`Started`] |
//! | 11 `Output` | launcher → service | bytes the agent wrote (already counted) |
//! | 12 `Exited` | launcher → service | JSON [`crate::Outcome`] — last |
//! | 13 `Failed` | launcher → service | JSON [`Failure`] — last |

use crate::identity::ProcessIdentity;
use crate::outcome::{Enforcement, Outcome};
use crate::spec::{
    AgentCommand, Bind, BundleMount, CopyIn, Enforcement as Strictness, Grant, LaunchSpec,
    LeaseFile, SeedFile, Terminal,
};
use glove_types::policy::ResourceLimits;
use serde::{Deserialize, Serialize};

/// Largest payload of one frame.
pub const MAX_FRAME: usize = 8 << 20;
const HEADER: usize = 5;

/// An exposure as it crosses the launcher socket (its descriptor travels
/// beside the frame).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExposureTarget {
    /// See [`crate::spec::ExposureMount::target`].
    pub target: String,
    /// See [`crate::spec::ExposureMount::read_only`].
    pub read_only: bool,
    /// See [`crate::spec::ExposureMount::max_bytes`].
    pub max_bytes: u64,
}

/// A launch spec as it crosses the launcher socket (no descriptors).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpecWire {
    /// See [`LaunchSpec::executable`].
    pub executable: String,
    /// See [`LaunchSpec::arguments`].
    pub arguments: Vec<String>,
    /// See [`LaunchSpec::environment`].
    pub environment: Vec<String>,
    /// See [`LaunchSpec::working_directory`].
    pub working_directory: String,
    /// See [`LaunchSpec::read_only_binds`].
    pub read_only_binds: Vec<Bind>,
    /// See [`LaunchSpec::sockets`] (absent when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sockets: Vec<Bind>,
    /// See [`LaunchSpec::symlinks`].
    pub symlinks: Vec<(String, String)>,
    /// See [`LaunchSpec::files`] (UTF-8 contents only).
    pub files: Vec<(String, String)>,
    /// See [`LaunchSpec::host_files`].
    pub host_files: Vec<Bind>,
    /// See [`LaunchSpec::writable_dirs`].
    pub writable_dirs: Vec<String>,
    /// See [`LaunchSpec::copy_in`].
    pub copy_in: Vec<CopyIn>,
    /// See [`LaunchSpec::seed_dirs`] (absent when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seed_dirs: Vec<String>,
    /// See [`LaunchSpec::seed_files`] (absent when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seed_files: Vec<SeedFile>,
    /// See [`LaunchSpec::leases`] (absent when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leases: Vec<LeaseFile>,
    /// See [`LaunchSpec::executable_pin`] (absent when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executable_pin: Option<String>,
    /// See [`LaunchSpec::cpu_rate_millicpus`] (absent when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_rate_millicpus: Option<u64>,
    /// The targets of [`LaunchSpec::retained`] (absent when none); the
    /// mounts travel with the frame, after the egress channel.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retained_targets: Vec<String>,
    /// The exposures of [`LaunchSpec::exposures`] without their
    /// descriptors (absent when none); the descriptors travel with the
    /// frame, after the retained mounts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exposure_targets: Vec<ExposureTarget>,
    /// The ports of [`LaunchSpec::egress`] (absent: offline); the channel
    /// travels with the frame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_ports: Option<Vec<u16>>,
    /// See [`LaunchSpec::hostname`].
    pub hostname: String,
    /// See [`LaunchSpec::limits`].
    pub limits: ResourceLimits,
    /// See [`LaunchSpec::terminal`].
    pub terminal: Terminal,
    /// See [`LaunchSpec::enforcement`].
    pub enforcement: Strictness,
    /// See [`LaunchSpec::grants`].
    pub grants: Vec<Grant>,
    /// See [`LaunchSpec::bundles`].
    pub bundles: Vec<BundleMount>,
    /// See [`LaunchSpec::protected_paths`].
    pub protected_paths: Vec<String>,
    /// Wait for a `Release` frame after `Prepared` (the service records the
    /// launch binding durably in between).
    pub hold_for_release: bool,
}

impl SpecWire {
    /// The wire form of a spec; `None` when it holds descriptors or a file
    /// that is not UTF-8 (neither can cross as JSON).
    pub fn from_spec(s: &LaunchSpec) -> Option<SpecWire> {
        if !s.extra_fds.is_empty() || !s.retained.is_empty() || !s.exposures.is_empty() {
            return None;
        }
        let files = s
            .files
            .iter()
            .map(|(p, b)| String::from_utf8(b.clone()).ok().map(|t| (p.clone(), t)))
            .collect::<Option<Vec<_>>>()?;
        Some(SpecWire {
            executable: s.executable.clone(),
            arguments: s.arguments.clone(),
            environment: s.environment.clone(),
            working_directory: s.working_directory.clone(),
            read_only_binds: s.read_only_binds.clone(),
            sockets: s.sockets.clone(),
            symlinks: s.symlinks.clone(),
            files,
            host_files: s.host_files.clone(),
            writable_dirs: s.writable_dirs.clone(),
            copy_in: s.copy_in.clone(),
            seed_dirs: s.seed_dirs.clone(),
            seed_files: s.seed_files.clone(),
            leases: s.leases.clone(),
            executable_pin: s.executable_pin.clone(),
            cpu_rate_millicpus: s.cpu_rate_millicpus,
            egress_ports: s.egress.as_ref().map(|e| e.ports.clone()),
            retained_targets: Vec::new(),
            exposure_targets: Vec::new(),
            hostname: s.hostname.clone(),
            limits: s.limits,
            terminal: s.terminal,
            enforcement: s.enforcement,
            grants: s.grants.clone(),
            bundles: s.bundles.clone(),
            protected_paths: s.protected_paths.clone(),
            hold_for_release: false,
        })
    }

    /// How many descriptors must come with this spec's frame: the egress
    /// channel when it names egress ports, then one mount per retained
    /// target.
    pub fn descriptors_expected(&self) -> usize {
        usize::from(self.egress_ports.is_some())
            + self.retained_targets.len()
            + self.exposure_targets.len()
    }

    /// The launch spec (validated later by `launch`), with the descriptors
    /// that came with the frame, in order: the egress channel (required
    /// when the spec names egress ports), then each retained workspace's
    /// mount. Any other count is refused.
    pub fn into_spec_with(self, fds: Vec<std::os::fd::OwnedFd>) -> Result<LaunchSpec, String> {
        if fds.len() != self.descriptors_expected() {
            return Err(format!(
                "{} descriptors came with a spec that needs {}",
                fds.len(),
                self.descriptors_expected()
            ));
        }
        let mut fds = fds.into_iter();
        let egress = match &self.egress_ports {
            Some(ports) => fds.next().map(|channel| crate::spec::EgressSpec {
                channel,
                ports: ports.clone(),
            }),
            None => None,
        };
        let targets = self.retained_targets.clone();
        let exposures = self.exposure_targets.clone();
        let mut spec = self.into_spec();
        spec.egress = egress;
        spec.retained = targets
            .into_iter()
            .zip(fds.by_ref())
            .map(|(target, mount)| crate::spec::RetainedMount { target, mount })
            .collect();
        spec.exposures = exposures
            .into_iter()
            .zip(fds)
            .map(|(t, source)| crate::spec::ExposureMount {
                target: t.target,
                source,
                read_only: t.read_only,
                max_bytes: t.max_bytes,
            })
            .collect();
        Ok(spec)
    }

    /// The launch spec (validated later by `launch`), offline.
    pub fn into_spec(self) -> LaunchSpec {
        LaunchSpec {
            executable: self.executable,
            arguments: self.arguments,
            environment: self.environment,
            working_directory: self.working_directory,
            read_only_binds: self.read_only_binds,
            sockets: self.sockets,
            symlinks: self.symlinks,
            files: self
                .files
                .into_iter()
                .map(|(p, t)| (p, t.into_bytes()))
                .collect(),
            host_files: self.host_files,
            writable_dirs: self.writable_dirs,
            copy_in: self.copy_in,
            seed_dirs: self.seed_dirs,
            seed_files: self.seed_files,
            leases: self.leases,
            executable_pin: self.executable_pin,
            cpu_rate_millicpus: self.cpu_rate_millicpus,
            hostname: self.hostname,
            limits: self.limits,
            terminal: self.terminal,
            extra_fds: Vec::new(),
            enforcement: self.enforcement,
            grants: self.grants,
            bundles: self.bundles,
            protected_paths: self.protected_paths,
            // Not on the wire: the launcher's owner decides.
            network_pool: None,
            retained: Vec::new(),
            exposures: Vec::new(),
            egress: None,
        }
    }
}

/// What the launcher reports once the agent runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Started {
    /// The sandbox init's identity (kill it and the whole sandbox ends).
    pub init: ProcessIdentity,
    /// The launcher's own pid.
    pub launcher_pid: i32,
    /// How each limit is enforced.
    pub enforcement: Enforcement,
}

/// Why a launch failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Failure {
    /// The stable error code.
    pub code: String,
    /// A message for the operator.
    pub message: String,
}

/// A frame from the service to the launcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToLauncher {
    /// The launch spec.
    Spec(Box<SpecWire>),
    /// Agent input.
    Stdin(Vec<u8>),
    /// Terminal size.
    Resize(u16, u16),
    /// A signal for the agent.
    Signal(i32),
    /// Stop with a grace period (ms).
    Stop(u64),
    /// Let a prepared agent run.
    Release,
    /// Let a prepared agent run this command instead of the spec's.
    ReleaseWith(Box<AgentCommand>),
}

/// A frame from the launcher to the service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FromLauncher {
    /// The sandbox is built and held before the agent runs.
    Prepared(Box<crate::launch::PreparedFacts>),
    /// The agent runs.
    Started(Box<Started>),
    /// Agent output.
    Output(Vec<u8>),
    /// The session ended.
    Exited(Box<Outcome>),
    /// The launch failed.
    Failed(Failure),
}

/// A malformed frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireError(pub String);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "launcher frame: {}", self.0)
    }
}

fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.push(kind);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

fn json<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

fn from_json<T: serde::de::DeserializeOwned>(p: &[u8]) -> Result<T, WireError> {
    glove_types::canon::decode(p, MAX_FRAME, glove_types::canon::Form::Strict)
        .map_err(|e| WireError(e.to_string()))
}

impl ToLauncher {
    /// Encodes one frame.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            ToLauncher::Spec(s) => frame(1, &json(s)),
            ToLauncher::Stdin(b) => frame(2, b),
            ToLauncher::Resize(r, c) => {
                let mut p = r.to_le_bytes().to_vec();
                p.extend_from_slice(&c.to_le_bytes());
                frame(3, &p)
            }
            ToLauncher::Signal(s) => frame(4, &s.to_le_bytes()),
            ToLauncher::Stop(ms) => frame(5, &ms.to_le_bytes()),
            ToLauncher::Release => frame(6, &[]),
            ToLauncher::ReleaseWith(c) => frame(7, &json(c)),
        }
    }

    fn decode(kind: u8, p: &[u8]) -> Result<Self, WireError> {
        let fixed = |n: usize| -> Result<&[u8], WireError> {
            if p.len() == n {
                Ok(p)
            } else {
                Err(WireError(format!("frame {kind} must carry {n} bytes")))
            }
        };
        Ok(match kind {
            1 => ToLauncher::Spec(Box::new(from_json(p)?)),
            2 => ToLauncher::Stdin(p.to_vec()),
            3 => {
                let b = fixed(4)?;
                ToLauncher::Resize(
                    u16::from_le_bytes([b[0], b[1]]),
                    u16::from_le_bytes([b[2], b[3]]),
                )
            }
            4 => {
                let b = fixed(4)?;
                ToLauncher::Signal(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            5 => {
                let b = fixed(8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                ToLauncher::Stop(u64::from_le_bytes(a))
            }
            6 => {
                fixed(0)?;
                ToLauncher::Release
            }
            7 => ToLauncher::ReleaseWith(Box::new(from_json(p)?)),
            other => return Err(WireError(format!("unknown frame type {other}"))),
        })
    }
}

impl FromLauncher {
    /// Encodes one frame.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            FromLauncher::Prepared(p) => frame(9, &json(p)),
            FromLauncher::Started(s) => frame(10, &json(s)),
            FromLauncher::Output(b) => frame(11, b),
            FromLauncher::Exited(o) => frame(12, &json(o)),
            FromLauncher::Failed(f) => frame(13, &json(f)),
        }
    }

    fn decode(kind: u8, p: &[u8]) -> Result<Self, WireError> {
        Ok(match kind {
            9 => FromLauncher::Prepared(Box::new(from_json(p)?)),
            10 => FromLauncher::Started(Box::new(from_json(p)?)),
            11 => FromLauncher::Output(p.to_vec()),
            12 => FromLauncher::Exited(Box::new(from_json(p)?)),
            13 => FromLauncher::Failed(from_json(p)?),
            other => return Err(WireError(format!("unknown frame type {other}"))),
        })
    }
}

/// Incremental frame decoder: push bytes as they arrive, take frames out.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
}

impl Decoder {
    /// Adds received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    fn next_raw(&mut self) -> Result<Option<(u8, Vec<u8>)>, WireError> {
        if self.buf.len() < HEADER {
            return Ok(None);
        }
        let len = u32::from_le_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if len > MAX_FRAME {
            return Err(WireError(format!(
                "frame of {len} bytes exceeds {MAX_FRAME}"
            )));
        }
        if self.buf.len() < HEADER + len {
            return Ok(None);
        }
        let kind = self.buf[0];
        let payload = self.buf[HEADER..HEADER + len].to_vec();
        self.buf.drain(..HEADER + len);
        Ok(Some((kind, payload)))
    }

    /// The next complete frame for the launcher, if any.
    pub fn next_to_launcher(&mut self) -> Result<Option<ToLauncher>, WireError> {
        match self.next_raw()? {
            Some((k, p)) => ToLauncher::decode(k, &p).map(Some),
            None => Ok(None),
        }
    }

    /// The next complete frame for the service, if any.
    pub fn next_from_launcher(&mut self) -> Result<Option<FromLauncher>, WireError> {
        match self.next_raw()? {
            Some((k, p)) => FromLauncher::decode(k, &p).map(Some),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_in_pieces() {
        let msgs = vec![
            ToLauncher::Stdin(b"echo hi\n".to_vec()),
            ToLauncher::Resize(40, 120),
            ToLauncher::Signal(15),
            ToLauncher::Stop(2000),
            ToLauncher::Release,
            ToLauncher::ReleaseWith(Box::new(AgentCommand {
                executable: "/bin/echo".into(),
                arguments: vec!["hi".into()],
                environment: vec!["A=b".into()],
            })),
        ];
        let bytes: Vec<u8> = msgs.iter().flat_map(|m| m.encode()).collect();
        let mut d = Decoder::default();
        let mut got = Vec::new();
        for chunk in bytes.chunks(3) {
            d.push(chunk);
            while let Some(m) = d.next_to_launcher().expect("valid") {
                got.push(m);
            }
        }
        assert_eq!(got, msgs);
    }

    #[test]
    fn rejects_bad_frames() {
        let mut d = Decoder::default();
        d.push(&[2, 0xff, 0xff, 0xff, 0xff]);
        assert!(d.next_to_launcher().is_err());
        let mut d = Decoder::default();
        d.push(&frame(3, &[1, 2, 3]));
        assert!(d.next_to_launcher().is_err());
        let mut d = Decoder::default();
        d.push(&frame(99, &[]));
        assert!(d.next_from_launcher().is_err());
        let mut d = Decoder::default();
        d.push(&frame(1, br#"{"executable":"/x","executable":"/y"}"#));
        assert!(d.next_to_launcher().is_err());
    }

    proptest! {
        #[test]
        fn decoder_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let mut d = Decoder::default();
            d.push(&bytes);
            for _ in 0..64 {
                match d.next_to_launcher() { Ok(Some(_)) => {}, _ => break }
            }
            let mut d = Decoder::default();
            d.push(&bytes);
            for _ in 0..64 {
                match d.next_from_launcher() { Ok(Some(_)) => {}, _ => break }
            }
        }
    }
}
