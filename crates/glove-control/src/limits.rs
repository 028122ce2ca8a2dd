//! The service's configured bounds, with their defaults.
//!
//! Every bound is enforced by the server and documented in
//! `docs/protocol.md`; the `gloved` flags of the same names override them.

use std::time::Duration;

/// The bounds of the control service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest frame payload in bytes, either direction (default 1 MiB).
    pub max_frame_bytes: u32,
    /// Authenticated connections served at once (default 64); one more is
    /// answered with `control_too_many_connections` and closed. Connections
    /// still in the handshake do not count here.
    pub max_connections: usize,
    /// Connections still in the handshake at once (default 16), a budget
    /// of their own: one more waits until one leaves or the oldest has been
    /// pending for a second, which is then closed with
    /// `control_too_many_handshakes`; so silent sockets delay the owner by
    /// about a second and never lock it out.
    pub max_handshakes: usize,
    /// Requests of one connection being processed at once (default 8); one
    /// more is answered with `control_busy`.
    pub max_in_flight: usize,
    /// A connection with nothing in flight that sends nothing for this long
    /// is closed (default 300 s).
    pub idle_timeout: Duration,
    /// Time a new connection has to complete the handshake (default 5 s).
    pub handshake_timeout: Duration,
    /// Time in-flight requests get to finish on shutdown (default 10 s).
    pub shutdown_grace: Duration,
    /// A frame not written to its client within this long closes the
    /// connection (default 30 s); shutdown never waits longer for one.
    pub write_timeout: Duration,
    /// Client nonces remembered to refuse replayed handshakes (default
    /// 65,536; the oldest is forgotten first).
    pub replay_window: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame_bytes: 1 << 20,
            max_connections: 64,
            max_handshakes: 16,
            max_in_flight: 8,
            idle_timeout: Duration::from_secs(300),
            handshake_timeout: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(10),
            write_timeout: Duration::from_secs(30),
            replay_window: 65_536,
        }
    }
}
