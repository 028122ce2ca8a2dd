// A durable proof is spent by the transition that takes it; it cannot be
// used again.
use glove_lifecycle::{Created, Durable, Preparing, Session};

fn any<T>() -> T {
    unimplemented!()
}

fn twice(a: Session<Created>, b: Session<Created>) {
    let proof: Durable<Preparing> = any();
    let _ = a.prepare(proof);
    let _ = b.prepare(proof);
}

fn main() {}
