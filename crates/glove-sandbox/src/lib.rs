//! Linux sandbox mechanisms for Glove.
//!
//! A tour:
//!
//! * [`spec`] — [`LaunchSpec`], everything a launch commits to, validated;
//! * [`launch`] — [`launch()`](launch::launch): clone into new user, mount,
//!   pid, net, ipc, uts and cgroup namespaces, build the file system view,
//!   and release the agent under seccomp with no capabilities;
//! * [`supervise`] — the supervisor loop: streams, output counting, wall and
//!   CPU watchdogs, and the [`Outcome`];
//! * [`cgroup`] — per-session cgroups (v2, or v1 as on the development
//!   machines); [`cgroup_leaf`] — a delegated v2 subtree (systemd
//!   `Delegate=`): the service moves into a leaf, sessions go beside it;
//! * [`seccomp`] — the default-deny allow-list;
//! * [`outcome`] — what a run used and how it ended;
//! * [`profile`] — the built-in default profile of `glove exec`, and
//!   [`etc_snapshot`], the cached read-only `/etc` it binds;
//! * [`launcher`] and [`wire`] — the single-threaded launcher process a
//!   multi-threaded service drives over one socket, and its frames;
//! * [`net_pool`] — network namespaces made ahead for root launches;
//! * [`identity`] — boot id + pid + start time + cgroup, for recovery;
//! * `sys` — the only module with `unsafe` code and raw system calls.
#![deny(unsafe_code)]

pub mod cgroup;
pub mod cgroup_leaf;
mod copy;
pub mod error;
pub mod etc_snapshot;
pub mod exposures;
pub mod grants;
pub mod identity;
pub mod launch;
pub mod launcher;
pub mod net_pool;
pub mod outcome;
pub mod profile;
pub mod retained;
pub mod seccomp;
pub mod sink;
pub mod spec;
pub mod supervise;
pub(crate) mod sys;
pub mod tty;
pub mod wire;

pub use error::SandboxError;
pub use launch::{launch, prepare, Prepared, PreparedFacts, Running, Streams};
pub use outcome::{Limit, Outcome};
pub use spec::LaunchSpec;
pub use sys::Errno;

/// A new egress channel, `(host end, sandbox end)`: a connected
/// `SOCK_SEQPACKET` Unix socket pair, close-on-exec
/// ([`spec::EgressSpec`]).
pub fn egress_channel() -> Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd), SandboxError> {
    sys::net::seqpacket_pair().map_err(|e| SandboxError::Io {
        detail: format!("egress channel: {e}"),
    })
}
