//! The owner's apply signing key.
//!
//! The key file is canonical JSON
//! `{"id":"<trust-policy key id>","schema":"glove.apply-key-v1","secret_key":"<64 hex>"}`
//! where `secret_key` is the 32-byte Ed25519 seed (RFC 8032 private key).
//! It is written once by [`keygen`]: created with `O_CREAT | O_EXCL |
//! O_NOFOLLOW` and mode 0600 (so an existing file or a link in its place is
//! refused, never overwritten), the seed from `getrandom`, the file and its
//! directory synced. [`load_signing_key`] reads it as a protected file: a
//! regular file (a link is not followed), owned by the caller, mode exactly
//! 0600, one hard link, at most 4 KiB, unchanged while read.

use ed25519_dalek::SigningKey;
use glove_fs::{Errno, OFlags};
use glove_types::canon::{self, Form};
use glove_types::codes::apply::*;
use glove_types::digest::to_hex;
use glove_types::ids::TrustKeyId;
use glove_types::Rejection;
use rustix::fd::AsFd;
use serde::{Deserialize, Serialize};
use std::ffi::OsStr;
use std::io::Write as _;
use std::path::Path;
use zeroize::Zeroizing;

/// The `schema` of a key file.
pub const KEY_SCHEMA: &str = "glove.apply-key-v1";
/// Largest key file accepted.
pub const MAX_KEY_FILE_BYTES: u64 = 4096;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKey {
    id: String,
    schema: String,
    secret_key: String,
}

/// The owner's signing key with the id the trust policy lists it under.
/// Not `Clone`; the secret is zeroed when dropped; `Debug` shows only the
/// id and the public key.
pub struct OwnerKey {
    id: TrustKeyId,
    key: SigningKey,
}

impl core::fmt::Debug for OwnerKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "OwnerKey({}, {})", self.id, self.public_key_hex())
    }
}

impl OwnerKey {
    /// The key's id in the trust policy.
    pub fn id(&self) -> &TrustKeyId {
        &self.id
    }

    /// The public key as 64 lowercase hex characters.
    pub fn public_key_hex(&self) -> String {
        public_key_hex(self)
    }

    /// The trust-policy entry for this key, canonical JSON
    /// (`{"id":…,"public_key":…}`).
    pub fn trust_entry(&self) -> String {
        format!(
            "{{\"id\":\"{}\",\"public_key\":\"{}\"}}",
            self.id,
            self.public_key_hex()
        )
    }

    pub(crate) fn signing_key(&self) -> &SigningKey {
        &self.key
    }
}

/// The public key of `key` as 64 lowercase hex characters.
pub fn public_key_hex(key: &OwnerKey) -> String {
    to_hex(key.key.verifying_key().as_bytes())
}

fn io(path: &Path, what: &str, e: impl core::fmt::Display) -> Rejection {
    Rejection::new(
        APPLY_FILE_IO,
        format!("cannot {what} {}: {e}", path.display()),
    )
}

/// Makes a new signing key named `id` and writes it to `path` (see the
/// module docs). The directory must exist. Refuses an existing file
/// (`apply_key_file_exists`).
pub fn keygen(path: &Path, id: TrustKeyId) -> Result<OwnerKey, Rejection> {
    let mut seed = Zeroizing::new([0u8; 32]);
    getrandom::fill(seed.as_mut_slice()).map_err(|e| io(path, "get randomness for", e))?;
    let key = OwnerKey {
        id,
        key: SigningKey::from_bytes(&seed),
    };
    let text = Zeroizing::new(canon::encode(&RawKey {
        id: key.id.as_str().to_owned(),
        schema: KEY_SCHEMA.to_owned(),
        secret_key: to_hex(seed.as_slice()),
    })?);
    let (dir_path, name) = split(path)?;
    let dir = glove_fs::unconfined::open_dir(dir_path, true)
        .map_err(|e| io(path, "open the directory of", e))?;
    let fd =
        glove_fs::create_in(dir.as_fd(), name, OFlags::WRONLY, 0o600).map_err(|e| match e {
            Errno::EXIST => Rejection::new(
                APPLY_KEY_FILE_EXISTS,
                format!(
                    "{} already exists; a key is never overwritten",
                    path.display()
                ),
            ),
            e => io(path, "create", e),
        })?;
    let written = (|| {
        // The umask may have cleared bits; 0600 exactly.
        glove_fs::chmod(fd.as_fd(), 0o600)?;
        let mut file = std::fs::File::from(fd);
        file.write_all(&text)
            .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))?;
        glove_fs::sync_data(&file)?;
        glove_fs::sync_dir(dir.as_fd())
    })();
    if let Err(e) = written {
        let _ = glove_fs::unlink_in(dir.as_fd(), name);
        return Err(io(path, "write", e));
    }
    Ok(key)
}

