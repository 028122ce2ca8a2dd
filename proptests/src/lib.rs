//! Cross-crate property tests live in `tests/`; this library only holds
//! shared generators.
#![forbid(unsafe_code)]
