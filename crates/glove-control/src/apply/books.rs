//! The durable books of applies: the apply journal (the transactions and
//! the single-use values they consumed), a locator per transaction (where
//! its source lives, with the identities recovery checks, and the two
//! manifests it compares against), and the receipt journal the applied
//! and failed receipts join.
//!
//! ```text
//! <apply dir>/                 mode 0700
//!   journal                    the apply journal (glove_journal::apply)
//!   locators/<txn>.json        the locator (its digest is the reservation's locator_digest)
//!   locators/<txn>.baseline    the baseline manifest
//!   locators/<txn>.final       the final manifest
//!   locators/<txn>.candidate   the candidate directory's device and inode
//! ```
//!
//! A locator is written (durably) before its transaction is reserved, and
//! kept: a failed or applied transaction needs none, an ambiguous one is
//! for the operator to read.

use glove_journal::apply::ApplyJournal;
use glove_journal::receipt::ReceiptJournal;
use glove_types::codes::apply::*;
use glove_types::manifest::Manifest;
use glove_types::{Rejection, Sha256Digest};
use rustix::fd::{AsFd, OwnedFd};
use serde::{Deserialize, Serialize};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The locator's schema.
pub const LOCATOR_SCHEMA: &str = "glove.apply-locator-v1";
const LOCATOR_DOMAIN: &str = "glove.apply-locator-v1";
const MAX_LOCATOR_BYTES: u64 = 64 << 10;

/// Where a transaction's source lives and what it committed to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Locator {
    /// [`LOCATOR_SCHEMA`].
    pub schema: String,
    /// The transaction.
    pub transaction_id: String,
    /// The session whose stage is applied.
    pub session_id: String,
    /// The stage's alias (the authorization's target).
    pub target: String,
    /// The authorization's grant id.
    pub grant_id: String,
    /// The authorization's digest.
    pub authorization_digest: String,
    /// The source directory (a host path).
    pub source: String,
    /// The source's parent directory's device and inode.
    pub parent_identity: (u64, u64),
    /// The source directory's device and inode before the exchange.
    pub source_identity: (u64, u64),
    /// The source root's mode, kept by the exchange.
    pub root_mode: u32,
    /// The baseline manifest's digest.
    pub baseline_digest: String,
    /// The final manifest's digest (the candidate's content).
    pub final_digest: String,
}

impl Locator {
    /// The canonical bytes (sorted keys, no spaces).
    pub fn bytes(&self) -> Result<Vec<u8>, Rejection> {
        let v = serde_json::to_value(self)
            .map_err(|e| Rejection::new(APPLY_LOCATOR_INVALID, e.to_string()))?;
        glove_types::canon::to_canonical(&v)
    }

    /// The digest the reservation commits to.
    pub fn digest(&self) -> Result<Sha256Digest, Rejection> {
        Ok(Sha256Digest::of_domain(LOCATOR_DOMAIN, &self.bytes()?))
    }

    /// Decodes a locator and checks it against `expected` (the
    /// reservation's locator digest).
    pub fn decode(bytes: &[u8], expected: &Sha256Digest) -> Result<Locator, Rejection> {
        let l: Locator = serde_json::from_slice(bytes)
            .map_err(|e| Rejection::new(APPLY_LOCATOR_INVALID, e.to_string()))?;
        if l.schema != LOCATOR_SCHEMA || &l.digest()? != expected {
            return Err(Rejection::new(
                APPLY_LOCATOR_INVALID,
                "the locator does not match its transaction's reservation",
            ));
        }
        Ok(l)
    }
}

/// The apply books, open.
#[derive(Debug)]
pub struct Books {
    /// The apply journal.
    pub journal: ApplyJournal,
    locators: OwnedFd,
    path: PathBuf,
}

fn io(what: impl std::fmt::Display, e: impl std::fmt::Display) -> Rejection {
    Rejection::new(APPLY_FILE_IO, format!("{what}: {e}"))
}

impl Books {
    /// Opens (creating when missing) the books in `dir` (mode 0700, the
    /// service user's).
    pub fn open(dir: &Path) -> Result<Books, Rejection> {
        let fd = crate::placement::ensure_dir(dir, "the apply directory")?;
        let locators_path = dir.join("locators");
        let locators = crate::placement::ensure_dir(&locators_path, "the apply locators")?;
        drop(fd);
        let jpath = dir.join("journal");
        let journal = if jpath.exists() {
            ApplyJournal::open(&jpath, None)
                .map(|(j, _)| j)
                .map_err(|e| Rejection::new(e.code(), format!("the apply journal: {e}")))?
        } else {
            ApplyJournal::create(&jpath, None)
                .map_err(|e| Rejection::new(e.code(), format!("the apply journal: {e}")))?
        };
        Ok(Books {
            journal,
            locators,
            path: dir.to_owned(),
        })
    }

    /// Where the books are.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes a transaction's locator and manifests, durably.
    pub fn write_locator(
        &self,
        l: &Locator,
        baseline: &Manifest,
        last: &Manifest,
    ) -> Result<Sha256Digest, Rejection> {
        let t = &l.transaction_id;
        for (name, bytes) in [
            (format!("{t}.baseline"), baseline.canonical_bytes()?),
            (format!("{t}.final"), last.canonical_bytes()?),
            (format!("{t}.json"), l.bytes()?),
        ] {
            glove_journal::atomic::write_file(self.locators.as_fd(), OsStr::new(&name), &bytes)
                .map_err(|e| io(format!("write {name}"), e))?;
        }
        l.digest()
    }

