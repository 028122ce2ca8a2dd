//! glove-mcp's integration tests: the mediator between a test agent (a
//! tokio duplex speaking JSON-RPC) and real upstream servers — the npm
//! `server-everything` and `server-filesystem` (found through
//! `GLOVE_MCP_SERVERS`, see `mcp/package.json`; skipped with a printed
//! reason when unset, failing under `GLOVE_REQUIRE_SANDBOX=1`) and a
//! scripted Python server (`tests/peers/script_server.py`). Each test
//! reopens the audit journal at the end and checks its events.

mod common;
mod everything;
mod filesystem;
mod props;
mod script;
