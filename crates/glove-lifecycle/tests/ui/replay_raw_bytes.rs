// Rule 1: replay reads a store's records through the `RecordSource` port,
// never loose bytes handed in by anyone (twin: `pass/replay_raw_bytes.rs`).
use glove_lifecycle::replay_session;
use glove_types::ids::SessionId;

fn replay(bytes: Vec<Vec<u8>>, id: &SessionId) {
    let _ = replay_session(&bytes, id);
}

fn main() {}
