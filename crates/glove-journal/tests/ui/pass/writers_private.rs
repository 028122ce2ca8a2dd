// Twin of `writers_private.rs`: the session is created and moved by the
// lifecycle, through the store's adapter.
use glove_journal::lifecycle::StoreLog;
use glove_journal::SessionStore;
use glove_lifecycle::{with_brand, PlanDigests, Session};
use glove_types::ids::{IdempotencyKey, SessionId};

fn through_the_lifecycle(
    store: &mut SessionStore,
    id: &SessionId,
    key: IdempotencyKey,
    plan: Vec<u8>,
    digests: PlanDigests,
) {
    let mut log = StoreLog::new(store);
    log.stage_plan(id, key, plan);
    with_brand(|brand| {
        if let Ok(created) = Session::log_create(brand, id, digests, &mut log).and_then(Session::create) {
            if let Ok(p) = created.log_prepare(&mut log) {
                let _ = created.prepare(p);
            }
        }
    });
}

fn main() {
    let _ = through_the_lifecycle;
}
