//! Forwarding: the outgoing head, the upstream connection (TLS verified
//! against the configured roots where the tunnel was terminated), the
//! dispatch, and the checks a response passes before it is released
//! (framing, content coding, reflected credentials, the byte limit).

use super::record::{audit_failed, Refusal, Seen};
use super::serve::hard_head_limit;
use super::{event_host, ConnCtx};
use crate::audit::Tally;
use crate::meter::{after, EndpointState, Flow, Metered, ProxyBody};
use glove_types::codes::egress::*;
use glove_types::egress::event::{Decision, EgressEvent};
use glove_types::egress::Host;
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode, Uri, Version};
use hyper_util::rt::TokioIo;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use tokio::net::TcpStream;

impl ConnCtx {
    /// Forwards one request to a decided target over a new upstream
    /// connection (TLS, verified, when `tls`), auditing the decision before
    /// any byte of the request leaves.
    pub(super) async fn forward(
        &self,
        req: Request<Incoming>,
        host: Host,
        port: u16,
        seen: Seen,
        tls: bool,
    ) -> Response<ProxyBody> {
        match self.try_forward(req, &host, port, &seen, tls).await {
            Ok(r) => r,
            Err(r) => self.refuse(&seen, r).await,
        }
    }

    pub(super) async fn try_forward(
        &self,
        req: Request<Incoming>,
        host: &Host,
        port: u16,
        seen: &Seen,
        tls: bool,
    ) -> Result<Response<ProxyBody>, Refusal> {
        let (addrs, index) = self.decide(host, port).await?;
        let (ep, st) = self.endpoint(index)?;
        let (mut parts, body) = req.into_parts();
        let uri_text = parts.uri.to_string();
        let texts = [parts.method.as_str(), uri_text.as_str()];
        // A placeholder in a header that is not forwarded (hop-by-hop, or
        // named by `Connection`) is misdirected like any other.
        let dropped = strip_hop_by_hop(&mut parts.headers);
        self.shared
            .broker
            .refuse_dropped(&dropped)
            .map_err(|r| Refusal::of(&r))?;
        let injected = self
            .shared
            .broker
            .apply(Some(&ep), tls, &texts, &mut parts.headers)
            .map_err(|r| Refusal::of(&r))?;
        // Every credential bound to the endpoint, injected now or not: an
        // endpoint may echo one, or keep it and hand it back later.
        let secrets = crate::meter::Secrets::new(self.shared.broker.values_for(&ep));
        self.outgoing_head(&mut parts, host, port, tls, !secrets.is_empty())?;
        // What the upstream receives counts against the endpoint's bytes,
        // its head included: taken before the decision, refused whole.
        let up_flow = Flow {
            endpoint: st.clone(),
            session: self.shared.bytes_up.clone(),
            connection: self.up.clone(),
        };
        let head = wire_head_len(&parts);
        self.take_budget(&st, &ep, head)?;
        up_flow.note(head);
        // Room for the decision and the failure that may follow it.
        if !self.shared.audit.ensure_room(2) {
            return Err(audit_failed());
        }
        // The decision (with the credential it injects) is durable before
        // anything of the request leaves: whatever happens upstream, the
        // journal says the request went.
        let ev = self.event(seen, Decision::Allowed, None, injected.handle.clone(), 0, 0);
        if !self.shared.audit.record(ev, Tally::Decision).await {
            return Ok(audit_failed().response());
        }
        // The end event a failure of the response body (after its head went
        // out) is recorded with.
        let end = self.event(
            seen,
            Decision::Refused,
            Some(EGRESS_UPSTREAM_FAILED),
            None,
            0,
            0,
        );
        let request = Request::from_parts(
            parts,
            Metered::new(body, up_flow, self.shared.limits.idle_deadline),
        );
        match self
            .dispatch(request, host, port, tls, &addrs, &st, secrets, end)
            .await
        {
            Ok(resp) => Ok(resp),
            Err(r) => {
                // Let through, then failed: the end of the request, with
                // the failure's code.
                let ev = self.event(seen, Decision::Refused, Some(r.code), None, 0, 0);
                if self.shared.audit.record(ev, Tally::Failed).await {
                    Ok(r.response())
                } else {
                    Ok(audit_failed().response())
                }
            }
        }
    }

