//! A session's terminal receipt: the facts it repeats and its body.

use glove_sandbox::outcome::{ExitStatus, Outcome};
use glove_types::ids::SessionId;
use glove_types::plan::DecodedPlan;
use glove_types::policy::ResourceLimits;
use serde_json::{json, Value};

/// The launch facts a receipt repeats.
#[derive(Clone, Debug)]
pub(super) struct ReceiptFacts {
    pub(super) digests: (String, String),
    pub(super) binding: Option<String>,
    /// `None` only at recovery, when the stored plan cannot be decoded: the
    /// receipt then says `null`, never a made-up limit.
    pub(super) limits: Option<ResourceLimits>,
    pub(super) projections: Vec<Value>,
}

pub(super) fn limits_json(l: &ResourceLimits) -> Value {
    json!({
        "cpu_time_ms": l.cpu_time_ms,
        "memory_bytes": l.memory_bytes,
        "pids": l.pids,
        "wall_time_ms": l.wall_time_ms,
        "disk_bytes": l.disk_bytes,
        "terminal_output_bytes": l.terminal_output_bytes,
    })
}

/// How a session ended, for its receipt.
pub(super) enum Ending<'a> {
    Outcome(&'a Outcome),
    Failure { code: String, message: String },
}

pub(super) fn receipt_body(
    id: &SessionId,
    f: &ReceiptFacts,
    end: &Ending<'_>,
    recovered: bool,
) -> Value {
    let mut body = json!({
        "receipt_kind": "resource_v1",
        "session_id": id.as_str(),
        "plan_content_digest": f.digests.0,
        "controller_plan_digest": f.digests.1,
        "launch_binding_digest": f.binding,
        "limits": f.limits.as_ref().map_or(Value::Null, limits_json),
        "projections": f.projections,
        "recovered": recovered,
    });
    let m = body.as_object_mut().expect("object");
    match end {
        Ending::Outcome(o) => {
            let u = &o.usage;
            m.insert(
                "usage".into(),
                json!({
                    "cpu_time_ms": u.cpu_time_ms,
                    "peak_memory_bytes": u.peak_memory_bytes,
                    "pids_peak": u.pids_peak,
                    "wall_time_ms": u.wall_time_ms,
                    "disk_bytes": u.disk_bytes,
                    "terminal_bytes": u.terminal_bytes,
                }),
            );
            let (reason, limit) = match (o.ended_by, o.stopped) {
                (Some(l), _) => ("limit", Some(l.as_str())),
                (None, true) => ("stopped", None),
                (None, false) => match o.exit {
                    ExitStatus::Exited { .. } => ("exited", None),
                    ExitStatus::Signaled { .. } => ("signaled", None),
                },
            };
            m.insert(
                "termination".into(),
                json!({
                    "reason": reason,
                    "limit": limit,
                    "limits_reached": o.limits_reached.iter().map(|l| l.as_str()).collect::<Vec<_>>(),
                    "exit": match o.exit {
                        ExitStatus::Exited { code } => json!({"kind": "exited", "code": code}),
                        ExitStatus::Signaled { signal } => json!({"kind": "signaled", "signal": signal}),
                    },
                }),
            );
        }
        Ending::Failure { code, message } => {
            m.insert("usage".into(), Value::Null);
            m.insert(
                "termination".into(),
                json!({"reason": "failed", "code": code, "message": message, "limit": null, "limits_reached": [], "exit": null}),
            );
        }
    }
    body
}

/// The limits a stored plan asks for, decoded strictly; `None` when the
/// bytes are no plan (never a limit defaulted to 0).
pub(super) fn recorded_limits(plan: &[u8]) -> Option<ResourceLimits> {
    DecodedPlan::decode(plan).ok().map(|p| *p.limits())
}
