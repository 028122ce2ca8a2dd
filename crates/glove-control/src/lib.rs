//! `gloved`'s service logic as a library, without sockets or a command line.
//!
//! A tour:
//!
//! * [`service`] — the frozen policy, session store and receipt journal,
//!   and synchronous dispatch of one request from an authenticated
//!   [`Caller`]; `create_session` drives the lifecycle's `log_create`;
//! * [`error`] — [`ControlError`](error::ControlError), the one internal
//!   error, mapped to the wire once at dispatch, and the lock policy;
//! * [`exposures`] — path exposures: the exposure policy, its held roots,
//!   the exposure journal, enrollment and the checks a plan passes;
//! * [`capabilities`] — the advertised methods and the capability document,
//!   derived from what startup constructed;
//! * [`protocol`] — the JSON-RPC 2.0 message model: strict request parsing,
//!   responses, and the one mapping from an internal error to a wire error;
//! * [`apply`] — the owner's apply signing key, signing, the root-owned
//!   trust policy and the verification of signed apply authorizations;
//! * [`assembly`] — the one assembly of a session, for `glove exec`,
//!   `glove run` and the managed start alike: its parts (egress, MCP,
//!   leases) prepared on the spec, started after the build, stopped and
//!   reported at the end;
//! * [`managed`] — the Linux managed runtime: launch spec, launch binding,
//!   launcher client, receipts, recovery, the attach transcript;
//! * [`harness`] — what a search directory holds of the five agent
//!   harnesses (`glove policy detect`);
//! * [`stage`] — a harness's closure copied, content-addressed, into a
//!   protected directory (`glove policy stage`);
//! * [`workspace`] — a retained workspace's manifest, taken through
//!   descriptors, and `glove diff`'s comparison and renderings;
//! * [`held`] — the paths the service holds and the refusal of a grant that
//!   would expose one;
//! * [`ports`] — the lifecycle's logs over the session store and receipt
//!   journal;
//! * [`process`] — signalling a recorded process through a verified pidfd;
//! * [`placement`] — directory checks and private atomic file writes;
//! * [`protected`] — reading operator files as protected files;
//! * [`limits`] — the configured bounds.
//!
//! The crate uses `glove-types`, `glove-lifecycle`, `glove-journal` and
//! `glove-sandbox`; only `glove-bin` (the socket server, frames and the
//! handshake, the clients, configuration parsing and the CLI) uses it.
#![forbid(unsafe_code)]

pub mod apply;
pub mod assembly;
pub mod capabilities;
pub mod error;
pub mod exposures;
pub mod harness;
pub mod held;
pub mod limits;
pub mod managed;
pub mod placement;
pub mod ports;
pub mod process;
pub mod protected;
pub mod protocol;
pub mod service;
pub mod stage;
pub mod stages;
pub mod workspace;

use glove_types::codes::control::CONTROL_INTERNAL;
use glove_types::Rejection;

/// An authenticated client, as request dispatch sees it: the label it
/// presented at the handshake. The socket server makes one only after the
/// mutual handshake succeeded (see `glove-bin`'s `auth`); the label
/// separates cooperating controllers, it is not a boundary against a
/// hostile process of the same user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    client: String,
    owner: bool,
}

impl Caller {
    /// The caller with this client label, on the control socket (a
    /// controller, local or tunnelled from elsewhere).
    pub fn new(client: impl Into<String>) -> Caller {
        Caller {
            client: client.into(),
            owner: false,
        }
    }

    /// The owner at this machine: a caller on the owner socket, which is
    /// never forwarded to a controller. Only the owner may inspect, apply
    /// or remove retained stages.
    pub fn owner(client: impl Into<String>) -> Caller {
        Caller {
            client: client.into(),
            owner: true,
        }
    }

    /// Whether this is the owner at this machine.
    pub fn is_owner(&self) -> bool {
        self.owner
    }

    /// The client label.
    pub fn client_id(&self) -> &str {
        &self.client
    }
}

/// Draws random bytes from the operating system.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], Rejection> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| {
        Rejection::new(
            CONTROL_INTERNAL,
            format!("the system random source failed: {e}"),
        )
    })?;
    Ok(b)
}
