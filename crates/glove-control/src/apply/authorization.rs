//! Signing and verifying apply authorizations.
//!
//! [`sign`] signs an authorization's signed message
//! (`ApplyAuthorization::signed_message`: the domain
//! `glove.apply-authorization-v1`, a zero byte, the canonical bytes) with
//! the owner's key. [`verify`] is the one way to a
//! [`VerifiedAuthorization`]: the named key is listed in the trust policy,
//! the signature verifies under it with `verify_strict` (no
//! non-canonical `S`, no small-order `R` or key), `now_ms < expires_at_ms`,
//! and `issued_at_ms ≤ now_ms + MAX_CLOCK_SKEW_MS`.
//!
//! Verification does not consume anything: single use is the apply
//! journal's reservation of the grant id, the authorization digest and the
//! manifest digest ([`VerifiedAuthorization::reservation`] builds it).

use super::key::OwnerKey;
use super::trust::TrustPolicy;
use ed25519_dalek::{Signature, Signer as _};
use glove_lifecycle::apply::{GrantId, Reservation};
use glove_types::apply::{ApplyAuthorization, SignedApplyAuthorization, MAX_CLOCK_SKEW_MS};
use glove_types::codes::apply::*;
use glove_types::{Rejection, Sha256Digest};

/// Signs `authorization` with `key`. Refuses (`apply_key_untrusted`) an
/// authorization that names another key id than `key`'s: it could never
/// verify.
pub fn sign(
    key: &OwnerKey,
    authorization: &ApplyAuthorization,
) -> Result<SignedApplyAuthorization, Rejection> {
    if authorization.key_id() != key.id() {
        return Err(Rejection::new(
            APPLY_KEY_UNTRUSTED,
            format!(
                "the authorization names key {:?}, the signing key is {:?}",
                authorization.key_id().as_str(),
                key.id().as_str()
            ),
        ));
    }
    let signature = key.signing_key().sign(&authorization.signed_message());
    SignedApplyAuthorization::new(authorization.clone(), signature.to_bytes())
}

/// An authorization whose signature verified under a trusted key and that
/// was current when checked. Only [`verify`] makes one; not `Clone`.
#[derive(Debug)]
pub struct VerifiedAuthorization {
    authorization: ApplyAuthorization,
    digest: Sha256Digest,
}

impl VerifiedAuthorization {
    /// The verified authorization.
    pub fn authorization(&self) -> &ApplyAuthorization {
        &self.authorization
    }

    /// Its `authorization_digest`.
    pub fn digest(&self) -> Sha256Digest {
        self.digest
    }

    /// What the apply transaction reserves for it: the grant id, this
    /// authorization's digest, its manifest digest, and the digest of the
    /// exposure locator the caller resolved for its target.
    pub fn reservation(&self, locator_digest: Sha256Digest) -> Result<Reservation, Rejection> {
        Ok(Reservation {
            grant_id: GrantId::new(self.authorization.grant_id().as_str())?,
            authorization_digest: self.digest,
            manifest_digest: *self.authorization.manifest_digest(),
            locator_digest,
        })
    }
}

/// Verifies `signed` against `policy` at wall-clock time `now_ms` (see the
/// module docs for the checks and their order).
pub fn verify(
    policy: &TrustPolicy,
    signed: &SignedApplyAuthorization,
    now_ms: u64,
) -> Result<VerifiedAuthorization, Rejection> {
    let a = signed.authorization();
    let key = policy.key(a.key_id()).ok_or_else(|| {
        Rejection::new(
            APPLY_KEY_UNTRUSTED,
            format!("key {:?} is not in the trust policy", a.key_id().as_str()),
        )
        .at("authorization.key_id")
    })?;
    let signature = Signature::from_bytes(signed.signature());
    key.verify_strict(&a.signed_message(), &signature)
        .map_err(|_| {
            Rejection::new(
                APPLY_SIGNATURE_INVALID,
                format!(
                    "the signature does not verify under key {:?}",
                    a.key_id().as_str()
                ),
            )
            .at("signature")
        })?;
    if now_ms >= a.expires_at_ms() {
        return Err(Rejection::new(
            APPLY_AUTHORIZATION_EXPIRED,
            format!(
                "the authorization expired at {} ms; it is now {now_ms} ms",
                a.expires_at_ms()
            ),
        ));
    }
    if a.issued_at_ms() > now_ms.saturating_add(MAX_CLOCK_SKEW_MS) {
        return Err(Rejection::new(
            APPLY_AUTHORIZATION_NOT_YET_VALID,
            format!(
                "the authorization is issued at {} ms, beyond {MAX_CLOCK_SKEW_MS} ms after now ({now_ms} ms)",
                a.issued_at_ms()
            ),
        ));
    }
    Ok(VerifiedAuthorization {
        authorization: a.clone(),
        digest: signed.authorization_digest(),
    })
}
