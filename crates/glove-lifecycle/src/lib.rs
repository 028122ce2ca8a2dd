//! Session and apply-transaction typestates.
//!
//! Not yet implemented: see issue 4. The crate will depend on `glove-types`
//! only and talk to storage through small port traits.
#![forbid(unsafe_code)]
