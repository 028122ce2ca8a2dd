//! The proxy proper: the accept loop over the channel, the per-connection
//! HTTP server (hyper), and each decision — `CONNECT` tunnels,
//! absolute-URI requests and port-mapped requests — audited before
//! anything from upstream reaches the agent.
//!
//! One concern a file:
//!
//! * `serve` — listening and serving: the accept loop, the per-connection
//!   HTTP server, stopping;
//! * `decision` — the request decision: target parsing (strict ports),
//!   name resolution and the allow-list decision;
//! * `tunnel` — `CONNECT` tunnels, opaque and terminated;
//! * `terminate` — TLS termination inside a tunnel;
//! * `forward` — forwarding: outgoing head, dispatch, response checks;
//! * `budget` — the refusal budget and endpoints' limits;
//! * `record` — events and refusals.

mod budget;
mod decision;
mod forward;
mod record;
mod serve;
mod terminate;
mod tunnel;

pub(crate) use serve::run;

use crate::audit::Audit;
use crate::broker::Broker;
use crate::meter::{EndpointState, IoMeter};
use crate::ProxyLimits;
use glove_types::egress::settings::EgressSettings;
use glove_types::egress::{Endpoint, Host};
use glove_types::ids::SessionId;
use std::net::IpAddr;
use std::num::NonZeroU16;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::{watch, Semaphore};
use tokio::time::Instant;
use tunnel::Tunnel;

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
            .endpoints()
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
                .port_mappings()
                .get(i)
                .map(|m| &m.endpoint),
            Listener::Terminated(i) => self.shared.settings.endpoints().get(i),
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
