//! What the upstreams say on their own: tool listings (pinned and
//! audited), `list_changed`, server-to-client requests, dropped frames,
//! and the budget that keeps one upstream from filling the audit.

use super::outcome::{Outcome, Reply, Req};
use super::{lock, now_ms, Shared, AGENT_RELIST_EVERY, MAX_UNSOLICITED_EVENTS};
use crate::audit::Decision;
use crate::error::McpError;
use crate::frame::glove_error;
use crate::pin::PinFile;
use crate::upstream::CallError;
use crate::upstream::Inbound;
use crate::view::Finding;
use glove_types::codes::mcp::*;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

/// The audit events one upstream may still cause on its own (see the
/// module docs of [`super`]). Not `Clone`: one per upstream for its whole
/// life, shared by its watcher and the agent's re-lists
/// ([`Shared::spend`]).
pub(super) struct Budget {
    left: usize,
    /// The upstream was stopped (once: its watcher and an agent's re-list
    /// may both find the budget spent).
    stopped: bool,
}

impl Budget {
    pub(super) fn new() -> Budget {
        Budget {
            left: MAX_UNSOLICITED_EVENTS,
            stopped: false,
        }
    }

    /// Takes one event from the budget; `false` when it is spent.
    pub(super) fn spend(&mut self) -> bool {
        match self.left.checked_sub(1) {
            Some(left) => {
                self.left = left;
                true
            }
            None => false,
        }
    }
}

/// What became of a listing's findings.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Applied {
    /// Every finding is recorded.
    Recorded,
    /// The audit failed (and is closed).
    AuditFailed,
    /// The upstream's budget ran out before every finding was recorded.
    OverBudget,
}

impl Shared {
    /// Takes one event from `server`'s budget; `false` when it is spent
    /// (or the server is unknown: fail closed).
    pub(super) fn spend(&self, server: &str) -> bool {
        self.budgets.get(server).is_some_and(|b| lock(b).spend())
    }

    /// Applies a listing of `server`, audits its findings, saves the pin
    /// file. At start (`budget` is `None`) a pin file that cannot be
    /// written is an error; later (`budgeted`) it blocks the first
    /// sights, and every mismatch found is taken from the upstream's
    /// budget (first sights are not: there is at most one per allowed
    /// tool).
    pub(super) async fn apply_listing(
        &self,
        server: &str,
        tools: &[Value],
        instructions: Option<&str>,
        budgeted: bool,
    ) -> Result<Applied, McpError> {
        let at_start = !budgeted;
        if self.profile.server(server).is_none() {
            return Ok(Applied::Recorded);
        }
        // Judged, saved and (when the save fails) blocked in one go on the
        // mediator's one thread: no request runs while a first sight is
        // in the view but not yet in the pin file. The pin file's lock
        // wait is bounded (`pin::LOCK_WAIT`) and its holders (another
        // session, `pins approve`) hold it for one read and write.
        let (findings, saved) = self.judge_listing(server, tools, instructions);
        if let Err(r) = saved {
            if at_start {
                return Err(McpError::PinFile(r));
            }
            let first: Vec<String> = findings
                .iter()
                .filter_map(|f| match f {
                    Finding::Pinned(t, _) => Some(t.clone()),
                    Finding::Mismatch(..) | Finding::Refused(..) => None,
                })
                .collect();
            lock(&self.view).block(server, &first);
        }
        for f in findings {
            let o = match &f {
                Finding::Pinned(t, _) => Outcome {
                    reply: Reply::Nothing,
                    decision: Decision::Pinned,
                    code: None,
                    server: None,
                    tool: None,
                    arguments: None,
                }
                .on(Some(server), Some(t)),
                Finding::Mismatch(t, _) => {
                    Outcome::denied(MCP_PIN_MISMATCH, "").on(Some(server), t.as_deref())
                }
                Finding::Refused(t, _) => {
                    Outcome::denied(MCP_DEFINITION_REFUSED, "").on(Some(server), Some(t))
                }
            };
            let d = match &f {
                Finding::Pinned(_, d) => *d,
                Finding::Mismatch(_, d) | Finding::Refused(_, d) => {
                    if budgeted && !self.spend(server) {
                        return Ok(Applied::OverBudget);
                    }
                    *d
                }
            };
            let mut e = self.event(None, &o, Some(d));
            e.method = Some("tools/list".into());
            if !self.audit.record(e).await {
                return Ok(Applied::AuditFailed);
            }
        }
        Ok(Applied::Recorded)
    }