    /// Makes a request's head what the upstream gets: origin-form target,
    /// HTTP/1.1, the endpoint's `Host`, no extensions, and (to an endpoint
    /// a credential is bound to, whose responses are checked) a request
    /// for an uncompressed answer.
    pub(super) fn outgoing_head(
        &self,
        parts: &mut hyper::http::request::Parts,
        host: &Host,
        port: u16,
        tls: bool,
        checked: bool,
    ) -> Result<(), Refusal> {
        if checked {
            // Compressed bytes could not be checked.
            parts.headers.insert(
                header::ACCEPT_ENCODING,
                hyper::header::HeaderValue::from_static("identity"),
            );
        }
        let path = parts
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| hyper::http::uri::PathAndQuery::from_static("/"));
        parts.uri = Uri::from(path);
        parts.version = Version::HTTP_11;
        let host_value = host_header(host, port, tls)
            .ok_or_else(|| Refusal::new(EGRESS_TARGET_INVALID, "the host makes no Host header"))?;
        parts.headers.insert(header::HOST, host_value);
        parts.extensions = Default::default();
        Ok(())
    }

    /// Sends an allowed request to its endpoint and returns the response
    /// to release, its body metered and checked for `secrets`.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn dispatch(
        &self,
        request: Request<Metered>,
        host: &Host,
        port: u16,
        tls: bool,
        addrs: &[IpAddr],
        st: &Arc<EndpointState>,
        secrets: crate::meter::Secrets,
        end: EgressEvent,
    ) -> Result<Response<ProxyBody>, Refusal> {
        let upstream = self.connect_upstream(addrs, port).await?;
        let idle = self.shared.limits.idle_deadline;
        let upstream_failed =
            |what: &str| Refusal::new(EGRESS_UPSTREAM_FAILED, format!("the endpoint {what}"));
        let resp = if tls {
            let stream = self.upstream_tls(host, upstream).await?;
            self.send_upstream(stream, request).await?
        } else {
            self.send_upstream(upstream, request).await?
        };
        if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
            return Err(upstream_failed(
                "switched protocols, which is not forwarded",
            ));
        }
        let (mut rparts, rbody) = resp.into_parts();
        // A transfer coding other than chunked would reach the agent
        // undone and unannounced (its header is hop-by-hop), and could hide
        // a credential from the check below: never forwarded. So would a
        // second layer of chunked (`chunked, chunked`, two fields, or a
        // list hyper does not read as chunked, such as `chunked,`).
        if !single_chunked_or_none(&rparts.headers) {
            return Err(upstream_failed(
                "answered with a transfer coding other than chunked, which is not forwarded",
            ));
        }
        // An endpoint that echoes the request (an error message quoting the
        // key, a debugging echo) must not hand the real value back. Its
        // content coding is judged on every field, before hop-by-hop
        // stripping (which a `Connection` naming `Content-Encoding` would
        // otherwise use to hide it).
        if !secrets.is_empty()
            && list_elements(&rparts.headers, header::CONTENT_ENCODING)
                .iter()
                .any(|t| t != "identity")
        {
            return Err(upstream_failed(
                "answered with a content encoding, which the proxy cannot check for credentials",
            ));
        }
        strip_hop_by_hop(&mut rparts.headers);
        rparts.extensions = Default::default();
        if !secrets.is_empty()
            && rparts.headers.iter().any(|(n, h)| {
                secrets.found_in(n.as_str().as_bytes()) || secrets.found_in(h.as_bytes())
            })
        {
            return Err(Refusal::new(
                EGRESS_CREDENTIAL_REFLECTED,
                "the endpoint's response head carried a brokered credential",
            )
            .status(StatusCode::BAD_GATEWAY));
        }
        let down_flow = Flow {
            endpoint: st.clone(),
            session: self.shared.bytes_down.clone(),
            connection: self.down.clone(),
        };
        // The response head counts against the endpoint's byte limit as the
        // request head does: an endpoint could otherwise hand the agent any
        // amount in header fields past a small budget.
        let head = wire_response_head_len(&rparts);
        if !st.reserve(head) {
            return Err(Refusal::new(
                EGRESS_LIMIT_REACHED,
                format!("the response head ({head} bytes) is over what is left of the endpoint's byte limit"),
            )
            .status(StatusCode::BAD_GATEWAY));
        }
        down_flow.note(head);
        let shared = self.shared.clone();
        let metered = Metered::new(rbody, down_flow, idle)
            .withholding_secrets(secrets)
            .on_failure(move |code| {
                let mut ev = end;
                ev.code = Some(code.as_str().to_owned());
                tokio::spawn(async move {
                    let _ = shared.audit.record(ev, Tally::Failed).await;
                });
            });
        Ok(Response::from_parts(rparts, ProxyBody::stream(metered)))
    }

    /// Connects to the checked addresses in order, the first that works,
    /// all within the connect deadline.
    pub(super) async fn connect_upstream(
        &self,
        addrs: &[IpAddr],
        port: u16,
    ) -> Result<TcpStream, Refusal> {
        let deadline = after(self.shared.limits.connect_deadline);
        let mut timed_out = false;
        for ip in addrs {
            match tokio::time::timeout_at(deadline, TcpStream::connect(SocketAddr::new(*ip, port)))
                .await
            {
                Ok(Ok(s)) => {
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Ok(Err(_)) => {}
                Err(_) => {
                    timed_out = true;
                    break;
                }
            }
        }
        if timed_out {
            Err(Refusal::new(
                EGRESS_UPSTREAM_FAILED,
                "connecting to the endpoint timed out",
            )
            .status(StatusCode::GATEWAY_TIMEOUT))
        } else {
            Err(Refusal::new(
                EGRESS_UPSTREAM_FAILED,
                "no address of the endpoint accepted a connection",
            ))
        }
    }

    /// TLS to the upstream as `host`, verified against the configured
    /// roots, within the connect deadline.
    pub(super) async fn upstream_tls(
        &self,
        host: &Host,
        tcp: TcpStream,
    ) -> Result<tokio_rustls::client::TlsStream<TcpStream>, Refusal> {
        let name = rustls::pki_types::ServerName::try_from(event_host(host)).map_err(|_| {
            Refusal::new(EGRESS_TARGET_INVALID, "the host is not a TLS server name")
        })?;
        let connector = tokio_rustls::TlsConnector::from(self.shared.tls_client.clone());
        let handshake = connector.connect(name, tcp);
        match tokio::time::timeout(self.shared.limits.connect_deadline, handshake).await {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => Err(Refusal::new(
                EGRESS_UPSTREAM_FAILED,
                format!("the endpoint's TLS failed: {e}"),
            )),
            Err(_) => Err(Refusal::new(
                EGRESS_UPSTREAM_FAILED,
                "the endpoint's TLS handshake timed out",
            )
            .status(StatusCode::GATEWAY_TIMEOUT)),
        }
    }

    /// Sends one request on a new HTTP/1.1 client connection over
    /// `stream` and waits (idle deadline) for the response head.
    pub(super) async fn send_upstream<S>(
        &self,
        stream: S,
        request: Request<Metered>,
    ) -> Result<Response<Incoming>, Refusal>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let upstream_failed =
            |what: &str| Refusal::new(EGRESS_UPSTREAM_FAILED, format!("the endpoint {what}"));
        let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
            .max_buf_size(hard_head_limit(&self.shared.limits))
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|_| upstream_failed("failed the HTTP handshake"))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let idle = self.shared.limits.idle_deadline;
        match tokio::time::timeout(idle, sender.send_request(request)).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(_)) => Err(upstream_failed("failed before its response head")),
            Err(_) => Err(upstream_failed("sent no response head in time")
                .status(StatusCode::GATEWAY_TIMEOUT)),
        }
    }
}

