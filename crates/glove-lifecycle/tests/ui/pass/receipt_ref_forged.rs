// Twin of `receipt_ref_forged.rs`: the reference the receipt log reports.
use glove_lifecycle::{ReceiptLog, Subject, TerminalReceiptRef};
use glove_types::ids::SessionId;

fn reference<R: ReceiptLog>(receipts: &R, id: &SessionId) {
    let _ = TerminalReceiptRef::durable(receipts, Subject::Session(id));
}

fn main() {
    let _ = reference::<glove_lifecycle::memory::MemoryReceipts>;
}
