// Twin of `wrong_proof_type.rs`: the prepare proof moves to preparing.
use glove_lifecycle::{Created, Durable, Preparing, Session};

fn prepare<'id>(s: Session<'id, Created>, proof: Durable<'id, Preparing>) {
    let _ = s.prepare(proof);
}

fn main() {
    let _ = prepare;
}
