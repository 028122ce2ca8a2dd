//! Apply authorizations and the apply trust policy: the schemas only.
//!
//! An [`ApplyAuthorization`] says "apply this session's stage, with this
//! manifest over this baseline, to this target, once (grant id), until then"
//! and names the trust-policy key that signs it. A
//! [`SignedApplyAuthorization`] carries one with its Ed25519 signature; the
//! signature is checked in `glove-control` (this crate has no cryptography
//! beyond digests and no I/O). [`ApplyTrustPolicy`] lists the public keys
//! an owner trusts (see [`trust`]).
//!
//! Definitions (`docs/digests.md` has test vectors):
//!
//! * the signed message is `b"glove.apply-authorization-v1" || 0x00 ||`
//!   the authorization's canonical JSON ([`ApplyAuthorization::signed_message`]);
//! * `authorization_digest` = SHA-256 of the same bytes
//!   ([`Sha256Digest::of_domain`] with [`AUTHORIZATION_DOMAIN`]); it is the
//!   value the apply journal reserves, once.
//!
//! Every document is decoded strictly: canonical bytes only (the signature
//! covers them), no unknown or repeated field at any depth, the exact
//! `schema`, identifiers in the shared charset, digests as 64 lowercase hex,
//! and a validity window `issued_at_ms < expires_at_ms ≤ issued_at_ms +`
//! [`MAX_AUTHORIZATION_LIFETIME_MS`].

pub mod trust;

pub use trust::{ApplyTrustPolicy, TrustedKey, MAX_TRUST_KEYS, MAX_TRUST_POLICY_BYTES};

use crate::canon::{self, Form, MAX_SAFE_INTEGER};
use crate::codes::apply::*;
use crate::digest::to_hex;
use crate::ids::{ApplyGrantId, ApplyTargetId, SessionId, TrustKeyId};
use crate::{Rejection, Sha256Digest};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The `schema` of an authorization.
pub const AUTHORIZATION_SCHEMA: &str = "glove.apply-authorization-v1";
/// The domain of the signed message and of `authorization_digest`.
pub const AUTHORIZATION_DOMAIN: &str = "glove.apply-authorization-v1";
/// The `schema` of a signed authorization file.
pub const SIGNED_AUTHORIZATION_SCHEMA: &str = "glove.signed-apply-authorization-v1";
/// Largest signed authorization file, in bytes.
pub const MAX_SIGNED_AUTHORIZATION_BYTES: usize = 4096;
/// Longest validity window an authorization may have (24 hours).
pub const MAX_AUTHORIZATION_LIFETIME_MS: u64 = 86_400_000;
/// How far in the future `issued_at_ms` may lie when it is checked.
pub const MAX_CLOCK_SKEW_MS: u64 = 30_000;
/// Length of an Ed25519 signature.
pub const SIGNATURE_LEN: usize = 64;

/// What an authorization says, as typed values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthorizationTerms {
    /// The session whose retained stage is applied.
    pub session_id: SessionId,
    /// The alias or exposure id it is applied to.
    pub target: ApplyTargetId,
    /// Digest of the baseline manifest taken at staging.
    pub baseline_digest: Sha256Digest,
    /// Digest of the staged manifest being applied.
    pub manifest_digest: Sha256Digest,
    /// The single-use grant id.
    pub grant_id: ApplyGrantId,
    /// When it was issued, milliseconds since the Unix epoch.
    pub issued_at_ms: u64,
    /// When it expires (exclusive), milliseconds since the Unix epoch.
    pub expires_at_ms: u64,
    /// The trust-policy key that signs it.
    pub key_id: TrustKeyId,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuthorization {
    schema: String,
    session_id: String,
    target: String,
    baseline_digest: String,
    manifest_digest: String,
    grant_id: String,
    issued_at_ms: u64,
    expires_at_ms: u64,
    key_id: String,
}

/// A well-formed apply authorization with its canonical bytes. Not
/// signature-checked: that is `glove-control`'s `verify`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplyAuthorization {
    terms: AuthorizationTerms,
    canonical: Vec<u8>,
}

