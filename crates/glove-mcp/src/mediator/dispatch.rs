//! Dispatch of one agent request: the admission and audit around it, the
//! decision by method, and the answers given locally (initialize,
//! capabilities, notifications).

use super::*;

impl Shared {
    pub(super) async fn handle(&self, session: &Session, tx: &mpsc::Sender<Vec<u8>>, mut req: Req) {
        // Room for this request's event is promised before anything is
        // decided or forwarded.
        let Some(res) = self.audit.reserve() else {
            self.refuse_closed(tx, &req.id).await;
            return;
        };
        if !lock(&session.active).insert(req.id.clone()) {
            let o = Outcome::denied(MCP_FRAME_INVALID, "a request with this id is in flight");
            self.release(tx, &req, o, res).await;
            return;
        }
        let o = self.decide(session, &mut req).await;
        // Set before the answer is written: the agent's next request may
        // come the moment it reads it. (If the audit fails, everything is
        // refused anyway.)
        if req.method == "initialize" && o.decision == Decision::Allowed {
            session
                .initialized
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        self.release(tx, &req, o, res).await;
        lock(&session.active).remove(&req.id);
    }

    pub(super) async fn decide(&self, session: &Session, req: &mut Req) -> Outcome {
        let version = req
            .params
            .get("_meta")
            .and_then(|m| m.get(META_VERSION))
            .cloned();
        match version {
            None => {}
            Some(Value::String(v)) if v == MODERN_REVISION => req.modern = true,
            Some(_) => {
                let mut o = Outcome::denied(
                    MCP_PROTOCOL_REFUSED,
                    "unsupported protocol version; the mediator speaks 2026-07-28 per request and 2025-11-25 after initialize",
                );
                if let Reply::Error(e) = &mut o.reply {
                    e.code = frame::UNSUPPORTED_PROTOCOL_VERSION;
                    if let Some(Value::Object(d)) = &mut e.data {
                        d.insert("supported".into(), serde_json::json!([MODERN_REVISION]));
                    }
                }
                return o;
            }
        }
        let initialized = session
            .initialized
            .load(std::sync::atomic::Ordering::SeqCst);
        match req.method.as_str() {
            "initialize" => {
                if req.modern || initialized {
                    return Outcome::denied(
                        MCP_PROTOCOL_REFUSED,
                        "initialize is answered once, and not in revision 2026-07-28",
                    );
                }
                Outcome::allowed(self.initialize_result())
            }
            "server/discover" => Outcome::allowed(self.discover_result()),
            "ping" => Outcome::allowed(Value::Object(Map::new())),
            _ if !req.modern && !initialized => Outcome::denied(
                MCP_PROTOCOL_REFUSED,
                "send initialize first, or name revision 2026-07-28 in _meta",
            ),
            "tools/list" => {
                if req.params.contains_key("cursor") {
                    return Outcome::denied(MCP_PARAMS_INVALID, "the tool list has one page");
                }
                // What the server offers now, judged against its pins,
                // not only what it offered when it last said so.
                self.relist_for_agent(req.scope.as_deref()).await;
                let mut m = Map::new();
                let tools = match &req.scope {
                    Some(server) => lock(&self.view).listing_scoped(server),
                    None => lock(&self.view).listing(),
                };
                m.insert("tools".into(), Value::Array(tools));
                Outcome::allowed(Value::Object(m))
            }
            "tools/call" => self.tools_call(req).await,
            "resources/list" | "prompts/list" => self.list_listed(req).await,
            "resources/templates/list" => {
                let mut m = Map::new();
                m.insert("resourceTemplates".into(), Value::Array(Vec::new()));
                Outcome::allowed(Value::Object(m))
            }
            "resources/read" | "prompts/get" | "completion/complete" => self.get_listed(req).await,
            m if m.starts_with("tasks/") => {
                Outcome::denied(MCP_TASK_REFUSED, "task-augmented requests are not mediated")
            }
            _ => Outcome::denied(MCP_METHOD_UNKNOWN, "method not found"),
        }
    }

    pub(super) fn capabilities(&self) -> Value {
        let servers = self.profile.servers();
        let mut c = Map::new();
        c.insert("tools".into(), serde_json::json!({"listChanged": true}));
        let resources = servers.iter().any(|s| !s.resources().is_empty());
        let prompts = servers.iter().any(|s| !s.prompts().is_empty());
        if resources {
            c.insert("resources".into(), Value::Object(Map::new()));
        }
        if prompts {
            c.insert("prompts".into(), Value::Object(Map::new()));
        }
        if resources || prompts {
            c.insert("completions".into(), Value::Object(Map::new()));
        }
        Value::Object(c)
    }

    pub(super) fn server_info() -> Value {
        serde_json::json!({"name": "glove-mcp", "version": env!("CARGO_PKG_VERSION")})
    }

    pub(super) fn initialize_result(&self) -> Value {
        serde_json::json!({
            "protocolVersion": LEGACY_REVISION,
            "capabilities": self.capabilities(),
            "serverInfo": Self::server_info(),
        })
    }

    pub(super) fn discover_result(&self) -> Value {
        serde_json::json!({
            "supportedVersions": [MODERN_REVISION],
            "capabilities": self.capabilities(),
            "serverInfo": Self::server_info(),
        })
    }

    /// Tells every connected agent that Glove's view of the tools changed.
    /// Never waits: a connection whose queue is full gets the notification
    /// after its next answer (notifications of one kind merge).
    pub(super) async fn tell_agents_list_changed(&self) {
        let agents = lock(&self.agents);
        for a in agents.values() {
            let n = frame::encode_notification("notifications/tools/list_changed", None);
            if a.tx.try_send(n).is_err() {
                a.changed.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }

    /// An agent's notification; `false` when the mediator does not act on
    /// it (then it is audited as ignored). Synchronous: the agent's reader
    /// must not wait on an upstream that does not read its input.
    pub(super) fn notification(
        &self,
        conn: u64,
        method: &str,
        params: Option<Map<String, Value>>,
    ) -> bool {
        match method {
            "notifications/initialized" => true,
            "notifications/cancelled" => {
                let id = params
                    .as_ref()
                    .and_then(|p| p.get("requestId"))
                    .and_then(Id::from_value);
                let Some(id) = id else {
                    return false;
                };
                let (known, sent) = {
                    let mut calls = lock(&self.in_flight);
                    match calls.get_mut(&(conn, id)) {
                        Some(InFlight::Sent { server, uid }) => {
                            (true, Some((server.clone(), *uid)))
                        }
                        Some(InFlight::Queueing { cancel, cancelled }) => {
                            *cancelled = true;
                            cancel.notify_one();
                            (true, None)
                        }
                        None => (false, None),
                    }
                };
                if let Some((server, uid)) = sent {
                    if let Some(up) = self.upstreams.get(&server) {
                        up.cancel(uid);
                    }
                }
                known
            }
            // Everything else (roots/list_changed above all) is ignored.
            _ => false,
        }
    }

    /// Audits an agent's notification the mediator did not act on:
    /// `dropped`, `mcp_notification_ignored`, with its method.
    pub(super) async fn ignored(&self, method: &str) {
        if !self.refusal_journaled().await {
            return;
        }
        let o = Outcome {
            reply: Reply::Nothing,
            decision: Decision::Dropped,
            code: Some(MCP_NOTIFICATION_IGNORED),
            server: None,
            tool: None,
            arguments: None,
        };
        let mut e = self.event(None, &o, None);
        e.method = Some(method.to_owned()).filter(|m| audit::is_method(m));
        self.audit.record(e).await;
    }
}
