//! What the mediator journals: the audit event of each decision, dropped
//! and refused frames, releases of reserved room, and the rate limit on
//! journaled refusals.

use super::*;

impl Shared {
    pub(super) fn event(
        &self,
        req: Option<&Req>,
        o: &Outcome,
        result: Option<Sha256Digest>,
    ) -> AuditEvent {
        let (method, latency_ms, started_at_ms) = match req {
            Some(r) => (
                Some(r.method.clone()).filter(|m| audit::is_method(m)),
                u64::try_from(r.started.elapsed().as_millis()).unwrap_or(u64::MAX),
                r.started_at_ms,
            ),
            None => (None, 0, now_ms()),
        };
        AuditEvent {
            seq: 1,
            session_id: self.session_id.clone(),
            server: o.server.clone(),
            tool: o.tool.clone(),
            method,
            decision: o.decision,
            code: o.code,
            arguments_sha256: o.arguments,
            result_sha256: result,
            latency_ms,
            started_at_ms,
            count: None,
        }
    }

    /// Audits a frame dropped unanswered (the agent's within the refusal
    /// budget).
    pub(super) async fn dropped(&self, server: Option<&str>, code: ErrorCode) {
        if server.is_none() && !self.refusal_journaled().await {
            return;
        }
        let o = Outcome {
            reply: Reply::Nothing,
            decision: Decision::Dropped,
            code: Some(code),
            server: server.map(str::to_owned),
            tool: None,
            arguments: None,
        };
        let e = self.event(None, &o, None);
        self.audit.record(e).await;
    }

    /// Audits a frame refused without a usable id (as `dropped`), then
    /// answers it with `id: null` and JSON-RPC code `rpc`: the agent is
    /// not left waiting on a frame it got wrong.
    pub(super) async fn refuse_frame(
        &self,
        tx: &mpsc::Sender<Vec<u8>>,
        code: ErrorCode,
        rpc: i64,
        message: &str,
    ) {
        let o = Outcome {
            reply: Reply::Nothing,
            decision: Decision::Dropped,
            code: Some(code),
            server: None,
            tool: None,
            arguments: None,
        };
        let e = self.event(None, &o, None);
        let recorded = !self.refusal_journaled().await || self.audit.record(e).await;
        let mut err = if recorded {
            glove_error(code, message)
        } else {
            glove_error(
                MCP_AUDIT_FAILED,
                "the decision could not be recorded; nothing is released",
            )
        };
        err.code = rpc;
        let _ = tx.send(frame::encode_error_null(&err)).await;
    }