fn window(issued: u64, expires: u64) -> Result<(), Rejection> {
    if expires <= issued {
        return Err(Rejection::new(
            APPLY_AUTHORIZATION_INVALID,
            "expires_at_ms must be after issued_at_ms",
        )
        .at("expires_at_ms"));
    }
    if expires - issued > MAX_AUTHORIZATION_LIFETIME_MS {
        return Err(Rejection::new(
            APPLY_AUTHORIZATION_INVALID,
            format!("the validity window is longer than {MAX_AUTHORIZATION_LIFETIME_MS} ms"),
        )
        .at("expires_at_ms"));
    }
    if expires > MAX_SAFE_INTEGER {
        return Err(Rejection::new(
            APPLY_AUTHORIZATION_INVALID,
            format!("times must be at most {MAX_SAFE_INTEGER}"),
        )
        .at("expires_at_ms"));
    }
    Ok(())
}

fn schema(found: &str, want: &str) -> Result<(), Rejection> {
    if found == want {
        Ok(())
    } else {
        let shown: String = found.chars().take(64).collect();
        Err(Rejection::new(
            APPLY_SCHEMA_UNKNOWN,
            format!("schema {shown:?}; expected {want:?}"),
        )
        .at("schema"))
    }
}

impl ApplyAuthorization {
    /// An authorization from checked terms (validity window as in the
    /// module docs).
    pub fn new(terms: AuthorizationTerms) -> Result<Self, Rejection> {
        window(terms.issued_at_ms, terms.expires_at_ms)?;
        let canonical = canon::encode(&RawAuthorization {
            schema: AUTHORIZATION_SCHEMA.to_owned(),
            session_id: terms.session_id.as_str().to_owned(),
            target: terms.target.as_str().to_owned(),
            baseline_digest: terms.baseline_digest.to_hex(),
            manifest_digest: terms.manifest_digest.to_hex(),
            grant_id: terms.grant_id.as_str().to_owned(),
            issued_at_ms: terms.issued_at_ms,
            expires_at_ms: terms.expires_at_ms,
            key_id: terms.key_id.as_str().to_owned(),
        })?;
        Ok(Self { terms, canonical })
    }

    /// Decodes an authorization that must be canonical JSON.
    pub fn decode(bytes: &[u8]) -> Result<Self, Rejection> {
        let value = canon::parse_canonical(bytes, MAX_SIGNED_AUTHORIZATION_BYTES)?;
        Self::from_value(value)
    }

    /// Decodes an already strictly parsed value; the canonical bytes are
    /// its canonical encoding.
    fn from_value(value: Value) -> Result<Self, Rejection> {
        let canonical = canon::to_canonical(&value)?;
        let raw: RawAuthorization = canon::from_value(value)?;
        schema(&raw.schema, AUTHORIZATION_SCHEMA)?;
        let sha = |s: &str, at: &str| Sha256Digest::parse(s).map_err(|r| r.at(at));
        let terms = AuthorizationTerms {
            session_id: SessionId::new(raw.session_id).map_err(|r| r.at("session_id"))?,
            target: ApplyTargetId::new(raw.target).map_err(|r| r.at("target"))?,
            baseline_digest: sha(&raw.baseline_digest, "baseline_digest")?,
            manifest_digest: sha(&raw.manifest_digest, "manifest_digest")?,
            grant_id: ApplyGrantId::new(raw.grant_id).map_err(|r| r.at("grant_id"))?,
            issued_at_ms: raw.issued_at_ms,
            expires_at_ms: raw.expires_at_ms,
            key_id: TrustKeyId::new(raw.key_id).map_err(|r| r.at("key_id"))?,
        };
        window(terms.issued_at_ms, terms.expires_at_ms)?;
        Ok(Self { terms, canonical })
    }

    /// The typed terms.
    pub fn terms(&self) -> &AuthorizationTerms {
        &self.terms
    }

    /// The session.
    pub fn session_id(&self) -> &SessionId {
        &self.terms.session_id
    }

    /// The target alias or exposure id.
    pub fn target(&self) -> &ApplyTargetId {
        &self.terms.target
    }

    /// The baseline manifest digest.
    pub fn baseline_digest(&self) -> &Sha256Digest {
        &self.terms.baseline_digest
    }

    /// The staged manifest digest.
    pub fn manifest_digest(&self) -> &Sha256Digest {
        &self.terms.manifest_digest
    }

    /// The grant id.
    pub fn grant_id(&self) -> &ApplyGrantId {
        &self.terms.grant_id
    }

    /// Issue time, ms since the epoch.
    pub fn issued_at_ms(&self) -> u64 {
        self.terms.issued_at_ms
    }

    /// Expiry time (exclusive), ms since the epoch.
    pub fn expires_at_ms(&self) -> u64 {
        self.terms.expires_at_ms
    }

