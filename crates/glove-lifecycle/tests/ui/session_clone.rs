// A session is not `Clone`: one value stands for its current stage.
use glove_lifecycle::{Running, Session};

fn fork<'id>(s: Session<'id, Running>) -> (Session<'id, Running>, Session<'id, Running>) {
    (s.clone(), s)
}

fn main() {}
