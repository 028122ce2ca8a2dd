//! The exposure methods' parameters (`exposure_create`,
//! `exposure_revoke`) decode strictly or are refused, and choosing modes
//! and runtimes from any decoded request never panics and returns only
//! allowed entries.
#![no_main]

use glove_control::exposures::{CreateParams, RevokeParams};
use glove_types::exposure::ExposureMode;
use glove_types::ids::RuntimeTemplateId;
use glove_types::policy::{Access, Materialization};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(v) = glove_types::canon::parse_strict(data, 64 * 1024) else {
        return;
    };
    let _ = serde_json::from_value::<RevokeParams>(v.clone());
    let Ok(p) = serde_json::from_value::<CreateParams>(v) else {
        return;
    };
    let allowed = [ExposureMode::new(Access::ReadOnly, Materialization::Copy, 1)];
    if let Ok(m) = p.modes(&allowed) {
        assert!(m.iter().all(|x| allowed.contains(x)));
    }
    let t = [RuntimeTemplateId::new("codex-safe").expect("id")];
    if let Ok(r) = p.runtimes(&t) {
        assert!(r.iter().all(|x| t.contains(x)));
    }
});
