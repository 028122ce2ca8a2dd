//! The request decision: head checks, target parsing (strict ports),
//! name resolution through the policy's hosts table or the system
//! resolver, and the allow-list decision over every address.

use super::record::{audit_failed, Refusal, Seen};
use super::{ConnCtx, Listener};
use crate::meter::{EndpointState, ProxyBody};
use glove_types::codes::egress::*;
use glove_types::egress::{decide, Endpoint, Host};
use hyper::body::Incoming;
use hyper::header::{self};
use hyper::{Method, Request, Response, StatusCode};
use std::net::IpAddr;
use std::num::NonZeroU16;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Most addresses the system resolver's answer is used for.
pub(super) const MAX_RESOLVED: usize = 16;

/// The port of a request target's authority, parsed strictly: `:` and 1
/// to 5 digits making 1-65535, or no port at all (then `default`, when
/// the scheme has one). http's own `port_u16` reads an unparseable or
/// out-of-range port (`:99999`, `:8O`) as no port, which would send the
/// request to the default port.
pub(super) fn authority_port(
    authority: &hyper::http::uri::Authority,
    default: Option<u16>,
) -> Result<NonZeroU16, Refusal> {
    let bad = |m: &str| Refusal::new(EGRESS_TARGET_INVALID, m.to_owned());
    let all = authority.as_str();
    let host_port = all.rsplit_once('@').map_or(all, |(_, hp)| hp);
    let Some(rest) = host_port.strip_prefix(authority.host()) else {
        return Err(bad("the target's authority does not parse"));
    };
    let port = if rest.is_empty() {
        default.ok_or_else(|| bad("the target needs a port 1-65535"))?
    } else {
        let digits = rest.strip_prefix(':').unwrap_or("");
        if digits.is_empty() || digits.len() > 5 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("the target's port is not a number 1-65535"));
        }
        digits
            .parse::<u16>()
            .map_err(|_| bad("the target's port is not a number 1-65535"))?
    };
    NonZeroU16::new(port).ok_or_else(|| bad("the target's port is not a number 1-65535"))
}

/// About how many bytes the head took on the wire.
pub(super) fn head_len<B>(req: &Request<B>) -> usize {
    let line = req.method().as_str().len() + req.uri().to_string().len() + 12;
    req.headers()
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .fold(line + 2, usize::saturating_add)
}

