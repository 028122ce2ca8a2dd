//! The socket side of `gloved`: bind, accept, authenticate, dispatch, and
//! shut down gracefully.
//!
//! Per connection: the peer's `SO_PEERCRED` uid must be the service uid
//! (else the connection is closed without a byte); the server sends
//! `hello` and the first frame must be a valid `authenticate` within the
//! handshake timeout (anything else is answered with an `auth_*` error and
//! the connection is closed). Two budgets: connections still in the
//! handshake (`max_handshakes`; one more waits until one leaves or the
//! oldest has been pending a second, which is then closed with
//! `control_too_many_handshakes`) and authenticated connections
//! (`max_connections`; a slot is taken when the handshake succeeds, and
//! with none free the peer gets `control_too_many_connections`, at once if
//! none is free when it connects). Silent sockets therefore never hold an
//! authenticated slot, and cannot keep the owner out. After that, each
//! request runs on the blocking pool, at most `max_in_flight` at once per
//! connection (one more is answered `control_busy`); responses may come out
//! of order and carry the request's id. A connection that sends nothing
//! for the idle timeout while nothing is in flight and no attach stream
//! runs is closed. A frame whose
//! length is over the bound gets an error and the connection is closed,
//! since the stream is out of step; any other bad message gets an error and
//! the connection stays open.
//!
//! Every write to a client has a deadline (`write_timeout`): a peer that
//! stops reading is closed, not waited for.
//!
//! On SIGTERM or SIGINT the listener is closed and the socket removed,
//! connections stop reading, in-flight requests get `shutdown_grace` to
//! finish; then the running sessions are stopped and their receipts
//! written, whatever the connections are doing, the bootstrap secret is
//! removed and the journals closed.

use super::auth::{
    AuthenticateParams, Authenticated, BootstrapSecret, ReplayGuard, ServerHandshake, SECRET_FILE,
};
use super::config::{Settings, Started, OWNER_SOCKET_FILE, SOCKET_FILE};
use super::frame;
use super::limits::Limits;
use super::placement;
use super::protocol::{self, Request, RpcError};
use super::service::Service;
use glove_types::codes::control::*;
use glove_types::digest::to_hex;
use glove_types::Rejection;
use rustix::fd::OwnedFd;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

mod handshake;
mod io;

use handshake::handshake;
use io::{finish_writer, send, send_wait, write_loop, FrameReader, ReadFault};

/// Longest socket path (`sun_path` holds 108 bytes with the NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// State shared by every connection.
struct Shared {
    /// The service; requests reach it only with an [`Authenticated`] proof.
    service: Arc<Service>,
    /// This start's bootstrap secret.
    secret: BootstrapSecret,
    /// Client nonces accepted so far (refuses replayed handshakes).
    replay: Mutex<ReplayGuard>,
    /// Bounds.
    limits: Limits,
    /// The service's uid, which every peer must have.
    uid: u32,
    /// Slots of authenticated connections (`max_connections`); a
    /// connection takes one when its handshake succeeds.
    connections: Arc<Semaphore>,
    /// Connections still in the handshake, oldest first, each with when it
    /// entered and the signal that closes it when a newer one needs its
    /// place.
    pending: Mutex<VecDeque<(u64, Instant, Arc<Notify>)>>,
    /// Woken when a connection leaves the handshake budget.
    freed: Notify,
    /// Numbers the pending connections.
    next_pending: AtomicU64,
}

/// The socket and secret, bound and written.
pub struct Bound {
    listener: UnixListener,
    owner: UnixListener,
    socket_path: PathBuf,
    runtime_dir: OwnedFd,
    secret: BootstrapSecret,
}

impl core::fmt::Debug for Bound {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Bound")
            .field("socket_path", &self.socket_path)
            .finish_non_exhaustive()
    }
}

impl Bound {
    /// The socket path.
    pub fn socket_path(&self) -> &std::path::Path {
        &self.socket_path
    }
}

fn socket_err(msg: String) -> Rejection {
    Rejection::new(CONTROL_SOCKET_IO, msg)
}

/// Binds `gloved.sock` (mode 0600) in the runtime directory and writes a
/// fresh bootstrap secret. A socket left by a dead service is replaced; one
/// that still answers means another service runs, and startup stops.
pub fn bind(settings: &Settings, runtime_dir: OwnedFd) -> Result<Bound, Rejection> {
    // Both sockets are checked before either is touched: a service that
    // still answers on one keeps the other.
    for name in [SOCKET_FILE, OWNER_SOCKET_FILE] {
        let path = settings.runtime_dir.join(name);
        if std::os::unix::net::UnixStream::connect(&path).is_ok() {
            return Err(Rejection::new(
                CONTROL_ALREADY_RUNNING,
                format!("a service already answers on {}", path.display()),
            ));
        }
    }
    let (listener, socket_path) = bind_one(settings, &runtime_dir, SOCKET_FILE)?;
    let (owner, _) = bind_one(settings, &runtime_dir, OWNER_SOCKET_FILE)?;
    let secret = BootstrapSecret::generate()?;
    placement::write_private(&runtime_dir, SECRET_FILE, secret.file_contents().as_bytes())?;
    Ok(Bound {
        listener,
        owner,
        socket_path,
        runtime_dir,
        secret,
    })
}

