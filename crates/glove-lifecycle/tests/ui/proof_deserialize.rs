// Neither proofs nor sessions (branded or parked) can be deserialized: a
// proof read from bytes would prove nothing, and a session comes back only
// through replay.
use glove_lifecycle::{Created, Durable, ParkedSession, Preparing, Session};

fn needs<T: serde::de::DeserializeOwned>() {}

fn main() {
    needs::<Durable<'static, Preparing>>();
    needs::<Session<'static, Created>>();
    needs::<ParkedSession<Created>>();
}
