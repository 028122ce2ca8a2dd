//! The `resource_v1` receipt body: what a managed session was allowed and
//! what it used, as a typed value with one canonical encoding and a strict
//! decoder.
//!
//! The body is canonical JSON (RFC 8785). [`ResourceReceiptV1::encode`] is
//! the only way `gloved` writes one; [`ResourceReceiptV1::decode`] accepts
//! exactly the bytes `encode` produces for some valid value and refuses
//! everything else with a code (`receipt_body_invalid`, or the strict JSON
//! decoder's own `json_*` code): unknown or missing fields, a wrong
//! `receipt_kind`, a field that is `null` where it must be absent, a
//! termination whose parts do not agree (a failure with an exit status, an
//! exit without usage, a limit ending without the limit), a digest that is
//! not 64 lowercase hex characters, an id outside the id charset.
//!
//! ```text
//! {"controller_plan_digest":…,"launch_binding_digest":…|null,
//!  "limits":{…}|null,"plan_content_digest":…,"projections":[…],
//!  "receipt_kind":"resource_v1","recovered":bool,
//!  ["recovery":{…},] "session_id":…,
//!  "termination":{"exit":{…}|null,"limit":…|null,"limits_reached":[…],
//!                 "reason":…[,"code":…,"message":…]},
//!  "usage":{…}|null[,"adapter":{…}][,"egress":{…}][,"mcp":{…}]
//!  [,"retained":[{…}]]}
//! ```
//!
//! `adapter` is present only for a session of a native runtime (see
//! [`AdapterReceipt`]), `egress` only for a session with egress (see
//! [`EgressReceipt`]), `mcp` only for a session with a tool policy (see
//! [`McpReceipt`]), `retained` only for a session with retained
//! workspaces (see [`RetainedReceipt`]).
//!
//! The `apply_v1` body of an apply transaction's terminal receipt is in
//! [`apply`] ([`ApplyReceiptV1`]); the `refinement_v1` body of an
//! evaluation session, which nests its `resource_v1` body, is in
//! [`refinement`] ([`RefinementReceiptV1`]).

use crate::canon::{self, Form};
use crate::codes::journal::RECEIPT_BODY_INVALID;
use crate::error::Rejection;
use crate::ids::{AliasId, ProjectionId, SessionId};
use crate::policy::ResourceLimits;
use crate::stage::SessionStage;
use crate::{Blake3Digest, Sha256Digest};
use serde::{Deserialize, Serialize};

pub mod apply;
pub mod refinement;
mod wire;

pub use apply::{ApplyOutcome, ApplyReceiptV1, FailedIn, APPLY_KIND, MAX_APPLY_BODY_BYTES};
pub use refinement::{
    EvaluatorState, RefinementReceiptV1, MAX_REFINEMENT_BODY_BYTES, REFINEMENT_KIND,
};
use wire::Wire;

/// The `receipt_kind` of this body.
pub const KIND: &str = "resource_v1";

/// Largest body accepted, in bytes (the receipt journal's own bound is the
/// same order).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Most library projections and reached limits a body lists.
pub const MAX_ITEMS: usize = 64;

/// Longest failure message kept, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// A limit's name in a receipt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitName {
    /// CPU time.
    CpuTime,
    /// Memory.
    Memory,
    /// Processes and threads.
    Pids,
    /// Wall-clock time.
    WallTime,
    /// Writable disk.
    Disk,
    /// Terminal output.
    TerminalOutput,
}

/// What the run used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    /// CPU time, milliseconds.
    pub cpu_time_ms: u64,
    /// Peak memory, bytes.
    pub peak_memory_bytes: u64,
    /// Most processes and threads at once.
    pub pids_peak: u64,
    /// Wall-clock time, milliseconds.
    pub wall_time_ms: u64,
    /// Peak writable disk, bytes.
    pub disk_bytes: u64,
    /// Terminal output, bytes.
    pub terminal_bytes: u64,
}

/// How the agent's process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Exit {
    /// Exited with a code.
    Exited {
        /// The exit code.
        code: i32,
    },
    /// Killed by a signal.
    Signaled {
        /// The signal number.
        signal: i32,
    },
}

