//! Compile-fail proofs: each file in `tests/ui/` must fail to compile, with
//! the error recorded in its `.stderr` file. Regenerate with
//! `TRYBUILD=overwrite` and read each diff: the error must be the intended one.
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
}
