//! Plan decoding and admission against the example policy never panic.
#![no_main]

use glove_types::plan::{admit, DecodedPlan};
use glove_types::policy::ValidatedPolicy;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

static POLICY: OnceLock<Option<ValidatedPolicy>> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let policy = POLICY.get_or_init(|| {
        ValidatedPolicy::from_json(include_bytes!("../../docs/examples/policy.json")).ok()
    });
    if let Ok(plan) = DecodedPlan::decode(data) {
        assert_eq!(plan.canonical_bytes(), data);
        if let Some(p) = policy {
            let _ = admit(plan, None, p, 1_796_000_001_000);
        }
    }
});
