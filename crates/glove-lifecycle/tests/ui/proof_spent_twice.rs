// A durable proof is spent by the transition that takes it; it cannot be
// used again, not even by the same session after a refusal.
use glove_lifecycle::{Created, Durable, Preparing, Session};

fn twice<'id>(a: Session<'id, Created>, proof: Durable<'id, Preparing>) {
    if let Err(refused) = a.prepare(proof) {
        let (a, _) = refused.into_parts();
        let _ = a.prepare(proof);
    }
}

fn main() {}
