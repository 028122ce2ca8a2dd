//! `gloved` end to end: the real binary in temporary directories, real Unix
//! sockets, the real client. No sleeps: readiness is the `gloved ready`
//! line on stdout, and every wait is on an event (a line, an exit, EOF).

#[path = "control/harness.rs"]
mod harness;

#[path = "common/mod.rs"]
mod common;

#[path = "control/managed.rs"]
mod managed;
#[path = "control/refinement.rs"]
mod refinement;

#[path = "control/adapter.rs"]
mod adapter;
#[path = "control/auth.rs"]
mod auth;
#[path = "control/both_doors.rs"]
mod both_doors;
#[path = "control/contained_turns.rs"]
mod contained_turns;
#[path = "control/exposures.rs"]
mod exposures;
#[path = "control/framing.rs"]
mod framing;
#[path = "control/harness_sessions.rs"]
mod harness_sessions;
#[path = "control/mcp.rs"]
mod mcp;
#[path = "control/methods.rs"]
mod methods;
#[path = "control/model.rs"]
mod model;
#[path = "control/newcomer.rs"]
mod newcomer;
#[path = "control/preset_session.rs"]
mod preset_session;
#[path = "control/receipts_show.rs"]
mod receipts_show;
#[path = "control/retained.rs"]
mod retained;
#[path = "control/snapshots.rs"]
mod snapshots;
#[path = "control/staged.rs"]
mod staged;
#[path = "control/startup.rs"]
mod startup;
