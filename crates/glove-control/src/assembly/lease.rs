//! Credential leases: a harness's login token, imported from the
//! operator's protected source file into a Glove-owned, content-versioned
//! copy that one session at a time may use and refresh.
//!
//! Layout, below the materialization root (mode 0700):
//!
//! ```text
//! leases/<secret_handle>/lock      flock(LOCK_EX) held for the whole session
//! leases/<secret_handle>/lease     the current copy (0600)
//! leases/<secret_handle>/returned  what the session gave back (0600)
//! leases/<secret_handle>/state     {"lease_sha256","source_sha256","version"}
//! ```
//!
//! At launch the source is read as a protected file (regular, owned by the
//! service user, mode 0600, one link, no final symlink, at most 1 MiB). A
//! source whose content differs from the one last imported replaces the
//! lease (a new version); an unchanged source keeps the lease as the last
//! session left it (a token the harness refreshed survives). The sandbox
//! gets the lease as a file of the agent's own in its private home and
//! gives it back after the session into `returned`, followed by its
//! SHA-256 (`glove_sandbox::spec::LeaseFile`): a complete return whose
//! content differs replaces the lease atomically as a new version; a torn
//! or missing one leaves the lease as it was. The sandbox never holds a
//! host file open for writing, and never sees the source or anything else
//! of the operator's.

use glove_journal::atomic;
use glove_types::codes::control::{SESSION_LEASE_BUSY, SESSION_LEASE_IO};
use glove_types::ids::SecretHandle;
use glove_types::{Rejection, Sha256Digest};
use rustix::fs::{FlockOperation, Mode, OFlags};
use serde::{Deserialize, Serialize};
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Largest credential source or lease.
pub const MAX_LEASE_BYTES: u64 = 1 << 20;

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct State {
    version: u64,
    source_sha256: String,
    lease_sha256: String,
}

/// A lease held for one session (the lock is released when dropped).
#[derive(Debug)]
pub struct LeaseHold {
    handle: SecretHandle,
    dir: OwnedFd,
    file: PathBuf,
    returned: PathBuf,
    state: State,
    _lock: OwnedFd,
}

fn io(what: &str, e: impl std::fmt::Display) -> Rejection {
    Rejection::new(SESSION_LEASE_IO, format!("lease {what}: {e}"))
}

fn read_state(dir: &Path) -> Result<Option<State>, Rejection> {
    match std::fs::read(dir.join("state")) {
        Ok(b) if b.len() <= 4096 => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| io("state", e)),
        Ok(_) => Err(io("state", "too large")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io("state", e)),
    }
}

fn write_state(dir: &OwnedFd, s: &State) -> Result<(), Rejection> {
    let bytes = serde_json::to_vec(s).map_err(|e| io("state", e))?;
    atomic::write_file(dir.as_fd(), OsStr::new("state"), &bytes).map_err(|e| io("state", e))
}

fn read_bounded(p: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let f = std::fs::File::open(p)?;
    let mut b = Vec::new();
    f.take(MAX_LEASE_BYTES + 33).read_to_end(&mut b)?;
    Ok(b)
}

/// The content of a complete return (`content || SHA-256(content)`).
fn returned_content(bytes: &[u8]) -> Option<&[u8]> {
    let split = bytes.len().checked_sub(32)?;
    let (content, digest) = bytes.split_at(split);
    (Sha256Digest::of(content).as_bytes() == digest).then_some(content)
}

