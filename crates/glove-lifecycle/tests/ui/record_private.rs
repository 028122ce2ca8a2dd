// Rule 1: the session record and its encoder are private to the lifecycle,
// so no crate can write a record (say, a `running` one) by hand. The only
// writers are the typed transitions (twin: `pass/record_private.rs`).
// (The crate-root re-export exists only with the `test-support` feature,
// which this suite builds with; the module path is private in every build.)
use glove_lifecycle::record::SessionRecord;

fn main() {
    let _ = SessionRecord::decode(b"{}");
}
