//! One egress audit event: a connection or a brokered request leaving a
//! session, allowed or refused, as the egress journal records it (before
//! the response flows back). One canonical encoding; the decoder accepts
//! exactly the bytes [`EgressEvent::encode`] writes for a valid value and
//! refuses anything else with `egress_event_invalid` (or a `json_*` code).
//!
//! ```text
//! {"bytes_down":u64,"bytes_up":u64,"code":…?,"credential":…?,"decision":"allowed"|"refused",
//!  "duration_ms":u64,"host":…,"kind":"connection"|"request","method":…?,
//!  "phase":"end"?,"port":1-65535,"seq":u64,"session_id":…,"started_at_ms":u64}
//! ```
//!
//! A decision has no `phase`; `"phase":"end"` marks the end of something
//! allowed earlier: a connection's totals, or a request that failed after
//! it was let through (refused, with the code of the failure).
//!
//! Rules: a refusal names its `egress_*` code and injected no credential;
//! an allowed event names no code; only a request has a method (an
//! uppercase token of at most 16 bytes); the host is a host as
//! [`super::Host::parse`] reads it, in that normal form.

use crate::canon::{self, Form};
use crate::codes::egress::EGRESS_EVENT_INVALID;
use crate::ids::{SecretHandle, SessionId};
use crate::Rejection;
use serde::{Deserialize, Serialize};

/// Largest encoded event.
pub const MAX_EVENT_BYTES: usize = 4096;

/// A connection (a `CONNECT` tunnel or a port mapping) or one request
/// the proxy read (plain HTTP, or inside a tunnel it terminates).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A connection.
    Connection,
    /// A request.
    Request,
}

/// What was decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Let through.
    Allowed,
    /// Refused with a code.
    Refused,
}

/// Whether an event is a decision or the end of what was decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The decision, recorded before anything is released (absent on the
    /// wire).
    #[default]
    Decision,
    /// The end of an allowed connection or request: its totals, or (a
    /// refusal) how it failed after it was let through.
    End,
}

impl Phase {
    fn is_decision(&self) -> bool {
        *self == Phase::Decision
    }
}

/// One audit event (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EgressEvent {
    /// The session.
    pub session_id: SessionId,
    /// The event's number within the session, from 1.
    pub seq: u64,
    /// Connection or request.
    pub kind: EventKind,
    /// Allowed or refused.
    pub decision: Decision,
    /// A decision, or the end of one.
    pub phase: Phase,
    /// The target host (normal form).
    pub host: String,
    /// The target port.
    pub port: u16,
    /// A request's method.
    pub method: Option<String>,
    /// The credential injected into this request, by handle.
    pub credential: Option<SecretHandle>,
    /// A refusal's code.
    pub code: Option<String>,
    /// Bytes from the agent.
    pub bytes_up: u64,
    /// Bytes to the agent.
    pub bytes_down: u64,
    /// When it started, Unix milliseconds.
    pub started_at_ms: u64,
    /// How long it lasted, milliseconds.
    pub duration_ms: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    session_id: String,
    seq: u64,
    kind: EventKind,
    decision: Decision,
    #[serde(default, skip_serializing_if = "Phase::is_decision")]
    phase: Phase,
    host: String,
    port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    credential: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    code: Option<String>,
    bytes_up: u64,
    bytes_down: u64,
    started_at_ms: u64,
    duration_ms: u64,
}

fn bad(m: impl Into<String>) -> Rejection {
    Rejection::new(EGRESS_EVENT_INVALID, m)
}

impl EgressEvent {
    fn check(&self) -> Result<(), Rejection> {
        if self.seq == 0 {
            return Err(bad("seq starts at 1").at("seq"));
        }
        if self.port == 0 {
            return Err(bad("port 0").at("port"));
        }
        let normal =
            super::Host::parse(&self.host).map_err(|r| bad(r.message().to_owned()).at("host"))?;
        let shown = match normal {
            super::Host::Name(n) => n,
            super::Host::Ip(ip) => ip.to_string(),
        };
        if shown != self.host {
            return Err(bad("the host is not in its normal form").at("host"));
        }
        match (self.kind, &self.method) {
            (EventKind::Connection, None) => {}
            (EventKind::Request, Some(m))
                if (1..=16).contains(&m.len()) && m.bytes().all(|b| b.is_ascii_uppercase()) => {}
            _ => return Err(bad("only a request has a method, an uppercase token").at("method")),
        }
        if self.kind == EventKind::Connection && self.credential.is_some() {
            return Err(bad("only a request can have a credential injected").at("credential"));
        }
        let is_egress_code = |c: &str| {
            crate::ErrorCode::all()
                .any(|e| e.area() == crate::codes::Area::Egress && e.as_str() == c)
        };
        match (self.decision, &self.code, &self.credential) {
            (Decision::Allowed, None, _) => {}
            (Decision::Refused, Some(c), None) if is_egress_code(c) => {}
            _ => {
                return Err(bad(
                    "a refusal names its egress code and injected nothing; an allowed event names no code",
                )
                .at("code"))
            }
        }
        if [
            self.bytes_up,
            self.bytes_down,
            self.started_at_ms,
            self.duration_ms,
        ]
        .iter()
        .any(|v| *v > canon::MAX_SAFE_INTEGER)
        {
            return Err(bad("a count beyond 2^53 - 1"));
        }
        Ok(())
    }

