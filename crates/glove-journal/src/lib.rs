//! Durable storage for Glove: bounded append-only journals, the session store
//! and the HMAC-chained receipt journal.
//!
//! Not yet implemented: see issue 3.
#![forbid(unsafe_code)]
