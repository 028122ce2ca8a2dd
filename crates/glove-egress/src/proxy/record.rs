//! What the proxy records and answers: what an event is about
//! ([`Seen`]), the events themselves, and refusals — audited, then
//! answered with their code.

use super::{elapsed_ms, event_host, now_ms, ConnCtx};
use crate::audit::Tally;
use crate::meter::ProxyBody;
use glove_types::codes::egress::*;
use glove_types::codes::ErrorCode;
use glove_types::egress::event::{Decision, EgressEvent, EventKind};
use glove_types::egress::Host;
use glove_types::ids::SecretHandle;
use glove_types::Rejection;
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Method, Response, StatusCode};
use std::num::NonZeroU16;
use std::sync::atomic::Ordering;
use tokio::time::Instant;

/// The refusal header.
pub(super) const REFUSAL_HEADER: &str = "x-glove-refusal";

/// What an event is about, as far as the proxy knows it. The port is
/// never 0 (an event cannot name it): a target whose port is not 1-65535
/// is refused at the listener's own address instead.
#[derive(Clone, Debug)]
pub(super) struct Seen {
    pub(super) kind: EventKind,
    pub(super) host: String,
    pub(super) port: NonZeroU16,
    pub(super) method: Option<String>,
    pub(super) started_ms: u64,
    pub(super) t0: Instant,
}

impl Seen {
    pub(super) fn connection(host: String, port: NonZeroU16) -> Seen {
        Seen {
            kind: EventKind::Connection,
            host,
            port,
            method: None,
            started_ms: now_ms(),
            t0: Instant::now(),
        }
    }

    pub(super) fn request(method: &Method, host: String, port: NonZeroU16) -> Seen {
        let m = method.as_str();
        let ok = (1..=16).contains(&m.len()) && m.bytes().all(|b| b.is_ascii_uppercase());
        Seen {
            kind: EventKind::Request,
            host,
            port,
            method: Some(if ok { m.to_owned() } else { "INVALID".into() }),
            started_ms: now_ms(),
            t0: Instant::now(),
        }
    }

    pub(super) fn at(mut self, host: &Host, port: NonZeroU16) -> Seen {
        self.host = event_host(host);
        self.port = port;
        self
    }
}

/// A refusal: its code, message and HTTP status.
#[derive(Debug)]
pub(super) struct Refusal {
    pub(super) code: ErrorCode,
    pub(super) message: String,
    pub(super) status: StatusCode,
}

impl Refusal {
    pub(super) fn of(r: &Rejection) -> Refusal {
        Refusal::new(r.code(), r.message())
    }

    pub(super) fn new(code: ErrorCode, message: impl Into<String>) -> Refusal {
        let status = if code == EGRESS_REQUEST_INVALID || code == EGRESS_TARGET_INVALID {
            StatusCode::BAD_REQUEST
        } else if code == EGRESS_UPSTREAM_FAILED {
            StatusCode::BAD_GATEWAY
        } else if code == EGRESS_AUDIT_FAILED {
            StatusCode::SERVICE_UNAVAILABLE
        } else if code == EGRESS_TIMEOUT {
            StatusCode::REQUEST_TIMEOUT
        } else {
            StatusCode::FORBIDDEN
        };
        Refusal {
            code,
            message: message.into(),
            status,
        }
    }

    pub(super) fn status(mut self, s: StatusCode) -> Refusal {
        self.status = s;
        self
    }

    pub(super) fn response(&self) -> Response<ProxyBody> {
        let body = format!(
            "glove egress refused: {}: {}\n",
            self.code.as_str(),
            self.message
        );
        let mut r = Response::new(ProxyBody::full(body));
        *r.status_mut() = self.status;
        if let Ok(v) = HeaderValue::from_str(self.code.as_str()) {
            r.headers_mut()
                .insert(HeaderName::from_static(REFUSAL_HEADER), v);
        }
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        r
    }
}

pub(super) fn audit_failed() -> Refusal {
    Refusal::new(
        EGRESS_AUDIT_FAILED,
        "the egress journal could not record the decision",
    )
}

impl ConnCtx {
    pub(super) fn event(
        &self,
        seen: &Seen,
        decision: Decision,
        code: Option<ErrorCode>,
        credential: Option<SecretHandle>,
        bytes_up: u64,
        bytes_down: u64,
    ) -> EgressEvent {
        EgressEvent {
            phase: glove_types::egress::event::Phase::Decision,
            session_id: self.shared.session_id.clone(),
            seq: 0,
            kind: seen.kind,
            decision,
            host: seen.host.clone(),
            port: seen.port.get(),
            method: seen.method.clone(),
            credential,
            code: code.map(|c| c.as_str().to_owned()),
            bytes_up,
            bytes_down,
            started_at_ms: seen.started_ms,
            duration_ms: elapsed_ms(seen.t0),
        }
    }

    /// Audits a refusal; `false` if the journal did not take it.
    pub(super) async fn audit_refusal(&self, seen: &Seen, r: &Rejection) -> bool {
        if !self.shared.refusal_event_allowed() {
            self.shared
                .refusals_unjournaled
                .fetch_add(1, Ordering::SeqCst);
            return true;
        }
        let ev = self.event(seen, Decision::Refused, Some(r.code()), None, 0, 0);
        self.shared.audit.record(ev, Tally::Decision).await
    }

    /// Audits a refusal, then answers it (or `503` if it was not recorded).
    pub(super) async fn refuse(&self, seen: &Seen, r: Refusal) -> Response<ProxyBody> {
        // A flood of refused requests (each its own fsync) would fill the
        // journal and close the audit: past the per-second budget they
        // are answered and counted, not journaled one by one.
        if !self.shared.refusal_event_allowed() {
            self.shared
                .refusals_unjournaled
                .fetch_add(1, Ordering::SeqCst);
            return r.response();
        }
        let ev = self.event(seen, Decision::Refused, Some(r.code), None, 0, 0);
        if self.shared.audit.record(ev, Tally::Decision).await {
            r.response()
        } else {
            audit_failed().response()
        }
    }

    /// The closing event of a mapped connection or terminated tunnel.
    pub(super) async fn close_event(&self) {
        let (host, port) = self.listener_target();
        let seen = Seen {
            kind: EventKind::Connection,
            host,
            port,
            method: None,
            started_ms: self.started_ms,
            t0: self.t0,
        };
        let up = self.up.load(Ordering::SeqCst);
        let down = self.down.load(Ordering::SeqCst);
        let ev = self.event(&seen, Decision::Allowed, None, None, up, down);
        let _ = self.shared.audit.record(ev, Tally::Closing).await;
    }
}
