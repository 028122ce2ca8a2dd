//! Start authorization: the MAC definition and every rejection code.

use crate::support::*;
use glove_lifecycle::memory::ManualClock;
use glove_lifecycle::start_auth::START_AUTH_DOMAIN;
use glove_lifecycle::*;
use glove_types::codes::lifecycle as c;
use glove_types::ErrorCode;
use hmac::{Hmac, Mac};

fn verify_at(
    a: &StartAuthorization,
    now: u64,
    nonces: &mut UsedNonces,
) -> Result<VerifiedStart, StartAuthError> {
    let id = sid("s-auth");
    a.verify(
        &key(),
        &id,
        &digests(),
        StartAuthPolicy::default(),
        &ManualClock::at(now),
        nonces,
    )
}

fn code_of(f: StartAuthFields, now: u64) -> ErrorCode {
    let a = StartAuthorization::issue(&key(), f).unwrap();
    verify_at(&a, now, &mut UsedNonces::new(8))
        .unwrap_err()
        .code()
}

fn base() -> StartAuthFields {
    fields(&sid("s-auth"), digests(), 1)
}

#[test]
fn accepts_a_fresh_authorization_and_matches_the_documented_mac() {
    let a = StartAuthorization::issue(&key(), base()).unwrap();
    let v = verify_at(&a, NOW + 1, &mut UsedNonces::new(8));
    assert!(v.is_ok());

    // MAC = HMAC-SHA-256(key, domain || 0x00 || canonical body without "mac").
    let wire = String::from_utf8(a.to_bytes().unwrap()).unwrap();
    let mac_hex = {
        let at = wire.find("\"mac\":\"").unwrap() + 7;
        wire[at..at + 64].to_owned()
    };
    let body = wire.replace(&format!("\"mac\":\"{mac_hex}\","), "");
    let mut m = Hmac::<sha2::Sha256>::new_from_slice(&[0x5a; 32]).unwrap();
    m.update(START_AUTH_DOMAIN.as_bytes());
    m.update(&[0]);
    m.update(body.as_bytes());
    let expected = glove_types::digest::to_hex(&m.finalize().into_bytes());
    assert_eq!(mac_hex, expected);

    // Round trip and a stable digest.
    let back = StartAuthorization::decode(wire.as_bytes()).unwrap();
    assert_eq!(back, a);
    assert_eq!(back.digest().unwrap(), a.digest().unwrap());
}

#[test]
fn bad_mac() {
    let other = ServiceKey::new(&[0x11; 32]).unwrap();
    let a = StartAuthorization::issue(&other, base()).unwrap();
    assert_eq!(
        verify_at(&a, NOW, &mut UsedNonces::new(8))
            .unwrap_err()
            .code(),
        c::START_AUTH_BAD_MAC
    );
    // A field changed after issuing breaks the MAC too.
    let wire = String::from_utf8(
        StartAuthorization::issue(&key(), base())
            .unwrap()
            .to_bytes()
            .unwrap(),
    )
    .unwrap();
    let forged = wire.replace(
        &format!("\"expires_at_ms\":{}", NOW + 30_000),
        &format!("\"expires_at_ms\":{}", NOW + 40_000),
    );
    let a = StartAuthorization::decode(forged.as_bytes()).unwrap();
    assert_eq!(
        verify_at(&a, NOW, &mut UsedNonces::new(8))
            .unwrap_err()
            .code(),
        c::START_AUTH_BAD_MAC
    );
}

#[test]
fn wrong_session_and_wrong_digests() {
    let mut f = base();
    f.session_id = sid("s-other");
    assert_eq!(code_of(f, NOW), c::START_AUTH_SESSION_MISMATCH);

    let mut f = base();
    f.digests = PlanDigests::new(
        digests_of("x").plan_content_digest(),
        digests().controller_plan_digest(),
    );
    assert_eq!(code_of(f, NOW), c::START_AUTH_PLAN_CONTENT_DIGEST_MISMATCH);

    let mut f = base();
    f.digests = PlanDigests::new(
        digests().plan_content_digest(),
        digests_of("x").controller_plan_digest(),
    );
    assert_eq!(code_of(f, NOW), c::START_AUTH_CONTROLLER_DIGEST_MISMATCH);
}