/// Binds one socket `name` (mode 0600) in the runtime directory.
fn bind_one(
    settings: &Settings,
    runtime_dir: &OwnedFd,
    name: &str,
) -> Result<(UnixListener, PathBuf), Rejection> {
    let socket_path = settings.runtime_dir.join(name);
    if socket_path.as_os_str().len() > MAX_SOCKET_PATH {
        return Err(socket_err(format!(
            "the socket path {} is longer than {MAX_SOCKET_PATH} bytes; choose a shorter runtime directory",
            socket_path.display()
        )));
    }
    if let Some(st) = placement::lstat_opt(&socket_path) {
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Socket {
            return Err(socket_err(format!(
                "{} exists and is not a socket",
                socket_path.display()
            )));
        }
        if std::os::unix::net::UnixStream::connect(&socket_path).is_ok() {
            return Err(Rejection::new(
                CONTROL_ALREADY_RUNNING,
                format!("a service already answers on {}", socket_path.display()),
            ));
        }
        placement::remove(runtime_dir, name)?;
        tracing::info!(path = ?socket_path, "removed a stale socket");
    }
    let std_listener = std::os::unix::net::UnixListener::bind(&socket_path)
        .map_err(|e| socket_err(format!("cannot bind {}: {e}", socket_path.display())))?;
    rustix::fs::chmod(&socket_path, rustix::fs::Mode::from_raw_mode(0o600))
        .map_err(|e| socket_err(format!("cannot chmod {}: {e}", socket_path.display())))?;
    std_listener
        .set_nonblocking(true)
        .map_err(|e| socket_err(format!("cannot configure the socket: {e}")))?;
    let listener = UnixListener::from_std(std_listener)
        .map_err(|e| socket_err(format!("cannot register the socket: {e}")))?;
    Ok((listener, socket_path))
}

/// Serves until `stop` resolves, then shuts down (see the module docs).
pub async fn serve(
    started: Started,
    bound: Bound,
    limits: Limits,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), Rejection> {
    let Started {
        service,
        pinned,
        stage_max_age_ms,
        ..
    } = started;
    let Bound {
        listener,
        owner,
        socket_path,
        runtime_dir,
        secret,
    } = bound;
    let shared = Arc::new(Shared {
        service: Arc::new(service),
        secret,
        replay: Mutex::new(ReplayGuard::new(limits.replay_window)),
        limits,
        uid: rustix::process::geteuid().as_raw(),
        connections: Arc::new(Semaphore::new(limits.max_connections)),
        pending: Mutex::new(VecDeque::new()),
        freed: Notify::new(),
        next_pending: AtomicU64::new(0),
    });
    let connections = shared.connections.clone();
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    // Retained stages past their age go every ten minutes (and went at
    // startup).
    if let Some(age) = stage_max_age_ms {
        let service = shared.service.clone();
        let mut done = shutdown_rx.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(600));
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = done.changed() => break,
                    _ = tick.tick() => {
                        let s = service.clone();
                        if let Ok(reports) = tokio::task::spawn_blocking(move || s.prune_stages(age)).await {
                            for r in reports {
                                tracing::info!(pruned = %r, "a retained stage past its age");
                            }
                        }
                    }
                }
            }
        });
    }
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => admit(stream, &shared, &shutdown_rx, false),
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::task::yield_now().await;
                }
            },
            accepted = owner.accept() => match accepted {
                Ok((stream, _)) => admit(stream, &shared, &shutdown_rx, true),
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed on the owner socket");
                    tokio::task::yield_now().await;
                }
            },
        }
    }
    tracing::info!(socket = ?socket_path, "shutting down: no new connections");
    drop(listener);
    drop(owner);
    let socket_removed = placement::remove(&runtime_dir, SOCKET_FILE)
        .and(placement::remove(&runtime_dir, OWNER_SOCKET_FILE));
    let _ = shutdown_tx.send(true);
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(limits.shutdown_grace, connections.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!("shutdown grace elapsed with connections still open");
    }
    // The sessions are stopped and their receipts written whatever the
    // connections do: none of it waits for a client.
    let service = shared.service.clone();
    if tokio::task::spawn_blocking(move || service.stop_sessions())
        .await
        .is_err()
    {
        tracing::error!("stopping the sessions failed inside the service");
    }
    let secret_removed = placement::remove(&runtime_dir, SECRET_FILE);
    match Arc::try_unwrap(shared) {
        Ok(s) => match Arc::try_unwrap(s.service) {
            Ok(service) => {
                service.close();
                tracing::info!("journals closed");
            }
            Err(_) => tracing::warn!("a request outlived the grace period; journals close at exit"),
        },
        Err(_) => tracing::warn!("a connection outlived the grace period; journals close at exit"),
    }
    drop(pinned);
    tracing::info!("stopped");
    socket_removed.and(secret_removed)
}

