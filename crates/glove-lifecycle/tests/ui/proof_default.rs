// A proof has no `Default`: it exists only after a durable append.
use glove_lifecycle::{Durable, Preparing};

fn make<'id>() -> Durable<'id, Preparing> {
    Default::default()
}

fn main() {}
