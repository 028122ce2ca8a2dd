// Rule 6: the dynamic boundary is matched exhaustively: a match over
// `AnySession` that forgets a stage does not compile
// (twin: `pass/any_session_not_exhaustive.rs`).
use glove_lifecycle::AnySession;

fn live(any: &AnySession) -> bool {
    match any {
        AnySession::Created(_)
        | AnySession::Preparing(_)
        | AnySession::Starting(_)
        | AnySession::Running(_) => true,
        AnySession::Exited(_) | AnySession::Failed(_) => false,
    }
}

fn main() {}