impl LeaseHold {
    /// Takes the lease of `handle` for one session, importing `source`
    /// first when its content changed. A lease another session holds is
    /// `session_lease_busy`; a source that is not a protected file carries
    /// the protected read's `file_*` code.
    pub fn acquire(
        root: &Path,
        handle: &SecretHandle,
        source: &Path,
    ) -> Result<LeaseHold, Rejection> {
        let leases = root.join("leases");
        let dir_path = leases.join(handle.as_str());
        for d in [&leases, &dir_path] {
            match std::fs::create_dir(d) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io("directory", e)),
            }
            std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .map_err(|e| io("directory", e))?;
        }
        let dir = rustix::fs::open(
            &dir_path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io("directory", e))?;
        let lock = rustix::fs::openat(
            dir.as_fd(),
            "lock",
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| io("lock", e))?;
        match rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(Rejection::new(
                    SESSION_LEASE_BUSY,
                    format!(
                        "the credential lease of {} is held by another session",
                        handle.as_str()
                    ),
                ))
            }
            Err(e) => return Err(io("lock", e)),
        }
        let src = crate::protected::read(
            source,
            crate::protected::Requirements {
                max_bytes: MAX_LEASE_BYTES,
                mode: 0o600,
            },
        )
        .map_err(|r| {
            Rejection::new(
                r.code(),
                format!("credential source of {}: {}", handle.as_str(), r.message()),
            )
        })?;
        let source_sha = Sha256Digest::of(&src).to_hex();
        // A session that ended while gloved was down gave its lease back
        // without anyone taking it: taken now, before anything else.
        let returned_path = dir_path.join("returned");
        if let (Some(mut s), Ok(back)) = (read_state(&dir_path)?, read_bounded(&returned_path)) {
            if let Some(content) = returned_content(&back) {
                let now = Sha256Digest::of(content).to_hex();
                if now != s.lease_sha256 {
                    atomic::write_file(dir.as_fd(), OsStr::new("lease"), content)
                        .map_err(|e| io("lease", e))?;
                    s.version += 1;
                    s.lease_sha256 = now;
                    write_state(&dir, &s)?;
                }
            }
        }
        let file = dir_path.join("lease");
        let returned = dir_path.join("returned");
        let state = match read_state(&dir_path)? {
            Some(s) if s.source_sha256 == source_sha && file.exists() => s,
            prev => {
                atomic::write_file(dir.as_fd(), OsStr::new("lease"), &src)
                    .map_err(|e| io("import", e))?;
                let s = State {
                    version: prev.map_or(1, |p| p.version + 1),
                    source_sha256: source_sha.clone(),
                    lease_sha256: source_sha,
                };
                write_state(&dir, &s)?;
                s
            }
        };
        // An empty return file: what this session gives back, if anything.
        atomic::write_file(dir.as_fd(), OsStr::new("returned"), b"")
            .map_err(|e| io("return file", e))?;
        Ok(LeaseHold {
            handle: handle.clone(),
            dir,
            file,
            returned,
            state,
            _lock: lock,
        })
    }

    /// The handle.
    pub fn handle(&self) -> &SecretHandle {
        &self.handle
    }

    /// The lease file (its content is copied into the sandbox).
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The file the sandbox writes the lease back into.
    pub fn returned(&self) -> &Path {
        &self.returned
    }

    /// The content version the session starts with.
    pub fn version(&self) -> u64 {
        self.state.version
    }

    /// After the session: a complete return with new content becomes the
    /// lease, as a new version. Returns the version the lease now has.
    pub fn finish(&mut self) -> Result<u64, Rejection> {
        let back = read_bounded(&self.returned).map_err(|e| io("return", e))?;
        if let Some(content) = returned_content(&back) {
            let now = Sha256Digest::of(content).to_hex();
            if now != self.state.lease_sha256 {
                atomic::write_file(self.dir.as_fd(), OsStr::new("lease"), content)
                    .map_err(|e| io("lease", e))?;
                self.state.version += 1;
                self.state.lease_sha256 = now;
                write_state(&self.dir, &self.state)?;
            }
        }
        atomic::write_file(self.dir.as_fd(), OsStr::new("returned"), b"")
            .map_err(|e| io("return file", e))?;
        Ok(self.state.version)
    }
}

/// A lease after its session: the version read back (none when the
/// session failed before its agent ran, or the return could not be read),
/// and the lock, held while this lives (until the end is recorded).
#[derive(Debug)]
pub struct LeaseEnd {
    hold: LeaseHold,
    version_at_end: Option<u64>,
}

impl LeaseEnd {
    /// The handle.
    pub fn handle(&self) -> &SecretHandle {
        &self.hold.handle
    }

    /// The version the lease has after the session, if read back.
    pub fn version_at_end(&self) -> Option<u64> {
        self.version_at_end
    }
}

