// A proof is not `Clone`: one record, one transition.
use glove_lifecycle::{Durable, Preparing};

fn copy<'id>(p: Durable<'id, Preparing>) -> (Durable<'id, Preparing>, Durable<'id, Preparing>) {
    (p.clone(), p)
}

fn main() {}
