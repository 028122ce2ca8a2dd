//! A session's terminal receipt: the facts it repeats and its typed body —
//! `resource_v1` ([`glove_types::receipt::ResourceReceiptV1`]), or for a
//! refinement evaluation `refinement_v1`
//! ([`glove_types::receipt::RefinementReceiptV1`], which nests the resource
//! receipt) — whose canonical encoding is what the receipt journal seals.

use glove_lifecycle::PlanDigests;
use glove_sandbox::outcome::{ExitStatus, Limit, Outcome};
use glove_types::ids::SessionId;
use glove_types::plan::DecodedPlan;
use glove_types::policy::ResourceLimits;
use glove_types::receipt::{
    AdapterReceipt, Exit, LimitName, Projection, Recovery, ResourceReceiptV1, Termination, Usage,
};
use glove_types::Sha256Digest;

/// The launch facts a receipt repeats.
#[derive(Clone, Debug)]
pub(super) struct ReceiptFacts {
    pub(super) digests: PlanDigests,
    pub(super) binding: Option<Sha256Digest>,
    /// `None` only at recovery, when the stored plan cannot be decoded: the
    /// receipt then says `null`, never a made-up limit.
    pub(super) limits: Option<ResourceLimits>,
    pub(super) projections: Vec<Projection>,
    /// The native adapter's facts (lease end versions filled in at the end).
    pub(super) adapter: Option<AdapterReceipt>,
    /// The egress proxy's summary (filled in at the end).
    pub(super) egress: Option<glove_types::receipt::EgressReceipt>,
    /// The MCP mediator's summary (filled in at the end).
    pub(super) mcp: Option<glove_types::receipt::McpReceipt>,
    /// The retained workspaces' stages (filled in at the end).
    pub(super) retained: Vec<glove_types::receipt::RetainedReceipt>,
    /// A refinement evaluation's facts (its evaluation filled in at the
    /// end); `None` for every other session.
    pub(super) refinement: Option<super::evaluation::RefinementFacts>,
}

/// A terminal receipt body of the kind the session's plan requires.
#[derive(Clone, Debug)]
pub(super) enum TerminalBody {
    Resource(Box<ResourceReceiptV1>),
    Refinement(Box<glove_types::receipt::RefinementReceiptV1>),
    /// The plan requires a refinement receipt but its facts could not be
    /// read: nothing is appended (never a receipt of the wrong kind).
    RefinementFactsMissing,
}

impl TerminalBody {
    /// The journal kind and canonical bytes.
    pub(super) fn encode(
        &self,
    ) -> Result<(glove_journal::receipt::ReceiptKind, Vec<u8>), glove_types::Rejection> {
        use glove_journal::receipt::ReceiptKind;
        Ok(match self {
            TerminalBody::Resource(b) => (ReceiptKind::ResourceV1, b.encode()?),
            TerminalBody::Refinement(b) => (ReceiptKind::RefinementV1, b.encode()?),
            TerminalBody::RefinementFactsMissing => {
                return Err(glove_types::Rejection::new(
                    glove_types::codes::control::CONTROL_INTERNAL,
                    "the refinement evaluation's facts could not be read; no receipt was written",
                ))
            }
        })
    }
}

impl ReceiptFacts {
    /// What the session's parts report: the proxy's and the mediator's
    /// summaries, and each lease's version after the session.
    pub(super) fn add_reports(&mut self, r: &crate::assembly::Reports) {
        if let Some(e) = &r.egress {
            self.egress = Some(e.receipt());
        }
        if let Some(m) = &r.mcp {
            self.mcp = Some(m.receipt());
        }
        self.retained = r.retained.iter().map(|s| s.receipt()).collect();
        if let Some(a) = self.adapter.as_mut() {
            for end in &r.leases {
                if let Some(l) = a
                    .leases
                    .iter_mut()
                    .find(|l| l.secret_handle == end.handle().as_str())
                {
                    l.version_at_end = end.version_at_end();
                }
            }
        }
    }
}

/// How a session ended, for its receipt.
pub(super) enum Ending<'a> {
    Outcome(&'a Outcome),
    Failure { code: String, message: String },
}

fn limit_name(l: Limit) -> LimitName {
    match l {
        Limit::CpuTime => LimitName::CpuTime,
        Limit::Memory => LimitName::Memory,
        Limit::Pids => LimitName::Pids,
        Limit::WallTime => LimitName::WallTime,
        Limit::Disk => LimitName::Disk,
        Limit::TerminalOutput => LimitName::TerminalOutput,
    }
}

/// The receipt body; `recovery` is set when recovery writes it.
pub(super) fn receipt_body(
    id: &SessionId,
    f: &ReceiptFacts,
    end: &Ending<'_>,
    recovery: Option<Recovery>,
) -> TerminalBody {
    let resource = resource_body(id, f, end, recovery);
    // The kind is the plan's (fixed in the creation record), not whether
    // facts happened to be found.
    match (f.digests.terminal_kind(), &f.refinement) {
        (glove_lifecycle::TerminalKind::Refinement, Some(r)) => TerminalBody::Refinement(Box::new(
            super::evaluation::refinement_body(id, r, resource),
        )),
        (glove_lifecycle::TerminalKind::Refinement, None) => TerminalBody::RefinementFactsMissing,
        _ => TerminalBody::Resource(Box::new(resource)),
    }
}

