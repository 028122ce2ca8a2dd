//! The executor's identity: the administrator-owned file that names the
//! executable and image digests, and the measurement of the executor's own
//! executable against it.
//!
//! The file is read only from [`IDENTITY_PATH`]; nothing (environment,
//! flag, configuration) can point the executor elsewhere. It is reached
//! one component at a time from `/`, each directory opened with
//! `O_PATH | O_DIRECTORY | O_NOFOLLOW` relative to the one before and
//! checked on its open descriptor (a directory, owned by root, not writable
//! by group or others), so the directories checked are exactly the ones the
//! file was found through. The file itself is opened with `O_NOFOLLOW`
//! (a symbolic link is refused, not followed) and `O_NONBLOCK` (a FIFO in
//! its place cannot stall the open), and its descriptor must be a regular
//! file owned by root, not writable by group or others, of 1 to
//! [`MAX_IDENTITY_BYTES`] bytes.
//!
//! The content is the canonical JSON document
//! `{"executable_sha256":"<64 hex>","image_sha256":"<64 hex>","schema":"glove.remote-executor-identity-v1"}`,
//! optionally followed by one newline (what `printf '…\n'` and most editors
//! write); nothing else: no other field, whitespace, key order or escape.
//!
//! Then `/proc/self/exe` is opened once, checked to be a regular file, and
//! its bytes are hashed with SHA-256; the digest is compared in constant
//! time with `executable_sha256`.
//!
//! Each failure has its own code: missing, empty, malformed, unsafe
//! placement (link, not regular, foreign owner, group- or other-writable,
//! here or above), unreadable, and a mismatched executable.

use glove_types::canon::{self, Form};
use glove_types::codes::control::{
    REMOTE_EXECUTABLE_MISMATCH, REMOTE_EXECUTABLE_UNREADABLE, REMOTE_IDENTITY_EMPTY,
    REMOTE_IDENTITY_MALFORMED, REMOTE_IDENTITY_MISSING, REMOTE_IDENTITY_UNREADABLE,
    REMOTE_IDENTITY_UNSAFE,
};
use glove_types::digest::Sha256Digest;
use glove_types::Rejection;
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{FileType, Mode, OFlags, Stat, CWD};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq;

/// Where the identity is read from, and only from.
pub const IDENTITY_PATH: &str = "/etc/glove/remote-executor.identity";

/// The directories below `/` on the way to the file, in order.
const DIRS: [&str; 2] = ["etc", "glove"];

/// The file's name inside the last of [`DIRS`].
const FILE_NAME: &str = "remote-executor.identity";

/// The identity document's `schema` value.
pub const IDENTITY_SCHEMA: &str = "glove.remote-executor-identity-v1";

/// The largest identity file accepted, in bytes.
pub const MAX_IDENTITY_BYTES: usize = 4096;

/// The file the running executable is measured through.
const SELF_EXE: &str = "/proc/self/exe";

/// The identity document on the wire (strings; the digests are checked
/// after decoding).
#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct IdentityWire {
    executable_sha256: String,
    image_sha256: String,
    schema: String,
}

/// A decoded identity: the digest the executor's own executable must have,
/// and the container image digest it reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    executable: Sha256Digest,
    image: Sha256Digest,
}

impl Identity {
    /// An identity naming these digests.
    pub fn new(executable: Sha256Digest, image: Sha256Digest) -> Self {
        Identity { executable, image }
    }

    /// The SHA-256 digest the executable must have.
    pub fn executable_sha256(&self) -> Sha256Digest {
        self.executable
    }

    /// The SHA-256 digest of the container image.
    pub fn image_sha256(&self) -> Sha256Digest {
        self.image
    }

    /// The canonical document (without the optional trailing newline).
    pub fn to_bytes(&self) -> Vec<u8> {
        let wire = IdentityWire {
            executable_sha256: self.executable.to_hex(),
            image_sha256: self.image.to_hex(),
            schema: IDENTITY_SCHEMA.to_owned(),
        };
        // Three strings of known characters: encoding cannot fail.
        canon::encode(&wire).unwrap_or_default()
    }
}

