// A proof is not `Clone`: one record, one transition.
use glove_lifecycle::{Durable, Preparing};

fn copy(p: Durable<Preparing>) -> (Durable<Preparing>, Durable<Preparing>) {
    (p.clone(), p)
}

fn main() {}
