//! `glove-remote-executor --stdio`: the program an SSH forced command runs
//! on a remote host for the construction-only remote backend.
//!
//! It is construction evidence, not a remote runtime: it proves the remote
//! end can be pinned (its executable measured against an identity the
//! host's administrator wrote) and spoken to over gloved's framing with
//! bounded time, and answers that it is not operational. Nothing is
//! launched.
//!
//! In order, on start:
//!
//! 1. the umask becomes `077` (before anything else);
//! 2. the arguments must be exactly `--stdio` (else `remote_usage`, exit
//!    [`EXIT_USAGE`]; standard input is never read);
//! 3. [`identity`]: `/etc/glove/remote-executor.identity` is read, from that
//!    fixed path only, through checked root-owned directories, and the
//!    executor's own executable is measured against it (else the refusal's
//!    code, exit [`EXIT_IDENTITY`]; standard input is never read);
//! 4. [`serve`]: JSON-RPC 2.0 requests in gloved's frames on standard
//!    input, answers on standard output, each bounded by the deadlines of
//!    [`deadline`], through the poll-bounded reads and writes of
//!    [`channel`].
//!
//! Diagnostics go to standard error, one line each:
//! `glove-remote-executor: <code>: <message>`.
//!
//! Exit statuses (sysexits): 0 when standard input ends at a frame
//! boundary; [`EXIT_USAGE`] (64) for a bad command line;
//! [`EXIT_PROTOCOL`] (65) when the input breaks the framing (an oversized
//! frame, the input ending inside a frame); [`EXIT_IO`] (74) when standard
//! input or output fails; [`EXIT_LIMIT`] (75) when a bound ends the
//! channel (its lifetime, a reply that could not be written before its
//! deadline, too many frames); [`EXIT_IDENTITY`] (78) when the identity
//! refuses.
//!
//! `docs/protocol.md` ("The remote executor") is the wire reference;
//! `docs/operations.md` tells the administrator how to install it.

pub mod channel;
pub mod deadline;
pub mod identity;
pub mod serve;

use glove_types::codes::control::REMOTE_USAGE;
use glove_types::ErrorCode;
use std::ffi::OsString;
use std::time::Instant;

/// The input ended cleanly.
pub const EXIT_OK: i32 = 0;
/// The command line is not exactly `--stdio`.
pub const EXIT_USAGE: i32 = 64;
/// The input broke the framing.
pub const EXIT_PROTOCOL: i32 = 65;
/// Standard input or output failed.
pub const EXIT_IO: i32 = 74;
/// A bound (channel lifetime, reply deadline, frame count) ended the
/// channel.
pub const EXIT_LIMIT: i32 = 75;
/// The identity file or the executable's measurement refused.
pub const EXIT_IDENTITY: i32 = 78;

/// The program's name in diagnostics.
pub const PROGRAM: &str = "glove-remote-executor";

/// The one accepted argument.
pub const STDIO_FLAG: &str = "--stdio";

/// Prints one diagnostic line on standard error.
pub fn diagnostic(code: ErrorCode, message: &str) {
    // One line, whatever the message holds.
    let message = message.replace(['\n', '\r'], " ");
    eprintln!("{PROGRAM}: {code}: {message}");
}

/// Checks the arguments (without the program name): exactly `--stdio`.
pub fn check_args(args: &[OsString]) -> Result<(), String> {
    match args {
        [one] if one == STDIO_FLAG => Ok(()),
        [] => Err(format!("expected exactly {STDIO_FLAG}, got no argument")),
        more => Err(format!(
            "expected exactly {STDIO_FLAG}, got {} argument(s)",
            more.len()
        )),
    }
}

/// The whole program: `args` are the arguments after the program name;
/// returns the exit status.
pub fn main(args: impl IntoIterator<Item = OsString>) -> i32 {
    // First thing: whatever this process or a later version of it creates
    // is private to its user.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let args: Vec<OsString> = args.into_iter().collect();
    if let Err(why) = check_args(&args) {
        diagnostic(REMOTE_USAGE, &why);
        return EXIT_USAGE;
    }
    let identity = match identity::load_and_verify() {
        Ok(i) => i,
        Err(r) => {
            diagnostic(r.code(), r.message());
            return EXIT_IDENTITY;
        }
    };
    serve::run(&identity, Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_stdio_is_accepted() {
        let v = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(check_args(&v(&["--stdio"])).is_ok());
        for bad in [
            &[][..],
            &["--stdio", "--stdio"][..],
            &["--stdio", "x"][..],
            &["stdio"][..],
            &["--stdio="][..],
            &["-"][..],
        ] {
            assert!(check_args(&v(bad)).is_err(), "{bad:?}");
        }
    }
}
