//! Cross-crate property tests live in `tests/`. This library holds nothing
//! of its own today: the lifecycle's ports over the session store and the
//! receipt journal that `tests/lifecycle_store.rs` checks against a model
//! are `glove_journal::lifecycle::{StoreLog, StoreReceipts}`, the same
//! adapter `gloved` uses.
#![forbid(unsafe_code)]
