// Twin of `identity_forged.rs`: the identity of what the runtime observed.
use glove_lifecycle::{ObservedProcess, ProcessIdentity};

fn identity<O: ObservedProcess>(observed: &O) {
    let _ = ProcessIdentity::observed(observed);
}

fn main() {
    let _ = identity::<glove_lifecycle::memory::Observed>;
}