/// Removes the hop-by-hop headers (the fixed ones and those `Connection`
/// names) and returns them: what the proxy does not forward must still be
/// checked for placeholders.
pub(super) fn strip_hop_by_hop(h: &mut HeaderMap) -> HeaderMap {
    let mut removed = HeaderMap::new();
    let named: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|s| s.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .filter(|n| n != header::HOST && n != header::CONTENT_LENGTH)
        .collect();
    for n in named {
        take_all(h, &mut removed, n);
    }
    for n in [
        header::CONNECTION,
        HeaderName::from_static("proxy-connection"),
        header::PROXY_AUTHORIZATION,
        HeaderName::from_static("keep-alive"),
        header::TE,
        header::TRAILER,
        header::UPGRADE,
        header::TRANSFER_ENCODING,
    ] {
        take_all(h, &mut removed, n);
    }
    removed
}

pub(super) fn take_all(from: &mut HeaderMap, to: &mut HeaderMap, name: HeaderName) {
    if let hyper::http::header::Entry::Occupied(e) = from.entry(name) {
        let (name, values) = e.remove_entry_mult();
        for v in values {
            to.append(name.clone(), v);
        }
    }
}

/// The elements of a comma-separated list header, every field of it
/// (empty elements skipped); a value that is not text is one element
/// that matches nothing.
pub(super) fn list_elements(h: &HeaderMap, name: HeaderName) -> Vec<String> {
    h.get_all(name)
        .iter()
        .flat_map(|v| match v.to_str() {
            Ok(s) => s
                .split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>(),
            Err(_) => vec!["\u{fffd}".to_owned()],
        })
        .collect()
}

