// A log cannot make up an acknowledgement: `AppendReceipt` comes only from
// `PendingRecord::acknowledge`.
use glove_lifecycle::AppendReceipt;

fn forge() -> AppendReceipt {
    AppendReceipt {
        subject: unimplemented!(),
        seq: 0,
        digest: unimplemented!(),
    }
}

fn main() {}
