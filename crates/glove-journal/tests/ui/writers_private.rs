// Rule 3: the session store's writers are not public. A session transition
// is appended only through the lifecycle (`StoreLog`, the lifecycle's
// `TransitionLog`), never written with arbitrary evidence
// (twin: `pass/writers_private.rs`).
use glove_journal::lifecycle::StoreLog;
use glove_journal::session::NewSession;
use glove_journal::SessionStore;
use glove_types::ids::SessionId;
use glove_types::stage::SessionStage;

fn forge(store: &mut SessionStore, id: &SessionId, new: NewSession<'_>) {
    let _ = store.create_session(new);
    let _ = store.transition(id, SessionStage::Running, br#"{"made":"up"}"#);
    let mut log = StoreLog::new(store);
    let _ = log.store_mut();
}

fn main() {}
