//! The proxy proper: the accept loop over the channel, the per-connection
//! HTTP server (hyper), and each decision — `CONNECT` tunnels,
//! absolute-URI requests and port-mapped requests — audited before
//! anything from upstream reaches the agent.

use crate::audit::{Audit, Tally};
use crate::broker::Broker;
use crate::channel::{Channel, Received};
use crate::meter::{after, idle_watch, AgentIo, EndpointState, Flow, IoMeter, Metered, ProxyBody};
use crate::relay::relay;
use crate::ProxyLimits;
use glove_types::codes::egress::*;
use glove_types::codes::ErrorCode;
use glove_types::egress::event::{Decision, EgressEvent, EventKind};
use glove_types::egress::settings::EgressSettings;
use glove_types::egress::{decide, Endpoint, Host};
use glove_types::ids::{SecretHandle, SessionId};
use glove_types::Rejection;
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri, Version};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU16;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Most addresses the system resolver's answer is used for.
const MAX_RESOLVED: usize = 16;
/// How long connections get, once told to stop, to write their closing
/// events before they are dropped.
const STOP_WAIT: Duration = Duration::from_secs(2);
/// The longest head deadline handed to hyper.
const MAX_DEADLINE: Duration = Duration::from_secs(86_400);
/// The refusal header.
const REFUSAL_HEADER: &str = "x-glove-refusal";

/// Where the proxy is in its life; connections watch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    Running,
    /// No new connections; in-flight ones finish (keep-alive ends).
    Draining,
    /// Every connection ends now (writing its closing event).
    Stopping,
}

async fn reached(mut rx: watch::Receiver<Phase>, p: Phase) {
    let _ = rx.wait_for(|x| *x >= p).await;
}

/// Everything connections share.
pub(crate) struct Shared {
    pub(crate) session_id: SessionId,
    pub(crate) settings: EgressSettings,
    pub(crate) limits: ProxyLimits,
    pub(crate) broker: Broker,
    pub(crate) audit: Audit,
    /// Parallel to `settings.endpoints`.
    pub(crate) endpoints: Vec<Arc<EndpointState>>,
    pub(crate) bytes_up: Arc<AtomicU64>,
    pub(crate) bytes_down: Arc<AtomicU64>,
    /// Names looked up (in the hosts table or the system resolver).
    pub(crate) lookups: AtomicU64,
    /// Refusals answered (or connections closed) and counted, not
    /// journaled one by one (past the budget).
    pub(crate) refusals_unjournaled: AtomicU64,
    /// The current second and the refusals journaled in it.
    refusal_window: std::sync::Mutex<(u64, u32)>,
    /// The TLS client for terminated tunnels' upstreams.
    tls_client: Arc<rustls::ClientConfig>,
    accepted: AtomicU64,
    permits: Arc<Semaphore>,
}

impl Shared {
    pub(crate) fn new(
        session_id: SessionId,
        settings: EgressSettings,
        limits: ProxyLimits,
        broker: Broker,
        audit: Audit,
        tls_client: Arc<rustls::ClientConfig>,
    ) -> Shared {
        let endpoints = settings
            .endpoints
            .iter()
            .map(|e| {
                let l = settings.limits_of(e);
                Arc::new(EndpointState {
                    max_connections: l.and_then(|l| l.max_connections),
                    max_bytes: l.and_then(|l| l.max_bytes),
                    ..EndpointState::default()
                })
            })
            .collect();
        let permits = Arc::new(Semaphore::new(
            limits.max_concurrent.min(Semaphore::MAX_PERMITS),
        ));
        Shared {
            session_id,
            settings,
            limits,
            broker,
            audit,
            endpoints,
            bytes_up: Arc::new(AtomicU64::new(0)),
            bytes_down: Arc::new(AtomicU64::new(0)),
            lookups: AtomicU64::new(0),
            refusals_unjournaled: AtomicU64::new(0),
            refusal_window: std::sync::Mutex::new((0, 0)),
            tls_client,
            accepted: AtomicU64::new(0),
            permits,
        }
    }
}

