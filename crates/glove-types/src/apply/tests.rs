use super::*;
use crate::codes::ids::{DIGEST_INVALID, ID_INVALID};
use crate::codes::json::*;
use crate::ErrorCode;

fn terms() -> AuthorizationTerms {
    AuthorizationTerms {
        session_id: SessionId::new("s-1").unwrap(),
        target: ApplyTargetId::new("work").unwrap(),
        baseline_digest: Sha256Digest::of(b"baseline"),
        manifest_digest: Sha256Digest::of(b"manifest"),
        grant_id: ApplyGrantId::new("grant-1").unwrap(),
        issued_at_ms: 1_000,
        expires_at_ms: 601_000,
        key_id: TrustKeyId::new("owner").unwrap(),
    }
}

fn signed_text(auth: &ApplyAuthorization) -> String {
    String::from_utf8(
        SignedApplyAuthorization::new(auth.clone(), [7u8; 64])
            .unwrap()
            .canonical_bytes()
            .to_vec(),
    )
    .unwrap()
}

fn code_of(text: &str) -> ErrorCode {
    SignedApplyAuthorization::decode(text.as_bytes())
        .unwrap_err()
        .code()
}

#[test]
fn round_trip_and_digest() {
    let a = ApplyAuthorization::new(terms()).unwrap();
    let text = std::str::from_utf8(a.canonical_bytes()).unwrap();
    assert!(text.starts_with("{\"baseline_digest\":"), "{text}");
    assert!(text.contains("\"schema\":\"glove.apply-authorization-v1\""));
    let again = ApplyAuthorization::decode(a.canonical_bytes()).unwrap();
    assert_eq!(again, a);
    let mut msg = b"glove.apply-authorization-v1\0".to_vec();
    msg.extend_from_slice(a.canonical_bytes());
    assert_eq!(a.signed_message(), msg);
    assert_eq!(a.digest(), Sha256Digest::of(&msg));
    let s = SignedApplyAuthorization::new(a.clone(), [0xab; 64]).unwrap();
    let d = SignedApplyAuthorization::decode(s.canonical_bytes()).unwrap();
    assert_eq!(d, s);
    assert_eq!(d.authorization_digest(), a.digest());
    assert_eq!(d.signature(), &[0xab; 64]);
    let mut file = s.canonical_bytes().to_vec();
    file.push(b'\n');
    assert_eq!(SignedApplyAuthorization::decode_file(&file).unwrap(), s);
    file.push(b'\n');
    assert!(SignedApplyAuthorization::decode_file(&file).is_err());
}

#[test]
fn window_rules() {
    let mut t = terms();
    t.expires_at_ms = t.issued_at_ms;
    let e = ApplyAuthorization::new(t.clone()).unwrap_err();
    assert_eq!(e.code(), APPLY_AUTHORIZATION_INVALID);
    t.expires_at_ms = t.issued_at_ms - 1;
    assert_eq!(
        ApplyAuthorization::new(t.clone()).unwrap_err().code(),
        APPLY_AUTHORIZATION_INVALID
    );
    t.expires_at_ms = t.issued_at_ms + MAX_AUTHORIZATION_LIFETIME_MS + 1;
    assert_eq!(
        ApplyAuthorization::new(t.clone()).unwrap_err().code(),
        APPLY_AUTHORIZATION_INVALID
    );
    t.expires_at_ms = t.issued_at_ms + MAX_AUTHORIZATION_LIFETIME_MS;
    assert!(ApplyAuthorization::new(t).is_ok());
}