/// Decodes the identity file's bytes (see the module docs for the form).
pub fn decode(bytes: &[u8]) -> Result<Identity, Rejection> {
    if bytes.is_empty() {
        return Err(Rejection::new(
            REMOTE_IDENTITY_EMPTY,
            format!("{IDENTITY_PATH} is empty"),
        ));
    }
    if bytes.len() > MAX_IDENTITY_BYTES {
        return Err(Rejection::new(
            REMOTE_IDENTITY_MALFORMED,
            format!(
                "{IDENTITY_PATH} is {} bytes; the bound is {MAX_IDENTITY_BYTES}",
                bytes.len()
            ),
        ));
    }
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let malformed = |r: Rejection| {
        let located = if r.location().is_empty() {
            String::new()
        } else {
            format!(" at {}", r.location())
        };
        Rejection::new(
            REMOTE_IDENTITY_MALFORMED,
            format!(
                "{IDENTITY_PATH} is not the canonical identity document ({}{located}: {})",
                r.code(),
                r.message()
            ),
        )
    };
    let wire: IdentityWire =
        canon::decode(body, MAX_IDENTITY_BYTES, Form::Canonical).map_err(malformed)?;
    if wire.schema != IDENTITY_SCHEMA {
        return Err(Rejection::new(
            REMOTE_IDENTITY_MALFORMED,
            format!("{IDENTITY_PATH} has schema other than {IDENTITY_SCHEMA:?}"),
        )
        .at("schema"));
    }
    let digest = |s: &str, field: &str| Sha256Digest::parse(s).map_err(|r| malformed(r.at(field)));
    Ok(Identity {
        executable: digest(&wire.executable_sha256, "executable_sha256")?,
        image: digest(&wire.image_sha256, "image_sha256")?,
    })
}

/// Reads and decodes the identity file from its fixed place, checking
/// every directory on the way and the file itself (see the module docs).
pub fn load() -> Result<Identity, Rejection> {
    let path_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut shown = String::from("/");
    let mut dir = rustix::fs::openat(CWD, "/", path_flags, Mode::empty())
        .map_err(|e| open_error(e, &shown))?;
    check_dir(&dir, &shown)?;
    for name in DIRS {
        shown = format!("{}/{name}", shown.trim_end_matches('/'));
        dir = rustix::fs::openat(&dir, name, path_flags, Mode::empty())
            .map_err(|e| open_error(e, &shown))?;
        check_dir(&dir, &shown)?;
    }
    let file = rustix::fs::openat(
        &dir,
        FILE_NAME,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| open_error(e, IDENTITY_PATH))?;
    let st = fstat(&file, IDENTITY_PATH, REMOTE_IDENTITY_UNREADABLE)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(unsafe_placement(format!(
            "{IDENTITY_PATH} is not a regular file"
        )));
    }
    check_owner_and_mode(&st, IDENTITY_PATH)?;
    if st.st_size == 0 {
        return Err(Rejection::new(
            REMOTE_IDENTITY_EMPTY,
            format!("{IDENTITY_PATH} is empty"),
        ));
    }
    // One byte more than the bound, so an oversized file is told apart from
    // one that is exactly at it (and a file that grew after the fstat too).
    let bytes = read_bounded(&file, MAX_IDENTITY_BYTES + 1).map_err(|e| {
        Rejection::new(
            REMOTE_IDENTITY_UNREADABLE,
            format!("{IDENTITY_PATH} could not be read: {e}"),
        )
    })?;
    decode(&bytes)
}

/// Measures the running executable: SHA-256 of the bytes of the file
/// `/proc/self/exe` leads to, read through one descriptor.
pub fn measure_self() -> Result<Sha256Digest, Rejection> {
    let unreadable = |what: String| Rejection::new(REMOTE_EXECUTABLE_UNREADABLE, what);
    let exe = rustix::fs::open(SELF_EXE, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| unreadable(format!("{SELF_EXE} could not be opened: {e}")))?;
    let st = fstat(&exe, SELF_EXE, REMOTE_EXECUTABLE_UNREADABLE)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(unreadable(format!("{SELF_EXE} is not a regular file")));
    }
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut total: u64 = 0;
    loop {
        match rustix::io::read(&exe, &mut buf) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
                total += n as u64;
            }
            Err(Errno::INTR) => continue,
            Err(e) => return Err(unreadable(format!("{SELF_EXE} could not be read: {e}"))),
        }
    }
    if i64::try_from(total).ok() != Some(st.st_size) {
        return Err(unreadable(format!(
            "{SELF_EXE} changed size while it was measured"
        )));
    }
    Ok(Sha256Digest::from_bytes(hasher.finalize().into()))
}

/// Compares the measured executable digest with the identity's, in
/// constant time.
pub fn verify_executable(identity: &Identity, measured: &Sha256Digest) -> Result<(), Rejection> {
    let same: bool = identity
        .executable
        .as_bytes()
        .ct_eq(measured.as_bytes())
        .into();
    if same {
        Ok(())
    } else {
        Err(Rejection::new(
            REMOTE_EXECUTABLE_MISMATCH,
            format!(
                "this executable's SHA-256 is {measured}; {IDENTITY_PATH} names {}",
                identity.executable
            ),
        ))
    }
}

/// [`load`], [`measure_self`] and [`verify_executable`] in order: the
/// identity the executor may serve under.
pub fn load_and_verify() -> Result<Identity, Rejection> {
    let identity = load()?;
    let measured = measure_self()?;
    verify_executable(&identity, &measured)?;
    Ok(identity)
}

fn unsafe_placement(message: String) -> Rejection {
    Rejection::new(REMOTE_IDENTITY_UNSAFE, message)
}

