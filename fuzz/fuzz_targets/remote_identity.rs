//! Fuzz the remote executor's identity decoder
//! (`/etc/glove/remote-executor.identity`).
//!
//! Oracles: no panic; a refusal is `remote_identity_empty` (exactly for
//! empty input) or `remote_identity_malformed`; an accepted input is
//! exactly the canonical encoding of the identity decoded, optionally
//! followed by one newline.
#![no_main]

use glove_bin::remote_executor::identity::decode;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match decode(data) {
        Ok(identity) => {
            let canonical = identity.to_bytes();
            assert!(
                data == canonical.as_slice()
                    || data.strip_suffix(b"\n") == Some(canonical.as_slice())
            );
        }
        Err(e) => {
            let want = if data.is_empty() {
                "remote_identity_empty"
            } else {
                "remote_identity_malformed"
            };
            assert_eq!(e.code().as_str(), want);
        }
    }
});
