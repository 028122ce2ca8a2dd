//! The methods forwarded to an upstream: `tools/call` with every check
//! before it, and the listed resources and prompts.

use super::outcome::{input_requests, upstream_outcome, Outcome, Req};
use super::{lock, InFlight, Shared};
use crate::audit::ARGUMENTS_DOMAIN;
use crate::json;
use crate::sanitize::{hidden_character, neutralize_value};
use crate::schema;
use crate::upstream::CallError;
use glove_types::codes::mcp::*;
use serde_json::{Map, Value};
use std::sync::Arc;

impl Shared {
    pub(super) async fn tools_call(&self, req: &Req) -> Outcome {
        let p = &req.params;
        let args = match p.get("arguments") {
            None => Value::Object(Map::new()),
            Some(Value::Object(a)) => Value::Object(a.clone()),
            Some(_) => return Outcome::denied(MCP_PARAMS_INVALID, "`arguments` must be an object"),
        };
        let digest = json::digest(ARGUMENTS_DOMAIN, &args);
        let Some(name) = p.get("name").and_then(Value::as_str) else {
            return Outcome::denied(MCP_PARAMS_INVALID, "`name` must be a string").args(digest);
        };
        if p.contains_key("task") {
            return Outcome::denied(MCP_TASK_REFUSED, "task-augmented calls are not mediated")
                .args(digest)
                .on(None, Some(name));
        }
        let resolved = match &req.scope {
            Some(server) => lock(&self.view).resolve_scoped(server, name),
            None => lock(&self.view).resolve(name),
        };
        let target = match resolved {
            Ok(t) => t,
            Err((code, at)) => {
                let msg = match code {
                    c if c == MCP_TOOL_UNKNOWN => "unknown tool",
                    c if c == MCP_TOOL_DENIED => "the profile does not allow this tool",
                    c if c == MCP_DEFINITION_REFUSED => {
                        "the tool's definition carries invisible or control characters; it is blocked"
                    }
                    c if c == MCP_UPSTREAM_FAILED => {
                        "the tool's server is withdrawn: its tool list could not be read again, or it misbehaved and was stopped"
                    }
                    _ => "the tool's definition differs from its pin; it is blocked",
                };
                let (server, tool) = match &at {
                    Some((s, t)) => (Some(s.as_str()), Some(t.as_str())),
                    None => (None, Some(name)),
                };
                return Outcome::denied(code, msg).args(digest).on(server, tool);
            }
        };
        let here = |o: Outcome| o.args(digest).on(Some(&target.server), Some(&target.tool));
        let Some(server) = self.profile.server(&target.server) else {
            return here(Outcome::denied(MCP_TOOL_UNKNOWN, "unknown tool"));
        };
        let Some(policy) = server.tools().get(&target.tool) else {
            return here(Outcome::denied(
                MCP_TOOL_DENIED,
                "the profile does not allow this tool",
            ));
        };
        let empty = Map::new();
        let a = args.as_object().unwrap_or(&empty);
        for (arg, rule) in policy.arguments() {
            match a.get(arg) {
                None if rule.required => {
                    return here(Outcome::denied(
                        MCP_ARGUMENT_REFUSED,
                        &format!("argument `{arg}` is required"),
                    ))
                }
                None => {}
                Some(v) => {
                    if let Err(why) = rule.check(v) {
                        return here(Outcome::denied(
                            MCP_ARGUMENT_REFUSED,
                            &format!("argument `{arg}` {why}"),
                        ));
                    }
                }
            }
        }
        let input = target.entry.definition.get("inputSchema");
        // Fail closed on a top-level schema the subset does not cover: it
        // may declare arguments the checks below cannot see.
        let gap = match input {
            None => Some("the tool has no input schema".to_owned()),
            Some(s) => schema::top_level_gap(s),
        };
        if let Some(why) = &gap {
            if !policy.lenient_input_schema() {
                return here(Outcome::denied(
                    MCP_SCHEMA_REFUSED,
                    &format!("{why}; the profile does not accept it (`lenient_input_schema`)"),
                ));
            }
        }
        if let Some(top) = input.and_then(Value::as_object) {
            let props = top.get("properties").and_then(Value::as_object);
            let open = top
                .get("additionalProperties")
                .is_some_and(|v| v.as_bool() == Some(true) || v.is_object());
            // Without `properties` an understood schema declares no
            // argument; a lenient one may declare them elsewhere.
            if !open && (props.is_some() || gap.is_none()) {
                let declared = |k: &str| props.is_some_and(|p| p.contains_key(k));
                if let Some(k) = a
                    .keys()
                    .find(|k| !declared(k) && !policy.arguments().contains_key(*k))
                {
                    let shown: String = k.chars().take(64).collect();
                    return here(Outcome::denied(
                        MCP_SCHEMA_REFUSED,
                        &format!("argument `{shown}` is not in the tool's input schema"),
                    ));
                }
            }
        }
        if let Some(s) = input {
            if let Err(why) = schema::validate(s, &args) {
                return here(Outcome::denied(
                    MCP_SCHEMA_REFUSED,
                    &format!("input schema: {why}"),
                ));
            }
        }
        if let Some(s) = policy.schema() {
            if let Err(why) = schema::validate(s, &args) {
                return here(Outcome::denied(
                    MCP_SCHEMA_REFUSED,
                    &format!("profile schema: {why}"),
                ));
            }
        }
        let Some(up) = self.upstreams.get(&target.server) else {
            return here(Outcome::denied(MCP_TOOL_UNKNOWN, "unknown tool"));
        };
        let mut fwd = Map::new();
        fwd.insert("name".into(), Value::from(target.tool.clone()));
        fwd.insert("arguments".into(), args);
        let roots = server.path_roots();
        // One deadline for queueing the call to the server and its answer:
        // a server that stops reading cannot hold the call (and its
        // in-flight permit) past it.
        let deadline = self.profile.limits().request_timeout;
        let t0 = std::time::Instant::now();
        // Known as in flight from before it is queued: a cancel that comes
        // while the call waits for room in the queue stops it there.
        let key = (req.conn, req.id.clone());
        let cancel = Arc::new(tokio::sync::Notify::new());
        lock(&self.in_flight).insert(
            key.clone(),
            InFlight::Queueing {
                cancel: cancel.clone(),
                cancelled: false,
            },
        );
        let sent = tokio::select! {
            r = up.send_within("tools/call", Some(fwd), deadline) => r,
            () = cancel.notified() => Err(CallError::Cancelled),
        };
        let res = match sent {
            Ok((uid, rx)) => {
                let cancelled = {
                    let mut calls = lock(&self.in_flight);
                    let was = matches!(
                        calls.get(&key),
                        Some(InFlight::Queueing {
                            cancelled: true,
                            ..
                        })
                    );
                    calls.insert(
                        key.clone(),
                        InFlight::Sent {
                            server: target.server.clone(),
                            uid,
                        },
                    );
                    was
                };
                if cancelled {
                    up.cancel(uid);
                }
                let r = up
                    .wait(uid, rx, deadline.saturating_sub(t0.elapsed()))
                    .await;
                lock(&self.in_flight).remove(&key);
                r
            }
            Err(e) => {
                lock(&self.in_flight).remove(&key);
                Err(e)
            }
        };
        self.deny_input_requests(&res, &target.server).await;
        here(upstream_outcome(
            res,
            &target.server,
            &roots,
            policy.raw_results(),
        ))
    }

