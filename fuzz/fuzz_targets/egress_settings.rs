//! Bytes as an egress policy file: never panics; what is accepted keeps
//! every cross-reference (mappings, limits and brokered endpoints are
//! endpoints of the policy; no mapping takes the proxy's port).
#![no_main]

use glove_types::egress::settings::{EgressSettings, PROXY_PORT};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = EgressSettings::from_json(data) {
        for m in s.port_mappings() {
            assert!(s.endpoints().contains(&m.endpoint));
            assert!(m.listen_port >= 1024 && m.listen_port != PROXY_PORT);
        }
        for l in s.limits() {
            assert!(s.endpoints().contains(&l.endpoint));
        }
        for b in s.brokered() {
            assert!(b.endpoints.iter().all(|e| s.endpoints().contains(e)));
        }
    }
});