#[test]
fn strict_decode_refusals() {
    let a = ApplyAuthorization::new(terms()).unwrap();
    let good = signed_text(&a);
    assert!(SignedApplyAuthorization::decode(good.as_bytes()).is_ok());
    // Not canonical: whitespace, reordered keys.
    assert_eq!(code_of(&good.replacen(':', ": ", 1)), JSON_NONCANONICAL);
    // Unknown field inside the authorization, and outside.
    let extra = good.replacen("{\"baseline_digest\"", "{\"aaa\":1,\"baseline_digest\"", 1);
    assert_eq!(code_of(&extra), JSON_UNKNOWN_FIELD);
    let outer = good.replacen("{\"authorization\"", "{\"a\":1,\"authorization\"", 1);
    assert_eq!(code_of(&outer), JSON_UNKNOWN_FIELD);
    // Duplicate key.
    let dup = good.replacen(
        "{\"baseline_digest\"",
        "{\"grant_id\":\"x\",\"baseline_digest\"",
        1,
    );
    assert_eq!(code_of(&dup), JSON_DUPLICATE_KEY);
    // Wrong schemas.
    let inner = good.replace(
        "glove.apply-authorization-v1",
        "glove.apply-authorization-v2",
    );
    assert_eq!(code_of(&inner), APPLY_SCHEMA_UNKNOWN);
    let outer = good.replace(
        "glove.signed-apply-authorization-v1",
        "glove.signed-apply-authorization-v2",
    );
    assert_eq!(code_of(&outer), APPLY_SCHEMA_UNKNOWN);
    // Bad digest, bad ids.
    let hex = Sha256Digest::of(b"manifest").to_hex();
    assert_eq!(
        code_of(&good.replace(&hex, &hex.to_uppercase())),
        DIGEST_INVALID
    );
    assert_eq!(code_of(&good.replace("\"work\"", "\"../etc\"")), ID_INVALID);
    assert_eq!(code_of(&good.replace("\"owner\"", "\"Owner\"")), ID_INVALID);
    // Bad signature.
    let sig = "07".repeat(64);
    assert_eq!(
        code_of(&good.replace(&sig, &"07".repeat(63))),
        APPLY_SIGNATURE_INVALID
    );
    assert_eq!(
        code_of(&good.replace(&sig, &"0G".repeat(64))),
        APPLY_SIGNATURE_INVALID
    );
    // Expiry at or before issue.
    assert_eq!(
        code_of(&good.replace("\"expires_at_ms\":601000", "\"expires_at_ms\":1000")),
        APPLY_AUTHORIZATION_INVALID
    );
    // Negative and float numbers.
    assert_eq!(
        code_of(&good.replace("\"issued_at_ms\":1000", "\"issued_at_ms\":-1")),
        JSON_NEGATIVE_NUMBER
    );
    assert_eq!(
        code_of(&good.replace("\"issued_at_ms\":1000", "\"issued_at_ms\":1.5")),
        JSON_FLOAT
    );
    // Too large.
    let big = format!("{}{}", good, " ".repeat(MAX_SIGNED_AUTHORIZATION_BYTES));
    assert_eq!(code_of(&big), JSON_TOO_LARGE);
}

fn policy(keys: &[(&str, String)]) -> String {
    let keys: Vec<String> = keys
        .iter()
        .map(|(id, pk)| format!("{{\"id\":\"{id}\",\"public_key\":\"{pk}\"}}"))
        .collect();
    format!(
        "{{\n  \"schema\": \"glove.apply-trust-v1\",\n  \"keys\": [{}]\n}}\n",
        keys.join(",")
    )
}

#[test]
fn trust_policy() {
    let pk = "ab".repeat(32);
    let p = ApplyTrustPolicy::decode(
        policy(&[("a", pk.clone()), ("owner", "01".repeat(32))]).as_bytes(),
    )
    .unwrap();
    assert_eq!(p.keys().len(), 2);
    assert_eq!(
        p.key(&TrustKeyId::new("owner").unwrap())
            .unwrap()
            .public_key(),
        &[1u8; 32]
    );
    assert!(p.key(&TrustKeyId::new("b").unwrap()).is_none());
    assert_eq!(ApplyTrustPolicy::decode(&p.encode().unwrap()).unwrap(), p);
    let c = |s: String| ApplyTrustPolicy::decode(s.as_bytes()).unwrap_err().code();
    assert_eq!(c(policy(&[])), APPLY_TRUST_POLICY_INVALID);
    assert_eq!(
        c(policy(&[("b", pk.clone()), ("a", pk.clone())])),
        APPLY_TRUST_POLICY_INVALID
    );
    assert_eq!(
        c(policy(&[("a", pk.clone()), ("a", pk.clone())])),
        APPLY_TRUST_POLICY_INVALID
    );
    assert_eq!(
        c(policy(&[("a", "AB".repeat(32))])),
        APPLY_TRUST_POLICY_INVALID
    );
    assert_eq!(
        c(policy(&[("a", "ab".repeat(31))])),
        APPLY_TRUST_POLICY_INVALID
    );
    assert_eq!(c(policy(&[("A", pk.clone())])), ID_INVALID);
    let many: Vec<(String, String)> = (0..65).map(|i| (format!("k{i:03}"), pk.clone())).collect();
    let many: Vec<(&str, String)> = many.iter().map(|(a, b)| (a.as_str(), b.clone())).collect();
    assert_eq!(c(policy(&many)), APPLY_TRUST_POLICY_INVALID);
    assert_eq!(
        c(policy(&[("a", pk.clone())]).replace("-v1", "-v0")),
        APPLY_SCHEMA_UNKNOWN
    );
    assert_eq!(
        c(policy(&[("a", pk.clone())]).replace("\"keys\"", "\"extra\":1,\"keys\"")),
        JSON_UNKNOWN_FIELD
    );
    assert_eq!(
        c(policy(&[("a", pk.clone())]).replace("\"id\":", "\"id\":\"x\",\"id\":")),
        JSON_DUPLICATE_KEY
    );
}
