//! The control service (`gloved`) and its client.
//!
//! A tour, from the wire up:
//!
//! * [`frame`] — one message per frame: a 4-byte big-endian length, then
//!   that many bytes of JSON; the pure decoder the server and the fuzz
//!   target share;
//! * [`protocol`] — JSON-RPC 2.0: strict request parsing (duplicate keys,
//!   depth, size, batches refused), responses, and the one mapping from a
//!   [`Rejection`](glove_types::Rejection) to a wire error;
//! * [`auth`] — the per-start bootstrap secret, the mutual HMAC
//!   challenge–response and its replay guard; [`auth::Authenticated`] is the
//!   proof request dispatch requires;
//! * [`capabilities`] — the advertised methods and the capability
//!   document, derived from what startup constructed;
//! * [`service`] — the frozen policy, session store and receipt journal,
//!   and synchronous dispatch of one request; `create_session` drives the
//!   lifecycle's `log_create`/`create` through a `TransitionLog` adapter on
//!   the session store;
//! * [`managed`] — the Linux managed runtime: the startup probe, the launch
//!   spec built from policy and plan, `start_session` through
//!   `glove-launcher` (launch binding durable before release), the
//!   per-session transcript and stream, stop, terminal receipts, recovery;
//! * [`held`] — the paths the service holds and the refusal of a grant that
//!   would expose one to the agent;
//! * [`ports`] — the lifecycle's `TransitionLog` and `ReceiptLog` over the
//!   session store and receipt journal for the records after creation;
//! * [`limits`] — the configured bounds;
//! * [`config`] — `gloved`'s flags and config file, and startup, which
//!   checks every path before anything is served;
//! * [`placement`] — directory checks and private atomic file writes;
//! * [`remote`] — the construction-only remote backend's SSH artifacts;
//! * [`server`] — tokio: bind, peer credentials, handshake, bounded
//!   concurrent dispatch, graceful shutdown;
//! * [`client`] — a blocking `std` client (no runtime);
//! * [`discover`] — how a client finds the running service without flags;
//! * [`client_cli`] — the `glove` subcommands built on it; [`session_run`]
//!   — `glove session run` and `glove session list`.
//!
//! `docs/protocol.md` is the wire reference; `docs/operations.md` tells how
//! to run the service.

pub mod auth;
pub mod client;
pub mod client_cli;
pub mod config;
pub mod discover;
pub mod frame;
pub mod remote;
pub mod server;
pub mod session_run;

// The service logic lives in `glove-control`; these are its modules under
// the names the server and the clients use.
pub use glove_control::{
    capabilities, held, limits, managed, placement, ports, process, protocol, service,
};