fn open_error(e: Errno, shown: &str) -> Rejection {
    match e {
        Errno::NOENT => Rejection::new(
            REMOTE_IDENTITY_MISSING,
            format!("{shown} does not exist; the administrator writes {IDENTITY_PATH}"),
        ),
        // O_NOFOLLOW on a link, or a non-directory where a directory belongs.
        Errno::LOOP | Errno::NOTDIR => {
            unsafe_placement(format!("{shown} is a symbolic link or not a directory"))
        }
        e => Rejection::new(
            REMOTE_IDENTITY_UNREADABLE,
            format!("{shown} could not be opened: {e}"),
        ),
    }
}

fn fstat(fd: &OwnedFd, shown: &str, code: glove_types::ErrorCode) -> Result<Stat, Rejection> {
    rustix::fs::fstat(fd).map_err(|e| Rejection::new(code, format!("{shown}: fstat: {e}")))
}

fn check_dir(fd: &OwnedFd, shown: &str) -> Result<(), Rejection> {
    let st = fstat(fd, shown, REMOTE_IDENTITY_UNREADABLE)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return Err(unsafe_placement(format!("{shown} is not a directory")));
    }
    check_owner_and_mode(&st, shown)
}

fn check_owner_and_mode(st: &Stat, shown: &str) -> Result<(), Rejection> {
    if st.st_uid != 0 {
        return Err(unsafe_placement(format!(
            "{shown} is owned by uid {}, not root",
            st.st_uid
        )));
    }
    if st.st_mode & 0o022 != 0 {
        return Err(unsafe_placement(format!(
            "{shown} has mode {:04o}: writable by group or others",
            st.st_mode & 0o7777
        )));
    }
    Ok(())
}

/// Reads to the end of `fd`, or until `limit` bytes.
fn read_bounded(fd: impl AsFd, limit: usize) -> Result<Vec<u8>, Errno> {
    let mut out = vec![0u8; limit];
    let mut filled = 0;
    while filled < limit {
        match rustix::io::read(fd.as_fd(), &mut out[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e),
        }
    }
    out.truncate(filled);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Identity {
        Identity::new(Sha256Digest::of(b"executable"), Sha256Digest::of(b"image"))
    }

    #[test]
    fn round_trip_with_and_without_newline() {
        let id = sample();
        let bytes = id.to_bytes();
        assert_eq!(decode(&bytes).expect("canonical"), id);
        let mut nl = bytes.clone();
        nl.push(b'\n');
        assert_eq!(decode(&nl).expect("one newline"), id);
        nl.push(b'\n');
        assert_eq!(
            decode(&nl).expect_err("two newlines").code(),
            REMOTE_IDENTITY_MALFORMED
        );
    }

    #[test]
    fn refusals_have_their_codes() {
        let hex = "a".repeat(64);
        let doc = |e: &str, i: &str, s: &str| {
            format!(r#"{{"executable_sha256":"{e}","image_sha256":"{i}","schema":"{s}"}}"#)
        };
        assert_eq!(decode(b"").unwrap_err().code(), REMOTE_IDENTITY_EMPTY);
        for bad in [
            "\n".to_owned(),
            "{}".to_owned(),
            "not json".to_owned(),
            doc(&hex, &hex, "glove.remote-executor-identity-v2"),
            doc(&"A".repeat(64), &hex, IDENTITY_SCHEMA),
            doc(&hex, &"a".repeat(63), IDENTITY_SCHEMA),
            // Not canonical: whitespace, and keys out of order.
            doc(&hex, &hex, IDENTITY_SCHEMA).replace(',', ", "),
            format!(
                r#"{{"schema":"{IDENTITY_SCHEMA}","executable_sha256":"{hex}","image_sha256":"{hex}"}}"#
            ),
            // An unknown field.
            format!(
                r#"{{"executable_sha256":"{hex}","extra":1,"image_sha256":"{hex}","schema":"{IDENTITY_SCHEMA}"}}"#
            ),
            " ".repeat(MAX_IDENTITY_BYTES + 1),
        ] {
            assert_eq!(
                decode(bad.as_bytes()).unwrap_err().code(),
                REMOTE_IDENTITY_MALFORMED,
                "{bad:.80}"
            );
        }
        assert!(decode(doc(&hex, &hex, IDENTITY_SCHEMA).as_bytes()).is_ok());
    }

    #[test]
    fn verify_is_exact() {
        let id = sample();
        assert!(verify_executable(&id, &Sha256Digest::of(b"executable")).is_ok());
        let e = verify_executable(&id, &Sha256Digest::of(b"other")).unwrap_err();
        assert_eq!(e.code(), REMOTE_EXECUTABLE_MISMATCH);
    }

    #[test]
    fn measures_the_running_test_binary() {
        let measured = measure_self().expect("measure");
        let bytes = std::fs::read(SELF_EXE).expect("read");
        assert_eq!(measured, Sha256Digest::of(&bytes));
    }
}
