//! Loading the apply trust policy from a file only root can change.
//!
//! The policy decides whose signatures may change the owner's files, so the
//! service user must not be able to write it, replace it or add a key:
//!
//! * the directory holding it is owned by root (uid 0) and neither group-
//!   nor other-writable (mode & 0o022 == 0), so no other user can rename
//!   another file into its place;
//! * the file itself is opened relative to that directory with
//!   `O_NOFOLLOW` (a symbolic link is refused) and checked on the open
//!   descriptor (`fstat`): a regular file, owned by root, permission bits
//!   a subset of 0644 (no group or other write, no execute or special
//!   bits), at most [`MAX_TRUST_POLICY_BYTES`];
//! * then decoded strictly (`glove_types::apply::ApplyTrustPolicy`) and
//!   every key checked to be a valid Ed25519 point that is not of small
//!   order (`VerifyingKey::is_weak`).
//!
//! With root ownership and no group/other write bit, only root can write
//! the file; a service running as another uid (`service_uid`) therefore
//! cannot. A service running as root can write anything, the policy
//! included: there the check still refuses a policy any *other* user could
//! have written, which is all a file check can say. Access control lists
//! are not inspected (Glove installs none; `install -m 0644` leaves none).

use ed25519_dalek::VerifyingKey;
use glove_fs::{Errno, FileType, OFlags};
use glove_types::apply::{ApplyTrustPolicy, MAX_TRUST_POLICY_BYTES};
use glove_types::codes::apply::*;
use glove_types::ids::TrustKeyId;
use glove_types::Rejection;
use rustix::fd::AsFd;
use std::io::Read as _;
use std::path::Path;

/// The trust policy with its keys parsed as Ed25519 public keys.
#[derive(Clone, Debug)]
pub struct TrustPolicy {
    policy: ApplyTrustPolicy,
    keys: Vec<(TrustKeyId, VerifyingKey)>,
}

/// Permission bits a trust policy may have at most.
pub const MAX_POLICY_MODE: u32 = 0o644;

impl TrustPolicy {
    /// A policy from decoded keys: each must be a valid, non-weak Ed25519
    /// public key (`apply_trust_policy_invalid`).
    pub fn from_policy(policy: ApplyTrustPolicy) -> Result<Self, Rejection> {
        let mut keys = Vec::with_capacity(policy.keys().len());
        for (i, k) in policy.keys().iter().enumerate() {
            let bad = || {
                Rejection::new(
                    APPLY_TRUST_POLICY_INVALID,
                    format!(
                        "key {:?} is not a usable Ed25519 public key",
                        k.id().as_str()
                    ),
                )
                .at(format!("keys[{i}].public_key"))
            };
            let vk = VerifyingKey::from_bytes(k.public_key()).map_err(|_| bad())?;
            if vk.is_weak() {
                return Err(bad());
            }
            keys.push((k.id().clone(), vk));
        }
        Ok(Self { policy, keys })
    }

    /// Loads the trust policy at `path` for a service running as
    /// `service_uid` (see the module docs for every check).
    pub fn load(path: &Path, service_uid: u32) -> Result<Self, Rejection> {
        let bytes = read_root_file(path, service_uid)?;
        let policy = ApplyTrustPolicy::decode(&bytes)?;
        Self::from_policy(policy)
    }

    /// The decoded policy.
    pub fn policy(&self) -> &ApplyTrustPolicy {
        &self.policy
    }

    /// The public key listed under `id`.
    pub(crate) fn key(&self, id: &TrustKeyId) -> Option<&VerifyingKey> {
        self.keys
            .binary_search_by(|(k, _)| k.cmp(id))
            .ok()
            .and_then(|i| self.keys.get(i))
            .map(|(_, v)| v)
    }
}

fn unsafe_policy(path: &Path, why: impl core::fmt::Display) -> Rejection {
    Rejection::new(
        APPLY_TRUST_POLICY_UNSAFE,
        format!("trust policy {}: {why}", path.display()),
    )
}

fn io(path: &Path, what: &str, e: Errno) -> Rejection {
    Rejection::new(
        APPLY_FILE_IO,
        format!("cannot {what} trust policy {}: {e}", path.display()),
    )
}

/// Reads `path` as a root-controlled file (the checks of the module docs).
fn read_root_file(path: &Path, service_uid: u32) -> Result<Vec<u8>, Rejection> {
    let name = path
        .file_name()
        .ok_or_else(|| unsafe_policy(path, "the path does not name a file"))?;
    let dir_path = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = glove_fs::unconfined::open_dir(dir_path, true)
        .map_err(|e| io(path, "open the directory of", e))?;
    let d = glove_fs::facts(dir.as_fd()).map_err(|e| io(path, "inspect the directory of", e))?;
    if d.uid != 0 || d.mode & 0o022 != 0 {
        return Err(unsafe_policy(
            path,
            format!(
                "its directory is owned by uid {} with mode {:04o}; it must be owned by root and not group- or other-writable",
                d.uid, d.mode
            ),
        ));
    }
    let fd = glove_fs::open_in(dir.as_fd(), name, OFlags::RDONLY | OFlags::NONBLOCK).map_err(
        |e| match e {
            Errno::LOOP => unsafe_policy(path, "it is a symbolic link"),
            e => io(path, "open", e),
        },
    )?;
    let f = glove_fs::facts(fd.as_fd()).map_err(|e| io(path, "inspect", e))?;
    if f.kind != FileType::RegularFile {
        return Err(unsafe_policy(path, "it is not a regular file"));
    }
    if f.uid != 0 {
        return Err(unsafe_policy(
            path,
            format!("it is owned by uid {}; it must be owned by root", f.uid),
        ));
    }
    if f.mode & !MAX_POLICY_MODE != 0 {
        return Err(unsafe_policy(
            path,
            format!("it has mode {:04o}; it must be 0644 or stricter", f.mode),
        ));
    }
    // Implied by the two checks above for any service_uid other than root;
    // kept explicit so a future relaxation cannot drop it.
    if service_uid != 0 && f.uid == service_uid {
        return Err(unsafe_policy(path, "the service user owns it"));
    }
    let max = MAX_TRUST_POLICY_BYTES as u64;
    if f.size > max {
        return Err(Rejection::new(
            APPLY_TRUST_POLICY_TOO_LARGE,
            format!(
                "trust policy {} is {} bytes; the bound is {max}",
                path.display(),
                f.size
            ),
        ));
    }
    let mut buf = Vec::new();
    std::fs::File::from(fd)
        .take(max + 1)
        .read_to_end(&mut buf)
        .map_err(|e| io(path, "read", Errno::from_io_error(&e).unwrap_or(Errno::IO)))?;
    if buf.len() > MAX_TRUST_POLICY_BYTES {
        return Err(Rejection::new(
            APPLY_TRUST_POLICY_TOO_LARGE,
            format!("trust policy {} grew past {max} bytes", path.display()),
        ));
    }
    Ok(buf)
}