/// Why the session ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Termination {
    /// The agent exited (status in `exit`).
    Exited {
        /// The exit status (always [`Exit::Exited`]).
        code: i32,
        /// Limits reached along the way (none ended the run).
        limits_reached: Vec<LimitName>,
    },
    /// The agent was killed by a signal nobody asked for.
    Signaled {
        /// The signal.
        signal: i32,
        /// Limits reached along the way.
        limits_reached: Vec<LimitName>,
    },
    /// The session was stopped on request (or at shutdown).
    Stopped {
        /// How the process ended.
        exit: Exit,
        /// Limits reached along the way.
        limits_reached: Vec<LimitName>,
    },
    /// A limit ended the run.
    Limit {
        /// The limit.
        limit: LimitName,
        /// How the process ended.
        exit: Exit,
        /// Every limit reached (includes `limit`).
        limits_reached: Vec<LimitName>,
    },
    /// The session failed: it never ran, or its end could not be observed.
    Failed {
        /// The stable error code.
        code: String,
        /// A message for the operator (no host paths).
        message: String,
    },
}

/// A library projection the session had.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Projection {
    /// The projection id.
    pub projection_id: ProjectionId,
    /// The destination alias.
    pub destination_alias: AliasId,
    /// Where it was mounted inside the sandbox.
    pub target: String,
    /// The bundle's digest.
    pub sha256: Sha256Digest,
}

/// What recovery found and did, for a session `gloved` restarted with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recovery {
    /// The stage the session was in.
    pub stage: SessionStage,
    /// Whether the recorded init identity matched a live process (which was
    /// then killed).
    pub identity_matched: bool,
    /// Whether the recorded launcher was killed instead.
    pub launcher_killed: bool,
    /// Session cgroup directories removed after that.
    pub cgroups_removed: u64,
    /// Whether anything was killed.
    pub killed: bool,
    /// The code of the replay failure, for a session whose records did not
    /// replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_error: Option<String>,
}

/// One credential lease a session held.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseReceipt {
    /// The secret handle the plan named.
    pub secret_handle: String,
    /// The lease's content version when the session started.
    pub version_at_start: u64,
    /// Its version after the session (higher when the harness refreshed
    /// the token inside); `None` when the session ended before it could be
    /// read back (a failure, or recovery).
    pub version_at_end: Option<u64>,
}

/// What a native runtime's adapter gave the session: the private home,
/// the managed environment, the expanded skills and the leases. The launch
/// binding commits to the same values; this says them in the open.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdapterReceipt {
    /// The native runtime id.
    pub runtime: String,
    /// The private home's path inside (a fresh quota tmpfs slice).
    pub home: String,
    /// The managed environment (`NAME=value`, sorted; `HOME` included).
    pub managed_environment: Vec<String>,
    /// The skill expansion digest (`glove.skill-expansion.v1`), when the
    /// plan projected skills.
    pub skills_digest: Option<String>,
    /// The skill names expanded, sorted.
    pub skills: Vec<String>,
    /// The credential leases, sorted by handle.
    pub leases: Vec<LeaseReceipt>,
    /// The CPU rate limit, thousandths of a CPU.
    pub cpu_rate_millicpus: Option<u64>,
}

impl AdapterReceipt {
    fn check(&self) -> Result<(), Rejection> {
        let at = |f: &str| format!("adapter.{f}");
        if crate::policy::NativeRuntime::parse(&self.runtime).is_none() {
            return Err(bad("not a native runtime").at(at("runtime")));
        }
        crate::paths::check_canonical(&self.home).map_err(|r| r.at(at("home")))?;
        let sorted_unique = |v: &[&str]| v.windows(2).all(|w| w[0] < w[1]);
        let env: Vec<&str> = self
            .managed_environment
            .iter()
            .map(String::as_str)
            .collect();
        if env.len() > MAX_ITEMS
            || !sorted_unique(&env)
            || env
                .iter()
                .any(|e| !e.contains('=') || e.len() > MAX_MESSAGE_BYTES)
        {
            return Err(bad("sorted NAME=value entries, bounded").at(at("managed_environment")));
        }
        if let Some(d) = &self.skills_digest {
            Sha256Digest::parse(d).map_err(|r| r.at(at("skills_digest")))?;
        }
        let skills: Vec<&str> = self.skills.iter().map(String::as_str).collect();
        if skills.len() > 1024
            || !sorted_unique(&skills)
            || skills.iter().any(|s| s.is_empty() || s.len() > 64)
        {
            return Err(bad("sorted unique skill names").at(at("skills")));
        }
        if self.skills.is_empty() != self.skills_digest.is_none() {
            return Err(bad("skills and their digest come together").at(at("skills_digest")));
        }
        let handles: Vec<&str> = self
            .leases
            .iter()
            .map(|l| l.secret_handle.as_str())
            .collect();
        if handles.len() > MAX_ITEMS || !sorted_unique(&handles) {
            return Err(bad("leases sorted by unique handle").at(at("leases")));
        }
        for l in &self.leases {
            crate::ids::SecretHandle::new(l.secret_handle.clone())
                .map_err(|r| r.at(at("leases.secret_handle")))?;
            if l.version_at_end.is_some_and(|e| e < l.version_at_start) || l.version_at_start == 0 {
                return Err(bad("lease versions start at 1 and never go back").at(at("leases")));
            }
        }
        if self.cpu_rate_millicpus.is_some_and(|r| r == 0) {
            return Err(bad("a CPU rate is positive").at(at("cpu_rate_millicpus")));
        }
        Ok(())
    }
}

