//! The integration tests of glove-journal, in one binary.
//!
//! * `anchor_files` — the anchor-file decoder's properties, the anchored
//!   session store, compaction's crash windows, a failed anchor write;
//! * `basics` — create/open/append, placement checks, locking, anchors,
//!   group commit, classification of crafted corruptions;
//! * `sessions` and `receipts` — the two stores' behaviour;
//! * `apply_receipts` — apply receipts in the receipt journal beside
//!   session receipts (one chain, offline verification, the receipt log);
//! * `exhaustive` — every truncation and every bit flip of small journals
//!   of each kind;
//! * `compaction` — session-store compaction: 100,000 sessions in bounded
//!   disk, live sessions byte for byte, carried nonces, admission room,
//!   the snapshot decoder's properties;
//! * `compaction_crash` — a child process killed with SIGKILL at every
//!   step of a compaction, and at random moments of a compaction loop;
//! * `compaction_model` — proptest-state-machine model of the anchored
//!   store with compaction and reopen steps;
//! * `crash` — a child process killed with SIGKILL while appending;
//! * `receipt_compaction_crash` — a child killed with SIGKILL around and
//!   inside receipt compactions;
//! * `model` — proptest-state-machine models of both stores with
//!   reopen and crash steps;
//! * `random_bytes` — replay of arbitrary bytes never panics.

mod anchor_files;
mod apply_receipts;
mod basics;
mod common;
mod compaction;
mod compaction_crash;
mod compaction_model;
mod crash;
mod exhaustive;
mod model;
mod random_bytes;
mod receipt_compaction_crash;
mod receipts;
mod refinement_receipts;
mod sessions;
