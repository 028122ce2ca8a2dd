//! Cross-crate property tests live in `tests/`; this library holds what
//! they share:
//!
//! * [`lifecycle_store`] — the lifecycle's `TransitionLog` and `ReceiptLog`
//!   ports over `glove-journal`'s session store and receipt journal, with
//!   the record mapping documented (used by `tests/lifecycle_store.rs`; the
//!   same approach serves `glove-bin`).
#![forbid(unsafe_code)]

pub mod lifecycle_store;