    /// Audits `o`, then (only then) writes its reply; `mcp_audit_failed`
    /// instead when the audit did not record it.
    pub(super) async fn release(
        &self,
        tx: &mpsc::Sender<Vec<u8>>,
        req: &Req,
        mut o: Outcome,
        res: Reservation,
    ) {
        let mut result = None;
        let mut bytes = match &mut o.reply {
            Reply::Result(v) => {
                if req.modern {
                    if let Some(m) = v.as_object_mut() {
                        m.insert("resultType".into(), Value::from("complete"));
                        // 2026-07-28 cacheable results: immediately stale
                        // and private (the view is this session's policy,
                        // and a pin can block a tool at any moment).
                        if CACHEABLE.contains(&req.method.as_str()) {
                            m.insert("ttlMs".into(), Value::from(0));
                            m.insert("cacheScope".into(), Value::from("private"));
                        }
                    }
                }
                result = Some(json::digest(RESULT_DOMAIN, v));
                Some(frame::encode_result(&req.id, v.clone()))
            }
            Reply::Error(e) => {
                if o.code == Some(MCP_UPSTREAM_ERROR) {
                    let mut ev = Map::new();
                    ev.insert("code".into(), Value::from(e.code));
                    ev.insert("message".into(), Value::from(e.message.clone()));
                    result = Some(json::digest(RESULT_DOMAIN, &Value::Object(ev)));
                }
                Some(frame::encode_error(&req.id, e))
            }
            Reply::Nothing => None,
        };
        if bytes.as_ref().is_some_and(|b| b.len() > MAX_FRAME_BYTES) {
            o = Outcome {
                reply: Reply::Nothing,
                decision: Decision::UpstreamError,
                code: Some(MCP_UPSTREAM_FAILED),
                server: o.server,
                tool: o.tool,
                arguments: o.arguments,
            };
            result = None;
            bytes = Some(frame::encode_error(
                &req.id,
                &glove_error(MCP_UPSTREAM_FAILED, "the answer is over the frame bound"),
            ));
        }
        let e = self.event(Some(req), &o, result);
        // A refusal, or an answer the mediator made itself from nothing an
        // upstream said in reply (a ping above all): budgeted, or a flood
        // of them would fill the journal as refusals did.
        let budgeted = o.decision == Decision::Denied
            || (o.decision == Decision::Allowed && ANSWERED_LOCALLY.contains(&req.method.as_str()));
        if budgeted && !self.refusal_journaled().await {
            // Past this second's budget: answered, counted (nothing was
            // forwarded; the count is journaled later).
            drop(res);
            if let Some(b) = bytes {
                let _ = tx.send(b).await;
            }
            return;
        }
        if !budgeted {
            let due = self.count_due();
            self.record_count(due).await;
        }
        if self.audit.record_reserved(e, res).await {
            if let Some(b) = bytes {
                let _ = tx.send(b).await;
            }
        } else if bytes.is_some() {
            let err = glove_error(
                MCP_AUDIT_FAILED,
                "the decision could not be recorded; nothing is released",
            );
            let _ = tx.send(frame::encode_error(&req.id, &err)).await;
        }
    }

    /// Takes one refusal from this second's budget: `true` when it is to
    /// be journaled (after any count owed from earlier seconds, journaled
    /// here first), `false` when it is only counted.
    pub(super) async fn refusal_journaled(&self) -> bool {
        let t = {
            let mut w = lock(&self.refusals);
            let second = now_ms() / 1000;
            if w.second != second {
                w.second = second;
                w.journaled = 0;
            }
            if w.journaled < REFUSAL_EVENTS_PER_SECOND {
                w.journaled += 1;
                Ticket {
                    journal: true,
                    flush: Some(std::mem::take(&mut w.pending)),
                }
            } else {
                w.pending = w.pending.saturating_add(1);
                Ticket {
                    journal: false,
                    flush: None,
                }
            }
        };
        if let Some(n) = t.flush {
            self.record_count(n).await;
        }
        t.journal
    }

    /// The refusals counted in a second now past (they are journaled
    /// with the next event, whatever it is).
    pub(super) fn count_due(&self) -> u64 {
        let mut w = lock(&self.refusals);
        if w.pending == 0 || w.second == now_ms() / 1000 {
            return 0;
        }
        std::mem::take(&mut w.pending)
    }

    /// Journals `n` counted refusals as one `counted` event (nothing when
    /// `n` is 0).
    pub(super) async fn record_count(&self, n: u64) {
        if n == 0 {
            return;
        }
        let mut e = self.event(
            None,
            &Outcome {
                reply: Reply::Nothing,
                decision: Decision::Counted,
                code: None,
                server: None,
                tool: None,
                arguments: None,
            },
            None,
        );
        e.count = Some(n);
        self.audit.record(e).await;
    }

    /// Answers `mcp_audit_failed` without deciding anything.
    pub(super) async fn refuse_closed(&self, tx: &mpsc::Sender<Vec<u8>>, id: &Id) {
        let err = glove_error(
            MCP_AUDIT_FAILED,
            "the audit cannot record decisions; the mediator refuses everything",
        );
        let _ = tx.send(frame::encode_error(id, &err)).await;
    }
}