/// Whether a response's transfer coding is none or exactly one `chunked`
/// (one field, one element, any case): the only framing hyper undoes
/// whole. Anything else (`gzip, chunked`, `chunked, chunked`, two fields,
/// `chunked,`, which hyper reads as not chunked and passes on to the
/// close with its framing) would reach the agent with a coding still on.
pub(super) fn single_chunked_or_none(h: &HeaderMap) -> bool {
    let mut fields = h.get_all(header::TRANSFER_ENCODING).iter();
    match (fields.next(), fields.next()) {
        (None, _) => true,
        (Some(v), None) => v
            .to_str()
            .is_ok_and(|s| s.trim().eq_ignore_ascii_case("chunked")),
        _ => false,
    }
}

/// The bytes a request head takes as the proxy hands it to hyper (the
/// request line, each field, the blank line); hyper may add a framing
/// field of its own.
pub(super) fn wire_head_len(parts: &hyper::http::request::Parts) -> u64 {
    let target = parts.uri.path_and_query().map_or(1, |p| p.as_str().len());
    let line = parts.method.as_str().len() + 1 + target + " HTTP/1.1\r\n".len();
    head_len(line, &parts.headers)
}

/// The length of a response head as the agent gets it (status line, each
/// field, the blank line), for the byte limit.
pub(super) fn wire_response_head_len(parts: &hyper::http::response::Parts) -> u64 {
    let reason = parts.status.canonical_reason().map_or(0, str::len);
    let line = "HTTP/1.1 200 ".len() + reason + 2;
    head_len(line, &parts.headers)
}

/// A head's length: its first line, each field (`name: value\r\n`), the
/// blank line.
fn head_len(first_line: usize, headers: &hyper::HeaderMap) -> u64 {
    let total = headers
        .iter()
        .map(|(n, v)| n.as_str().len() + 2 + v.len() + 2)
        .fold(first_line + 2, usize::saturating_add);
    u64::try_from(total).unwrap_or(u64::MAX)
}

/// The Host header for a target (its port left out when it is the
/// scheme's default).
pub(super) fn host_header(host: &Host, port: u16, tls: bool) -> Option<HeaderValue> {
    let default = if tls { 443 } else { 80 };
    let s = if port == default {
        host.to_string()
    } else {
        format!("{host}:{port}")
    };
    HeaderValue::from_str(&s).ok()
}