    /// Judges a listing of `server` against its pins — the pin file's
    /// under its lock, or the copy in memory — and saves the file.
    fn judge_listing(
        &self,
        server: &str,
        tools: &[Value],
        instructions: Option<&str>,
    ) -> (Vec<Finding>, Result<(), glove_types::Rejection>) {
        let Some(profile) = self.profile.server(server) else {
            return (Vec::new(), Ok(()));
        };
        let mut pins = lock(&self.pins);
        match &self.pin_path {
            // Judged against the file as it is now (another session or
            // `pins approve` may have changed it), under its lock.
            Some(path) => {
                let view = &self.view;
                let mut judged = None;
                match PinFile::update(path, |file| {
                    let findings = lock(view).apply(profile, file, tools, instructions);
                    judged = Some(findings.clone());
                    findings
                }) {
                    Ok((file, findings)) => {
                        *pins = file;
                        (findings, Ok(()))
                    }
                    // Judged against the file, which could not be saved:
                    // those findings stand (a second judgement would find
                    // each mismatch already reported, and audit none); the
                    // first sights are then blocked.
                    Err(r) if judged.is_some() => (judged.unwrap_or_default(), Err(r)),
                    Err(r) => {
                        // Not judged (the file could not be locked or
                        // read): judged against the copy in memory, so the
                        // view is current; the first sights are then
                        // blocked.
                        let findings =
                            lock(&self.view).apply(profile, &mut pins, tools, instructions);
                        (findings, Err(r))
                    }
                }
            }
            None => {
                let findings = lock(&self.view).apply(profile, &mut pins, tools, instructions);
                (findings, Ok(()))
            }
        }
    }

    /// Handles what one upstream sends on its own, until it closes or
    /// spends its budget (then it is stopped). Its `list_changed`
    /// notifications coalesce into one wake-up, taken between events; a
    /// server that overflowed its inbound queue is stopped.
    pub(super) async fn watch(self: Arc<Self>, server: String, mut rx: mpsc::Receiver<Inbound>) {
        let Some(up) = self.upstreams.get(&server).cloned() else {
            return;
        };
        let changed = up.tools_changed();
        loop {
            let within = tokio::select! {
                ev = rx.recv() => match ev {
                    None | Some(Inbound::Closed) => break,
                    Some(ev) => self.unsolicited(&server, ev).await,
                },
                () = changed.notified() => self.relist(&server).await,
            };
            // A flooded server is stopped once what it queued is taken
            // (which spends its budget first).
            if !within || (up.flooded() && rx.is_empty()) {
                self.stop_upstream(&server).await;
                break;
            }
        }
    }

    /// Audits one frame an upstream sent on its own (from its budget);
    /// `false` when the budget is spent.
    async fn unsolicited(&self, server: &str, ev: Inbound) -> bool {
        if !self.spend(server) {
            return false;
        }
        match ev {
            Inbound::Request { id, method } => {
                let started = Instant::now();
                let o = Outcome::denied(MCP_REQUEST_DENIED, "").on(Some(server), None);
                let req = Req {
                    id: id.clone(),
                    method,
                    params: Map::new(),
                    modern: false,
                    started,
                    started_at_ms: now_ms(),
                    conn: 0,
                    scope: None,
                };
                let e = self.event(Some(&req), &o, None);
                self.audit.record(e).await;
                if let Some(up) = self.upstreams.get(server) {
                    let err = glove_error(
                        MCP_REQUEST_DENIED,
                        "the client does not serve roots, sampling or elicitation",
                    );
                    up.refuse(&id, &err);
                }
            }
            Inbound::Dropped { code } => self.dropped(Some(server), code).await,
            Inbound::Closed => {}
        }
        true
    }