    /// The input requests of an `input_required` result (2026-07-28: the
    /// server asks the client for sampling, elicitation or roots inside
    /// its answer) are denied as server-to-client requests are: each
    /// audited (`denied`, `mcp_request_denied`, its method), none reaches
    /// the agent. Nothing is sent back: in this revision the server keeps
    /// no state between rounds, a round continues only when the client
    /// calls again with `inputResponses`, so not calling again is the
    /// whole answer. The request itself ends `mcp_input_refused`.
    ///
    /// The denials are what the upstream caused, not the agent: they are
    /// taken from the upstream's budget (see the module docs of
    /// [`super`]), and one past it stops the upstream instead of being
    /// audited.
    async fn deny_input_requests(&self, r: &Result<Value, CallError>, server: &str) {
        for method in input_requests(r) {
            if !self.spend(server) {
                self.stop_upstream(server).await;
                return;
            }
            let o = Outcome::denied(MCP_REQUEST_DENIED, "").on(Some(server), None);
            let mut e = self.event(None, &o, None);
            e.method = method;
            self.audit.record(e).await;
        }
    }

    /// `resources/list`, `prompts/list`: each server's listing, filtered
    /// to what its profile entry lists, each item neutralised and left
    /// out when it carries a hidden character.
    pub(super) async fn list_listed(&self, req: &Req) -> Outcome {
        let prompts = req.method == "prompts/list";
        let (member, key) = if prompts {
            ("prompts", "name")
        } else {
            ("resources", "uri")
        };
        let mut out = Vec::new();
        for s in self.profile.servers() {
            if req.scope.as_deref().is_some_and(|o| o != s.id()) {
                continue;
            }
            let listed = if prompts { s.prompts() } else { s.resources() };
            if listed.is_empty() {
                continue;
            }
            let Some(up) = self.upstreams.get(s.id()) else {
                continue;
            };
            let r = up
                .request(&req.method, None, self.profile.limits().request_timeout)
                .await;
            let v = match r {
                Ok(v) => v,
                Err(e) => {
                    return upstream_outcome(Err(e), s.id(), &s.path_roots(), false)
                        .on(Some(s.id()), None)
                }
            };
            for item in v
                .get(member)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if !item
                    .get(key)
                    .and_then(Value::as_str)
                    .is_some_and(|k| listed.contains(k))
                {
                    continue;
                }
                // Shown to the agent as a tool's definition is: terminal
                // controls neutralised, and an item still carrying a
                // hidden character (an invisible format character, an
                // SGR escape) left out.
                let mut item = item.clone();
                neutralize_value(&mut item);
                if hidden_character(&item).is_none() {
                    out.push(item);
                }
            }
        }
        let mut m = Map::new();
        m.insert(member.into(), Value::Array(out));
        Outcome::allowed(Value::Object(m))
    }

    /// `resources/read`, `prompts/get`, `completion/complete`: forwarded
    /// to the first server whose profile entry lists the resource or
    /// prompt named.
    pub(super) async fn get_listed(&self, req: &Req) -> Outcome {
        let p = &req.params;
        let (is_prompt, name, fwd): (bool, Option<&str>, Vec<&str>) = match req.method.as_str() {
            "resources/read" => (false, p.get("uri").and_then(Value::as_str), vec!["uri"]),
            "prompts/get" => (
                true,
                p.get("name").and_then(Value::as_str),
                vec!["name", "arguments"],
            ),
            _ => {
                let r = p.get("ref");
                let kind = r.and_then(|r| r.get("type")).and_then(Value::as_str);
                match kind {
                    Some("ref/prompt") => (
                        true,
                        r.and_then(|r| r.get("name")).and_then(Value::as_str),
                        vec!["ref", "argument", "context"],
                    ),
                    Some("ref/resource") => (
                        false,
                        r.and_then(|r| r.get("uri")).and_then(Value::as_str),
                        vec!["ref", "argument", "context"],
                    ),
                    _ => (false, None, vec![]),
                }
            }
        };
        let digest = json::digest(ARGUMENTS_DOMAIN, &Value::Object(p.clone()));
        let Some(name) = name else {
            return Outcome::denied(
                MCP_PARAMS_INVALID,
                "the request names no resource or prompt",
            )
            .args(digest);
        };
        let server = self.profile.servers().iter().find(|s| {
            if req.scope.as_deref().is_some_and(|o| o != s.id()) {
                return false;
            }
            if is_prompt {
                s.prompts().contains(name)
            } else {
                s.resources().contains(name)
            }
        });
        let Some(server) = server else {
            return Outcome::denied(MCP_RESOURCE_DENIED, "not listed in the profile").args(digest);
        };
        let Some(up) = self.upstreams.get(server.id()) else {
            return Outcome::denied(MCP_RESOURCE_DENIED, "not listed in the profile").args(digest);
        };
        let mut params = Map::new();
        for k in fwd {
            if let Some(v) = p.get(k) {
                params.insert(k.into(), v.clone());
            }
        }
        let r = up
            .request(
                &req.method,
                Some(params),
                self.profile.limits().request_timeout,
            )
            .await;
        self.deny_input_requests(&r, server.id()).await;
        upstream_outcome(r, server.id(), &server.path_roots(), false)
            .args(digest)
            .on(Some(server.id()), None)
    }
}
