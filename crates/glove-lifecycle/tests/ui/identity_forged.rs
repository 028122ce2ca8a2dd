// Rule 2: a process identity comes only from an observed process (the
// `ObservedProcess` port), never from raw values
// (twin: `pass/identity_forged.rs`).
use glove_lifecycle::ProcessIdentity;

fn main() {
    let _ = ProcessIdentity::new("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", 42, 99, 7);
}