/// Which of the forwarder's listeners a connection came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Listener {
    /// The HTTP proxy port.
    Proxy,
    /// A port mapping (its index).
    Mapping(usize),
    /// Inside a `CONNECT` tunnel the proxy terminates (the endpoint's
    /// index).
    Terminated(usize),
}

/// The accept loop: takes connections from the channel until it closes or
/// the handle asks to finish; then gives in-flight connections `grace`,
/// tells the rest to stop, and drops whatever is left.
pub(crate) async fn run(
    shared: Arc<Shared>,
    channel: Channel,
    finish: oneshot::Receiver<Duration>,
) {
    let (phase_tx, phase_rx) = watch::channel(Phase::Running);
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut accepting = true;
    let mut finish = finish;
    let grace = loop {
        tokio::select! {
            r = channel.recv(), if accepting => match r {
                Received::Closed => accepting = false,
                Received::Dropped => {}
                Received::Connection { index, stream } => {
                    accept(&shared, index, stream, &mut tasks, &phase_rx);
                }
            },
            g = &mut finish => break g.unwrap_or(Duration::ZERO),
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    };
    drop(channel);
    let _ = phase_tx.send(Phase::Draining);
    let _ = tokio::time::timeout(grace, all_done(&mut tasks)).await;
    let _ = phase_tx.send(Phase::Stopping);
    let _ = tokio::time::timeout(STOP_WAIT, all_done(&mut tasks)).await;
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
}

async fn all_done(tasks: &mut JoinSet<()>) {
    while tasks.join_next().await.is_some() {}
}

fn accept(
    shared: &Arc<Shared>,
    index: u8,
    stream: std::net::TcpStream,
    tasks: &mut JoinSet<()>,
    phase: &watch::Receiver<Phase>,
) {
    let listener = match usize::from(index) {
        0 => Listener::Proxy,
        i if i <= shared.settings.port_mappings.len() => Listener::Mapping(i - 1),
        _ => return,
    };
    let Ok(stream) = TcpStream::from_std(stream) else {
        return;
    };
    // A connected socket's local port is never 0; one that reports it
    // could not be recorded (events name ports 1-65535) and is dropped.
    let Some(local) = stream
        .local_addr()
        .ok()
        .and_then(|a| NonZeroU16::new(a.port()).map(|p| (a.ip(), p)))
    else {
        return;
    };
    let _ = stream.set_nodelay(true);
    let n = shared
        .accepted
        .fetch_add(1, Ordering::SeqCst)
        .saturating_add(1);
    let permit = if n > shared.limits.max_session_connections {
        None
    } else {
        shared.permits.clone().try_acquire_owned().ok()
    };
    let ctx = ConnCtx::new(shared.clone(), listener, local);
    match permit {
        Some(permit) => {
            tasks.spawn(serve(ctx, stream, phase.clone(), permit));
        }
        None => {
            // Closed at once; the refusal is audited after, within the
            // session's refusal budget (see `refuse`).
            drop(stream);
            if !shared.refusal_event_allowed() {
                shared.refusals_unjournaled.fetch_add(1, Ordering::SeqCst);
                return;
            }
            tasks.spawn(async move {
                let (host, port) = ctx.listener_target();
                let seen = Seen::connection(host, port);
                let message = "the session's connection limit is reached";
                let r = Rejection::new(EGRESS_LIMIT_REACHED, message);
                let _ = ctx.audit_refusal(&seen, &r).await;
            });
        }
    }
}

/// Refusals journaled per second at most, per session (see `refuse`).
pub(crate) const REFUSAL_EVENTS_PER_SECOND: u32 = 64;

impl Shared {
    fn refusal_event_allowed(&self) -> bool {
        let second = now_ms() / 1000;
        let Ok(mut w) = self.refusal_window.lock() else {
            return false;
        };
        if w.0 != second {
            *w = (second, 0);
        }
        if w.1 >= REFUSAL_EVENTS_PER_SECOND {
            return false;
        }
        w.1 += 1;
        true
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(0))
        .unwrap_or(0)
}

fn elapsed_ms(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The host as an event names it.
fn event_host(h: &Host) -> String {
    match h {
        Host::Name(n) => n.clone(),
        Host::Ip(ip) => ip.to_string(),
    }
}

/// What an event is about, as far as the proxy knows it. The port is
/// never 0 (an event cannot name it): a target whose port is not 1-65535
/// is refused at the listener's own address instead.
#[derive(Clone, Debug)]
struct Seen {
    kind: EventKind,
    host: String,
    port: NonZeroU16,
    method: Option<String>,
    started_ms: u64,
    t0: Instant,
}

impl Seen {
    fn connection(host: String, port: NonZeroU16) -> Seen {
        Seen {
            kind: EventKind::Connection,
            host,
            port,
            method: None,
            started_ms: now_ms(),
            t0: Instant::now(),
        }
    }

    fn request(method: &Method, host: String, port: NonZeroU16) -> Seen {
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

    fn at(mut self, host: &Host, port: NonZeroU16) -> Seen {
        self.host = event_host(host);
        self.port = port;
        self
    }
}

/// A refusal: its code, message and HTTP status.
#[derive(Debug)]
struct Refusal {
    code: ErrorCode,
    message: String,
    status: StatusCode,
}

impl Refusal {
    fn of(r: &Rejection) -> Refusal {
        Refusal::new(r.code(), r.message())
    }

    fn new(code: ErrorCode, message: impl Into<String>) -> Refusal {
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

    fn status(mut self, s: StatusCode) -> Refusal {
        self.status = s;
        self
    }

    fn response(&self) -> Response<ProxyBody> {
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

fn audit_failed() -> Refusal {
    Refusal::new(
        EGRESS_AUDIT_FAILED,
        "the egress journal could not record the decision",
    )
}

/// A tunnel the service approved, waiting for hyper to hand over the
/// agent's stream.
struct Tunnel {
    on_upgrade: hyper::upgrade::OnUpgrade,
    endpoint: usize,
    seen: Seen,
    /// `Some`: an opaque tunnel to this upstream; `None`: terminated.
    upstream: Option<TcpStream>,
}

/// One agent connection.
struct ConnCtx {
    shared: Arc<Shared>,
    listener: Listener,
    /// The agent-side address the connection came in on.
    local: (IpAddr, NonZeroU16),
    meter: Arc<IoMeter>,
    tunnel: Mutex<Option<Tunnel>>,
    /// Bytes this connection's requests sent up and got down.
    up: Arc<AtomicU64>,
    down: Arc<AtomicU64>,
    started_ms: u64,
    t0: Instant,
}

/// The bound on a request head hyper itself enforces (its own `431`),
/// twice the proxy's: heads between the two get the proxy's refusal with
/// its code.
fn hard_head_limit(limits: &ProxyLimits) -> usize {
    limits.max_head_bytes.saturating_mul(2).max(8192)
}

async fn serve(
    ctx: Arc<ConnCtx>,
    stream: TcpStream,
    phase: watch::Receiver<Phase>,
    _permit: OwnedSemaphorePermit,
) {
    serve_http(ctx, stream, phase).await;
}

/// Serves HTTP/1.1 on an agent stream (a proxy or mapped connection, or
/// the inside of a terminated tunnel), then runs the tunnel it approved,
/// if any, and writes the closing event of a mapped connection or a
/// terminated tunnel.
///
/// Boxed: serving inside a terminated tunnel is this same future again.
fn serve_http<T>(
    ctx: Arc<ConnCtx>,
    stream: T,
    phase: watch::Receiver<Phase>,
) -> Pin<Box<dyn Future<Output = ()> + Send>>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    Box::pin(serve_http_inner(ctx, stream, phase))
}

async fn serve_http_inner<T>(ctx: Arc<ConnCtx>, stream: T, phase: watch::Receiver<Phase>)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let limits = ctx.shared.limits.clone();
    let io = TokioIo::new(AgentIo::new(stream, ctx.meter.clone()));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        // hyper adds this to the clock unchecked: keep it sane.
        .header_read_timeout(limits.head_deadline.min(MAX_DEADLINE))
        .max_buf_size(hard_head_limit(&limits))
        .max_header_size(hard_head_limit(&limits))
        .keep_alive(true);
    let svc_ctx = ctx.clone();
    let svc = hyper::service::service_fn(move |req| {
        let ctx = svc_ctx.clone();
        async move { Ok::<_, Infallible>(ctx.handle(req).await) }
    });
    let mut conn = Box::pin(builder.serve_connection(io, svc).with_upgrades());
    let mut draining = false;
    let ended: Result<(), hyper::Error> = loop {
        tokio::select! {
            r = conn.as_mut() => break r,
            () = reached(phase.clone(), Phase::Draining), if !draining => {
                conn.as_mut().graceful_shutdown();
                draining = true;
            }
            () = reached(phase.clone(), Phase::Stopping) => break Ok(()),
            () = idle_watch(&ctx.meter, limits.idle_deadline) => break Ok(()),
        }
    };
    drop(conn);
    if let Err(e) = ended {
        ctx.audit_connection_error(&e).await;
    }
    let tunnel = ctx.tunnel.lock().ok().and_then(|mut t| t.take());
    if let Some(t) = tunnel {
        ctx.run_tunnel(t, phase).await;
    }
    if let Listener::Mapping(_) | Listener::Terminated(_) = ctx.listener {
        ctx.close_event().await;
    }
}

/// Removes the hop-by-hop headers (the fixed ones and those `Connection`
/// names) and returns them: what the proxy does not forward must still be
/// checked for placeholders.
fn strip_hop_by_hop(h: &mut HeaderMap) -> HeaderMap {
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

fn take_all(from: &mut HeaderMap, to: &mut HeaderMap, name: HeaderName) {
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
fn list_elements(h: &HeaderMap, name: HeaderName) -> Vec<String> {
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
fn single_chunked_or_none(h: &HeaderMap) -> bool {
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
fn wire_head_len(parts: &hyper::http::request::Parts) -> u64 {
    let target = parts.uri.path_and_query().map_or(1, |p| p.as_str().len());
    let line = parts.method.as_str().len() + 1 + target + " HTTP/1.1\r\n".len();
    let total = parts
        .headers
        .iter()
        .map(|(n, v)| n.as_str().len() + 2 + v.len() + 2)
        .fold(line + 2, usize::saturating_add);
    u64::try_from(total).unwrap_or(u64::MAX)
}

/// The length of a response head as the agent gets it (status line, each
/// field, the blank line), for the byte limit.
fn wire_response_head_len(parts: &hyper::http::response::Parts) -> u64 {
    let reason = parts.status.canonical_reason().map_or(0, str::len);
    let line = "HTTP/1.1 200 ".len() + reason + 2;
    let total = parts
        .headers
        .iter()
        .map(|(n, v)| n.as_str().len() + 2 + v.len() + 2)
        .fold(line + 2, usize::saturating_add);
    u64::try_from(total).unwrap_or(u64::MAX)
}

/// The port of a request target's authority, parsed strictly: `:` and 1
/// to 5 digits making 1-65535, or no port at all (then `default`, when
/// the scheme has one). http's own `port_u16` reads an unparseable or
/// out-of-range port (`:99999`, `:8O`) as no port, which would send the
/// request to the default port.
fn authority_port(
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
fn head_len<B>(req: &Request<B>) -> usize {
    let line = req.method().as_str().len() + req.uri().to_string().len() + 12;
    req.headers()
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .fold(line + 2, usize::saturating_add)
}

/// The Host header for a target (its port left out when it is the
/// scheme's default).
fn host_header(host: &Host, port: u16, tls: bool) -> Option<HeaderValue> {
    let default = if tls { 443 } else { 80 };
    let s = if port == default {
        host.to_string()
    } else {
        format!("{host}:{port}")
    };
    HeaderValue::from_str(&s).ok()
}

impl ConnCtx {
    fn new(shared: Arc<Shared>, listener: Listener, local: (IpAddr, NonZeroU16)) -> Arc<ConnCtx> {
        Arc::new(ConnCtx {
            shared,
            listener,
            local,
            meter: IoMeter::new(),
            tunnel: Mutex::new(None),
            up: Arc::new(AtomicU64::new(0)),
            down: Arc::new(AtomicU64::new(0)),
            started_ms: now_ms(),
            t0: Instant::now(),
        })
    }

    /// The endpoint a mapped connection or terminated tunnel reaches.
    fn fixed_endpoint(&self) -> Option<&Endpoint> {
        match self.listener {
            Listener::Mapping(i) => self
                .shared
                .settings
                .port_mappings
                .get(i)
                .map(|m| &m.endpoint),
            Listener::Terminated(i) => self.shared.settings.endpoints.get(i),
            Listener::Proxy => None,
        }
    }

    /// What a connection's own events name: the endpoint a mapping or
    /// terminated tunnel reaches, else the address the agent connected to.
    fn listener_target(&self) -> (String, NonZeroU16) {
        let (ip, port) = self.local;
        match self.fixed_endpoint() {
            // A policy's endpoints have ports 1-65535 (`Endpoint::parse`).
            Some(e) => (event_host(&e.host), NonZeroU16::new(e.port).unwrap_or(port)),
            None => (ip.to_string(), port),
        }
    }

    fn event(
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
    async fn audit_refusal(&self, seen: &Seen, r: &Rejection) -> bool {
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
    async fn refuse(&self, seen: &Seen, r: Refusal) -> Response<ProxyBody> {
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

    /// A connection hyper ended with an error: a head that did not come
    /// in time, or one it could not parse (which it answered itself).
    async fn audit_connection_error(&self, e: &hyper::Error) {
        let (code, message) = if e.is_timeout() {
            if !self.meter.partial_since_rest() {
                return;
            }
            (EGRESS_TIMEOUT, "the request head did not arrive in time")
        } else if e.is_parse() || e.is_parse_too_large() {
            (
                EGRESS_REQUEST_INVALID,
                "the request head is malformed or too large",
            )
        } else {
            return;
        };
        let (host, port) = self.listener_target();
        let seen = Seen::connection(host, port);
        let _ = self
            .audit_refusal(&seen, &Rejection::new(code, message))
            .await;
    }

    async fn handle(&self, req: Request<Incoming>) -> Response<ProxyBody> {
        let resp = match self.listener {
            Listener::Proxy => self.proxy_request(req).await,
            Listener::Mapping(_) | Listener::Terminated(_) => self.fixed_request(req).await,
        };
        resp.map(|b| b.resting(&self.meter))
    }

    /// The checks every request shares before its target is looked at.
    fn head_checks(&self, req: &Request<Incoming>) -> Result<(), Refusal> {
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

    async fn proxy_request(&self, req: Request<Incoming>) -> Response<ProxyBody> {
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
    async fn fixed_request(&self, req: Request<Incoming>) -> Response<ProxyBody> {
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
    async fn resolve(&self, host: &Host, port: u16) -> Vec<IpAddr> {
        let Host::Name(name) = host else {
            return Vec::new();
        };
        self.shared.lookups.fetch_add(1, Ordering::SeqCst);
        if let Some(table) = &self.shared.settings.hosts {
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
    async fn decide(&self, host: &Host, port: u16) -> Result<(Vec<IpAddr>, usize), Refusal> {
        if self.shared.audit.failed() {
            return Err(audit_failed());
        }
        let s = &self.shared.settings;
        // Host and port first, with no address: a name that is not an
        // endpoint is never looked up (a lookup is itself a way out, to
        // whatever resolver the host uses).
        if !s
            .endpoints
            .iter()
            .any(|e| &e.host == host && e.port == port)
        {
            let e = decide(&s.endpoints, s.allow_private, host, port, &[])
                .err()
                .map(|r| Refusal::of(&r))
                .unwrap_or_else(|| Refusal::new(EGRESS_HOST_NOT_ALLOWED, "not an endpoint"));
            return Err(e);
        }
        let resolved = self.resolve(host, port).await;
        let addrs = decide(&s.endpoints, s.allow_private, host, port, &resolved)
            .map_err(|r| Refusal::of(&r))?;
        let index = s
            .endpoints
            .iter()
            .position(|e| &e.host == host && e.port == port)
            .ok_or_else(|| Refusal::new(EGRESS_HOST_NOT_ALLOWED, "not an endpoint"))?;
        Ok((addrs, index))
    }

    fn endpoint(&self, index: usize) -> Result<(Endpoint, Arc<EndpointState>), Refusal> {
        let e = self.shared.settings.endpoints.get(index);
        let st = self.shared.endpoints.get(index);
        match (e, st) {
            (Some(e), Some(st)) => Ok((e.clone(), st.clone())),
            _ => Err(Refusal::new(EGRESS_HOST_NOT_ALLOWED, "not an endpoint")),
        }
    }

    /// Takes one upstream connection and `head` bytes (a request head as
    /// the upstream gets it; 0 for a tunnel, whose bytes count as they
    /// flow) from the endpoint's budget. A head that does not fit what is
    /// left of the byte limit is refused whole: none of it is sent.
    fn take_budget(&self, st: &EndpointState, ep: &Endpoint, head: u64) -> Result<(), Refusal> {
        if st.bytes_exhausted() {
            return Err(Refusal::new(
                EGRESS_LIMIT_REACHED,
                format!("{ep} has used its byte limit"),
            ));
        }
        if !st.reserve(head) {
            return Err(Refusal::new(
                EGRESS_LIMIT_REACHED,
                format!(
                    "the request head ({head} bytes) is over what is left of {ep}'s byte limit"
                ),
            ));
        }
        if !st.take_connection() {
            st.refund(head);
            return Err(Refusal::new(
                EGRESS_LIMIT_REACHED,
                format!("{ep} has used its connection limit"),
            ));
        }
        Ok(())
    }

    /// Connects to the checked addresses in order, the first that works,
    /// all within the connect deadline.
    async fn connect_upstream(&self, addrs: &[IpAddr], port: u16) -> Result<TcpStream, Refusal> {
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

    async fn connect(&self, mut req: Request<Incoming>) -> Response<ProxyBody> {
        let (lhost, lport) = self.listener_target();
        let seen = Seen::connection(lhost, lport);
        if head_len(&req) > self.shared.limits.max_head_bytes {
            let r = Refusal::new(EGRESS_REQUEST_INVALID, "the request head is too large")
                .status(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
            return self.refuse(&seen, r).await;
        }
        let Some(authority) = req.uri().authority().cloned() else {
            let r = Refusal::new(EGRESS_TARGET_INVALID, "CONNECT needs host:port");
            return self.refuse(&seen, r).await;
        };
        let host = match Host::parse(authority.host()) {
            Ok(h) => h,
            Err(r) => return self.refuse(&seen, Refusal::of(&r)).await,
        };
        let port = match authority_port(&authority, None) {
            Ok(p) => p,
            Err(r) => return self.refuse(&seen, r).await,
        };
        let seen = seen.at(&host, port);
        let port = port.get();
        let texts = [req.method().as_str(), authority.as_str()];
        if let Err(r) = self.shared.broker.refuse_any(&texts, req.headers()) {
            return self.refuse(&seen, Refusal::of(&r)).await;
        }
        let (addrs, index) = match self.decide(&host, port).await {
            Ok(v) => v,
            Err(r) => return self.refuse(&seen, r).await,
        };
        let (ep, st) = match self.endpoint(index) {
            Ok(v) => v,
            Err(r) => return self.refuse(&seen, r).await,
        };
        // A tunnel to an endpoint a credential is bound to is terminated:
        // its upstream connections are its requests', counted then.
        let terminate = self.shared.broker.binds(&ep);
        // An endpoint a plain-HTTP credential is bound to is reached in
        // plain HTTP only, where its responses are checked: an opaque
        // tunnel could carry a kept credential back unseen.
        if !terminate && self.shared.broker.binds_any(&ep) {
            let r = Refusal::new(
                EGRESS_REQUEST_INVALID,
                "no tunnel to an endpoint a plain-HTTP credential is bound to",
            );
            return self.refuse(&seen, r).await;
        }
        let budget = if !terminate {
            self.take_budget(&st, &ep, 0)
        } else if st.bytes_exhausted() {
            Err(Refusal::new(
                EGRESS_LIMIT_REACHED,
                format!("{ep} has used its byte limit"),
            ))
        } else {
            Ok(())
        };
        if let Err(r) = budget {
            return self.refuse(&seen, r).await;
        }
        if !self.shared.audit.ensure_room(2) {
            return audit_failed().response();
        }
        // The decision is durable before the upstream sees even a
        // handshake; a connection that then fails is its end event.
        let ev = self.event(&seen, Decision::Allowed, None, None, 0, 0);
        if !self.shared.audit.record(ev, Tally::Decision).await {
            return audit_failed().response();
        }
        let upstream = if terminate {
            None
        } else {
            match self.connect_upstream(&addrs, port).await {
                Ok(s) => Some(s),
                Err(r) => {
                    let ev = self.event(&seen, Decision::Refused, Some(r.code), None, 0, 0);
                    if self.shared.audit.record(ev, Tally::Failed).await {
                        return r.response();
                    }
                    return audit_failed().response();
                }
            }
        };
        let on_upgrade = hyper::upgrade::on(&mut req);
        if let Ok(mut slot) = self.tunnel.lock() {
            *slot = Some(Tunnel {
                on_upgrade,
                upstream,
                endpoint: index,
                seen,
            });
        }
        Response::new(ProxyBody::empty())
    }

    /// Runs an approved tunnel once hyper hands the agent's stream over,
    /// then writes its end event. A tunnel whose upgrade fails (the agent
    /// went away before its `200` was written) ends too, with nothing
    /// moved: every allowed decision has its end.
    async fn run_tunnel(&self, t: Tunnel, phase: watch::Receiver<Phase>) {
        let upgraded = t.on_upgrade.await;
        let Some(upstream) = t.upstream else {
            match upgraded {
                // The terminated tunnel writes its own end event.
                Ok(agent) => self.terminate(agent, t.endpoint, phase).await,
                Err(_) => {
                    let ev = self.event(&t.seen, Decision::Allowed, None, None, 0, 0);
                    let _ = self.shared.audit.record(ev, Tally::Closing).await;
                }
            }
            return;
        };
        let up = Arc::new(AtomicU64::new(0));
        let down = Arc::new(AtomicU64::new(0));
        if let (Ok(agent), Some(st)) = (upgraded, self.shared.endpoints.get(t.endpoint)) {
            let fu = Flow {
                endpoint: st.clone(),
                session: self.shared.bytes_up.clone(),
                connection: up.clone(),
            };
            let fd = Flow {
                endpoint: st.clone(),
                session: self.shared.bytes_down.clone(),
                connection: down.clone(),
            };
            let stop = reached(phase, Phase::Stopping);
            let idle = self.shared.limits.idle_deadline;
            // A proxy connection is a TCP stream under hyper: take it back
            // and relay with `splice`; anything else is copied.
            match agent.downcast::<TokioIo<AgentIo<TcpStream>>>() {
                Ok(parts) => {
                    let tcp = parts.io.into_inner().into_inner();
                    crate::relay::relay_tcp(tcp, &parts.read_buf, upstream, &fu, &fd, idle, stop)
                        .await;
                }
                Err(agent) => relay(TokioIo::new(agent), upstream, &fu, &fd, idle, stop).await,
            }
        }
        let ev = self.event(
            &t.seen,
            Decision::Allowed,
            None,
            None,
            up.load(Ordering::SeqCst),
            down.load(Ordering::SeqCst),
        );
        let _ = self.shared.audit.record(ev, Tally::Closing).await;
    }

    /// Terminates TLS on a tunnel's agent side with a leaf of the session
    /// CA for the endpoint, then serves HTTP/1.1 inside it (each request
    /// brokered, decided and forwarded over TLS); its closing event is
    /// written when it ends (with 0 bytes if the handshake failed).
    async fn terminate(
        &self,
        agent: hyper::upgrade::Upgraded,
        endpoint: usize,
        phase: watch::Receiver<Phase>,
    ) {
        let inner = ConnCtx::new(
            self.shared.clone(),
            Listener::Terminated(endpoint),
            self.local,
        );
        let config = self
            .shared
            .settings
            .endpoints
            .get(endpoint)
            .map(|e| self.shared.broker.ca().server_config(&e.host));
        let Some(Ok(config)) = config else {
            inner.close_event().await;
            return;
        };
        let accept = tokio_rustls::TlsAcceptor::from(config).accept(TokioIo::new(agent));
        let deadline = self.shared.limits.head_deadline;
        match tokio::time::timeout(deadline, accept).await {
            Ok(Ok(tls)) => serve_http(inner, tls, phase).await,
            _ => inner.close_event().await,
        }
    }

    /// The closing event of a mapped connection or terminated tunnel.
    async fn close_event(&self) {
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

    /// Forwards one request to a decided target over a new upstream
    /// connection (TLS, verified, when `tls`), auditing the decision before
    /// any byte of the request leaves.
    async fn forward(
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

    /// TLS to the upstream as `host`, verified against the configured
    /// roots, within the connect deadline.
    async fn upstream_tls(
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
    async fn send_upstream<S>(
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

    async fn try_forward(
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
    fn outgoing_head(
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
    async fn dispatch(
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Issue 26, finding 10: a `CONNECT` whose upgrade fails (the agent is
    /// gone before its `200` is written) left its allowed decision with no
    /// end event. No socket can time that failure reliably; hyper's own
    /// handle for a message that was never upgraded fails the same way.
    #[tokio::test]
    async fn issue26_a_tunnel_whose_upgrade_fails_still_ends() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        let limits = ProxyLimits::default();
        let (audit, writer) = crate::audit::spawn(
            &dir.path().join("egress.journal"),
            &limits.journal_spec(),
            limits.max_concurrent,
        )
        .expect("audit");
        let settings = EgressSettings::from_json(
            br#"{"schema_version":1,"egress_policy_id":"t","endpoints":["model.test:8443"],
                "allow_private":true,"hosts":{"model.test":["127.0.0.1"]}}"#,
        )
        .expect("settings");
        let roots = crate::TlsRoots {
            extra_pem: Vec::new(),
            system_bundle: None,
        };
        let shared = Arc::new(Shared::new(
            SessionId::new("s-test").expect("id"),
            settings,
            limits,
            Broker::empty().expect("broker"),
            audit,
            crate::tls::client_config(&roots).expect("tls"),
        ));
        let proxy_port = NonZeroU16::new(3128).expect("port");
        let ctx = ConnCtx::new(
            shared.clone(),
            Listener::Proxy,
            (IpAddr::from([127, 0, 0, 1]), proxy_port),
        );
        let seen = Seen::connection("model.test".into(), NonZeroU16::new(8443).expect("port"));
        let decision = ctx.event(&seen, Decision::Allowed, None, None, 0, 0);
        assert!(shared.audit.record(decision, Tally::Decision).await);
        let (_phase_tx, phase) = watch::channel(Phase::Running);
        // A terminated tunnel (no upstream of its own) whose upgrade fails.
        let tunnel = Tunnel {
            on_upgrade: hyper::upgrade::on(Request::new(())),
            endpoint: 0,
            seen,
            upstream: None,
        };
        ctx.run_tunnel(tunnel, phase).await;
        drop(ctx);
        drop(shared);
        let totals = writer.join().expect("the writer ends");
        assert_eq!(totals.connections_allowed, 1);
        assert_eq!(
            totals.connections_closed, 1,
            "the allowed tunnel has its end event"
        );
        assert_eq!(totals.journal_records, 2);
    }
}
