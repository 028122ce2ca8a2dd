//! The handshake with an upstream (`server/discover`, else `initialize`;
//! see the module docs) and the listing of its tools.

use super::*;

impl Upstream {
    /// The handshake (see the module docs).
    pub async fn handshake(&self, limits: &Limits) -> Result<Handshake, CallError> {
        let wait = DISCOVER_WAIT.min(limits.startup_timeout);
        let mut p = Map::new();
        p.insert("_meta".into(), self.meta());
        match self.request("server/discover", Some(p), wait).await {
            Ok(r) => {
                let speaks = r
                    .get("supportedVersions")
                    .and_then(Value::as_array)
                    .is_some_and(|v| v.iter().any(|x| x.as_str() == Some(MODERN_REVISION)));
                if speaks {
                    self.modern.store(true, Ordering::SeqCst);
                    return Ok(Handshake {
                        revision: MODERN_REVISION.into(),
                        instructions: instructions(&r),
                    });
                }
            }
            Err(CallError::Rpc(e))
                if e.code == frame::UNSUPPORTED_PROTOCOL_VERSION
                    || e.code == frame::UNSUPPORTED_PROTOCOL_VERSION_DRAFT =>
            {
                return Err(CallError::Failed(
                    "the server speaks a stateless revision other than 2026-07-28".into(),
                ));
            }
            Err(CallError::Rpc(_)) | Err(CallError::Timeout) => {}
            Err(e) => return Err(e),
        }
        let mut p = Map::new();
        p.insert("protocolVersion".into(), Value::from(LEGACY_REVISION));
        p.insert("capabilities".into(), self.capabilities.clone());
        p.insert("clientInfo".into(), client_info());
        let r = self
            .request("initialize", Some(p), limits.startup_timeout)
            .await?;
        let version = r
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !LEGACY_ACCEPTED.contains(&version) {
            return Err(CallError::Failed(
                "the server answered initialize with a revision the mediator does not speak".into(),
            ));
        }
        let revision = version.to_owned();
        self.notify("notifications/initialized", None).await;
        Ok(Handshake {
            revision,
            instructions: instructions(&r),
        })
    }

    /// Every tool the server lists, following `nextCursor` for at most
    /// `limits.max_tool_pages` pages and `limits.max_tools` tools. A
    /// server without tools (-32601) lists none.
    pub async fn list_tools(&self, limits: &Limits) -> Result<Vec<Value>, CallError> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..limits.max_tool_pages {
            let params = cursor.take().map(|c| {
                let mut m = Map::new();
                m.insert("cursor".into(), Value::from(c));
                m
            });
            let r = match self
                .request("tools/list", params, limits.request_timeout)
                .await
            {
                Ok(r) => r,
                Err(CallError::Rpc(e)) if e.code == frame::METHOD_NOT_FOUND && out.is_empty() => {
                    return Ok(out)
                }
                Err(e) => return Err(e),
            };
            let Some(tools) = r.get("tools").and_then(Value::as_array) else {
                return Err(CallError::Failed("tools/list without a tools array".into()));
            };
            out.extend(tools.iter().cloned());
            if out.len() > limits.max_tools {
                return Err(CallError::Failed(format!(
                    "the server lists more than {} tools",
                    limits.max_tools
                )));
            }
            match r.get("nextCursor") {
                Some(Value::String(c)) if !c.is_empty() => cursor = Some(c.clone()),
                _ => return Ok(out),
            }
        }
        Err(CallError::Failed(format!(
            "tools/list has more than {} pages",
            limits.max_tool_pages
        )))
    }
}

fn instructions(r: &Value) -> Option<String> {
    r.get("instructions")
        .and_then(Value::as_str)
        .filter(|s| s.len() <= MAX_INSTRUCTIONS)
        .map(str::to_owned)
}
