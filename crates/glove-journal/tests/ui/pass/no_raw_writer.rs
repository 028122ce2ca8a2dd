// Twin of `no_raw_writer.rs`: what the view does give, the size, count,
// anchor and identity of each journal.
use glove_journal::{ReceiptJournal, SessionStore};

fn look(store: &SessionStore, receipts: &ReceiptJournal) -> u64 {
    let s = store.journal();
    let r = receipts.journal();
    let _ = (s.anchor(), r.journal_id(), s.is_poisoned());
    s.len_bytes() + r.record_count()
}

fn main() {
    let _ = look;
}
