//! Named points where the crash tests stop an apply.
//!
//! A process whose `GLOVE_APPLY_CRASH_POINT` names a point prints
//! `CRASH_POINT <name>` on standard error when it gets there and then waits
//! on its standard input, so the test driving it can `SIGKILL` it at
//! exactly that step. The variable can only make `glove apply` wait (the
//! person who sets it runs the command); it never skips a step.
//!
//! | point | the durable state when it stops |
//! | --- | --- |
//! | `reserve` | reserved (grant, authorization and manifest consumed) |
//! | `copy` | reserved; the candidate copied beside the source, not yet synced |
//! | `sync` | prepared (candidate synced and recorded) |
//! | `exchange` | the exchange done and synced; the journal still says prepared |
//! | `commit` | committed (the exchange recorded); no receipt yet |
//! | `cleanup` | applied (receipt durable); part of the old tree removed |

/// The environment variable naming the point to stop at.
pub const ENV: &str = "GLOVE_APPLY_CRASH_POINT";

/// Stops here if the environment names `name` (see the module docs).
pub fn reached(name: &str) {
    use std::io::{Read as _, Write as _};
    if std::env::var_os(ENV).is_some_and(|v| v == name) {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "CRASH_POINT {name}");
        let _ = err.flush();
        drop(err);
        let mut b = [0u8; 1];
        let _ = std::io::stdin().read(&mut b);
        std::process::abort();
    }
}
