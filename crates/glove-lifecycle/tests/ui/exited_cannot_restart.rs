// A terminal session cannot be moved back into an earlier stage either.
use glove_lifecycle::{Durable, Exited, Preparing, Session};

fn any<T>() -> T {
    unimplemented!()
}

fn again<'id>(s: Session<'id, Exited>) {
    let _ = s.prepare(any::<Durable<'id, Preparing>>());
}

fn main() {}
