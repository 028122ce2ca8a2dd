//! Bytes as a signed apply authorization file and as an apply trust policy
//! never panic; whatever decodes re-encodes to the input (a signed
//! authorization is canonical) or to an equal policy.
#![no_main]

use glove_types::apply::{ApplyAuthorization, ApplyTrustPolicy, SignedApplyAuthorization};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = SignedApplyAuthorization::decode(data) {
        assert_eq!(s.canonical_bytes(), data);
        let a = s.authorization();
        let again = ApplyAuthorization::decode(a.canonical_bytes()).expect("inner is canonical");
        assert_eq!(&again, a);
        let rebuilt = SignedApplyAuthorization::new(a.clone(), *s.signature()).expect("encodes");
        assert_eq!(rebuilt.canonical_bytes(), data);
        assert!(a.issued_at_ms() < a.expires_at_ms());
    }
    let _ = SignedApplyAuthorization::decode_file(data);
    if let Ok(p) = ApplyTrustPolicy::decode(data) {
        let bytes = p.encode().expect("encodes");
        assert_eq!(ApplyTrustPolicy::decode(&bytes).expect("re-decodes"), p);
    }
});