impl ConnCtx {
    /// The checks every request shares before its target is looked at.
    pub(super) fn head_checks(&self, req: &Request<Incoming>) -> Result<(), Refusal> {
        if head_len(req) > self.shared.limits.max_head_bytes {
            return Err(Refusal::new(
                EGRESS_REQUEST_INVALID,
                format!(
                    "the request head is over {} bytes",
                    self.shared.limits.max_head_bytes
                ),
            )
            .status(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE));
        }
        let m = req.method().as_str();
        if !((1..=16).contains(&m.len()) && m.bytes().all(|b| b.is_ascii_uppercase())) {
            return Err(Refusal::new(
                EGRESS_REQUEST_INVALID,
                "the method is not an uppercase token of at most 16 letters",
            ));
        }
        // The usual methods only: TRACE (and IIS's TRACK) answer with the
        // request they got, so a credential put in would come back.
        const METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];
        if !METHODS.contains(&m) {
            return Err(Refusal::new(
                EGRESS_REQUEST_INVALID,
                "only GET, HEAD, POST, PUT, PATCH, DELETE and OPTIONS are forwarded",
            ));
        }
        if req.headers().contains_key(header::UPGRADE) {
            return Err(Refusal::new(
                EGRESS_REQUEST_INVALID,
                "protocol upgrades are not forwarded",
            ));
        }
        Ok(())
    }

    pub(super) async fn proxy_request(&self, req: Request<Incoming>) -> Response<ProxyBody> {
        let (lhost, lport) = self.listener_target();
        if req.method() == Method::CONNECT {
            return self.connect(req).await;
        }
        let seen = Seen::request(req.method(), lhost, lport);
        if let Err(r) = self.head_checks(&req) {
            return self.refuse(&seen, r).await;
        }
        let uri = req.uri().clone();
        let Some(authority) = uri.authority() else {
            let r = Refusal::new(
                EGRESS_REQUEST_INVALID,
                "the proxy forwards only absolute http:// URIs and CONNECT",
            );
            return self.refuse(&seen, r).await;
        };
        let host = match Host::parse(authority.host()) {
            Ok(h) => h,
            Err(r) => return self.refuse(&seen, Refusal::of(&r)).await,
        };
        // A target that cannot be recorded as it is (no port 1-65535) is
        // refused at the listener's address, before any decision.
        let port = match authority_port(authority, Some(80)) {
            Ok(p) => p,
            Err(r) => return self.refuse(&seen, r).await,
        };
        let seen = seen.at(&host, port);
        if uri.scheme_str() != Some("http") || authority.as_str().contains('@') {
            let r = Refusal::new(
                EGRESS_REQUEST_INVALID,
                "only http:// URIs without user information are forwarded (https goes through CONNECT)",
            );
            return self.refuse(&seen, r).await;
        }
        self.forward(req, host, port.get(), seen, false).await
    }

    /// A request on a port mapping or inside a terminated tunnel: for its
    /// one endpoint, origin-form only.
    pub(super) async fn fixed_request(&self, req: Request<Incoming>) -> Response<ProxyBody> {
        let Some(e) = self.fixed_endpoint() else {
            return Refusal::new(EGRESS_REQUEST_INVALID, "no such endpoint").response();
        };
        let host = e.host.clone();
        let port = e.port;
        let tls = matches!(self.listener, Listener::Terminated(_));
        let (shown, event_port) = self.listener_target();
        let seen = Seen::request(req.method(), shown, event_port);
        if let Err(r) = self.head_checks(&req) {
            return self.refuse(&seen, r).await;
        }
        if req.method() == Method::CONNECT || req.uri().authority().is_some() {
            let r = Refusal::new(
                EGRESS_REQUEST_INVALID,
                "a port mapping or terminated tunnel takes origin-form requests (it reaches one endpoint)",
            );
            return self.refuse(&seen, r).await;
        }
        self.forward(req, host, port, seen, tls).await
    }

    /// Resolves a name: the policy's `hosts` table when it has one (and
    /// nothing else), the system resolver otherwise.
    pub(super) async fn resolve(&self, host: &Host, port: u16) -> Vec<IpAddr> {
        let Host::Name(name) = host else {
            return Vec::new();
        };
        self.shared.lookups.fetch_add(1, Ordering::SeqCst);
        if let Some(table) = self.shared.settings.hosts() {
            return table.get(name).cloned().unwrap_or_default();
        }
        let lookup = tokio::net::lookup_host((name.as_str(), port));
        match tokio::time::timeout(self.shared.limits.connect_deadline, lookup).await {
            Ok(Ok(addrs)) => {
                let mut out: Vec<IpAddr> = Vec::new();
                for a in addrs {
                    if !out.contains(&a.ip()) {
                        out.push(a.ip());
                    }
                    if out.len() >= MAX_RESOLVED {
                        break;
                    }
                }
                out
            }
            _ => Vec::new(),
        }
    }

    /// Decides a target: allowed by the policy (every address checked),
    /// then within its endpoint's limits. Returns the addresses to try and
    /// the endpoint's index.
    pub(super) async fn decide(
        &self,
        host: &Host,
        port: u16,
    ) -> Result<(Vec<IpAddr>, usize), Refusal> {
        if self.shared.audit.failed() {
            return Err(audit_failed());
        }
        let s = &self.shared.settings;
        // Host and port first, with no address: a name that is not an
        // endpoint is never looked up (a lookup is itself a way out, to
        // whatever resolver the host uses).
        if !s
            .endpoints()
            .iter()
            .any(|e| &e.host == host && e.port == port)
        {
            let e = decide(s.endpoints(), s.allow_private(), host, port, &[])
                .err()
                .map(|r| Refusal::of(&r))
                .unwrap_or_else(|| Refusal::new(EGRESS_HOST_NOT_ALLOWED, "not an endpoint"));
            return Err(e);
        }
        let resolved = self.resolve(host, port).await;
        let addrs = decide(s.endpoints(), s.allow_private(), host, port, &resolved)
            .map_err(|r| Refusal::of(&r))?;
        let index = s
            .endpoints()
            .iter()
            .position(|e| &e.host == host && e.port == port)
            .ok_or_else(|| Refusal::new(EGRESS_HOST_NOT_ALLOWED, "not an endpoint"))?;
        Ok((addrs, index))
    }

    pub(super) fn endpoint(&self, index: usize) -> Result<(Endpoint, Arc<EndpointState>), Refusal> {
        let e = self.shared.settings.endpoints().get(index);
        let st = self.shared.endpoints.get(index);
        match (e, st) {
            (Some(e), Some(st)) => Ok((e.clone(), st.clone())),
            _ => Err(Refusal::new(EGRESS_HOST_NOT_ALLOWED, "not an endpoint")),
        }
    }
}
