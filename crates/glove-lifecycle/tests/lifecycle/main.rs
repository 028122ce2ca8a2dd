//! Integration tests of glove-lifecycle (one binary; one module per area).

mod apply;
mod graph;
mod model;
mod not_impl;
mod recovery;
mod sessions;
mod start_auth;
mod support;
