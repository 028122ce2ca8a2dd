//! What the upstreams say on their own: tool listings (pinned and
//! audited), `list_changed`, server-to-client requests, dropped frames.

use super::outcome::{Outcome, Reply, Req};
use super::{lock, now_ms, Shared};
use crate::audit::Decision;
use crate::error::McpError;
use crate::frame::glove_error;
use crate::upstream::Inbound;
use crate::view::Finding;
use glove_types::codes::mcp::*;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

impl Shared {
    /// Applies a listing of `server`, audits its findings, saves the pin
    /// file. `false` when the audit failed. At start a pin file that
    /// cannot be written is an error; later it blocks the first sights.
    pub(super) async fn apply_listing(
        &self,
        server: &str,
        tools: &[Value],
        instructions: Option<&str>,
        at_start: bool,
    ) -> Result<bool, McpError> {
        let Some(profile) = self.profile.server(server) else {
            return Ok(true);
        };
        let (findings, saved) = {
            let mut pins = lock(&self.pins);
            let before = pins.encode();
            let findings = lock(&self.view).apply(profile, &mut pins, tools, instructions);
            let saved = match &self.pin_path {
                Some(path) if pins.encode() != before => pins.save(path),
                _ => Ok(()),
            };
            (findings, saved)
        };
        if let Err(r) = saved {
            if at_start {
                return Err(McpError::PinFile(r));
            }
            let first: Vec<String> = findings
                .iter()
                .filter_map(|f| match f {
                    Finding::Pinned(t, _) => Some(t.clone()),
                    Finding::Mismatch(..) => None,
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
            };
            let d = match &f {
                Finding::Pinned(_, d) | Finding::Mismatch(_, d) => *d,
            };
            let mut e = self.event(None, &o, Some(d));
            e.method = Some("tools/list".into());
            if !self.audit.record(e).await {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Handles what one upstream sends on its own.
    pub(super) async fn watch(self: Arc<Self>, server: String, mut rx: mpsc::Receiver<Inbound>) {
        while let Some(ev) = rx.recv().await {
            match ev {
                Inbound::ToolsChanged => self.relist(&server).await,
                Inbound::Request { id, method } => {
                    let started = Instant::now();
                    let o = Outcome::denied(MCP_REQUEST_DENIED, "").on(Some(&server), None);
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
                    if let Some(up) = self.upstreams.get(&server) {
                        let err = glove_error(
                            MCP_REQUEST_DENIED,
                            "the client does not serve roots, sampling or elicitation",
                        );
                        up.refuse(&id, &err).await;
                    }
                }
                Inbound::Dropped { code } => self.dropped(Some(&server), code).await,
                Inbound::Closed => break,
            }
        }
    }

    async fn relist(&self, server: &str) {
        let _guard = self.relist.lock().await;
        let Some(up) = self.upstreams.get(server) else {
            return;
        };
        let limits = self.profile.limits();
        let Ok(tools) = up.list_tools(&limits).await else {
            return;
        };
        let before = lock(&self.view).fingerprint();
        let instructions = self.instructions.get(server).cloned().flatten();
        let ok = self
            .apply_listing(server, &tools, instructions.as_deref(), false)
            .await
            .unwrap_or(false);
        let after = lock(&self.view).fingerprint();
        if ok && before != after {
            self.tell_agents_list_changed().await;
        }
    }
}
