//! The event's canonical encoding: its wire form, the checks every event
//! passes, and [`AuditEvent::encode`] and [`AuditEvent::decode`].

use super::*;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    arguments_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    count: Option<u64>,
    decision: Decision,
    latency_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result_sha256: Option<String>,
    seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    server: Option<String>,
    session_id: String,
    started_at_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool: Option<String>,
}

fn bad(m: impl Into<String>) -> Rejection {
    Rejection::new(MCP_EVENT_INVALID, m)
}

fn one_of(code: Option<ErrorCode>, set: &[ErrorCode]) -> bool {
    code.is_some_and(|c| set.contains(&c))
}

impl AuditEvent {
    fn check(&self) -> Result<(), Rejection> {
        if self.seq == 0 {
            return Err(bad("seq starts at 1").at("seq"));
        }
        if self
            .server
            .as_deref()
            .is_some_and(|s| !crate::profile::is_server_id(s))
        {
            return Err(bad("not a server id").at("server"));
        }
        if self
            .tool
            .as_deref()
            .is_some_and(|t| !crate::profile::is_tool_name(t))
        {
            return Err(bad("not a tool name").at("tool"));
        }
        if self.method.as_deref().is_some_and(|m| !is_method(m)) {
            return Err(bad("not a method").at("method"));
        }
        if self.code.is_some_and(|c| c.area() != Area::Mcp) {
            return Err(bad("codes are from the mcp area").at("code"));
        }
        let (code, result) = (self.code, self.result_sha256.is_some());
        let ok = match self.decision {
            Decision::Allowed => code.is_none() && result,
            // A pin mismatch names the digest it saw.
            Decision::Denied => {
                code.is_some()
                    && (!result || one_of(code, &[MCP_PIN_MISMATCH, MCP_DEFINITION_REFUSED]))
            }
            Decision::UpstreamError => {
                (one_of(
                    code,
                    &[MCP_UPSTREAM_FAILED, MCP_UPSTREAM_TIMEOUT, MCP_INPUT_REFUSED],
                ) && !result)
                    || one_of(code, &[MCP_UPSTREAM_ERROR])
            }
            Decision::Dropped => {
                one_of(
                    code,
                    &[
                        MCP_FRAME_INVALID,
                        MCP_FRAME_TOO_LARGE,
                        MCP_BATCH_REFUSED,
                        MCP_NOTIFICATION_IGNORED,
                    ],
                ) && !result
                    && self.tool.is_none()
            }
            Decision::Pinned => {
                code.is_none() && result && self.tool.is_some() && self.server.is_some()
            }
            Decision::Cancelled => code.is_none() && !result,
            Decision::Counted => {
                code.is_none()
                    && !result
                    && self.tool.is_none()
                    && self.server.is_none()
                    && self.method.is_none()
                    && self.arguments_sha256.is_none()
            }
        };
        let counted = self.decision == Decision::Counted;
        if self
            .count
            .is_some_and(|n| n == 0 || n > canon::MAX_SAFE_INTEGER)
            || self.count.is_some() != counted
        {
            return Err(bad("only a counted event has a count, of 1 to 2^53 - 1").at("count"));
        }
        if !ok {
            return Err(bad("the code and result digest do not fit the decision").at("decision"));
        }
        if self.latency_ms > canon::MAX_SAFE_INTEGER || self.started_at_ms > canon::MAX_SAFE_INTEGER
        {
            return Err(bad("a count beyond 2^53 - 1"));
        }
        Ok(())
    }

    /// The canonical encoding (refuses a value [`decode`](Self::decode)
    /// would refuse).
    pub fn encode(&self) -> Result<Vec<u8>, Rejection> {
        self.check()?;
        let w = Wire {
            arguments_sha256: self.arguments_sha256.map(|d| d.to_hex()),
            code: self.code.map(|c| c.as_str().to_owned()),
            count: self.count,
            decision: self.decision,
            latency_ms: self.latency_ms,
            method: self.method.clone(),
            result_sha256: self.result_sha256.map(|d| d.to_hex()),
            seq: self.seq,
            server: self.server.clone(),
            session_id: self.session_id.as_str().to_owned(),
            started_at_ms: self.started_at_ms,
            tool: self.tool.clone(),
        };
        let b = canon::encode(&w).map_err(|r| bad(r.to_string()))?;
        if b.len() > MAX_EVENT_BYTES {
            return Err(bad("the event is over 4 KiB"));
        }
        Ok(b)
    }

    /// Decodes strictly: only the canonical encoding of a valid event.
    pub fn decode(bytes: &[u8]) -> Result<AuditEvent, Rejection> {
        let w: Wire = canon::decode(bytes, MAX_EVENT_BYTES, Form::Canonical)
            .map_err(|r| bad(format!("{}: {}", r.code(), r.message())).at(r.location()))?;
        let digest = |s: Option<String>, at: &str| {
            s.map(|s| Sha256Digest::parse(&s).map_err(|r| bad(r.message().to_owned()).at(at)))
                .transpose()
        };
        let code = match w.code {
            None => None,
            Some(c) => {
                Some(ErrorCode::from_code(&c).ok_or_else(|| bad("unknown code").at("code"))?)
            }
        };
        let e = AuditEvent {
            seq: w.seq,
            session_id: SessionId::new(w.session_id)
                .map_err(|r| bad(r.message().to_owned()).at("session_id"))?,
            server: w.server,
            tool: w.tool,
            method: w.method,
            decision: w.decision,
            code,
            arguments_sha256: digest(w.arguments_sha256, "arguments_sha256")?,
            result_sha256: digest(w.result_sha256, "result_sha256")?,
            latency_ms: w.latency_ms,
            started_at_ms: w.started_at_ms,
            count: w.count,
        };
        // `null` for an optional member is canonical JSON but not the
        // encoding (which omits it): only the exact bytes pass.
        if e.encode()? != bytes {
            return Err(bad("not the canonical encoding of the event"));
        }
        Ok(e)
    }
}