    /// Lists the tools of every server in `scope` again before an agent's
    /// `tools/list` is answered, at most once per [`AGENT_RELIST_EVERY`]
    /// per server: a server that changes a tool without saying so is
    /// judged against its pin then (the changed tool blocked, the
    /// mismatch audited) instead of being called under the definition
    /// pinned and shown. A server no longer running is skipped (its calls
    /// fail anyway). The audit events a re-list causes come from the
    /// server's one budget, which its watcher spends too; a re-list that
    /// finds it spent stops the server.
    pub(super) async fn relist_for_agent(&self, scope: Option<&str>) {
        for (server, up) in &self.upstreams {
            if scope.is_some_and(|s| s != server) || !up.is_alive() {
                continue;
            }
            let due = {
                let mut last = lock(&self.agent_relists);
                let now = Instant::now();
                match last.get(server) {
                    Some(t) if now.duration_since(*t) < AGENT_RELIST_EVERY => false,
                    _ => {
                        last.insert(server.clone(), now);
                        true
                    }
                }
            };
            if !due {
                continue;
            }
            if !self.relist(server).await {
                self.stop_upstream(server).await;
            }
        }
    }

    /// Stops an upstream that spent its budget: its tools are withdrawn,
    /// its process killed (its calls in flight and later fail
    /// `mcp_upstream_failed`), one event says so, the agent is told.
    pub(super) async fn stop_upstream(&self, server: &str) {
        if let Some(b) = self.budgets.get(server) {
            if std::mem::replace(&mut lock(b).stopped, true) {
                return;
            }
        }
        let before = lock(&self.view).fingerprint();
        lock(&self.view).withdraw(server);
        if let Some(up) = self.upstreams.get(server) {
            up.kill().await;
        }
        let o = Outcome {
            reply: Reply::Nothing,
            decision: Decision::UpstreamError,
            code: Some(MCP_UPSTREAM_FAILED),
            server: None,
            tool: None,
            arguments: None,
        }
        .on(Some(server), None);
        let e = self.event(None, &o, None);
        self.audit.record(e).await;
        self.tell_if_changed(before).await;
    }

    /// Sends the agent `notifications/tools/list_changed` when its view
    /// differs from `before`.
    async fn tell_if_changed(&self, before: Vec<(String, glove_types::Sha256Digest)>) {
        if lock(&self.view).fingerprint() == before {
            return;
        }
        self.tell_agents_list_changed().await;
    }

    /// Re-lists `server`'s tools after `list_changed`. A failed re-list
    /// withdraws its tools (until a later one succeeds) and is audited.
    /// `false` when the upstream's budget ran out.
    async fn relist(&self, server: &str) -> bool {
        // One re-list of a server at a time; other servers' go on.
        let _guard = match self.relist.get(server) {
            Some(l) => Some(l.lock().await),
            None => None,
        };
        let Some(up) = self.upstreams.get(server) else {
            return true;
        };
        let limits = self.profile.limits();
        let before = lock(&self.view).fingerprint();
        let within = match up.list_tools(&limits).await {
            Ok(tools) => {
                let instructions = self.instructions.get(server).cloned().flatten();
                let applied = self
                    .apply_listing(server, &tools, instructions.as_deref(), true)
                    .await
                    .unwrap_or(Applied::AuditFailed);
                applied != Applied::OverBudget
            }
            Err(e) => {
                // The old definitions are no longer what the server
                // offers: nothing of it is callable until it lists again.
                lock(&self.view).withdraw(server);
                if self.spend(server) {
                    let code = match e {
                        CallError::Timeout => MCP_UPSTREAM_TIMEOUT,
                        CallError::Rpc(_) => MCP_UPSTREAM_ERROR,
                        CallError::Failed(_) | CallError::Cancelled => MCP_UPSTREAM_FAILED,
                    };
                    let o = Outcome {
                        reply: Reply::Nothing,
                        decision: Decision::UpstreamError,
                        code: Some(code),
                        server: None,
                        tool: None,
                        arguments: None,
                    }
                    .on(Some(server), None);
                    let mut e = self.event(None, &o, None);
                    e.method = Some("tools/list".into());
                    self.audit.record(e).await;
                    true
                } else {
                    false
                }
            }
        };
        self.tell_if_changed(before).await;
        within
    }
}
