// Twin of `single_use_clone.rs`: one instance, shared by `&mut`.
use glove_lifecycle::apply::SingleUseRegistry;
use glove_lifecycle::UsedNonces;

fn use_both(_nonces: &mut UsedNonces, _grants: &mut SingleUseRegistry) {}

fn main() {
    let mut nonces = UsedNonces::new(8);
    let mut grants = SingleUseRegistry::new(8);
    use_both(&mut nonces, &mut grants);
    use_both(&mut nonces, &mut grants);
}
