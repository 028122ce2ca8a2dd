//! The MCP mediator: Glove's side of `glove run`'s tool calls (see
//! `docs/mcp.md`; the module docs here are the reference).
//!
//! A contained agent reaches the mediator through one inherited
//! connection and speaks MCP to it as to a server; the mediator speaks MCP
//! as a client to the upstream servers the operator's profile names, which
//! run on the host. Nothing the agent sends reaches an upstream unless the
//! mediator decided it may, and nothing an upstream answers reaches the
//! agent before the decision is durably audited.
//!
//! A tour of the crate, bottom up:
//!
//! * [`json`] — strict JSON for frames (duplicate keys refused at any
//!   depth, non-integer numbers allowed) and the canonical encoding every
//!   digest here uses;
//! * [`frame`] — newline-delimited JSON-RPC 2.0: the bounded line reader
//!   and the pure, total [`frame::decode`];
//! * [`profile`] — the operator's [`Profile`]: upstream commands with
//!   explicit environments, tool allow-lists, argument rules, resource and
//!   prompt lists, pins, limits;
//! * [`rules`], [`schema`] — argument rules (`equals`, `one_of`, `prefix`,
//!   `pattern`, `range`, `length`, `path`, `items`) and the enforced JSON
//!   Schema subset;
//! * [`pin`] — tool and server digests, the protected pin file,
//!   `pins show` / `approve`;
//! * [`audit`] — [`AuditEvent`] (one canonical encoding, strict decoder),
//!   the journal writer (group commit on the mediator's thread), [`Summary`];
//! * [`upstream`] — one upstream server process: handshake in either
//!   revision, requests with deadlines, paginated `tools/list`, what the
//!   server sends on its own;
//! * [`view`] — Glove's own view of the tools: allowed, pinned, named;
//! * [`sanitize`] — host paths removed from upstream error messages;
//! * [`mediator`] — [`Mediator`]: one agent connection, every method's
//!   decision, audit before release, fail closed;
//! * [`sockets`] — [`sockets::SocketServer`]: a mediator behind one Unix
//!   socket per upstream, on a runtime thread of its own;
//! * [`relay`] — the other end, inside the sandbox: `glove mcp-relay`,
//!   the agent's MCP server as a harness starts it;
//! * [`demo`] — `glove run demo`'s upstream and scripted agent;
//! * [`error`] — [`McpError`] with its stable code.
//!
//! The crate has no `unsafe` code.
#![forbid(unsafe_code)]

pub mod audit;
pub mod demo;
pub mod error;
pub mod frame;
pub mod handoff;
pub mod json;
pub mod mediator;
pub mod pin;
pub mod profile;
pub mod relay;
pub mod rules;
pub mod sanitize;
pub mod schema;
pub mod sockets;
pub mod upstream;
pub mod view;

pub use audit::{journal_spec, read_events, AuditEvent, Decision, Summary};
pub use error::McpError;
pub use mediator::{Mediator, MediatorConfig};
pub use profile::Profile;