#[test]
fn windows_expiry_and_skew() {
    let p = StartAuthPolicy::default();
    let mut f = base();
    f.expires_at_ms = f.issued_at_ms;
    assert_eq!(code_of(f, NOW), c::START_AUTH_LIFETIME_INVALID);
    let mut f = base();
    f.expires_at_ms = f.issued_at_ms - 1;
    assert_eq!(code_of(f, NOW), c::START_AUTH_LIFETIME_INVALID);
    let mut f = base();
    f.expires_at_ms = f.issued_at_ms + p.max_lifetime_ms + 1;
    assert_eq!(code_of(f, NOW), c::START_AUTH_LIFETIME_INVALID);

    assert_eq!(
        code_of(base(), NOW - p.max_skew_ms - 1),
        c::START_AUTH_NOT_YET_VALID
    );
    let ok = StartAuthorization::issue(&key(), base()).unwrap();
    assert!(verify_at(&ok, NOW - p.max_skew_ms, &mut UsedNonces::new(8)).is_ok());

    assert_eq!(code_of(base(), NOW + 30_000), c::START_AUTH_EXPIRED);
    assert!(verify_at(&ok, NOW + 29_999, &mut UsedNonces::new(8)).is_ok());
}

#[test]
fn replay_and_a_full_nonce_store() {
    let a = StartAuthorization::issue(&key(), base()).unwrap();
    let mut nonces = UsedNonces::new(1);
    assert!(verify_at(&a, NOW, &mut nonces).is_ok());
    assert_eq!(
        verify_at(&a, NOW, &mut nonces).unwrap_err().code(),
        c::START_AUTH_REPLAYED
    );

    let mut f = base();
    f.nonce = Nonce::from_bytes([2; 16]);
    let b = StartAuthorization::issue(&key(), f).unwrap();
    assert_eq!(
        verify_at(&b, NOW, &mut nonces).unwrap_err().code(),
        c::START_AUTH_NONCE_STORE_FULL
    );
    // Once the first authorization has expired its nonce may be pruned.
    let mut f = base();
    f.nonce = Nonce::from_bytes([2; 16]);
    f.issued_at_ms = NOW + 30_000;
    f.expires_at_ms = NOW + 60_000;
    let c2 = StartAuthorization::issue(&key(), f).unwrap();
    assert!(verify_at(&c2, NOW + 30_001, &mut nonces).is_ok());
    assert_eq!(nonces.len(), 1);

    // A nonce rebuilt from durable history is refused as a replay.
    let mut rebuilt = UsedNonces::new(8);
    rebuilt.insert_recovered(Nonce::from_bytes([1; 16]), NOW + 30_000);
    assert_eq!(
        verify_at(&a, NOW, &mut rebuilt).unwrap_err().code(),
        c::START_AUTH_REPLAYED
    );
}

#[test]
fn a_failed_check_does_not_consume_the_nonce() {
    let mut nonces = UsedNonces::new(8);
    let a = StartAuthorization::issue(&key(), base()).unwrap();
    assert!(verify_at(&a, NOW + 30_000, &mut nonces).is_err());
    assert!(nonces.is_empty());
    assert!(verify_at(&a, NOW, &mut nonces).is_ok());
}

#[test]
fn malformed_and_short_keys() {
    assert_eq!(
        ServiceKey::new(&[1; 31]).unwrap_err().code(),
        c::START_AUTH_KEY_INVALID
    );
    let wire = String::from_utf8(
        StartAuthorization::issue(&key(), base())
            .unwrap()
            .to_bytes()
            .unwrap(),
    )
    .unwrap();
    for bad in [
        String::from("not json"),
        wire.replacen('{', "{ ", 1),
        wire.replacen("{\"controller", "{\"a\":1,\"controller", 1),
        wire.replacen("\"nonce\":\"01", "\"nonce\":\"0G", 1),
        wire.replacen("\"session_id\":\"s-auth\"", "\"session_id\":\"S\"", 1),
    ] {
        assert_eq!(
            StartAuthorization::decode(bad.as_bytes())
                .unwrap_err()
                .code(),
            c::START_AUTH_MALFORMED,
            "{bad}"
        );
    }
}
