//! The session store's trusted anchor, kept by `gloved` beside the store.
//!
//! A journal cut exactly at a record boundary looks like a shorter journal
//! that was never longer. To notice such a cut, `gloved` writes the store's
//! [`Anchor`] (record count, byte length, head digest) after every creation
//! and at shutdown to `<store>.anchor` (mode 0600, written to a temporary
//! name, synced, renamed), authenticated with the receipt key:
//!
//! ```text
//! mac = HMAC-SHA-256(receipt key, "glove-session-store-anchor-v1" || 0x00 ||
//!                    records (u64 BE) || byte_len (u64 BE) || head (32 bytes))
//! file = canonical JSON {"byte_len":…,"head":"<hex>","mac":"<hex>","records":…}
//! ```
//!
//! On start the anchor is verified and handed to the store's replay, which
//! then refuses a store shorter than the anchor or diverging from it. An
//! anchor that does not verify stops startup (`control_store_anchor_invalid`);
//! a missing anchor beside an existing store is logged and the store opens
//! without one. The anchor lives in the same directory as the store, so it
//! catches a store that was cut or replaced on its own, not a rollback of
//! the whole directory.

use super::auth::mac_matches;
use super::placement;
use glove_journal::Anchor;
use glove_types::codes::control::CONTROL_STORE_ANCHOR_INVALID;
use glove_types::digest::to_hex;
use glove_types::Rejection;
use hmac::{Hmac, Mac};
use rustix::fd::OwnedFd;
use serde::Deserialize;
use sha2::Sha256;
use std::path::Path;

/// The MAC domain.
pub const ANCHOR_DOMAIN: &[u8] = b"glove-session-store-anchor-v1";

/// Where and how the anchor is kept.
pub struct StoreAnchor {
    dir: OwnedFd,
    name: String,
    key: [u8; 32],
}

impl core::fmt::Debug for StoreAnchor {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("StoreAnchor")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Drop for StoreAnchor {
    fn drop(&mut self) {
        self.key.fill(0);
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AnchorFile {
    records: u64,
    byte_len: u64,
    head: String,
    mac: String,
}

fn mac(key: &[u8; 32], a: &Anchor) -> [u8; 32] {
    let mut block = [0u8; 64];
    block[..32].copy_from_slice(key);
    let mut m = <Hmac<Sha256> as hmac::digest::KeyInit>::new(&block.into());
    m.update(ANCHOR_DOMAIN);
    m.update(&[0]);
    m.update(&a.records.to_be_bytes());
    m.update(&a.byte_len.to_be_bytes());
    m.update(&a.head);
    m.finalize().into_bytes().into()
}

impl StoreAnchor {
    /// The anchor beside `store`, keyed with the receipt key's 32 bytes.
    pub fn beside(store: &Path, key: [u8; 32]) -> Result<StoreAnchor, Rejection> {
        let parent = store.parent().unwrap_or(Path::new("/"));
        let dir = placement::open_dir(parent, "the directory of the session store")?;
        let name = format!(
            "{}.anchor",
            store
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        );
        Ok(StoreAnchor { dir, name, key })
    }

    fn path_in(&self, store: &Path) -> std::path::PathBuf {
        store.with_file_name(&self.name)
    }

    /// Reads and verifies the anchor; `None` when there is none.
    pub fn load(&self, store: &Path) -> Result<Option<Anchor>, Rejection> {
        let path = self.path_in(store);
        if path.symlink_metadata().is_err() {
            return Ok(None);
        }
        let bytes = crate::protected::read(
            &path,
            crate::protected::Requirements {
                max_bytes: 1024,
                mode: 0o600,
            },
        )?;
        let invalid = || {
            Rejection::new(
                CONTROL_STORE_ANCHOR_INVALID,
                format!(
                    "{} is malformed or does not verify with the receipt key",
                    path.display()
                ),
            )
        };
        let f: AnchorFile =
            glove_types::canon::decode(&bytes, 1024, glove_types::canon::Form::Canonical)
                .map_err(|_| invalid())?;
        let head = super::auth::parse_hex32(&f.head).ok_or_else(invalid)?;
        let received = super::auth::parse_hex32(&f.mac).ok_or_else(invalid)?;
        let a = Anchor {
            records: f.records,
            byte_len: f.byte_len,
            head,
        };
        if !mac_matches(&mac(&self.key, &a), &received) {
            return Err(invalid());
        }
        Ok(Some(a))
    }

    /// Durably writes `a`.
    pub fn store(&self, a: &Anchor) -> Result<(), Rejection> {
        let v = serde_json::json!({
            "records": a.records,
            "byte_len": a.byte_len,
            "head": to_hex(&a.head),
            "mac": to_hex(&mac(&self.key, a)),
        });
        let bytes = glove_types::canon::to_canonical(&v)?;
        placement::write_private(&self.dir, &self.name, &bytes)
    }
}
