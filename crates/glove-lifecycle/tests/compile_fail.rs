//! Compile-fail proofs: each file in `tests/ui/` must fail to compile, with
//! the error recorded in its `.stderr` file. Regenerate with
//! `TRYBUILD=overwrite` and read each diff: the error must be the intended one.
//!
//! One class of misuse cannot be a compile error: spending a proof of
//! session A on session B (session identities are runtime values). That is
//! refused at runtime with `lifecycle_proof_subject_mismatch`; see
//! `tests/lifecycle/sessions.rs`.

#[test]
fn illegal_uses_do_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
