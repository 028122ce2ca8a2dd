// Twin of `any_session_not_exhaustive.rs`: all seven stages named.
use glove_lifecycle::AnySession;

fn live(any: &AnySession) -> bool {
    match any {
        AnySession::Created(_)
        | AnySession::Preparing(_)
        | AnySession::Starting(_)
        | AnySession::Running(_)
        | AnySession::Stopping(_) => true,
        AnySession::Exited(_) | AnySession::Failed(_) => false,
    }
}

fn main() {
    let _ = live;
}
