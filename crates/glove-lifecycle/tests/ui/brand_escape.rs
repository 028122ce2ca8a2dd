// Nothing branded leaves its scope: neither the branded session nor a proof
// it minted can be returned from the closure that introduced the brand (so
// a proof cannot be carried over to a session branded later). To leave,
// a session parks (`Session::park`, `AnySession::from`).
use glove_lifecycle::{Created, ParkedSession, TransitionLog};

fn keep_session(s: ParkedSession<Created>) {
    let _branded = s.enter(|s| s);
}

fn keep_proof<L: TransitionLog>(s: ParkedSession<Created>, log: &mut L) {
    let _proof = s.enter(|s| s.log_prepare(log));
}

fn main() {}
