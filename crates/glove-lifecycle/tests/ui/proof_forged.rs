// A proof cannot be built outside the crate: its fields are private and it
// has no public constructor.
use glove_lifecycle::{Durable, Preparing};

fn forge() -> Durable<Preparing> {
    Durable {
        subject: unimplemented!(),
        seq: 1,
        prev: None,
        digest: unimplemented!(),
        entered: unimplemented!(),
    }
}

fn main() {}
