//! Compile-fail proofs: each file in `tests/ui/` must fail to compile, with
//! the error recorded in its `.stderr` file, and each file in
//! `tests/ui/pass/` (a twin) must compile. Regenerate with
//! `TRYBUILD=overwrite` and read each diff: the error must be the intended one.
//! The `.stderr` files are exact compiler output, so the toolchain is pinned
//! (`rust-toolchain.toml`, the one CI runs); a toolchain bump regenerates
//! them in the same commit.
//!
//! Spending a proof of session A on session B is one of them
//! (`proof_other_session.rs`, and `proof_other_txn.rs` for apply
//! transactions): sessions and proofs carry a generative brand lifetime (see
//! `glove_lifecycle::brand`), so the two sessions' brands cannot unify. The
//! error is a lifetime error (E0521, "borrowed data escapes outside of
//! closure"), reported at both ends of the mix. `brand_escape.rs` and
//! `brand_reused.rs` show the two properties the brand rests on: nothing
//! branded leaves its scope, and one brand names one session. The runtime
//! check behind it (`lifecycle_proof_subject_mismatch`) is unit-tested in
//! `src/session.rs`.

#[test]
fn illegal_uses_do_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
    // Each case's twin: the same code with the forbidden line replaced by
    // the allowed way, which compiles, so each failure is for its stated
    // reason.
    t.pass("tests/ui/pass/*.rs");
}
