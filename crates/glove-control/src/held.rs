//! The paths `gloved` holds, and the refusal of a path grant that would
//! put one of them in front of the agent.
//!
//! The service holds secrets and evidence: the receipt key, the
//! start-authorization key, the policy, the session store, the receipt
//! journal, their anchor files and the ack, the path-exposure policy and
//! journal, the runtime directory (socket, bootstrap secret) and the
//! materialization root (launcher records). A grant exposes one of them
//! when its host directory
//!
//! * is that path or one of its ancestors (the agent would see it below the
//!   grant's target), or
//! * lies inside a directory the service holds as a whole (the runtime
//!   directory, the materialization root).
//!
//! Paths are compared by identity (device and inode), never by spelling,
//! so a second spelling through a bind mount or `..` is caught. This check
//! runs in `gloved` before anything is prepared and answers with
//! `session_grant_exposes_protected_path`; the same list goes into the
//! launch spec's `protected_paths`, where the sandbox init checks it again
//! against the directory it actually opened (no window between the two).

use glove_types::codes::control::SESSION_GRANT_EXPOSES_PROTECTED_PATH;
use glove_types::Rejection;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where the service keeps its files: the settings' paths, gathered once.
#[derive(Clone, Debug, Default)]
pub struct HeldPaths {
    /// Each file or directory, absolute.
    paths: Vec<PathBuf>,
}

/// The files a journal keeps beside itself (`<name>.anchor`, `<name>.ack`).
fn beside(journal: &Path, suffix: &str) -> PathBuf {
    let mut s = journal.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

impl HeldPaths {
    /// An empty set.
    pub fn new() -> HeldPaths {
        HeldPaths::default()
    }

    /// Adds a file or directory the service holds.
    pub fn add(&mut self, p: &Path) -> &mut Self {
        if !self.paths.iter().any(|q| q == p) {
            self.paths.push(p.to_path_buf());
        }
        self
    }

    /// Adds a journal and the anchor and ack files kept beside it.
    pub fn add_journal(&mut self, journal: &Path) -> &mut Self {
        self.add(journal)
            .add(&beside(journal, ".anchor"))
            .add(&beside(journal, ".ack"))
    }

    /// The paths, as the launch spec's `protected_paths` wants them (a
    /// component that is not UTF-8 is spelled lossily, which keeps the
    /// ancestors before it protected in the sandbox; [`Self::check_grant`]
    /// compares the real path).
    pub fn to_strings(&self) -> Vec<String> {
        self.paths
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect()
    }

    /// Refuses a grant whose host directory `host` exposes a held path
    /// (see the module docs). `alias` names the grant in the message, which
    /// goes to a possibly remote caller and so names no host path; the log
    /// line has the paths.
    pub fn check_grant(&self, alias: &str, host: &str) -> Result<(), Rejection> {
        let Some(grant) = identity(Path::new(host)) else {
            // Missing (a copy that starts empty) or unreadable: the sandbox
            // opens it itself and checks the identity it finds.
            return Ok(());
        };
        for held in &self.paths {
            let exposed = Path::new(held)
                .ancestors()
                .filter_map(identity)
                .any(|a| a == grant);
            let inside = held.is_dir()
                && identity(held).is_some_and(|h| {
                    Path::new(host)
                        .ancestors()
                        .filter_map(identity)
                        .any(|a| a == h)
                });
            if exposed || inside {
                tracing::warn!(
                    code = SESSION_GRANT_EXPOSES_PROTECTED_PATH.as_str(),
                    alias,
                    host_path = host,
                    held = ?held,
                    "grant refused: it would expose a path the service holds"
                );
                return Err(Rejection::new(
                    SESSION_GRANT_EXPOSES_PROTECTED_PATH,
                    format!(
                        "the grant of {alias} would expose a key, journal or directory the service holds"
                    ),
                )
                .at("path_grants"));
            }
        }
        Ok(())
    }
}

/// (device, inode) of `p`, following symbolic links; `None` if it cannot
/// be read.
fn identity(p: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: Result<(), Rejection>) -> Option<&'static str> {
        r.err().map(|e| e.code().as_str())
    }

    #[test]
    fn ancestors_of_a_held_file_and_insides_of_a_held_directory_are_refused() {
        let t = tempfile::tempdir().expect("tempdir");
        let keys = t.path().join("keys");
        let run = t.path().join("run");
        let work = t.path().join("work");
        for d in [&keys, &run, &work, &run.join("sub")] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        std::fs::write(keys.join("receipt.key"), b"k").expect("write");
        let mut held = HeldPaths::new();
        held.add(&keys.join("receipt.key")).add(&run);
        let s = |p: &Path| p.display().to_string();
        let refused = Some("session_grant_exposes_protected_path");
        assert_eq!(code(held.check_grant("a", &s(&keys))), refused);
        assert_eq!(code(held.check_grant("a", &s(t.path()))), refused);
        assert_eq!(code(held.check_grant("a", "/")), refused);
        assert_eq!(code(held.check_grant("a", &s(&run))), refused);
        assert_eq!(code(held.check_grant("a", &s(&run.join("sub")))), refused);
        // Another spelling of the same directory.
        let dotted = format!("{}/../keys", s(&work));
        assert_eq!(code(held.check_grant("a", &dotted)), refused);
        assert_eq!(code(held.check_grant("a", &s(&work))), None);
        assert_eq!(
            code(held.check_grant("a", &s(&t.path().join("gone")))),
            None
        );
    }

    #[test]
    fn a_journal_brings_its_anchor_and_ack() {
        let mut held = HeldPaths::new();
        held.add_journal(Path::new("/s/receipts.journal"));
        assert_eq!(
            held.to_strings(),
            [
                "/s/receipts.journal",
                "/s/receipts.journal.anchor",
                "/s/receipts.journal.ack"
            ]
        );
    }
}
