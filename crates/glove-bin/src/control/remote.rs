//! The construction-only remote backend: the SSH artifacts startup writes.
//!
//! When the policy names a `remote_backend`, startup writes an isolated
//! OpenSSH client config and a pinned `known_hosts` (both mode 0600) into
//! `remote/` (mode 0700) beneath the verified runtime directory. Nothing
//! contacts the host: no DNS lookup, no connection, no `ssh` process. The
//! backend adds no method; capabilities report it with
//! `lifecycle_operational: false`. The policy validator already restricted
//! every value written here (host name or address, port, user name, one
//! `ssh-ed25519` key), so none can break out of its line.

use super::placement;
use glove_types::policy::RemoteBackend;
use glove_types::Rejection;
use rustix::fd::OwnedFd;
use std::path::Path;

/// The subdirectory of the runtime directory.
pub const REMOTE_DIR: &str = "remote";

/// Writes the SSH artifacts (see the module docs).
pub fn prepare(
    _runtime_fd: &OwnedFd,
    runtime_dir: &Path,
    r: &RemoteBackend,
) -> Result<(), Rejection> {
    let dir_path = runtime_dir.join(REMOTE_DIR);
    let dir = placement::ensure_dir(&dir_path, "the remote backend directory")?;
    let known_hosts = dir_path.join("known_hosts");
    let host = if r.port() == 22 {
        r.host().to_owned()
    } else {
        format!("[{}]:{}", r.host(), r.port())
    };
    let config = format!(
        "# Written by gloved at startup; construction only, never used to connect yet.\n\
         Host glove-remote\n\
         \x20 HostName {host_name}\n\
         \x20 Port {port}\n\
         \x20 User {user}\n\
         \x20 UserKnownHostsFile {kh}\n\
         \x20 GlobalKnownHostsFile none\n\
         \x20 StrictHostKeyChecking yes\n\
         \x20 HostKeyAlgorithms ssh-ed25519\n\
         \x20 UpdateHostKeys no\n\
         \x20 ControlMaster no\n\
         \x20 ControlPath none\n\
         \x20 ControlPersist no\n",
        host_name = r.host(),
        port = r.port(),
        user = r.user(),
        kh = known_hosts.display(),
    );
    let write = |name: &str, contents: &[u8]| {
        placement::write_private(&dir, name, contents).map_err(|e| {
            Rejection::new(
                glove_types::codes::control::CONTROL_REMOTE_ARTIFACT_IO,
                e.message().to_owned(),
            )
        })
    };
    write(
        "known_hosts",
        format!("{host} {}\n", r.host_key()).as_bytes(),
    )?;
    write("ssh_config", config.as_bytes())?;
    Ok(())
}
