// Twin of `evidence_before_run.rs`: running and stopping sessions carry the
// identity and the binding, with no record read.
use glove_lifecycle::{ParkedSession, Running, Stopping};

fn evidence(r: &ParkedSession<Running>, s: &ParkedSession<Stopping>) {
    let _ = (r.process_identity(), r.launch_binding());
    let _ = (s.process_identity(), s.launch_binding());
}

fn main() {
    let _ = evidence;
}
