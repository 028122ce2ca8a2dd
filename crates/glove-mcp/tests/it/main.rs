//! glove-mcp's integration tests: the mediator between a test agent (a
//! tokio duplex speaking JSON-RPC) and real upstream servers — the npm
//! `server-everything` and `server-filesystem` (found through
//! `GLOVE_MCP_SERVERS`, see `mcp/package.json`; skipped with a printed
//! reason when unset, failing under `GLOVE_REQUIRE_SANDBOX=1`) and a
//! scripted Python server (`tests/peers/script_server.py`). Each test
//! reopens the audit journal at the end and checks its events.
//!
//! The tests run on a current-thread runtime, as the socket server does
//! in production (the audit's sync then blocks the only thread); two also
//! run on a multi-thread one, as an embedder may (the sync then runs in
//! `block_in_place`).

mod common;
mod everything;
mod filesystem;
mod props;
mod script;
