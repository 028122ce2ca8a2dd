//! Linux sandbox mechanisms: namespaces, mounts, `pivot_root`, seccomp,
//! cgroups, rlimits, PTY and process identity.
//!
//! Not yet implemented: see issue 6. All `unsafe` code will live in `src/sys/`.
#![deny(unsafe_code)]