    fn to_wire(&self) -> Wire {
        Wire {
            session_id: self.session_id.as_str().to_owned(),
            seq: self.seq,
            kind: self.kind,
            decision: self.decision,
            phase: self.phase,
            host: self.host.clone(),
            port: self.port,
            method: self.method.clone(),
            credential: self.credential.as_ref().map(|c| c.as_str().to_owned()),
            code: self.code.clone(),
            bytes_up: self.bytes_up,
            bytes_down: self.bytes_down,
            started_at_ms: self.started_at_ms,
            duration_ms: self.duration_ms,
        }
    }

    /// The canonical encoding (refuses a value `decode` would refuse).
    pub fn encode(&self) -> Result<Vec<u8>, Rejection> {
        self.check()?;
        let b = canon::encode(&self.to_wire())?;
        if b.len() > MAX_EVENT_BYTES {
            return Err(bad("the event is over 4 KiB"));
        }
        Ok(b)
    }

    /// Decodes strictly: only the canonical encoding of a valid event.
    pub fn decode(bytes: &[u8]) -> Result<EgressEvent, Rejection> {
        let w: Wire = canon::decode(bytes, MAX_EVENT_BYTES, Form::Canonical)?;
        let v = EgressEvent {
            session_id: SessionId::new(w.session_id).map_err(|r| r.at("session_id"))?,
            seq: w.seq,
            kind: w.kind,
            decision: w.decision,
            phase: w.phase,
            host: w.host,
            port: w.port,
            method: w.method,
            credential: w
                .credential
                .map(SecretHandle::new)
                .transpose()
                .map_err(|r| r.at("credential"))?,
            code: w.code,
            bytes_up: w.bytes_up,
            bytes_down: w.bytes_down,
            started_at_ms: w.started_at_ms,
            duration_ms: w.duration_ms,
        };
        v.check()?;
        if v.encode()? != bytes {
            return Err(bad("the bytes are not the encoding of their value"));
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> EgressEvent {
        EgressEvent {
            session_id: SessionId::new("s-1").expect("id"),
            seq: 1,
            kind: EventKind::Request,
            decision: Decision::Allowed,
            phase: Phase::Decision,
            host: "api.openai.com".into(),
            port: 443,
            method: Some("POST".into()),
            credential: Some(SecretHandle::new("openai-key").expect("handle")),
            code: None,
            bytes_up: 812,
            bytes_down: 20_311,
            started_at_ms: 1_796_000_010_000,
            duration_ms: 1_200,
        }
    }

    #[test]
    fn round_trip_and_rules() {
        let e = sample();
        let b = e.encode().expect("encodes");
        assert_eq!(EgressEvent::decode(&b).expect("decodes"), e);
        let refuse = |f: &dyn Fn(&mut EgressEvent)| {
            let mut x = sample();
            f(&mut x);
            x.encode().expect_err("refused").code()
        };
        for f in [
            &(|x: &mut EgressEvent| x.seq = 0) as &dyn Fn(&mut EgressEvent),
            &|x| x.port = 0,
            &|x| x.host = "API.openai.com".into(),
            &|x| x.host = "127.1".into(),
            &|x| x.kind = EventKind::Connection,
            &|x| x.method = Some("post".into()),
            &|x| x.decision = Decision::Refused,
            &|x| x.code = Some("egress_host_not_allowed".into()),
            &|x| {
                x.decision = Decision::Refused;
                x.credential = None;
                x.code = Some("policy_x".into());
            },
            &|x| x.bytes_up = u64::MAX,
            &|x| x.kind = EventKind::Connection,
            &|x| {
                x.method = None;
                x.kind = EventKind::Connection;
            },
            &|x| {
                x.decision = Decision::Refused;
                x.credential = None;
                x.code = Some("egress_".into());
            },
        ] {
            assert_eq!(refuse(f), EGRESS_EVENT_INVALID);
        }
        let mut refused = sample();
        refused.decision = Decision::Refused;
        refused.credential = None;
        refused.code = Some("egress_host_not_allowed".into());
        let b = refused.encode().expect("a refusal encodes");
        assert_eq!(EgressEvent::decode(&b).expect("decodes"), refused);
        // Not canonical: a space; null where absent.
        let mut spaced = b.clone();
        spaced.insert(1, b' ');
        assert!(EgressEvent::decode(&spaced).is_err());
        let mut v: serde_json::Value = serde_json::from_slice(&b).expect("json");
        v["method"] = serde_json::Value::Null;
        let nulled = canon::to_canonical(&v).expect("canon");
        assert!(EgressEvent::decode(&nulled).is_err());
    }
}
