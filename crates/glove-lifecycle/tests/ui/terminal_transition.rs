// Nothing leaves a terminal stage: `Session<Exited>` has no `log_fail`
// because `Exited` is not `Live`.
use glove_lifecycle::{Exited, ReceiptLog, Session, TerminalReceiptRef, TransitionLog};
use glove_types::codes::lifecycle::LIFECYCLE_WRONG_STAGE;

fn any<T>() -> T {
    unimplemented!()
}

fn fail_after_exit<R: ReceiptLog, L: TransitionLog>(s: Session<'_, Exited>, r: &R, log: &mut L) {
    let _ = s.log_fail(LIFECYCLE_WRONG_STAGE, any::<TerminalReceiptRef>(), r, log);
}

fn main() {}
