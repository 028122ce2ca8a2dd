//! Egress targets as a client or a policy names them: `host:port` and bare
//! hosts never panic, and whatever parses is classified and decided
//! without panicking.
#![no_main]

use glove_types::egress::{classify, decide, Endpoint, Host};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(e) = Endpoint::parse(s) {
        if let Host::Ip(ip) = e.host {
            let _ = classify(ip);
        }
        let _ = decide(std::slice::from_ref(&e), false, &e.host, e.port, &[]);
    }
    let _ = Host::parse(s);
});
