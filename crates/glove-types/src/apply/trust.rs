//! The apply trust policy: the Ed25519 public keys whose signatures the
//! owner accepts on apply authorizations.
//!
//! ```json
//! {"keys":[{"id":"owner","public_key":"<64 lowercase hex>"}],"schema":"glove.apply-trust-v1"}
//! ```
//!
//! Strict JSON (whitespace and key order are free, so an operator can write
//! it by hand; unknown and repeated fields are refused at every depth),
//! 1 to [`MAX_TRUST_KEYS`] keys sorted by id without repeats, ids in the
//! shared charset, public keys as 64 lowercase hex. Whether a key is a
//! valid, non-weak Ed25519 point is checked where the keys are used
//! (`glove-control`). Where the file may live and who may own it is
//! `glove-control`'s `TrustPolicy::load`.

use super::{parse_hex, schema};
use crate::canon::{self, Form};
use crate::codes::apply::APPLY_TRUST_POLICY_INVALID;
use crate::digest::to_hex;
use crate::ids::TrustKeyId;
use crate::Rejection;
use serde::{Deserialize, Serialize};

/// The `schema` of a trust policy.
pub const TRUST_POLICY_SCHEMA: &str = "glove.apply-trust-v1";
/// Largest trust policy file, in bytes.
pub const MAX_TRUST_POLICY_BYTES: usize = 64 * 1024;
/// Most keys a trust policy lists.
pub const MAX_TRUST_KEYS: usize = 64;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    schema: String,
    keys: Vec<RawKey>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKey {
    id: String,
    public_key: String,
}

/// One trusted key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustedKey {
    id: TrustKeyId,
    public_key: [u8; 32],
}

impl TrustedKey {
    /// A key entry.
    pub fn new(id: TrustKeyId, public_key: [u8; 32]) -> Self {
        Self { id, public_key }
    }

    /// The key's id.
    pub fn id(&self) -> &TrustKeyId {
        &self.id
    }

    /// The raw Ed25519 public key.
    pub fn public_key(&self) -> &[u8; 32] {
        &self.public_key
    }
}

/// A decoded trust policy (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplyTrustPolicy {
    keys: Vec<TrustedKey>,
}

fn invalid(msg: impl Into<String>) -> Rejection {
    Rejection::new(APPLY_TRUST_POLICY_INVALID, msg)
}

impl ApplyTrustPolicy {
    /// A policy of `keys` (same rules as [`decode`](Self::decode)).
    pub fn new(keys: Vec<TrustedKey>) -> Result<Self, Rejection> {
        if keys.is_empty() || keys.len() > MAX_TRUST_KEYS {
            return Err(invalid(format!(
                "a trust policy lists 1 to {MAX_TRUST_KEYS} keys (found {})",
                keys.len()
            ))
            .at("keys"));
        }
        for (i, w) in keys.windows(2).enumerate() {
            if w[0].id >= w[1].id {
                return Err(invalid("keys must be sorted by id, each id once")
                    .at(format!("keys[{}]", i + 1)));
            }
        }
        Ok(Self { keys })
    }

    /// Decodes a trust policy of at most [`MAX_TRUST_POLICY_BYTES`].
    pub fn decode(bytes: &[u8]) -> Result<Self, Rejection> {
        let raw: RawPolicy = canon::decode(bytes, MAX_TRUST_POLICY_BYTES, Form::Strict)?;
        schema(&raw.schema, TRUST_POLICY_SCHEMA)?;
        if raw.keys.len() > MAX_TRUST_KEYS {
            return Err(invalid(format!("at most {MAX_TRUST_KEYS} keys")).at("keys"));
        }
        let mut keys = Vec::with_capacity(raw.keys.len());
        for (i, k) in raw.keys.into_iter().enumerate() {
            let at = format!("keys[{i}]");
            let id = TrustKeyId::new(k.id).map_err(|r| r.at("id").at(&at))?;
            let public_key = parse_hex::<32>(&k.public_key).ok_or_else(|| {
                invalid("a public key is 64 lowercase hexadecimal characters")
                    .at("public_key")
                    .at(&at)
            })?;
            keys.push(TrustedKey { id, public_key });
        }
        Self::new(keys)
    }

    /// The canonical encoding.
    pub fn encode(&self) -> Result<Vec<u8>, Rejection> {
        canon::encode(&RawPolicy {
            schema: TRUST_POLICY_SCHEMA.to_owned(),
            keys: self
                .keys
                .iter()
                .map(|k| RawKey {
                    id: k.id.as_str().to_owned(),
                    public_key: to_hex(&k.public_key),
                })
                .collect(),
        })
    }

    /// Every key, sorted by id.
    pub fn keys(&self) -> &[TrustedKey] {
        &self.keys
    }

    /// The key with this id.
    pub fn key(&self, id: &TrustKeyId) -> Option<&TrustedKey> {
        self.keys
            .binary_search_by(|k| k.id.cmp(id))
            .ok()
            .and_then(|i| self.keys.get(i))
    }
}