fn resource_body(
    id: &SessionId,
    f: &ReceiptFacts,
    end: &Ending<'_>,
    recovery: Option<Recovery>,
) -> ResourceReceiptV1 {
    let (usage, termination) = match end {
        Ending::Outcome(o) => {
            let u = &o.usage;
            let exit = match o.exit {
                ExitStatus::Exited { code } => Exit::Exited { code },
                ExitStatus::Signaled { signal } => Exit::Signaled { signal },
            };
            let mut limits_reached: Vec<LimitName> =
                o.limits_reached.iter().map(|l| limit_name(*l)).collect();
            let termination = match (o.ended_by, o.stopped, exit) {
                (Some(l), _, exit) => {
                    let limit = limit_name(l);
                    if !limits_reached.contains(&limit) {
                        limits_reached.push(limit);
                    }
                    Termination::Limit {
                        limit,
                        exit,
                        limits_reached,
                    }
                }
                (None, true, exit) => Termination::Stopped {
                    exit,
                    limits_reached,
                },
                (None, false, Exit::Exited { code }) => Termination::Exited {
                    code,
                    limits_reached,
                },
                (None, false, Exit::Signaled { signal }) => Termination::Signaled {
                    signal,
                    limits_reached,
                },
            };
            let usage = Usage {
                cpu_time_ms: u.cpu_time_ms,
                peak_memory_bytes: u.peak_memory_bytes,
                pids_peak: u.pids_peak,
                wall_time_ms: u.wall_time_ms,
                disk_bytes: u.disk_bytes,
                terminal_bytes: u.terminal_bytes,
            };
            (Some(usage), termination)
        }
        Ending::Failure { code, message } => (
            None,
            Termination::Failed {
                code: code.clone(),
                message: bounded(message),
            },
        ),
    };
    ResourceReceiptV1 {
        session_id: id.clone(),
        plan_content_digest: f.digests.plan_content_digest(),
        controller_plan_digest: f.digests.controller_plan_digest(),
        launch_binding_digest: f.binding,
        limits: f.limits,
        projections: f.projections.clone(),
        usage,
        termination,
        recovery,
        adapter: f.adapter.clone(),
        egress: f.egress.clone(),
        mcp: f.mcp.clone(),
        retained: f.retained.clone(),
    }
}

/// A failure message cut to the receipt's bound, on a character boundary.
fn bounded(m: &str) -> String {
    let max = glove_types::receipt::MAX_MESSAGE_BYTES;
    if m.len() <= max {
        return m.to_owned();
    }
    let mut end = max;
    while !m.is_char_boundary(end) {
        end -= 1;
    }
    m[..end].to_owned()
}

/// The limits a stored plan asks for, decoded strictly; `None` when the
/// bytes are no plan (never a limit defaulted to 0).
pub(super) fn recorded_limits(plan: &[u8]) -> Option<ResourceLimits> {
    DecodedPlan::decode(plan).ok().map(|p| *p.limits())
}

#[cfg(test)]
mod tests {
    use super::*;
    use glove_sandbox::outcome::{Enforcement, Mechanism};
    use glove_types::Blake3Digest;

    fn facts() -> ReceiptFacts {
        ReceiptFacts {
            digests: PlanDigests::new(Sha256Digest::of(b"p"), Blake3Digest::of(b"p")),
            binding: Some(Sha256Digest::of(b"b")),
            limits: None,
            projections: vec![],
            adapter: None,
            egress: None,
            mcp: None,
            retained: vec![],
            refinement: None,
        }
    }

    fn outcome(ended_by: Option<Limit>, stopped: bool, exit: ExitStatus) -> Outcome {
        let m = Mechanism::CgroupV2;
        Outcome {
            exit,
            ended_by,
            limits_reached: vec![],
            usage: Default::default(),
            enforcement: Enforcement {
                cpu_time: m,
                memory: m,
                pids: m,
                wall_time: m,
                disk: m,
                terminal_output: m,
            },
            stopped,
            output_complete: true,
        }
    }

    #[test]
    fn every_ending_makes_a_body_that_decodes_to_itself() {
        let id = SessionId::new("s-1").expect("id");
        let endings = [
            outcome(None, false, ExitStatus::Exited { code: 0 }),
            outcome(None, false, ExitStatus::Signaled { signal: 9 }),
            outcome(None, true, ExitStatus::Signaled { signal: 15 }),
            outcome(
                Some(Limit::Memory),
                false,
                ExitStatus::Signaled { signal: 9 },
            ),
            outcome(Some(Limit::WallTime), true, ExitStatus::Exited { code: 1 }),
        ];
        for o in &endings {
            let body = resource_body(&id, &facts(), &Ending::Outcome(o), None);
            let bytes = body.encode().expect("encodes");
            assert_eq!(ResourceReceiptV1::decode(&bytes).expect("decodes"), body);
        }
        let long = "é".repeat(5000);
        let failed = resource_body(
            &id,
            &facts(),
            &Ending::Failure {
                code: "session_launch_failed".into(),
                message: long,
            },
            None,
        );
        let bytes = failed.encode().expect("encodes a bounded message");
        assert_eq!(ResourceReceiptV1::decode(&bytes).expect("decodes"), failed);
    }
}
