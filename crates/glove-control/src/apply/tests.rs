//! Unit tests of keys, signing, verification and the trust-policy file
//! checks. The file checks need root (to own files as root and to chown
//! them away): without it they print why they skip, and fail under
//! `GLOVE_REQUIRE_SANDBOX=1`.

use super::*;
use glove_types::apply::{ApplyAuthorization, ApplyTrustPolicy, AuthorizationTerms, TrustedKey};
use glove_types::codes::apply::*;
use glove_types::ids::{ApplyGrantId, ApplyTargetId, SessionId, TrustKeyId};
use glove_types::{ErrorCode, Sha256Digest};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

/// Whether the test may run as root; prints why not (and fails under
/// `GLOVE_REQUIRE_SANDBOX=1`, like the other root-needing tests).
fn root_or_skip(test: &str) -> bool {
    if glove_fs::euid() == 0 {
        return true;
    }
    assert!(
        std::env::var("GLOVE_REQUIRE_SANDBOX").as_deref() != Ok("1"),
        "GLOVE_REQUIRE_SANDBOX=1 but {test} is not root (it chowns files to root and away)"
    );
    eprintln!("skipping {test}: needs root to make root-owned and foreign-owned files");
    false
}

fn id(s: &str) -> TrustKeyId {
    TrustKeyId::new(s).unwrap()
}

fn authorization(key_id: &str, issued: u64, expires: u64) -> ApplyAuthorization {
    ApplyAuthorization::new(AuthorizationTerms {
        session_id: SessionId::new("s-1").unwrap(),
        target: ApplyTargetId::new("work").unwrap(),
        baseline_digest: Sha256Digest::of(b"baseline"),
        manifest_digest: Sha256Digest::of(b"manifest"),
        grant_id: ApplyGrantId::new("grant-1").unwrap(),
        issued_at_ms: issued,
        expires_at_ms: expires,
        key_id: id(key_id),
    })
    .unwrap()
}

fn new_key(dir: &Path, name: &str, key_id: &str) -> (PathBuf, OwnerKey) {
    let p = dir.join(name);
    let k = keygen(&p, id(key_id)).unwrap();
    (p, k)
}

fn policy_of(keys: &[&OwnerKey]) -> TrustPolicy {
    let mut entries: Vec<TrustedKey> = keys
        .iter()
        .map(|k| {
            let pk = Sha256Digest::parse(&k.public_key_hex()).unwrap();
            TrustedKey::new(k.id().clone(), *pk.as_bytes())
        })
        .collect();
    entries.sort_by(|a, b| a.id().cmp(b.id()));
    TrustPolicy::from_policy(ApplyTrustPolicy::new(entries).unwrap()).unwrap()
}

#[test]
fn keygen_writes_0600_once_and_loads_back() {
    let dir = tempfile::tempdir().unwrap();
    let (p, k) = new_key(dir.path(), "key", "owner");
    let meta = std::fs::symlink_metadata(&p).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    let text = std::fs::read_to_string(&p).unwrap();
    assert!(
        text.starts_with("{\"id\":\"owner\",\"schema\":\"glove.apply-key-v1\",\"secret_key\":\"")
    );
    let loaded = load_signing_key(&p).unwrap();
    assert_eq!(loaded.public_key_hex(), k.public_key_hex());
    assert_eq!(loaded.id(), k.id());
    assert!(
        !format!("{loaded:?}").contains(&text[60..90]),
        "Debug leaks the secret"
    );
    // Never overwritten.
    let again = keygen(&p, id("owner")).unwrap_err();
    assert_eq!(again.code(), APPLY_KEY_FILE_EXISTS);
    assert_eq!(std::fs::read_to_string(&p).unwrap(), text);
    // A link in its place is not followed either.
    let l = dir.path().join("link");
    symlink(dir.path().join("nowhere"), &l).unwrap();
    assert_eq!(
        keygen(&l, id("owner")).unwrap_err().code(),
        APPLY_KEY_FILE_EXISTS
    );
    assert!(!dir.path().join("nowhere").exists());
}

