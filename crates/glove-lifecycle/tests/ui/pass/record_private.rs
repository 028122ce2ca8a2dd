// Twin of `record_private.rs`: a record comes into being only through a
// typed transition, which encodes it inside the lifecycle.
use glove_lifecycle::{with_brand, PlanDigests, Session, TransitionLog};
use glove_types::ids::SessionId;

fn write<L: TransitionLog>(id: &SessionId, digests: PlanDigests, log: &mut L) {
    with_brand(|brand| {
        let _ = Session::log_create(brand, id, digests, log).and_then(Session::create);
    });
}

fn main() {
    let _ = write::<glove_lifecycle::memory::MemoryLog>;
}
