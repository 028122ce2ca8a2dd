//! The control service's wire path without a socket: frames are cut from
//! the input with the server's decoder, the first is tried as a handshake
//! answer, every one is parsed as a JSON-RPC request and dispatched to a
//! service holding the example policy. Nothing may panic; every answer must
//! be a frame-sized canonical JSON-RPC response.
#![no_main]

use glove_bin::control::auth::{AuthenticateParams, BootstrapSecret, ReplayGuard, ServerHandshake};
use glove_bin::control::capabilities::Components;
use glove_bin::control::frame;
use glove_bin::control::protocol::{self, parse_request};
use glove_bin::control::service::{Clock, Parts, Service};
use glove_types::policy::ValidatedPolicy;
use libfuzzer_sys::fuzz_target;
use std::sync::{Mutex, OnceLock};

const MAX_FRAME: u32 = 64 * 1024;

static SERVICE: OnceLock<Service> = OnceLock::new();

fn service() -> &'static Service {
    SERVICE.get_or_init(|| {
        Service::new(Parts {
            policy: ValidatedPolicy::from_json(include_bytes!("../../docs/examples/policy.json")).ok(),
            store: None,
            receipts: None,
            components: Components::default(),
            clock: Clock::Fixed(1_796_000_010_000),
            max_frame_bytes: MAX_FRAME,
        })
    })
}

fn check_response(v: &serde_json::Value) {
    let bytes = protocol::to_bytes(v);
    assert!(glove_types::canon::parse_canonical(&bytes, usize::MAX).is_ok());
    assert_eq!(v["jsonrpc"], "2.0");
}

fuzz_target!(|data: &[u8]| {
    let secret = BootstrapSecret::from_bytes([0x11; 32]);
    let replay = Mutex::new(ReplayGuard::new(4));
    let mut rest = data;
    let mut first = true;
    // The proof dispatch needs: a genuine handshake with known values.
    let hs = ServerHandshake::with_nonce([0x22; 32]);
    let cn = [0x33u8; 32];
    let params = AuthenticateParams {
        client_nonce: glove_types::digest::to_hex(&cn),
        client_mac: glove_types::digest::to_hex(&secret.client_mac(&[0x22; 32], &cn)),
        client_id: None,
    };
    let Ok((_, auth)) = hs.verify(&secret, &params, &replay) else {
        panic!("a genuine handshake must verify");
    };
    loop {
        let (payload, used) = match frame::decode(rest, MAX_FRAME) {
            Ok(Some(x)) => x,
            Ok(None) => break,
            Err(e) => {
                check_response(&protocol::RpcError::from_rejection(&e).to_response(None));
                break;
            }
        };
        if first {
            first = false;
            if let Ok(req) = parse_request(payload, MAX_FRAME as usize) {
                if let Ok(p) = glove_types::canon::from_value::<AuthenticateParams>(
                    serde_json::Value::Object(req.params.clone()),
                ) {
                    let hs = ServerHandshake::with_nonce([0x44; 32]);
                    // Forged input must never verify.
                    assert!(hs.verify(&secret, &p, &replay).is_err());
                }
            }
        }
        match parse_request(payload, MAX_FRAME as usize) {
            Err(b) => check_response(&b.to_response()),
            Ok(req) => {
                let id = req.id.clone().unwrap_or(serde_json::Value::Null);
                match service().dispatch(auth.caller(), &req) {
                    Ok(result) => check_response(&protocol::result_response(&id, result)),
                    Err(e) => check_response(&e.to_response(Some(&id))),
                }
            }
        }
        rest = &rest[used..];
    }
});
