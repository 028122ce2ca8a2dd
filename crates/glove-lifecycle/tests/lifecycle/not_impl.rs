//! Compile-time proof that proofs, brands, stages and sessions are not `Clone`,
//! `Copy`, `Default` or `Deserialize`.
//!
//! The trick: a trait with a blanket impl for every type, and a second
//! blanket impl for types that have the forbidden trait. Naming the method
//! through `<T as AmbiguousIf<_>>` compiles only when exactly one impl
//! applies, that is, only when `T` lacks the trait. If someone derives
//! `Clone` on `Durable`, this file stops compiling. (The trybuild cases in
//! `tests/ui/` show the positive side: those uses fail to compile.)

#![allow(dead_code)]

use glove_lifecycle::apply::{self, Txn};
use glove_lifecycle::*;

macro_rules! assert_not_impl {
    ($ty:ty: $($bound:path),+) => {
        const _: fn() = || {
            trait AmbiguousIf<A> {
                fn check() {}
            }
            impl<T: ?Sized> AmbiguousIf<()> for T {}
            $(
                {
                    struct Invalid;
                    impl<T: ?Sized + $bound> AmbiguousIf<Invalid> for T {}
                }
            )+
            let _ = <$ty as AmbiguousIf<_>>::check;
        };
    };
}

trait Owned: serde::de::DeserializeOwned {}
impl<T: serde::de::DeserializeOwned> Owned for T {}

assert_not_impl!(Durable<'static, Preparing>: Clone, Copy, Default, Owned);
assert_not_impl!(Durable<'static, Failed>: Clone, Copy, Default, Owned);
assert_not_impl!(Durable<'static, apply::Applied>: Clone, Copy, Default, Owned);
assert_not_impl!(VerifiedStart: Clone, Copy, Default, Owned);
assert_not_impl!(AppendReceipt: Clone, Copy, Default, Owned);
assert_not_impl!(PendingRecord<'static>: Clone, Copy, Default, Owned);
assert_not_impl!(Session<'static, Created>: Clone, Copy, Default, Owned);
assert_not_impl!(Session<'static, Running>: Clone, Copy, Default, Owned);
assert_not_impl!(Session<'static, Exited>: Clone, Copy, Default, Owned);
assert_not_impl!(ParkedSession<Created>: Clone, Copy, Default, Owned);
assert_not_impl!(ParkedSession<Failed>: Clone, Copy, Default, Owned);
assert_not_impl!(Brand<'static>: Clone, Copy, Default, Owned);
assert_not_impl!(AnySession: Clone, Copy, Default, Owned);
assert_not_impl!(Created: Clone, Copy, Default, Owned);
assert_not_impl!(Preparing: Clone, Copy, Default, Owned);
assert_not_impl!(Starting: Clone, Copy, Default, Owned);
assert_not_impl!(Running: Clone, Copy, Default, Owned);
assert_not_impl!(Stopping: Clone, Copy, Default, Owned);
assert_not_impl!(Exited: Clone, Copy, Default, Owned);
assert_not_impl!(Failed: Clone, Copy, Default, Owned);
assert_not_impl!(Txn<'static, apply::Reserved>: Clone, Copy, Default, Owned);
assert_not_impl!(Txn<'static, apply::Ambiguous>: Clone, Copy, Default, Owned);
assert_not_impl!(apply::ParkedTxn<apply::Committed>: Clone, Copy, Default, Owned);
assert_not_impl!(apply::Reserved: Clone, Copy, Default, Owned);
assert_not_impl!(apply::Prepared: Clone, Copy, Default, Owned);
assert_not_impl!(apply::Committed: Clone, Copy, Default, Owned);
assert_not_impl!(apply::Applied: Clone, Copy, Default, Owned);
assert_not_impl!(apply::Failed: Clone, Copy, Default, Owned);
assert_not_impl!(apply::Ambiguous: Clone, Copy, Default, Owned);
assert_not_impl!(ServiceKey: Clone, Copy, Default, Owned);

#[test]
fn negative_trait_assertions_compiled() {
    // The assertions above are checked by the compiler; reaching this test
    // means they held.
}
