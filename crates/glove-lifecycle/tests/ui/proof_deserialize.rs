// Neither proofs nor sessions can be deserialized: a proof read from bytes
// would prove nothing, and a session comes back only through replay.
use glove_lifecycle::{Created, Durable, Preparing, Session};

fn needs<T: serde::de::DeserializeOwned>() {}

fn main() {
    needs::<Durable<Preparing>>();
    needs::<Session<Created>>();
}
