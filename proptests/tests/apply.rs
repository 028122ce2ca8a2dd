//! Properties of apply authorizations, for auditors:
//!
//! 1. any well-formed authorization encodes to canonical bytes that decode
//!    back to it, alone and inside a signed authorization file;
//! 2. changing any single byte of a signed authorization file makes it
//!    either fail to decode or fail to verify: nothing a signature covers,
//!    nor the signature, nor the framing can be altered and still pass;
//! 3. arbitrary bytes never panic the signed-authorization or trust-policy
//!    decoders.

use glove_control::apply::{keygen, sign, verify, OwnerKey, TrustPolicy};
use glove_types::apply::{
    ApplyAuthorization, ApplyTrustPolicy, AuthorizationTerms, SignedApplyAuthorization, TrustedKey,
    MAX_AUTHORIZATION_LIFETIME_MS,
};
use glove_types::ids::{ApplyGrantId, ApplyTargetId, SessionId, TrustKeyId};
use glove_types::Sha256Digest;
use proptest::prelude::*;
use std::sync::OnceLock;

const ID: &str = "[a-z0-9][a-z0-9._-]{0,63}";

fn terms(key_id: &'static str) -> impl Strategy<Value = AuthorizationTerms> {
    (
        (ID, ID, ID),
        any::<[u8; 32]>(),
        any::<[u8; 32]>(),
        0u64..(1 << 52),
        1..=MAX_AUTHORIZATION_LIFETIME_MS,
    )
        .prop_map(move |((s, t, g), b, m, issued, life)| AuthorizationTerms {
            session_id: SessionId::new(s).unwrap(),
            target: ApplyTargetId::new(t).unwrap(),
            baseline_digest: Sha256Digest::from_bytes(b),
            manifest_digest: Sha256Digest::from_bytes(m),
            grant_id: ApplyGrantId::new(g).unwrap(),
            issued_at_ms: issued,
            expires_at_ms: issued + life,
            key_id: TrustKeyId::new(key_id).unwrap(),
        })
}

/// One owner key for the whole run, and a trust policy listing only it.
fn owner() -> &'static (tempfile::TempDir, OwnerKey, TrustPolicy) {
    static OWNER: OnceLock<(tempfile::TempDir, OwnerKey, TrustPolicy)> = OnceLock::new();
    OWNER.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let key = keygen(&dir.path().join("key"), TrustKeyId::new("owner").unwrap()).unwrap();
        let pk = Sha256Digest::parse(&key.public_key_hex()).unwrap();
        let policy =
            ApplyTrustPolicy::new(vec![TrustedKey::new(key.id().clone(), *pk.as_bytes())]).unwrap();
        let policy = TrustPolicy::from_policy(policy).unwrap();
        (dir, key, policy)
    })
}

proptest! {
    #[test]
    fn authorizations_round_trip(t in terms("owner"), sig in any::<[u8; 32]>()) {
        let a = ApplyAuthorization::new(t.clone()).unwrap();
        prop_assert_eq!(a.terms(), &t);
        let again = ApplyAuthorization::decode(a.canonical_bytes()).unwrap();
        prop_assert_eq!(&again, &a);
        let mut signature = [0u8; 64];
        signature[..32].copy_from_slice(&sig);
        let s = SignedApplyAuthorization::new(a.clone(), signature).unwrap();
        let d = SignedApplyAuthorization::decode(s.canonical_bytes()).unwrap();
        prop_assert_eq!(d.authorization(), &a);
        prop_assert_eq!(d.canonical_bytes(), s.canonical_bytes());
        prop_assert_eq!(d.authorization_digest(), a.digest());
    }

    #[test]
    fn any_single_byte_change_fails_decode_or_verify(
        t in terms("owner"),
        at in any::<prop::sample::Index>(),
        delta in 1u8..=255,
    ) {
        let (_, key, policy) = owner();
        let a = ApplyAuthorization::new(t).unwrap();
        let signed = sign(key, &a).unwrap();
        let now = a.issued_at_ms();
        prop_assert!(verify(policy, &signed, now).is_ok());
        let mut bytes = signed.canonical_bytes().to_vec();
        let i = at.index(bytes.len());
        bytes[i] = bytes[i].wrapping_add(delta);
        if let Ok(changed) = SignedApplyAuthorization::decode(&bytes) {
            prop_assert!(
                verify(policy, &changed, now).is_err(),
                "byte {} changed and still verifies", i
            );
        }
    }

    #[test]
    fn decoders_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = SignedApplyAuthorization::decode(&bytes);
        let _ = SignedApplyAuthorization::decode_file(&bytes);
        let _ = ApplyTrustPolicy::decode(&bytes);
    }
}