fn admit(stream: UnixStream, shared: &Arc<Shared>, shutdown: &watch::Receiver<bool>, owner: bool) {
    let uid = match stream.peer_cred() {
        Ok(c) => c.uid(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read peer credentials; closing");
            return;
        }
    };
    if uid != shared.uid {
        tracing::warn!(
            code = AUTH_PEER_UID_MISMATCH.as_str(),
            peer_uid = uid,
            "connection from another user closed"
        );
        return;
    }
    if shared.connections.available_permits() == 0 {
        // No slot could be taken after the handshake either: say so now.
        tracing::warn!(
            code = CONTROL_TOO_MANY_CONNECTIONS.as_str(),
            "connection refused"
        );
        let max_frame = shared.limits.max_frame_bytes;
        let deadline = shared.limits.write_timeout;
        tokio::spawn(async move {
            let e = too_many_connections();
            let mut stream = stream;
            if let Ok(f) = frame::encode(&protocol::to_bytes(&e.to_response(None)), max_frame) {
                let _ = tokio::time::timeout(deadline, stream.write_all(&f)).await;
            }
        });
        return;
    }
    let shared = shared.clone();
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        connection(stream, shared, shutdown, owner).await;
    });
}

fn too_many_connections() -> RpcError {
    RpcError::new(
        protocol::LIMIT_ERROR,
        CONTROL_TOO_MANY_CONNECTIONS,
        "the service already serves the maximum number of connections",
    )
}

async fn connection(
    stream: UnixStream,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
    owner: bool,
) {
    let limits = shared.limits;
    let max = limits.max_frame_bytes;
    let (rd, wr) = stream.into_split();
    let mut reader = FrameReader {
        rd,
        buf: Vec::new(),
        max,
    };
    // Bounded: the reader waits when answers are not being written.
    let (tx, rx) = mpsc::channel(limits.max_in_flight + 2);
    let writer = tokio::spawn(write_loop(wr, rx, limits.write_timeout));
    let too_many = || {
        RpcError::new(
            protocol::LIMIT_ERROR,
            CONTROL_TOO_MANY_HANDSHAKES,
            "too many connections are in the handshake; try again",
        )
        .to_response(None)
    };
    let Some((pending, evict)) = shared.enter_handshake().await else {
        tracing::warn!(
            code = CONTROL_TOO_MANY_HANDSHAKES.as_str(),
            "connection refused: the handshake budget stayed full"
        );
        send(&tx, max, &too_many());
        drop(tx);
        finish_writer(writer, limits.write_timeout).await;
        return;
    };
    let authed = tokio::select! {
        a = handshake(&mut reader, &tx, &shared) => a,
        () = evict.notified() => {
            tracing::warn!(code = CONTROL_TOO_MANY_HANDSHAKES.as_str(), "the oldest unauthenticated connection closed");
            send(&tx, max, &too_many());
            None
        }
    };
    shared.leave_handshake(pending);
    let Some((auth, slot)) = authed else {
        drop(tx);
        finish_writer(writer, limits.write_timeout).await;
        return;
    };
    tracing::debug!(owner, "connection authenticated");
    let auth = Arc::new(if owner { auth.into_owner() } else { auth });
    let in_flight = Arc::new(Semaphore::new(limits.max_in_flight));
    let mut shutting_down = false;
    // Attached sessions of this connection: the forwarding task of each.
    let mut attached: std::collections::HashMap<String, tokio::task::JoinHandle<()>> =
        std::collections::HashMap::new();
    loop {
        let read = tokio::select! {
            _ = shutdown.changed() => { shutting_down = true; break }
            r = tokio::time::timeout(limits.idle_timeout, reader.next()) => r,
        };
        let payload = match read {
            // An attached connection is not idle while its stream runs.
            Err(_)
                if in_flight.available_permits() == limits.max_in_flight
                    && attached.values().all(tokio::task::JoinHandle::is_finished) =>
            {
                tracing::debug!("idle connection closed");
                break;
            }
            Err(_) => continue,
            Ok(Err(ReadFault::Closed)) => break,
            Ok(Err(ReadFault::TooLarge(r))) => {
                tracing::warn!(code = r.code().as_str(), "oversized frame; closing");
                let _ = send_wait(&tx, max, &RpcError::from_rejection(&r).to_response(None)).await;
                break;
            }
            Ok(Ok(p)) => p,
        };
        let req = match protocol::parse_request(&payload, max as usize) {
            Ok(r) => r,
            Err(b) => {
                tracing::debug!(code = b.error.code.as_str(), "malformed request");
                if !send_wait(&tx, max, &b.to_response()).await {
                    break;
                }
                continue;
            }
        };
        let Some(id) = req.id.clone() else {
            tracing::debug!(method = ?req.method, "notification ignored");
            continue;
        };
        if matches!(req.method.as_str(), "attach" | "detach")
            && shared
                .service
                .capabilities()
                .advertised(&req.method)
                .is_some()
        {
            let msg = stream_request(&shared, &auth, &req, &id, &tx, &mut attached).await;
            if !msg.is_null() && !send_wait(&tx, max, &msg).await {
                break;
            }
            continue;
        }
        let Ok(permit) = in_flight.clone().try_acquire_owned() else {
            let e = RpcError::new(
                protocol::LIMIT_ERROR,
                CONTROL_BUSY,
                format!(
                    "at most {} requests may be in flight per connection",
                    limits.max_in_flight
                ),
            );
            if !send_wait(&tx, max, &e.to_response(Some(&id))).await {
                break;
            }
            continue;
        };
        let (tx, shared, auth) = (tx.clone(), shared.clone(), auth.clone());
        tokio::spawn(async move {
            let service = shared.service.clone();
            let outcome =
                tokio::task::spawn_blocking(move || service.dispatch(auth.caller(), &req)).await;
            let msg = match outcome {
                Ok(Ok(result)) => protocol::result_response(&id, result),
                Ok(Err(e)) => e.to_response(Some(&id)),
                Err(_) => RpcError::new(
                    protocol::INTERNAL_ERROR,
                    CONTROL_INTERNAL,
                    "the request failed inside the service",
                )
                .to_response(Some(&id)),
            };
            let _ = send_wait(&tx, max, &msg).await;
            drop(permit);
        });
    }
    for (_, h) in attached.drain() {
        h.abort();
    }
    let all = u32::try_from(limits.max_in_flight).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(limits.shutdown_grace, in_flight.acquire_many(all)).await;
    if shutting_down {
        let e = RpcError::new(
            protocol::LIMIT_ERROR,
            CONTROL_SHUTTING_DOWN,
            "the service is shutting down",
        );
        // Never waits: a peer that does not read misses it.
        send(&tx, max, &e.to_response(None));
    }
    drop(tx);
    finish_writer(writer, limits.write_timeout).await;
    drop(slot);
}

