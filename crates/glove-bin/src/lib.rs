//! Wiring for the `glove` command and the `gloved` service.
//!
//! * [`protected`] — reading operator files (policy, plans) as protected
//!   files: one descriptor, identity re-checked after the read;
//! * [`cli`] — the `glove` command line (clap), parsed in two phases: raw
//!   flags, then resolved commands;
//! * [`exec`] — `glove exec`: the default profile, stdio forwarding and the
//!   exit-status mapping;
//! * [`explain`] — the text rendering of `glove policy explain`;
//! * [`report`] — how errors and results reach the terminal: `error[<code>]:
//!   <message>` on stderr, or one JSON object with `--json`, and the
//!   documented exit statuses;
//! * [`apply`] — `glove apply keygen` and `glove apply sign` (the owner's
//!   key and signed apply authorizations);
//! * [`plan_new`] — `glove plan new` and `glove plan fmt`;
//! * [`init`] — `glove init` and `glove exposures`: path exposures through
//!   the owner socket;
//! * [`stage`] — `glove policy stage`: confirmation, progress bar, report;
//! * [`setup`] — `glove setup`: directories, keys, a starter policy, the
//!   `gloved` config file;
//! * [`layout`] — where Glove's files live (config, state, runtime);
//! * [`daemon`] — `glove daemon`: gloved as a systemd service;
//! * [`control`] — the `gloved` control service (socket, handshake,
//!   JSON-RPC dispatch) and the client behind `glove capabilities`,
//!   `glove session` and `glove receipts`;
//! * [`remote_executor`] — `glove-remote-executor --stdio`, the forced
//!   command of the construction-only remote backend: its identity file,
//!   deadlines and the `remote_health` method.
#![forbid(unsafe_code)]

pub mod agent;
pub mod apply;
pub mod apply_run;
pub mod audit;
pub mod cli;
pub mod control;
pub mod daemon;
pub mod demo;
pub mod diff;
pub mod egress;
pub mod exec;
pub mod explain;
pub mod generate_cmd;
pub mod init;
pub mod layout;
pub mod plan_new;
pub use glove_control::protected;
pub mod receipts_show;
pub mod receipts_verify;
pub mod remote_executor;
pub mod report;
pub mod run;
pub mod run_demo;
pub mod setup;
pub mod stage;
pub mod stages_service;
pub mod words;
pub mod workspace;
