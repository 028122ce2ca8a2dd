//! The per-session egress proxy: the host side of a sandbox's egress (see
//! `docs/egress.md`).
//!
//! A sandboxed agent has its own network namespace with only `lo`. A
//! forwarder inside it listens on `127.0.0.1` ports and passes each
//! accepted TCP connection over an inherited Unix `SOCK_SEQPACKET` channel
//! (one data byte, the listener index, and exactly one descriptor, a
//! connected `AF_INET`/`AF_INET6` TCP socket; any other message is dropped
//! with its descriptors closed). [`start`] serves them
//! on one thread running a single-threaded tokio runtime:
//!
//! * **listener 0** ([`PROXY_PORT`](glove_types::egress::settings::PROXY_PORT))
//!   is an HTTP/1.1 forward proxy: `CONNECT host:port` tunnels and
//!   absolute-URI `http://` requests; anything else (an origin-form
//!   request, an upgrade, a head hyper rejects) is `egress_request_invalid`,
//!   and a target port that is not exactly 1-65535 in digits is
//!   `egress_target_invalid` (never read as the default port);
//! * **listener i+1** is `settings.port_mappings[i]`: a plain HTTP/1.1
//!   server whose every origin-form request is forwarded to the mapping's
//!   endpoint.
//!
//! Every target is decided with [`glove_types::egress::decide`] against
//! the policy's endpoints and every address it resolves to — through the
//! policy's `hosts` table only, when it has one, or the system resolver —
//! and the proxy connects only to the addresses it checked. Per-endpoint
//! limits count over the whole session: `max_connections` upstream
//! connections (tunnels and forwarded requests) and `max_bytes` both ways
//! (upward, what the endpoint receives: request heads as well as bodies).
//! The relay never creates a host socket other than those upstream
//! connections and never offers DNS.
//!
//! **Audit before release.** Every decision is an
//! [`EgressEvent`](glove_types::egress::event::EgressEvent) appended
//! durably to the session's egress journal before the agent sees its
//! outcome: a tunnel's before the `200`, a forwarded request's before any
//! byte of it leaves for the upstream (a failure after that is one more
//! event), a refusal's before the error. Tunnels and mapped connections get one more
//! (allowed) connection event when they end, with their bytes and
//! duration. If an append fails, or the journal has no room left for the
//! events a decision needs, the agent gets `503 egress_audit_failed` and
//! nothing from upstream, and the proxy refuses everything after (fail
//! closed).
//!
//! **Refusals** are answered with an HTTP error naming the code in
//! `x-glove-refusal` and a body `glove egress refused: <code>: <message>`:
//! `403` for policy refusals (host, port, address, placeholder, limit),
//! `400` for invalid requests (`431` for a head over the bound), `502` when
//! the upstream fails, `504` when it times out, `503` when the audit
//! fails. Two kinds hyper answers itself, before the proxy sees a request,
//! and they are audited after: a head over twice the bound or malformed
//! (hyper's own `431`/`400`, audited `egress_request_invalid`), and a head
//! not complete within its deadline (the connection is closed, audited
//! `egress_timeout` when the agent had sent part of a head).
//!
//! **Brokered credentials**: see [`Broker`]; bodies are not scanned. A
//! `CONNECT` tunnel is opaque, except to an endpoint a credential is bound
//! to: that one is terminated (TLS with a leaf of the session CA,
//! [`Broker::ca_certificate_pem`]), and each request inside is brokered,
//! audited as a request event and forwarded over TLS verified against
//! [`TlsRoots`]. Such a tunnel's upstream connections are its requests'
//! (one each); an agent that does not trust the session CA fails its
//! handshake, and the tunnel ends with its closing event.
//!
//! The crate has no `unsafe` code; descriptor passing uses rustix's safe
//! `recvmsg`.

mod audit;
mod broker;
mod channel;
mod error;
mod meter;
mod proxy;
mod relay;
mod sandbox;
mod tls;

pub use audit::{journal_spec, read_events, EVENT_RECORD};
pub use broker::{Broker, MAX_CREDENTIAL_BYTES, PLACEHOLDER_PREFIX};
pub use error::EgressError;
pub use sandbox::{
    sandbox_environment, sandbox_ports, sandbox_trust_files, CA_BUNDLE_FILE, CA_FILE,
};
pub use tls::{
    TlsRoots, BUNDLE_CANDIDATES, MAX_BUNDLE_BYTES, MAX_EXTRA_ROOTS, MAX_EXTRA_ROOT_BYTES,
};

use glove_journal::JournalSpec;
use glove_types::egress::settings::EgressSettings;
use glove_types::ids::{PolicyId, SessionId};
use rustix::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// The proxy's bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyLimits {
    /// Most agent connections served at once; one over is closed at once
    /// and audited `egress_limit_reached`.
    pub max_concurrent: usize,
    /// Largest request head, in bytes (the proxy refuses above it; hyper
    /// cuts at twice it).
    pub max_head_bytes: usize,
    /// How long a request head may take to arrive (also how long an idle
    /// keep-alive connection is kept).
    pub head_deadline: Duration,
    /// How long a connection, tunnel or body may go without progress, and
    /// how long an upstream may take to send its response head.
    pub idle_deadline: Duration,
    /// How long resolving a name and connecting to an upstream may take.
    pub connect_deadline: Duration,
    /// Most agent connections over the whole session.
    pub max_session_connections: u64,
    /// The egress journal's largest size, header included.
    pub journal_max_bytes: u64,
    /// The egress journal's most records.
    pub journal_max_records: u64,
}

