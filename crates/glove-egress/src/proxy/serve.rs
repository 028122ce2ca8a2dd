//! Listening and serving: the accept loop over the channel, the
//! per-connection HTTP/1.1 server (hyper) with its head bounds and
//! deadlines, and the routing of each request by listener.

use super::record::Seen;
use super::{reached, ConnCtx, Listener, Phase, Shared};
use crate::channel::{Channel, Received};
use crate::meter::{idle_watch, AgentIo, ProxyBody};
use crate::ProxyLimits;
use glove_types::codes::egress::*;
use glove_types::Rejection;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::num::NonZeroU16;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::{oneshot, watch, OwnedSemaphorePermit};
use tokio::task::JoinSet;

/// How long connections get, once told to stop, to write their closing
/// events before they are dropped.
pub(super) const STOP_WAIT: Duration = Duration::from_secs(2);

/// The longest head deadline handed to hyper.
pub(super) const MAX_DEADLINE: Duration = Duration::from_secs(86_400);

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

pub(super) async fn all_done(tasks: &mut JoinSet<()>) {
    while tasks.join_next().await.is_some() {}
}

pub(super) fn accept(
    shared: &Arc<Shared>,
    index: u8,
    stream: std::net::TcpStream,
    tasks: &mut JoinSet<()>,
    phase: &watch::Receiver<Phase>,
) {
    let listener = match usize::from(index) {
        0 => Listener::Proxy,
        i if i <= shared.settings.port_mappings().len() => Listener::Mapping(i - 1),
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

/// The bound on a request head hyper itself enforces (its own `431`),
/// twice the proxy's: heads between the two get the proxy's refusal with
/// its code.
pub(super) fn hard_head_limit(limits: &ProxyLimits) -> usize {
    limits.max_head_bytes.saturating_mul(2).max(8192)
}

pub(super) async fn serve(
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
pub(super) fn serve_http<T>(
    ctx: Arc<ConnCtx>,
    stream: T,
    phase: watch::Receiver<Phase>,
) -> Pin<Box<dyn Future<Output = ()> + Send>>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    Box::pin(serve_http_inner(ctx, stream, phase))
}

pub(super) async fn serve_http_inner<T>(ctx: Arc<ConnCtx>, stream: T, phase: watch::Receiver<Phase>)
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

impl ConnCtx {
    pub(super) async fn handle(&self, req: Request<Incoming>) -> Response<ProxyBody> {
        let resp = match self.listener {
            Listener::Proxy => self.proxy_request(req).await,
            Listener::Mapping(_) | Listener::Terminated(_) => self.fixed_request(req).await,
        };
        resp.map(|b| b.resting(&self.meter))
    }

    /// A connection hyper ended with an error: a head that did not come
    /// in time, or one it could not parse (which it answered itself).
    pub(super) async fn audit_connection_error(&self, e: &hyper::Error) {
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
}