/// `attach` and `detach`, which belong to the connection: attach answers
/// with the transcript, then a task forwards the session's later events as
/// `output` and `session_ended` notifications (after the answer, since the
/// answer is queued first); detach stops that task.
async fn stream_request(
    shared: &Arc<Shared>,
    auth: &Authenticated,
    req: &Request,
    id: &serde_json::Value,
    tx: &mpsc::Sender<Vec<u8>>,
    attached: &mut std::collections::HashMap<String, tokio::task::JoinHandle<()>>,
) -> serde_json::Value {
    let session = req
        .params
        .get("session_id")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("")
        .to_owned();
    attached.retain(|_, h| !h.is_finished());
    if req.method == "detach" {
        let auth_free = shared.service.attach_check(&req.params);
        if let Err(e) = auth_free {
            return e.to_response(Some(id));
        }
        let was = attached.remove(&session).map(|h| h.abort()).is_some();
        return protocol::result_response(
            id,
            serde_json::json!({"session_id": session, "detached": was}),
        );
    }
    match shared.service.attach(auth.caller(), &req.params) {
        Err(e) => e.to_response(Some(id)),
        Ok((result, rx)) => {
            if let Some(old) = attached.remove(&session) {
                old.abort();
            }
            if let Some(mut rx) = rx {
                let tx = tx.clone();
                let max = shared.limits.max_frame_bytes;
                let name = session.clone();
                // The answer is queued before the task can queue anything.
                let answer = protocol::result_response(id, result);
                if !send_wait(&tx, max, &answer).await {
                    return serde_json::Value::Null;
                }
                let h = tokio::spawn(async move {
                    loop {
                        match rx.recv().await {
                            Ok(ev) => {
                                let end = matches!(ev, super::managed::Event::Ended(_));
                                if !send_wait(&tx, max, &ev.notification(&name)).await || end {
                                    break;
                                }
                            }
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                                let note = protocol::notification(
                                    "output_lost",
                                    serde_json::json!({"session_id": name, "chunks": n}),
                                );
                                if !send_wait(&tx, max, &note).await {
                                    break;
                                }
                            }
                            Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                        }
                    }
                });
                attached.insert(session, h);
                return serde_json::Value::Null;
            }
            protocol::result_response(id, result)
        }
    }
}
