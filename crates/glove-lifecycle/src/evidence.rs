//! Typed evidence that stages require: plan digests, launch binding, process
//! identity, terminal receipt references and stop reasons.
//!
//! Each value is validated when built, so a stage holding one holds a valid
//! one. None of these is a proof by itself; proofs are [`crate::Durable`].

use crate::error::LifecycleError;
use crate::ports::{ObservedProcess, PortError, ReceiptLog};
use crate::proof::Subject;
use glove_types::canon;
use glove_types::{Blake3Digest, Sha256Digest};

/// The kind of terminal receipt a subject ends with, as the receipt log
/// reports it. A session's plan fixes which one it must be (see
/// [`PlanDigests::terminal_kind`]): a refinement evaluation ends only with
/// a refinement receipt, any other session only with a resource receipt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TerminalKind {
    /// `resource_v1`.
    Resource,
    /// `refinement_v1`.
    Refinement,
    /// `apply_v1`.
    Apply,
}

impl TerminalKind {
    /// The receipt kind's wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            TerminalKind::Resource => "resource_v1",
            TerminalKind::Refinement => "refinement_v1",
            TerminalKind::Apply => "apply_v1",
        }
    }
}

/// The two digests a session is created with and bound to for life, and
/// the kind of terminal receipt its plan requires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PlanDigests {
    plan_content_digest: Sha256Digest,
    controller_plan_digest: Blake3Digest,
    terminal: TerminalKind,
}

impl PlanDigests {
    /// Glove's SHA-256 of the plan's canonical bytes and the controller's
    /// BLAKE3 correlation digest, for a plan that ends with a resource
    /// receipt.
    pub fn new(plan_content_digest: Sha256Digest, controller_plan_digest: Blake3Digest) -> Self {
        Self {
            plan_content_digest,
            controller_plan_digest,
            terminal: TerminalKind::Resource,
        }
    }

    /// The same digests for a refinement evaluation plan, which must end
    /// with a refinement receipt.
    pub fn refinement(self) -> Self {
        Self {
            terminal: TerminalKind::Refinement,
            ..self
        }
    }

    /// The kind of terminal receipt the plan requires: [`TerminalKind::Resource`]
    /// or [`TerminalKind::Refinement`].
    pub fn terminal_kind(&self) -> TerminalKind {
        self.terminal
    }

    /// SHA-256 of the exact canonical plan bytes.
    pub fn plan_content_digest(&self) -> Sha256Digest {
        self.plan_content_digest
    }

    /// The controller's BLAKE3 correlation digest.
    pub fn controller_plan_digest(&self) -> Blake3Digest {
        self.controller_plan_digest
    }
}

/// Digest domain of a launch binding: `SHA-256(domain || 0x00 || spec)`,
/// where `spec` is the canonical JSON of everything the launch commits to.
pub const LAUNCH_BINDING_DOMAIN: &str = "glove.lifecycle.launch-binding.v1";

/// Upper bound on the launch specification handed to
/// [`LaunchBinding::of_launch_spec`].
pub const MAX_LAUNCH_SPEC_BYTES: usize = 1 << 20;

/// A commitment to everything a launch uses: resolved executable and
/// arguments, environment, mounts and projections, cgroup, the six limits.
/// `Session<Starting>` cannot exist without one.
///
/// Made only by [`LaunchBinding::of_launch_spec`] from the canonical launch
/// document itself, which this crate digests: there is no way to make one
/// from a digest (replay rebuilds recorded ones inside the crate).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaunchBinding(Sha256Digest);

impl LaunchBinding {
    /// Binds the canonical JSON launch specification `spec`. Non-canonical
    /// input is refused (`lifecycle_launch_spec_invalid`) so that two
    /// encodings of one launch cannot yield two bindings.
    pub fn of_launch_spec(spec: &[u8]) -> Result<Self, LifecycleError> {
        canon::parse_canonical(spec, MAX_LAUNCH_SPEC_BYTES)
            .map_err(|detail| LifecycleError::LaunchSpecInvalid { detail })?;
        Ok(Self(Sha256Digest::of_domain(LAUNCH_BINDING_DOMAIN, spec)))
    }

    /// A recorded binding, read back from a record by replay.
    pub(crate) fn from_digest(digest: Sha256Digest) -> Self {
        Self(digest)
    }

    /// The binding digest.
    pub fn digest(&self) -> Sha256Digest {
        self.0
    }
}

/// Largest Linux pid (`PID_MAX_LIMIT` on 64-bit kernels).
pub const MAX_PID: u32 = 1 << 22;

/// Who the running agent is, in a form that survives a service restart:
/// boot id, pid, process start time and cgroup id. A pid alone could be
/// reused; all four together name one process of one boot.
///
/// Made only from an [`ObservedProcess`] ([`ProcessIdentity::observed`]),
/// and by replay from a record the lifecycle wrote; never from raw values.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProcessIdentity {
    boot_id: String,
    pid: u32,
    start_time_ticks: u64,
    cgroup_id: u64,
}

impl ProcessIdentity {
    /// The identity of an observed process, validated as in
    /// [`ProcessIdentity::new`] (`lifecycle_process_identity_invalid`).
    pub fn observed<O: ObservedProcess + ?Sized>(process: &O) -> Result<Self, LifecycleError> {
        Self::new(
            process.boot_id(),
            process.pid(),
            process.start_time_ticks(),
            process.cgroup_id(),
        )
    }