#[test]
fn load_signing_key_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let (p, _) = new_key(dir.path(), "key", "owner");
    let code = |p: &Path| load_signing_key(p).unwrap_err().code();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(code(&p), APPLY_KEY_FILE_UNSAFE);
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    let l = dir.path().join("link");
    symlink(&p, &l).unwrap();
    assert_eq!(code(&l), APPLY_KEY_FILE_UNSAFE);
    assert_eq!(code(dir.path()), APPLY_KEY_FILE_UNSAFE);
    assert_eq!(code(&dir.path().join("missing")), APPLY_FILE_IO);
    let bad = dir.path().join("bad");
    std::fs::write(
        &bad,
        b"{\"id\":\"owner\",\"schema\":\"glove.apply-key-v1\",\"secret_key\":\"00\"}",
    )
    .unwrap();
    std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(code(&bad), APPLY_KEY_FILE_INVALID);
    if root_or_skip("load_signing_key_refusals (foreign owner)") {
        rustix::fs::chown(&p, Some(rustix::process::Uid::from_raw(65534)), None).unwrap();
        assert_eq!(code(&p), APPLY_KEY_FILE_UNSAFE);
    }
}

#[test]
fn sign_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let (_, owner) = new_key(dir.path(), "owner", "owner");
    let (_, other) = new_key(dir.path(), "other", "other");
    let policy = policy_of(&[&owner]);
    let a = authorization("owner", 1_000, 601_000);
    let signed = sign(&owner, &a).unwrap();
    let v = verify(&policy, &signed, 1_000).unwrap();
    assert_eq!(v.authorization(), &a);
    assert_eq!(v.digest(), a.digest());
    let r = v.reservation(Sha256Digest::of(b"locator")).unwrap();
    assert_eq!(r.grant_id.as_str(), "grant-1");
    assert_eq!(r.authorization_digest, a.digest());
    assert_eq!(r.manifest_digest, Sha256Digest::of(b"manifest"));
    // Decoded from its file bytes, the same.
    let again =
        glove_types::apply::SignedApplyAuthorization::decode(signed.canonical_bytes()).unwrap();
    assert!(verify(&policy, &again, 600_999).is_ok());
    let code = |r: Result<VerifiedAuthorization, glove_types::Rejection>| -> ErrorCode {
        r.unwrap_err().code()
    };
    assert_eq!(
        code(verify(&policy, &signed, 601_000)),
        APPLY_AUTHORIZATION_EXPIRED
    );
    let future = sign(&owner, &authorization("owner", 100_000, 200_000)).unwrap();
    assert_eq!(
        code(verify(&policy, &future, 69_999)),
        APPLY_AUTHORIZATION_NOT_YET_VALID
    );
    assert!(verify(&policy, &future, 70_000).is_ok());
    // Signed by a key the policy does not list.
    let by_other = sign(&other, &authorization("other", 1_000, 601_000)).unwrap();
    assert_eq!(code(verify(&policy, &by_other, 1_000)), APPLY_KEY_UNTRUSTED);
    // Signed by another key under the owner's id.
    let both = policy_of(&[&owner, &other]);
    let wrong = glove_types::apply::SignedApplyAuthorization::new(
        authorization("owner", 1_000, 601_000),
        *by_other.signature(),
    )
    .unwrap();
    assert_eq!(code(verify(&both, &wrong, 1_000)), APPLY_SIGNATURE_INVALID);
    // A key cannot sign for another id.
    assert_eq!(sign(&other, &a).unwrap_err().code(), APPLY_KEY_UNTRUSTED);
}

#[test]
fn weak_and_invalid_public_keys_are_refused() {
    // The identity point (small order) and a non-point.
    let mut identity = [0u8; 32];
    identity[0] = 1;
    let not_a_point = (2u8..=255)
        .map(|i| {
            let mut b = [0u8; 32];
            b[0] = i;
            b
        })
        .find(|b| ed25519_dalek::VerifyingKey::from_bytes(b).is_err())
        .unwrap();
    for pk in [identity, not_a_point] {
        let p = ApplyTrustPolicy::new(vec![TrustedKey::new(id("a"), pk)]).unwrap();
        assert_eq!(
            TrustPolicy::from_policy(p).unwrap_err().code(),
            APPLY_TRUST_POLICY_INVALID
        );
    }
}

