// Rule 2: a terminal receipt reference is handed out only by the receipt
// log, after the receipt is durable; it has no constructor from raw values
// (twin: `pass/receipt_ref_forged.rs`).
use glove_lifecycle::TerminalReceiptRef;
use glove_types::Sha256Digest;

fn main() {
    let _ = TerminalReceiptRef::new(1, Sha256Digest::of(b"made up"));
}
