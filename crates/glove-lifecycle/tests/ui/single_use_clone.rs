// Rule 5: the single-use registries cannot be cloned into two instances
// (each copy would accept the same nonce or grant once)
// (twin: `pass/single_use_clone.rs`).
use glove_lifecycle::apply::SingleUseRegistry;
use glove_lifecycle::UsedNonces;

fn main() {
    let nonces = UsedNonces::new(8);
    let _second = nonces.clone();
    let grants = SingleUseRegistry::new(8);
    let _second = grants.clone();
}
