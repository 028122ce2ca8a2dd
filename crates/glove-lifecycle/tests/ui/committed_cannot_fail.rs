// A committed apply transaction cannot be failed: the change may be in
// place, so only `applied` (or `ambiguous`) follows
// (twin: `pass/committed_cannot_fail.rs`).
use glove_lifecycle::apply::{Committed, Txn};
use glove_lifecycle::{ReceiptLog, TerminalReceiptRef, TransitionLog};
use glove_types::codes::lifecycle::APPLY_AMBIGUOUS;

fn give_up<R: ReceiptLog, L: TransitionLog>(
    t: Txn<'_, Committed>,
    receipt: TerminalReceiptRef,
    r: &R,
    log: &mut L,
) {
    let _ = t.log_fail(APPLY_AMBIGUOUS, receipt, r, log);
}

fn main() {}
