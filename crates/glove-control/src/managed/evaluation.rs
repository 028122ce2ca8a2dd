//! `refinement-eval-v1` in a managed session: Glove, not the agent, decides
//! whether the run passed.
//!
//! * **Before launch** ([`read_fixture`]) the fixture projection is read
//!   through the bundle root's protected open (no link followed, owner and
//!   mode checked, size bounded, rehashed against the plan's digest),
//!   decoded strictly and checked against the admitted plan: the session,
//!   the variant, the skill projections and the matched-context digest. A
//!   refusal leaves the session created; nothing was launched. The fixture
//!   is supervisor-only: [`super::spec::build_spec`] never mounts it.
//! * **While it runs** the session thread hands every raw PTY byte to the
//!   [`Evaluator`] before the bytes enter the bounded attach transcript
//!   (which may evict them); the evaluator keeps its own bounded state.
//! * **At the end**, after the launcher reported the outcome (the PTY
//!   drained to its end) and the session's parts reported, the evaluator
//!   is finished with what the supervisor observed — how the agent ended,
//!   the wall latency from release, whether the stream was complete, and
//!   the limit that stopped it — and the outcome goes into the refinement
//!   receipt ([`super::receipt`]).
//!
//! Nothing the agent prints is read as a result: its output is only text
//! the literals are looked for in.

use super::receipt::ReceiptFacts;
use glove_sandbox::outcome::{ExitStatus, Limit, Outcome};
use glove_types::codes::control::SESSION_PLAN_NOT_ADMITTED;
use glove_types::plan::{AdmittedPlan, DecodedPlan, LibraryProjection};
use glove_types::refinement::evaluator::Evaluation;
use glove_types::refinement::{
    Evaluator, Fixture, Observed, ObservedEnd, RefinementBinding, Variant,
};
use glove_types::{Rejection, Sha256Digest};
use std::path::Path;
use std::time::Instant;

/// What a refinement receipt repeats about the plan: the two projections,
/// the variant and the matched context, and — once the session ended with
/// an outcome — the evaluation.
#[derive(Clone, Debug)]
pub(super) struct RefinementFacts {
    pub(super) fixture: LibraryProjection,
    pub(super) selected: LibraryProjection,
    pub(super) variant: Variant,
    pub(super) matched_context_digest: Sha256Digest,
    pub(super) evaluation: Option<Evaluation>,
}

impl RefinementFacts {
    /// The facts of a binding.
    pub(super) fn of(b: &RefinementBinding) -> Self {
        RefinementFacts {
            fixture: b.fixture().clone(),
            selected: b.selected().clone(),
            variant: b.variant(),
            matched_context_digest: *b.matched_context_digest(),
            evaluation: None,
        }
    }

    /// The facts of a stored plan's binding, for a receipt written without
    /// the start's facts (recovery, abandonment); `None` for any other plan.
    pub(super) fn of_stored_plan(plan: &[u8]) -> Option<Self> {
        let p = DecodedPlan::decode(plan).ok()?;
        p.refinement().map(Self::of)
    }
}

/// Reads and checks the fixture of a refinement plan (see the module
/// docs); `Ok(None)` for any other plan.
pub(super) fn read_fixture(
    bundle_root: Option<&Path>,
    admitted: &AdmittedPlan,
) -> Result<Option<Fixture>, Rejection> {
    let Some(binding) = admitted.refinement() else {
        return Ok(None);
    };
    let root = bundle_root.ok_or_else(|| {
        Rejection::new(
            glove_types::codes::control::SESSION_BUNDLE_ROOT_MISSING,
            "a refinement evaluation reads its fixture from the library bundle store; start gloved with --library-bundle-root",
        )
    })?;
    let f = binding.fixture();
    let bytes = crate::protected::read(
        &root.join(f.sha256.to_hex()),
        crate::protected::Requirements {
            max_bytes: glove_sandbox::spec::MAX_BUNDLE_BYTES,
            mode: 0o600,
        },
    )
    .map_err(|r| r.at("refinement.fixture"))?;
    if Sha256Digest::of(&bytes) != f.sha256 {
        return Err(Rejection::new(
            SESSION_PLAN_NOT_ADMITTED,
            "the fixture bundle's bytes do not have the digest the plan names",
        )
        .at("refinement.fixture"));
    }
    let fixture = Fixture::decode(&bytes).map_err(|r| r.at("refinement.fixture"))?;
    fixture
        .check_against(admitted.plan())
        .map_err(|r| r.at("refinement.fixture"))?;
    Ok(Some(fixture))
}

