// Rule 2: a launch binding is computed by the lifecycle from the canonical
// launch document; it cannot be made from a raw digest
// (twin: `pass/binding_from_digest.rs`).
use glove_lifecycle::LaunchBinding;
use glove_types::Sha256Digest;

fn main() {
    let _ = LaunchBinding::from_digest(Sha256Digest::of(b"made up"));
}
