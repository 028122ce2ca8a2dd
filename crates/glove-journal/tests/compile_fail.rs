//! Compile-fail proofs for the session store's writers: each file in
//! `tests/ui/` must fail to compile with the error in its `.stderr`, and
//! its twin in `tests/ui/pass/` must compile. The `.stderr` files are exact
//! compiler output for the pinned toolchain (`rust-toolchain.toml`);
//! regenerate with `TRYBUILD=overwrite` and read the diff.
//!
//! This suite builds with the `test-support` feature (a dev-dependency),
//! which only adds the opt-in `glove_journal::testing` traits: the inherent
//! writers stay crate-private in every build, which is what the cases show.

#[test]
fn store_writers_are_not_public() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
