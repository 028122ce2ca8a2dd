// A verified start is produced by `StartAuthorization::verify` (MAC, window,
// nonce spent), never written by hand (twin: `pass/verified_start_forged.rs`).
use glove_lifecycle::{Nonce, PlanDigests, VerifiedStart};
use glove_types::ids::SessionId;
use glove_types::Sha256Digest;

fn forge(session_id: SessionId, digests: PlanDigests) -> VerifiedStart {
    VerifiedStart {
        session_id,
        digests,
        nonce: Nonce::from_bytes([0; 16]),
        expires_at_ms: u64::MAX,
        authorization: Sha256Digest::of(b"made up"),
    }
}

fn main() {}