/// What left the session through its egress proxy: the egress policy,
/// the decisions counted, and the head of the session's egress journal
/// (its last record's chained digest), which authenticates them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressReceipt {
    /// The egress policy id.
    pub policy_id: String,
    /// Connections (tunnels, mapped connections) allowed.
    pub connections_allowed: u64,
    /// Connections refused.
    pub connections_refused: u64,
    /// Requests allowed.
    pub requests_allowed: u64,
    /// Requests refused.
    pub requests_refused: u64,
    /// Requests let through that then failed upstream.
    pub requests_failed: u64,
    /// Tunnels and mapped connections that ended.
    pub connections_closed: u64,
    /// Refusals past the journal's per-second budget: answered and
    /// counted, not journaled one by one.
    pub refusals_unjournaled: u64,
    /// Names the proxy looked up (only endpoints' names ever are).
    pub names_resolved: u64,
    /// Bytes from the agent.
    pub bytes_up: u64,
    /// Bytes to the agent.
    pub bytes_down: u64,
    /// Records in the egress journal.
    pub journal_records: u64,
    /// The journal's head, 64 lowercase hex digits (all zeros when the
    /// proxy could not report it).
    pub journal_head: String,
    /// Whether the audit failed: the proxy then refused everything, or
    /// (with a zero head) the proxy itself failed and the counts are not
    /// known.
    pub audit_failed: bool,
}

impl EgressReceipt {
    fn check(&self) -> Result<(), Rejection> {
        crate::ids::PolicyId::new(self.policy_id.clone()).map_err(|r| r.at("egress.policy_id"))?;
        let hex = self.journal_head.len() == 64
            && self
                .journal_head
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !hex {
            return Err(bad("64 lowercase hex digits").at("egress.journal_head"));
        }
        Ok(())
    }
}

/// What the session's MCP mediator decided: the tool policy, the MCP
/// profile it was read from (by digest), the decisions counted, and the
/// head of the session's MCP audit journal, which authenticates every tool
/// call (`glove audit verify --head`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpReceipt {
    /// The tool policy id.
    pub tool_policy_id: String,
    /// SHA-256 of the MCP profile file's bytes, 64 lowercase hex digits.
    pub profile_sha256: String,
    /// Requests answered with a result.
    pub allowed: u64,
    /// Requests refused by Glove (and server-to-client requests denied).
    pub denied: u64,
    /// Forwarded requests the upstream failed.
    pub upstream_errors: u64,
    /// Frames dropped unanswered.
    pub dropped: u64,
    /// Tool definitions pinned at first sight.
    pub pinned: u64,
    /// Calls the agent cancelled.
    pub cancelled: u64,
    /// Records in the audit journal.
    pub journal_records: u64,
    /// The audit journal's head, 64 lowercase hex digits (all zeros when
    /// the mediator could not report it).
    pub journal_head: String,
    /// Whether the audit failed (the mediator then refused everything), or
    /// (with a zero head) the mediator itself failed.
    pub audit_failed: bool,
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl McpReceipt {
    fn check(&self) -> Result<(), Rejection> {
        crate::ids::PolicyId::new(self.tool_policy_id.clone())
            .map_err(|r| r.at("mcp.tool_policy_id"))?;
        if !is_hex64(&self.profile_sha256) {
            return Err(bad("64 lowercase hex digits").at("mcp.profile_sha256"));
        }
        if !is_hex64(&self.journal_head) {
            return Err(bad("64 lowercase hex digits").at("mcp.journal_head"));
        }
        Ok(())
    }
}

