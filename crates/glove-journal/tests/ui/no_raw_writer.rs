// Issue 27: neither guarded store hands out its journal's raw writer. A
// session record is appended only through the lifecycle, a receipt only
// through the MAC-chained receipt writer; `journal()` is a read-only view
// (twin: `pass/no_raw_writer.rs`).
use glove_journal::{ReceiptJournal, SessionStore};

fn forge(store: &SessionStore, receipts: &ReceiptJournal) {
    let _ = store.journal().append(1, br#"{"made":"up"}"#);
    let _ = receipts.journal().queue(2, br#"{"made":"up"}"#);
}

fn main() {}