/// A directory and a trust policy file in it listing `key`, both root's
/// (the test runs as root), the file mode 0644.
fn policy_file(key: &OwnerKey) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let p = dir.path().join("apply-trust.json");
    std::fs::write(
        &p,
        format!(
            "{{\"schema\":\"glove.apply-trust-v1\",\"keys\":[{}]}}\n",
            key.trust_entry()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    (dir, p)
}

#[test]
fn trust_policy_file_checks() {
    if !root_or_skip("trust_policy_file_checks") {
        return;
    }
    let keys = tempfile::tempdir().unwrap();
    let (_, owner) = new_key(keys.path(), "k", "owner");
    let svc = 65534;
    let code = |p: &Path| TrustPolicy::load(p, svc).unwrap_err().code();
    let (dir, p) = policy_file(&owner);
    let loaded = TrustPolicy::load(&p, svc).unwrap();
    let signed = sign(&owner, &authorization("owner", 1_000, 2_000)).unwrap();
    assert!(verify(&loaded, &signed, 1_500).is_ok());
    // Stricter is fine, and so is a root service.
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(TrustPolicy::load(&p, 0).is_ok());
    // Group-writable, other-writable, executable.
    for mode in [0o664, 0o646, 0o755, 0o4644] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        assert_eq!(code(&p), APPLY_TRUST_POLICY_UNSAFE, "{mode:o}");
    }
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    // Owned by the service user (or anyone but root).
    rustix::fs::chown(&p, Some(rustix::process::Uid::from_raw(svc)), None).unwrap();
    assert_eq!(code(&p), APPLY_TRUST_POLICY_UNSAFE);
    rustix::fs::chown(&p, Some(rustix::process::Uid::from_raw(0)), None).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(TrustPolicy::load(&p, svc).is_ok());
    // A symbolic link to a good policy.
    let l = dir.path().join("link.json");
    symlink(&p, &l).unwrap();
    assert_eq!(code(&l), APPLY_TRUST_POLICY_UNSAFE);
    // A directory.
    let d = dir.path().join("sub");
    std::fs::create_dir(&d).unwrap();
    assert_eq!(code(&d), APPLY_TRUST_POLICY_UNSAFE);
    // Missing.
    assert_eq!(code(&dir.path().join("missing")), APPLY_FILE_IO);
    // The parent writable by others, or owned by another user.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(code(&p), APPLY_TRUST_POLICY_UNSAFE);
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    assert_eq!(code(&p), APPLY_TRUST_POLICY_UNSAFE);
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    rustix::fs::chown(dir.path(), Some(rustix::process::Uid::from_raw(svc)), None).unwrap();
    assert_eq!(code(&p), APPLY_TRUST_POLICY_UNSAFE);
    rustix::fs::chown(dir.path(), Some(rustix::process::Uid::from_raw(0)), None).unwrap();
    assert!(TrustPolicy::load(&p, svc).is_ok());
    // Too large, and not a valid policy.
    std::fs::write(
        &p,
        vec![b' '; glove_types::apply::MAX_TRUST_POLICY_BYTES + 1],
    )
    .unwrap();
    assert_eq!(code(&p), APPLY_TRUST_POLICY_TOO_LARGE);
    std::fs::write(&p, b"{\"schema\":\"glove.apply-trust-v1\",\"keys\":[]}").unwrap();
    assert_eq!(code(&p), APPLY_TRUST_POLICY_INVALID);
}

/// The signature vector in `docs/digests.md`: the example authorization
/// signed with the Ed25519 seed of 32 bytes 0x01 (Ed25519 is
/// deterministic, so the signature is fixed).
#[test]
fn docs_signature_vector() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let example = std::fs::read(root.join("docs/examples/apply-authorization.json")).unwrap();
    let a = ApplyAuthorization::decode(&example).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("key");
    std::fs::write(
        &p,
        format!(
            "{{\"id\":\"owner\",\"schema\":\"glove.apply-key-v1\",\"secret_key\":\"{}\"}}",
            "01".repeat(32)
        ),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    let key = load_signing_key(&p).unwrap();
    let signed = sign(&key, &a).unwrap();
    let doc = std::fs::read_to_string(root.join("docs/digests.md")).unwrap();
    for want in [
        key.public_key_hex(),
        glove_types::digest::to_hex(signed.signature()),
        a.digest().to_hex(),
    ] {
        assert!(doc.contains(&want), "docs/digests.md lacks {want}");
    }
    assert!(verify(&policy_of(&[&key]), &signed, 1_767_225_600_000).is_ok());
}
