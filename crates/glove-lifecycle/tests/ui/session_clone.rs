// A session is not `Clone`: one value stands for its current stage.
use glove_lifecycle::{Running, Session};

fn fork(s: Session<Running>) -> (Session<Running>, Session<Running>) {
    (s.clone(), s)
}

fn main() {}