fn split(path: &Path) -> Result<(&Path, &OsStr), Rejection> {
    let name = path.file_name().ok_or_else(|| {
        Rejection::new(
            APPLY_FILE_IO,
            format!("{} does not name a file", path.display()),
        )
    })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok((dir, name))
}

/// Reads the owner's signing key from `path` (see the module docs).
pub fn load_signing_key(path: &Path) -> Result<OwnerKey, Rejection> {
    use glove_fs::unconfined::ReadFault as R;
    use glove_fs::Fault as F;
    let shown = path.display();
    let unsafe_file = |why: String| Rejection::new(APPLY_KEY_FILE_UNSAFE, format!("{shown} {why}"));
    let bytes = Zeroizing::new(
        glove_fs::unconfined::read_protected(path, 0o600, MAX_KEY_FILE_BYTES).map_err(
            |f| match f {
                R::Open(Errno::LOOP) => unsafe_file("is a symbolic link".into()),
                R::Open(e) => io(path, "open", e),
                R::Placement(F::NotRegular | F::NotDirectory) => {
                    unsafe_file("is not a regular file".into())
                }
                R::Placement(F::WrongOwner { uid }) => unsafe_file(format!(
                    "is owned by uid {uid}, not by the caller (uid {})",
                    glove_fs::euid()
                )),
                R::Placement(F::BadMode { mode }) => {
                    unsafe_file(format!("has mode {mode:04o}; it must be 0600"))
                }
                R::Placement(F::LinkCount { links }) => {
                    unsafe_file(format!("has {links} hard links; it must have exactly one"))
                }
                R::TooLarge { size } => Rejection::new(
                    APPLY_KEY_FILE_INVALID,
                    format!("{shown} is {size} bytes; a key file is at most {MAX_KEY_FILE_BYTES}"),
                ),
                R::Io(e) => io(path, "read", e),
                R::Changed => unsafe_file("changed while it was read".into()),
            },
        )?,
    );
    let invalid = |r: Rejection| {
        Rejection::new(
            APPLY_KEY_FILE_INVALID,
            format!("{shown} is not a signing key file: {r}"),
        )
    };
    let raw: RawKey =
        canon::decode(&bytes, MAX_KEY_FILE_BYTES as usize, Form::Canonical).map_err(invalid)?;
    let RawKey {
        id,
        schema,
        secret_key,
    } = raw;
    let secret_key = Zeroizing::new(secret_key);
    if schema != KEY_SCHEMA {
        return Err(invalid(Rejection::new(
            APPLY_SCHEMA_UNKNOWN,
            format!("schema is not {KEY_SCHEMA:?}"),
        )));
    }
    let id = TrustKeyId::new(id).map_err(invalid)?;
    let seed = Zeroizing::new(parse_seed(&secret_key).ok_or_else(|| {
        invalid(Rejection::new(
            APPLY_KEY_FILE_INVALID,
            "secret_key must be 64 lowercase hexadecimal characters",
        ))
    })?);
    Ok(OwnerKey {
        id,
        key: SigningKey::from_bytes(&seed),
    })
}

fn parse_seed(s: &str) -> Option<[u8; 32]> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let nib = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 32];
    for (o, pair) in out.iter_mut().zip(b.chunks_exact(2)) {
        *o = (nib(pair[0])? << 4) | nib(pair[1])?;
    }
    Some(out)
}