impl Default for ProxyLimits {
    fn default() -> ProxyLimits {
        ProxyLimits {
            max_concurrent: 64,
            max_head_bytes: 64 * 1024,
            head_deadline: Duration::from_secs(10),
            idle_deadline: Duration::from_secs(120),
            connect_deadline: Duration::from_secs(10),
            max_session_connections: 4096,
            journal_max_bytes: 64 * 1024 * 1024,
            journal_max_records: 1_000_000,
        }
    }
}

impl ProxyLimits {
    /// The spec the egress journal is created (and must be opened) with.
    pub fn journal_spec(&self) -> JournalSpec {
        journal_spec(self.journal_max_bytes, self.journal_max_records)
    }
}

/// What one session's proxy serves.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// The session, named in every event.
    pub session_id: SessionId,
    /// The validated egress policy.
    pub settings: EgressSettings,
    /// The egress journal, created fresh (its directory exists, mode 0700).
    pub journal_path: PathBuf,
    /// The bounds.
    pub limits: ProxyLimits,
    /// The roots upstreams of terminated tunnels are verified against.
    pub tls_roots: TlsRoots,
}

/// Totals of a finished proxy, for the session's receipt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The egress policy served.
    pub policy_id: PolicyId,
    /// Allowed connection decisions (tunnels opened).
    pub connections_allowed: u64,
    /// Refused connections (tunnels refused, connections over a cap,
    /// heads hyper rejected or that timed out).
    pub connections_refused: u64,
    /// Closing events (tunnels and mapped connections that ended).
    pub connections_closed: u64,
    /// Forwarded requests.
    pub requests_allowed: u64,
    /// Refused requests.
    pub requests_refused: u64,
    /// Requests let through that then failed (the endpoint did not
    /// answer, answered badly, or reflected a credential).
    pub requests_failed: u64,
    /// Bytes relayed from the agent to upstreams (tunnel data and request
    /// bodies).
    pub bytes_up: u64,
    /// Bytes relayed from upstreams to the agent (tunnel data and response
    /// bodies).
    pub bytes_down: u64,
    /// Names looked up: only endpoints' names ever are.
    pub names_resolved: u64,
    /// Refusals (requests answered, connections over a cap closed) past
    /// the journal's budget of 64 a second: counted, not journaled one by
    /// one, and not in the other counts.
    pub refusals_unjournaled: u64,
    /// Records in the egress journal.
    pub journal_records: u64,
    /// The journal's head digest.
    pub journal_head: [u8; 32],
    /// Whether the audit failed (the proxy then refused everything).
    pub audit_failed: bool,
}

/// A running proxy; [`ProxyHandle::finish`] ends it. Dropping the handle
/// ends it too, without waiting and without a summary.
#[derive(Debug)]
pub struct ProxyHandle {
    finish: Option<oneshot::Sender<Duration>>,
    thread: Option<std::thread::JoinHandle<Result<Summary, EgressError>>>,
}

/// Starts the proxy for one session on its own thread and returns at
/// once. The journal is created here (an error if it exists). `channel` is
/// the forwarder's `SOCK_SEQPACKET` socket; its end (EOF) only means no
/// more connections.
pub fn start(
    config: ProxyConfig,
    broker: Broker,
    channel: OwnedFd,
) -> Result<ProxyHandle, EgressError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(EgressError::io("build the egress runtime"))?;
    let channel = {
        let _guard = rt.enter();
        channel::Channel::new(channel)?
    };
    let spec = config.limits.journal_spec();
    let tls_client = tls::client_config(&config.tls_roots)?;
    let (audit, writer) = audit::spawn(&config.journal_path, &spec, config.limits.max_concurrent)?;
    let policy_id = config.settings.policy_id().clone();
    let shared = Arc::new(proxy::Shared::new(
        config.session_id,
        config.settings,
        config.limits,
        broker,
        audit,
        tls_client,
    ));
    let (finish_tx, finish_rx) = oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("glove-egress".into())
        .spawn(move || {
            rt.block_on(proxy::run(shared.clone(), channel, finish_rx));
            drop(rt);
            let bytes_up = shared.bytes_up.load(Ordering::SeqCst);
            let bytes_down = shared.bytes_down.load(Ordering::SeqCst);
            let names_resolved = shared.lookups.load(Ordering::SeqCst);
            let unjournaled = shared.refusals_unjournaled.load(Ordering::SeqCst);
            drop(shared);
            let t = writer.join().map_err(|_| EgressError::Panicked)?;
            Ok(Summary {
                policy_id,
                connections_allowed: t.connections_allowed,
                connections_refused: t.connections_refused,
                connections_closed: t.connections_closed,
                requests_allowed: t.requests_allowed,
                requests_refused: t.requests_refused,
                requests_failed: t.requests_failed,
                bytes_up,
                bytes_down,
                names_resolved,
                refusals_unjournaled: unjournaled,
                journal_records: t.journal_records,
                journal_head: t.journal_head,
                audit_failed: t.audit_failed,
            })
        })
        .map_err(EgressError::io("spawn the egress thread"))?;
    Ok(ProxyHandle {
        finish: Some(finish_tx),
        thread: Some(thread),
    })
}

impl ProxyHandle {
    /// Stops taking connections, gives in-flight ones `grace` to finish,
    /// tells the rest to stop (tunnels write their closing events), drops
    /// what is left, and returns the totals once the journal is closed.
    pub fn finish(mut self, grace: Duration) -> Result<Summary, EgressError> {
        if let Some(tx) = self.finish.take() {
            let _ = tx.send(grace);
        }
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| EgressError::Panicked)?,
            None => Err(EgressError::Panicked),
        }
    }
}
