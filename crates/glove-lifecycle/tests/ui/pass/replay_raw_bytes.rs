// Twin of `replay_raw_bytes.rs`: replay from the store, as a `RecordSource`.
use glove_lifecycle::{replay_session, RecordSource};
use glove_types::ids::SessionId;

fn replay<S: RecordSource>(store: &S, id: &SessionId) {
    let _ = replay_session(store, id);
}

fn main() {
    let _ = replay::<glove_lifecycle::memory::MemoryLog>;
}
