// A proof cannot be built outside the crate: its fields are private and it
// has no public constructor.
use glove_lifecycle::{Durable, Preparing};

fn forge<'id>() -> Durable<'id, Preparing> {
    Durable {
        brand: std::marker::PhantomData,
        subject: unimplemented!(),
        seq: 1,
        prev: None,
        digest: unimplemented!(),
        entered: unimplemented!(),
    }
}

fn main() {}
