// Twin of `committed_cannot_fail.rs`: a prepared transaction can fail.
use glove_lifecycle::apply::{Prepared, Txn};
use glove_lifecycle::{ReceiptLog, TerminalReceiptRef, TransitionLog};
use glove_types::codes::lifecycle::APPLY_AMBIGUOUS;

fn give_up<R: ReceiptLog, L: TransitionLog>(
    t: Txn<'_, Prepared>,
    receipt: TerminalReceiptRef,
    r: &R,
    log: &mut L,
) {
    let _ = t.log_fail(APPLY_AMBIGUOUS, receipt, r, log);
}

fn main() {
    let _ = give_up::<glove_lifecycle::memory::MemoryReceipts, glove_lifecycle::memory::MemoryLog>;
}
