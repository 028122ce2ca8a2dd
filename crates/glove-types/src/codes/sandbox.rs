//! Codes of the Linux sandbox (owned by `glove-sandbox`).

define_codes! { Sandbox;
    SANDBOX_UNAVAILABLE = "sandbox_unavailable": "a required kernel feature is not available",
    SANDBOX_SPEC_INVALID = "sandbox_spec_invalid": "the launch specification breaks a rule (path, size, descriptor or limit)",
    SANDBOX_MULTITHREADED = "sandbox_multithreaded": "a launch was attempted from a multi-threaded process",
    SANDBOX_LIMIT_UNENFORCEABLE = "sandbox_limit_unenforceable": "a limit cannot be enforced by the required mechanism on this host",
    SANDBOX_CGROUP_FAILED = "sandbox_cgroup_failed": "the session's cgroup could not be created, configured or joined",
    SANDBOX_CLONE_FAILED = "sandbox_clone_failed": "the sandbox process could not be created in new namespaces",
    SANDBOX_SETUP_FAILED = "sandbox_setup_failed": "a mount, id map or other setup step inside the sandbox failed",
    SANDBOX_COPY_FAILED = "sandbox_copy_failed": "copying a directory into the sandbox failed (size quota, special file or I/O)",
    SANDBOX_SECCOMP_FAILED = "sandbox_seccomp_failed": "the seccomp filter could not be built or installed",
    SANDBOX_EXEC_FAILED = "sandbox_exec_failed": "the command could not be executed inside the sandbox",
    SANDBOX_BIND_SHADOWED = "sandbox_bind_shadowed": "a read-only bind target lies at or below a writable directory that would hide it",
    SANDBOX_SOCKET_EXPOSED = "sandbox_socket_exposed": "a read-only bind or grant holds a Unix socket, which a connect() inside would reach",
    SANDBOX_GRANT_REFUSED = "sandbox_grant_refused": "a path grant was refused at launch (link in the path, not a directory, exposes a protected path, missing)",
    SANDBOX_BUNDLE_REFUSED = "sandbox_bundle_refused": "a library bundle was refused (root or file mode, owner, link count, size, symlink, digest mismatch, changed while read)",
    SANDBOX_EXECUTABLE_CHANGED = "sandbox_executable_changed": "the resolved executable was replaced or changed between resolution and launch (its device, inode or change time differ)",
    SANDBOX_LEASE_REFUSED = "sandbox_lease_refused": "a credential lease or its return file is not a regular host file with one link of at most 1 MiB (or could not be read or placed in the private home)",
    SANDBOX_IO_FAILED = "sandbox_io_failed": "talking to the sandbox (pipes, terminal, status channel) failed",
}