    /// Records the candidate directory's identity (before anything goes
    /// into it): only a tree of that identity is ever removed as the
    /// candidate.
    pub fn write_candidate(&self, txn: &str, id: (u64, u64)) -> Result<(), Rejection> {
        let name = format!("{txn}.candidate");
        glove_journal::atomic::write_file(
            self.locators.as_fd(),
            OsStr::new(&name),
            format!("{} {}\n", id.0, id.1).as_bytes(),
        )
        .map_err(|e| io(format!("write {name}"), e))
    }

    /// The candidate's recorded identity, if it was recorded.
    pub fn read_candidate(&self, txn: &str) -> Option<(u64, u64)> {
        parse_candidate(&self.read(&format!("{txn}.candidate"), 64).ok()?)
    }

    fn read(&self, name: &str, max: u64) -> Result<Vec<u8>, Rejection> {
        use std::io::Read;
        let fd = glove_fs::open_in(
            self.locators.as_fd(),
            OsStr::new(name),
            glove_fs::OFlags::RDONLY,
        )
        .map_err(|e| Rejection::new(APPLY_LOCATOR_INVALID, format!("{name}: {e}")))?;
        let mut out = Vec::new();
        std::fs::File::from(fd)
            .take(max + 1)
            .read_to_end(&mut out)
            .map_err(|e| io(format!("read {name}"), e))?;
        if out.len() as u64 > max {
            return Err(Rejection::new(
                APPLY_LOCATOR_INVALID,
                format!("{name} is too large"),
            ));
        }
        Ok(out)
    }

    /// Reads a transaction's locator (checked against its reservation) and
    /// its two manifests (checked against the locator).
    pub fn read_locator(
        &self,
        txn: &str,
        expected: &Sha256Digest,
    ) -> Result<(Locator, Manifest, Manifest), Rejection> {
        let l = Locator::decode(
            &self.read(&format!("{txn}.json"), MAX_LOCATOR_BYTES)?,
            expected,
        )?;
        let max = crate::stages::MAX_MANIFEST_BYTES;
        let baseline = Manifest::decode(&self.read(&format!("{txn}.baseline"), max)?)?;
        let last = Manifest::decode(&self.read(&format!("{txn}.final"), max)?)?;
        if baseline.digest()?.to_string() != l.baseline_digest
            || last.digest()?.to_string() != l.final_digest
        {
            return Err(Rejection::new(
                APPLY_LOCATOR_INVALID,
                "a transaction's manifests do not match its locator",
            ));
        }
        Ok((l, baseline, last))
    }
}

/// A candidate identity file's contents: `<dev> <ino>` and a newline;
/// anything else is `None` (the candidate is then never removed).
pub fn parse_candidate(bytes: &[u8]) -> Option<(u64, u64)> {
    let s = std::str::from_utf8(bytes).ok()?;
    let mut it = s.split_whitespace().map(|x| x.parse::<u64>().ok());
    match (it.next(), it.next(), it.next()) {
        (Some(Some(d)), Some(Some(i)), None) => Some((d, i)),
        _ => None,
    }
}

/// The receipt journal's key for a transaction's receipt (the journal keys
/// receipts by their subject's id; a transaction id is in the same id
/// charset).
pub fn receipt_subject(txn: &str) -> Result<glove_types::ids::SessionId, Rejection> {
    glove_types::ids::SessionId::new(txn)
}

/// A local receipt journal for `glove apply` outside gloved: `receipts`
/// in `dir`, keyed by `receipt.key` (32 random bytes, mode 0600, made on
/// first use, 64 hex digits as gloved's).
pub fn local_receipts(dir: &Path) -> Result<ReceiptJournal, Rejection> {
    use glove_journal::receipt::{ReceiptConfig, ReceiptHead, ReceiptKey};
    let dfd = crate::placement::ensure_dir(dir, "the apply directory")?;
    let key_path = dir.join("receipt.key");
    // The same file format as gloved's receipt key: 64 hex digits, so
    // `glove receipts verify --key-file` reads it.
    let key = if key_path.exists() {
        let b = crate::protected::read(
            &key_path,
            crate::protected::Requirements {
                max_bytes: 65,
                mode: 0o600,
            },
        )?;
        ReceiptKey::from_key_file(&b)
            .map_err(|e| Rejection::new(e.code(), format!("receipt.key: {e}")))?
    } else {
        let k = crate::random_bytes::<32>()?;
        let text = format!("{}\n", glove_types::digest::to_hex(&k));
        crate::placement::write_private(&dfd, "receipt.key", text.as_bytes())?;
        ReceiptKey::from_bytes(k)
    };
    // The chain starts at zero: a local journal has no controller to hand
    // it an anchor.
    let anchor = ReceiptHead {
        seq: 0,
        chain: [0; 32],
    };
    let path = dir.join("receipts");
    let j = if path.exists() {
        ReceiptJournal::open(&path, key, &anchor, ReceiptConfig::default()).map(|(j, _)| j)
    } else {
        ReceiptJournal::create(&path, key, &anchor, ReceiptConfig::default())
    };
    j.map_err(|e| Rejection::new(e.code(), format!("the receipt journal: {e}")))
}