    /// Validates and builds an identity.
    ///
    /// * `boot_id`: the kernel's boot id, 36 lowercase characters
    ///   `8-4-4-4-12` hex groups (as in `/proc/sys/kernel/random/boot_id`);
    /// * `pid`: 1 to [`MAX_PID`];
    /// * `start_time_ticks`: the process start time in clock ticks after
    ///   boot (`/proc/<pid>/stat` field 22), not zero;
    /// * `cgroup_id`: the cgroup directory's inode number, not zero.
    pub(crate) fn new(
        boot_id: &str,
        pid: u32,
        start_time_ticks: u64,
        cgroup_id: u64,
    ) -> Result<Self, LifecycleError> {
        let bad = |field| LifecycleError::ProcessIdentityInvalid { field };
        if !is_boot_id(boot_id) {
            return Err(bad("boot_id"));
        }
        if pid == 0 || pid > MAX_PID {
            return Err(bad("pid"));
        }
        if start_time_ticks == 0 {
            return Err(bad("start_time_ticks"));
        }
        if cgroup_id == 0 {
            return Err(bad("cgroup_id"));
        }
        Ok(Self {
            boot_id: boot_id.to_owned(),
            pid,
            start_time_ticks,
            cgroup_id,
        })
    }

    /// The boot id.
    pub fn boot_id(&self) -> &str {
        &self.boot_id
    }

    /// The pid in the service's pid namespace.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Start time in clock ticks after boot.
    pub fn start_time_ticks(&self) -> u64 {
        self.start_time_ticks
    }

    /// The cgroup id.
    pub fn cgroup_id(&self) -> u64 {
        self.cgroup_id
    }
}

fn is_boot_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, &c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(&c),
        })
}

/// A reference to a durably appended terminal receipt: its sequence number in
/// the receipt journal and the digest of its envelope.
///
/// Only the receipt log hands one out ([`TerminalReceiptRef::durable`],
/// after the receipt is appended); replay rebuilds recorded ones inside the
/// crate. There is no constructor from raw values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TerminalReceiptRef {
    receipt_seq: u64,
    receipt_digest: Sha256Digest,
}

impl TerminalReceiptRef {
    /// A reference read back from a record, or minted from a receipt log's
    /// answer.
    pub(crate) fn new(receipt_seq: u64, receipt_digest: Sha256Digest) -> Self {
        Self {
            receipt_seq,
            receipt_digest,
        }
    }

    /// The durably appended terminal receipt of `subject`, as `receipts`
    /// reports it: append the receipt first, then ask for its reference.
    /// A port failure passes through as `LifecycleError::Port`.
    pub fn durable<R: ReceiptLog + ?Sized>(
        receipts: &R,
        subject: Subject<'_>,
    ) -> Result<Option<Self>, LifecycleError> {
        Ok(receipts
            .terminal_receipt(subject)
            .map_err(PortError::into_lifecycle)?
            .map(|e| Self::new(e.receipt_seq(), e.receipt_digest())))
    }

    /// Sequence number in the receipt journal.
    pub fn receipt_seq(&self) -> u64 {
        self.receipt_seq
    }

    /// Digest of the receipt envelope.
    pub fn receipt_digest(&self) -> Sha256Digest {
        self.receipt_digest
    }
}

/// Why a running session is stopping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StopReason {
    /// The controller or operator asked for a stop.
    Requested,
    /// The agent process ended by itself.
    AgentExited,
    /// A resource limit (wall time, output, ...) was reached.
    LimitReached,
    /// The service is shutting down.
    ServiceShutdown,
}

impl StopReason {
    /// Every reason.
    pub const ALL: [StopReason; 4] = [
        StopReason::Requested,
        StopReason::AgentExited,
        StopReason::LimitReached,
        StopReason::ServiceShutdown,
    ];

    /// The snake_case name stored in records.
    pub const fn as_str(self) -> &'static str {
        match self {
            StopReason::Requested => "requested",
            StopReason::AgentExited => "agent_exited",
            StopReason::LimitReached => "limit_reached",
            StopReason::ServiceShutdown => "service_shutdown",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glove_types::codes::lifecycle as c;

    #[test]
    fn process_identity_rules() {
        let boot = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
        assert!(ProcessIdentity::new(boot, 42, 7, 9).is_ok());
        for (b, pid, st, cg) in [
            ("", 42, 7, 9),
            ("0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0", 42, 7, 9),
            ("0f1e2d3c04b5a-6978-8796-a5b4c3d2e1f0", 42, 7, 9),
            (boot, 0, 7, 9),
            (boot, MAX_PID + 1, 7, 9),
            (boot, 42, 0, 9),
            (boot, 42, 7, 0),
        ] {
            let e = ProcessIdentity::new(b, pid, st, cg).unwrap_err();
            assert_eq!(e.code(), c::LIFECYCLE_PROCESS_IDENTITY_INVALID);
        }
    }

    #[test]
    fn launch_binding_needs_canonical_spec() {
        let a = LaunchBinding::of_launch_spec(br#"{"argv":["/bin/true"],"pids":16}"#).unwrap();
        assert_eq!(
            a.digest(),
            Sha256Digest::of_domain(
                LAUNCH_BINDING_DOMAIN,
                br#"{"argv":["/bin/true"],"pids":16}"#
            )
        );
        let e = LaunchBinding::of_launch_spec(br#"{"pids":16,"argv":["/bin/true"]}"#).unwrap_err();
        assert_eq!(e.code(), c::LIFECYCLE_LAUNCH_SPEC_INVALID);
    }
}
