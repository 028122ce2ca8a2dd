//! Named crash points for the crash tests (private).
//!
//! With the `crash-points` feature (only the crate's own tests enable it),
//! a process whose `GLOVE_JOURNAL_CRASH_POINT` names a point prints
//! `CRASH_POINT <name>` on its stdout when it gets there and then waits on
//! its stdin, so the test driving it can `SIGKILL` it at exactly that step.
//! Without the feature [`reached`] is an empty function.

/// The environment variable naming the point to stop at.
#[cfg(feature = "crash-points")]
pub(crate) const ENV: &str = "GLOVE_JOURNAL_CRASH_POINT";

/// Stops here if the environment names `name` (see the module docs).
#[cfg(feature = "crash-points")]
pub(crate) fn reached(name: &str) {
    use std::io::{Read as _, Write as _};
    if std::env::var_os(ENV).is_some_and(|v| v == name) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "CRASH_POINT {name}");
        let _ = out.flush();
        drop(out);
        // Parked until the driver kills us; if it closes stdin instead,
        // die the same way rather than go on.
        let mut b = [0u8; 1];
        let _ = std::io::stdin().read(&mut b);
        std::process::abort();
    }
}

/// Nothing without the `crash-points` feature.
#[cfg(not(feature = "crash-points"))]
#[inline(always)]
pub(crate) fn reached(_name: &str) {}