/// The reports of `leases` alone: each read back when `read_back` (the
/// session ran), each lock kept.
pub(crate) fn finish_all(leases: Vec<LeaseHold>, read_back: bool) -> super::Reports {
    let leases = leases
        .into_iter()
        .map(|mut hold| {
            let version_at_end = if read_back {
                match hold.finish() {
                    Ok(v) => Some(v),
                    Err(r) => {
                        tracing::error!(
                            secret_handle = hold.handle.as_str(),
                            code = r.code().as_str(),
                            "lease not read back: {}",
                            r.message()
                        );
                        None
                    }
                }
            } else {
                None
            };
            LeaseEnd {
                hold,
                version_at_end,
            }
        })
        .collect();
    super::Reports {
        leases,
        ..super::Reports::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn source(dir: &Path, body: &[u8]) -> PathBuf {
        let p = dir.join("src.json");
        std::fs::write(&p, body).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        p
    }

    #[test]
    fn versions_follow_content_and_one_session_holds_it() {
        let t = tempfile::tempdir().expect("tempdir");
        let h = SecretHandle::new("codex-login").expect("handle");
        let src = source(t.path(), b"{\"token\":\"a\"}");
        let mut a = LeaseHold::acquire(t.path(), &h, &src).expect("acquire");
        assert_eq!(a.version(), 1);
        let busy = LeaseHold::acquire(t.path(), &h, &src).expect_err("busy");
        assert_eq!(busy.code(), SESSION_LEASE_BUSY);
        // Nothing came back (a failed session): the same version.
        assert_eq!(a.finish().expect("finish"), 1);
        // A torn return: ignored.
        std::fs::write(a.returned(), b"{\"token\":\"b\"}").expect("torn");
        assert_eq!(a.finish().expect("finish"), 1);
        // The harness refreshed its token inside; the sandbox gave it back.
        let mut back = b"{\"token\":\"b\"}".to_vec();
        back.extend_from_slice(Sha256Digest::of(&back).as_bytes());
        std::fs::write(a.returned(), &back).expect("returned");
        assert_eq!(a.finish().expect("finish"), 2);
        // Given back unchanged: the same version.
        let mut same = b"{\"token\":\"b\"}".to_vec();
        same.extend_from_slice(Sha256Digest::of(&same).as_bytes());
        std::fs::write(a.returned(), &same).expect("returned");
        assert_eq!(a.finish().expect("finish"), 2);
        drop(a);
        // Same source: the refreshed lease is kept.
        let b = LeaseHold::acquire(t.path(), &h, &src).expect("again");
        assert_eq!(b.version(), 2);
        assert_eq!(std::fs::read(b.file()).expect("read"), b"{\"token\":\"b\"}");
        drop(b);
        // A new source: imported as a new version.
        let src = source(t.path(), b"{\"token\":\"c\"}");
        let c = LeaseHold::acquire(t.path(), &h, &src).expect("import");
        assert_eq!(c.version(), 3);
        assert_eq!(std::fs::read(c.file()).expect("read"), b"{\"token\":\"c\"}");
        // gloved went down before taking a return: the next acquire takes it.
        let mut back = b"{\"token\":\"d\"}".to_vec();
        back.extend_from_slice(Sha256Digest::of(&back).as_bytes());
        std::fs::write(c.returned(), &back).expect("returned");
        drop(c);
        let d = LeaseHold::acquire(t.path(), &h, &src).expect("after a crash");
        assert_eq!(d.version(), 4);
        assert_eq!(std::fs::read(d.file()).expect("read"), b"{\"token\":\"d\"}");
    }

    #[test]
    fn loose_or_linked_sources_are_refused() {
        let t = tempfile::tempdir().expect("tempdir");
        let h = SecretHandle::new("k").expect("handle");
        let src = source(t.path(), b"x");
        std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = LeaseHold::acquire(t.path(), &h, &src).expect_err("loose");
        assert_eq!(e.code(), glove_types::codes::file::FILE_BAD_MODE);
        std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let link = t.path().join("link.json");
        std::os::unix::fs::symlink(&src, &link).expect("symlink");
        let e = LeaseHold::acquire(t.path(), &h, &link).expect_err("symlink");
        assert_eq!(e.code(), glove_types::codes::file::FILE_SYMLINK);
        assert!(
            LeaseHold::acquire(t.path(), &h, &src).is_ok(),
            "the lock was released"
        );
    }
}
