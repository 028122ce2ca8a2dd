// An ambiguous apply transaction is never terminalized automatically: it
// has no `log_fail` (nor any other transition).
use glove_lifecycle::apply::{Ambiguous, Txn};
use glove_lifecycle::{ReceiptLog, TerminalReceiptRef, TransitionLog};
use glove_types::codes::lifecycle::APPLY_AMBIGUOUS;

fn any<T>() -> T {
    unimplemented!()
}

fn give_up<R: ReceiptLog, L: TransitionLog>(t: Txn<'_, Ambiguous>, r: &R, log: &mut L) {
    let _ = t.log_fail(APPLY_AMBIGUOUS, any::<TerminalReceiptRef>(), r, log);
}

fn main() {}