/// The evaluator of a running session, when its agent was released (the
/// release sent to the launcher) and when the launcher reported its end.
pub(super) struct Running {
    evaluator: Evaluator,
    released: Instant,
    ended: Option<Instant>,
}

impl Running {
    pub(super) fn new(fixture: &Fixture, released: Instant) -> Self {
        Running {
            evaluator: Evaluator::new(fixture.expect()),
            released,
            ended: None,
        }
    }

    /// The launcher reported the agent's end (the wall latency stops here,
    /// not when the receipt is written).
    pub(super) fn ended(&mut self) {
        self.ended.get_or_insert_with(Instant::now);
    }

    /// Every raw PTY byte, in order.
    pub(super) fn feed(&mut self, chunk: &[u8]) {
        self.evaluator.feed(chunk);
    }

    /// Finishes the evaluation: `end` is the launcher's report (`None` when
    /// the session failed or the launcher was lost, so the stream is not
    /// known to be complete).
    pub(super) fn finish(self, outcome: Option<&Outcome>) -> Evaluation {
        let end = self.ended.unwrap_or_else(Instant::now);
        let latency_us = u64::try_from(end.saturating_duration_since(self.released).as_micros())
            .unwrap_or(u64::MAX);
        let observed = match outcome {
            Some(o) => Observed {
                termination: match o.exit {
                    ExitStatus::Exited { code } => ObservedEnd::Exited(code),
                    ExitStatus::Signaled { signal } => ObservedEnd::Signaled(signal),
                },
                latency_us,
                // Every byte the terminal produced reached the evaluator
                // (the launcher says whether its final drain emptied it).
                stream_complete: o.output_complete,
                // A limit, or a stop asked for while the agent ran: either
                // way the agent did not end by itself, and the run fails.
                resource_stop: o
                    .ended_by
                    .map(|l| limit_name(l).to_owned())
                    .or_else(|| o.stopped.then(|| "stopped".to_owned())),
            },
            None => Observed {
                termination: ObservedEnd::Failed,
                latency_us,
                stream_complete: false,
                resource_stop: None,
            },
        };
        self.evaluator.finish(&observed)
    }
}

fn limit_name(l: Limit) -> &'static str {
    match l {
        Limit::CpuTime => "cpu_time",
        Limit::Memory => "memory",
        Limit::Pids => "pids",
        Limit::WallTime => "wall_time",
        Limit::Disk => "disk",
        Limit::TerminalOutput => "terminal_output",
    }
}

/// Puts a finished evaluation into the receipt facts.
pub(super) fn record(facts: &mut ReceiptFacts, evaluation: Evaluation) {
    if let Some(r) = facts.refinement.as_mut() {
        r.evaluation = Some(evaluation);
    }
}

/// The refinement receipt around a session's resource receipt. Without an
/// evaluation (the session failed before its agent ended, or recovery
/// wrote the receipt) the outcome is absent and the evaluator incomplete.
pub(super) fn refinement_body(
    id: &glove_types::ids::SessionId,
    r: &RefinementFacts,
    resource: glove_types::receipt::ResourceReceiptV1,
) -> glove_types::receipt::RefinementReceiptV1 {
    use glove_types::receipt::{EvaluatorState, RefinementReceiptV1};
    let e = r.evaluation.as_ref();
    RefinementReceiptV1 {
        session_id: id.clone(),
        fixture: r.fixture.clone(),
        selected: r.selected.clone(),
        variant: r.variant,
        matched_context_digest: r.matched_context_digest,
        outcome: e.map(|e| e.outcome.clone()),
        outcome_commitment: e.map(|e| e.outcome.commitment()),
        raw_pty_sha256: e.map(|e| e.raw_pty_sha256),
        raw_pty_bytes: e.map_or(0, |e| e.raw_pty_bytes),
        evaluator: EvaluatorState {
            complete: e.is_some_and(|e| e.complete),
            evidence: e.map(|e| e.evidence),
        },
        resource,
    }
}