    /// The signing key's id in the trust policy.
    pub fn key_id(&self) -> &TrustKeyId {
        &self.terms.key_id
    }

    /// The canonical JSON bytes.
    pub fn canonical_bytes(&self) -> &[u8] {
        &self.canonical
    }

    /// The message an Ed25519 signature covers:
    /// `AUTHORIZATION_DOMAIN || 0x00 || canonical bytes`.
    pub fn signed_message(&self) -> Vec<u8> {
        let mut m = Vec::with_capacity(AUTHORIZATION_DOMAIN.len() + 1 + self.canonical.len());
        m.extend_from_slice(AUTHORIZATION_DOMAIN.as_bytes());
        m.push(0);
        m.extend_from_slice(&self.canonical);
        m
    }

    /// `authorization_digest`: SHA-256 of the signed message.
    pub fn digest(&self) -> Sha256Digest {
        Sha256Digest::of_domain(AUTHORIZATION_DOMAIN, &self.canonical)
    }
}

/// Decodes `2 * N` lowercase hex characters.
pub(crate) fn parse_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let b = s.as_bytes();
    if b.len() != 2 * N {
        return None;
    }
    let nib = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (o, pair) in out.iter_mut().zip(b.chunks_exact(2)) {
        *o = (nib(pair[0])? << 4) | nib(pair[1])?;
    }
    Some(out)
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSigned {
    schema: String,
    authorization: Value,
    signature: String,
}

/// An authorization with its Ed25519 signature, as the owner hands it to
/// `glove apply`: canonical JSON
/// `{"authorization":{…},"schema":"glove.signed-apply-authorization-v1","signature":"<128 hex>"}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedApplyAuthorization {
    authorization: ApplyAuthorization,
    signature: [u8; SIGNATURE_LEN],
    canonical: Vec<u8>,
}

impl SignedApplyAuthorization {
    /// Pairs an authorization with a signature (not checked here).
    pub fn new(
        authorization: ApplyAuthorization,
        signature: [u8; SIGNATURE_LEN],
    ) -> Result<Self, Rejection> {
        let inner = canon::parse_canonical(authorization.canonical_bytes(), usize::MAX)?;
        let canonical = canon::encode(&RawSigned {
            schema: SIGNED_AUTHORIZATION_SCHEMA.to_owned(),
            authorization: inner,
            signature: to_hex(&signature),
        })?;
        Ok(Self {
            authorization,
            signature,
            canonical,
        })
    }

    /// Decodes a signed authorization file: canonical JSON of at most
    /// [`MAX_SIGNED_AUTHORIZATION_BYTES`].
    pub fn decode(bytes: &[u8]) -> Result<Self, Rejection> {
        let value =
            canon::decode::<RawSigned>(bytes, MAX_SIGNED_AUTHORIZATION_BYTES, Form::Canonical)?;
        schema(&value.schema, SIGNED_AUTHORIZATION_SCHEMA)?;
        let authorization = ApplyAuthorization::from_value(value.authorization)
            .map_err(|r| r.at("authorization"))?;
        let signature = parse_hex::<SIGNATURE_LEN>(&value.signature).ok_or_else(|| {
            Rejection::new(
                APPLY_SIGNATURE_INVALID,
                "a signature must be exactly 128 lowercase hexadecimal characters",
            )
            .at("signature")
        })?;
        Ok(Self {
            authorization,
            signature,
            canonical: bytes.to_vec(),
        })
    }

    /// Decodes a signed authorization *file*: the canonical bytes, or the
    /// canonical bytes and one final newline (`glove apply sign` writes
    /// one, as text files end).
    pub fn decode_file(bytes: &[u8]) -> Result<Self, Rejection> {
        Self::decode(bytes.strip_suffix(b"\n").unwrap_or(bytes))
    }

    /// The authorization (not yet verified).
    pub fn authorization(&self) -> &ApplyAuthorization {
        &self.authorization
    }

    /// The raw signature.
    pub fn signature(&self) -> &[u8; SIGNATURE_LEN] {
        &self.signature
    }

    /// The file's canonical bytes.
    pub fn canonical_bytes(&self) -> &[u8] {
        &self.canonical
    }

    /// The authorization's `authorization_digest`.
    pub fn authorization_digest(&self) -> Sha256Digest {
        self.authorization.digest()
    }
}

#[cfg(test)]
mod tests;