/// A `resource_v1` receipt body (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceReceiptV1 {
    /// The session.
    pub session_id: SessionId,
    /// Glove's SHA-256 digest of the canonical plan.
    pub plan_content_digest: Sha256Digest,
    /// The controller's BLAKE3 digest of the canonical plan.
    pub controller_plan_digest: Blake3Digest,
    /// The launch binding, when the session got that far.
    pub launch_binding_digest: Option<Sha256Digest>,
    /// The limits the session was admitted with; `None` only when recovery
    /// could not decode the stored plan (never a made-up limit).
    pub limits: Option<ResourceLimits>,
    /// The library projections.
    pub projections: Vec<Projection>,
    /// What was used; `None` when the session failed.
    pub usage: Option<Usage>,
    /// Why it ended.
    pub termination: Termination,
    /// Set when recovery wrote this receipt.
    pub recovery: Option<Recovery>,
    /// The native adapter's facts, for a native runtime.
    pub adapter: Option<AdapterReceipt>,
    /// The egress proxy's summary, for a session with egress.
    pub egress: Option<EgressReceipt>,
    /// The MCP mediator's summary, for a session with a tool policy.
    pub mcp: Option<McpReceipt>,
    /// Each retained workspace's stage, for a session with any (absent
    /// when empty).
    pub retained: Vec<RetainedReceipt>,
}

/// A retained workspace as its session left it: which stage holds it (the
/// session and the alias name it; the image's device and inode pin it) and
/// the manifests it was filled with and frozen at. `final_digest` is
/// `null` when the stage could not be frozen (`error` says why).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetainedReceipt {
    /// The grant alias.
    pub alias: String,
    /// The image file's device and inode.
    pub image: (u64, u64),
    /// The image's size in bytes.
    pub bytes: u64,
    /// Digest of the baseline manifest, 64 lowercase hex digits.
    pub baseline_digest: String,
    /// Digest of the final manifest, once frozen.
    pub final_digest: Option<String>,
    /// Why it could not be frozen (a code).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl RetainedReceipt {
    fn check(&self) -> Result<(), Rejection> {
        crate::ids::check_id(&self.alias).map_err(|r| r.at("retained.alias"))?;
        Sha256Digest::parse(&self.baseline_digest).map_err(|r| r.at("retained.baseline_digest"))?;
        if let Some(d) = &self.final_digest {
            Sha256Digest::parse(d).map_err(|r| r.at("retained.final_digest"))?;
        }
        if self.final_digest.is_some() == self.error.is_some() {
            return Err(bad("a stage has a final digest or an error").at("retained"));
        }
        Ok(())
    }
}

fn bad(msg: impl Into<String>) -> Rejection {
    Rejection::new(RECEIPT_BODY_INVALID, msg)
}

impl ResourceReceiptV1 {
    /// Whether recovery wrote this receipt.
    pub fn recovered(&self) -> bool {
        self.recovery.is_some()
    }

    /// The canonical encoding. Fails (with `receipt_body_invalid`) only
    /// for a value [`decode`](Self::decode) would refuse: a failure code
    /// outside the code charset, an over-long message, too many items.
    pub fn encode(&self) -> Result<Vec<u8>, Rejection> {
        let wire = self.to_wire();
        Self::check(&wire)?;
        let bytes = canon::encode(&wire)?;
        if bytes.len() > MAX_BODY_BYTES {
            return Err(bad(format!(
                "the body is {} bytes; the bound is {MAX_BODY_BYTES}",
                bytes.len()
            )));
        }
        Ok(bytes)
    }

    /// Decodes a body strictly: only the canonical encoding of a valid
    /// value is accepted.
    pub fn decode(bytes: &[u8]) -> Result<ResourceReceiptV1, Rejection> {
        let wire: Wire = canon::decode(bytes, MAX_BODY_BYTES, Form::Canonical)?;
        Self::check(&wire)?;
        let v = Self::from_wire(wire)?;
        // One encoding per value: a field that must be absent given as
        // null, for one, decodes but does not re-encode to these bytes.
        if v.encode()? != bytes {
            return Err(bad("the body is not the encoding of its value"));
        }
        Ok(v)
    }
}
