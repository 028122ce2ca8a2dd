//! The receipt body's wire form: the conversion of a [`ResourceReceiptV1`]
//! to and from it, and the rules every body obeys.

use super::*;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireProjection {
    projection_id: String,
    destination_alias: String,
    target: String,
    sha256: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireTermination {
    reason: String,
    limit: Option<LimitName>,
    limits_reached: Vec<LimitName>,
    exit: Option<Exit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Wire {
    receipt_kind: String,
    session_id: String,
    plan_content_digest: String,
    controller_plan_digest: String,
    launch_binding_digest: Option<String>,
    limits: Option<ResourceLimits>,
    projections: Vec<WireProjection>,
    recovered: bool,
    usage: Option<Usage>,
    termination: WireTermination,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    recovery: Option<Recovery>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    adapter: Option<AdapterReceipt>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    egress: Option<EgressReceipt>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mcp: Option<McpReceipt>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    retained: Vec<RetainedReceipt>,
}

/// Whether `s` is in the code charset (1 to 64 of `[a-z0-9_]`).
pub(super) fn is_code(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

impl ResourceReceiptV1 {
    pub(super) fn to_wire(&self) -> Wire {
        let (reason, limit, limits_reached, exit, code, message) = match &self.termination {
            Termination::Exited {
                code,
                limits_reached,
            } => (
                "exited",
                None,
                limits_reached.clone(),
                Some(Exit::Exited { code: *code }),
                None,
                None,
            ),
            Termination::Signaled {
                signal,
                limits_reached,
            } => (
                "signaled",
                None,
                limits_reached.clone(),
                Some(Exit::Signaled { signal: *signal }),
                None,
                None,
            ),
            Termination::Stopped {
                exit,
                limits_reached,
            } => (
                "stopped",
                None,
                limits_reached.clone(),
                Some(*exit),
                None,
                None,
            ),
            Termination::Limit {
                limit,
                exit,
                limits_reached,
            } => (
                "limit",
                Some(*limit),
                limits_reached.clone(),
                Some(*exit),
                None,
                None,
            ),
            Termination::Failed { code, message } => (
                "failed",
                None,
                vec![],
                None,
                Some(code.clone()),
                Some(message.clone()),
            ),
        };
        Wire {
            receipt_kind: KIND.into(),
            session_id: self.session_id.as_str().into(),
            plan_content_digest: self.plan_content_digest.to_hex(),
            controller_plan_digest: self.controller_plan_digest.to_hex(),
            launch_binding_digest: self.launch_binding_digest.map(|d| d.to_hex()),
            limits: self.limits,
            projections: self
                .projections
                .iter()
                .map(|p| WireProjection {
                    projection_id: p.projection_id.as_str().into(),
                    destination_alias: p.destination_alias.as_str().into(),
                    target: p.target.clone(),
                    sha256: p.sha256.to_hex(),
                })
                .collect(),
            recovered: self.recovery.is_some(),
            usage: self.usage,
            termination: WireTermination {
                reason: reason.into(),
                limit,
                limits_reached,
                exit,
                code,
                message,
            },
            recovery: self.recovery.clone(),
            adapter: self.adapter.clone(),
            egress: self.egress.clone(),
            mcp: self.mcp.clone(),
            retained: self.retained.clone(),
        }
    }

    /// The rules the types alone do not carry.
    pub(super) fn check(w: &Wire) -> Result<(), Rejection> {
        if w.receipt_kind != KIND {
            return Err(bad(format!("receipt_kind is not {KIND}")).at("receipt_kind"));
        }
        if w.recovered != w.recovery.is_some() {
            return Err(bad("recovered and recovery disagree").at("recovered"));
        }
        if w.projections.len() > MAX_ITEMS || w.termination.limits_reached.len() > MAX_ITEMS {
            return Err(bad(format!("more than {MAX_ITEMS} items")));
        }
        if let Some(e) = &w.egress {
            e.check()?;
        }
        if let Some(m) = &w.mcp {
            m.check()?;
        }
        if w.retained.len() > MAX_ITEMS {
            return Err(bad(format!("more than {MAX_ITEMS} retained stages")).at("retained"));
        }
        for r in &w.retained {
            r.check()?;
        }
        if let Some(a) = &w.adapter {
            a.check()?;
        }
        if let Some(r) = &w.recovery {
            if r.replay_error.as_deref().is_some_and(|c| !is_code(c)) {
                return Err(bad("replay_error is not a code").at("recovery.replay_error"));
            }
        }
        let t = &w.termination;
        let at = |f: &str| format!("termination.{f}");
        let failed = t.reason == "failed";
        if failed {
            if w.usage.is_some() || t.exit.is_some() || t.limit.is_some() {
                return Err(bad("a failed session has no usage, exit or limit").at(at("reason")));
            }
            if !t.limits_reached.is_empty() {
                return Err(bad("a failed session reached no limit").at(at("limits_reached")));
            }
            match (&t.code, &t.message) {
                (Some(c), Some(m)) if is_code(c) && m.len() <= MAX_MESSAGE_BYTES => {}
                _ => return Err(bad("a failure has a code and a bounded message").at(at("code"))),
            }
            return Ok(());
        }
        if t.code.is_some() || t.message.is_some() {
            return Err(bad("only a failure has a code and a message").at(at("code")));
        }
        if w.usage.is_none() {
            return Err(bad("a session that ran has its usage").at("usage"));
        }
        let exit = t
            .exit
            .ok_or_else(|| bad("a session that ran has an exit status").at(at("exit")))?;
        match (t.reason.as_str(), t.limit, exit) {
            ("exited", None, Exit::Exited { .. })
            | ("signaled", None, Exit::Signaled { .. })
            | ("stopped", None, _) => Ok(()),
            ("limit", Some(l), _) if t.limits_reached.contains(&l) => Ok(()),
            _ => Err(bad("reason, limit and exit do not agree").at(at("reason"))),
        }
    }

    pub(super) fn from_wire(w: Wire) -> Result<ResourceReceiptV1, Rejection> {
        let t = w.termination;
        let termination = match (t.reason.as_str(), t.exit) {
            ("exited", Some(Exit::Exited { code })) => Termination::Exited {
                code,
                limits_reached: t.limits_reached,
            },
            ("signaled", Some(Exit::Signaled { signal })) => Termination::Signaled {
                signal,
                limits_reached: t.limits_reached,
            },
            ("stopped", Some(exit)) => Termination::Stopped {
                exit,
                limits_reached: t.limits_reached,
            },
            ("limit", Some(exit)) => Termination::Limit {
                limit: t.limit.ok_or_else(|| bad("no limit"))?,
                exit,
                limits_reached: t.limits_reached,
            },
            ("failed", None) => Termination::Failed {
                code: t.code.unwrap_or_default(),
                message: t.message.unwrap_or_default(),
            },
            _ => return Err(bad("unknown termination reason").at("termination.reason")),
        };
        let digest = |s: &str, f: &str| Sha256Digest::parse(s).map_err(|r| r.at(f));
        Ok(ResourceReceiptV1 {
            session_id: SessionId::new(w.session_id).map_err(|r| r.at("session_id"))?,
            plan_content_digest: digest(&w.plan_content_digest, "plan_content_digest")?,
            controller_plan_digest: Blake3Digest::parse(&w.controller_plan_digest)
                .map_err(|r| r.at("controller_plan_digest"))?,
            launch_binding_digest: w
                .launch_binding_digest
                .as_deref()
                .map(|s| digest(s, "launch_binding_digest"))
                .transpose()?,
            limits: w.limits,
            projections: w
                .projections
                .into_iter()
                .map(|p| {
                    crate::paths::check_canonical(&p.target)
                        .map_err(|r| r.at("projections.target"))?;
                    Ok(Projection {
                        projection_id: ProjectionId::new(p.projection_id)
                            .map_err(|r| r.at("projections.projection_id"))?,
                        destination_alias: AliasId::new(p.destination_alias)
                            .map_err(|r| r.at("projections.destination_alias"))?,
                        target: p.target,
                        sha256: digest(&p.sha256, "projections.sha256")?,
                    })
                })
                .collect::<Result<_, Rejection>>()?,
            usage: w.usage,
            termination,
            recovery: w.recovery,
            adapter: w.adapter,
            egress: w.egress,
            mcp: w.mcp,
            retained: w.retained,
        })
    }
}
