//! Brands: a compile-time name for one session (or one apply transaction)
//! inside one scope, so that a proof of one cannot be spent on another.
//!
//! A [`Brand<'id>`](Brand) is a zero-sized value whose lifetime `'id` is
//! *invariant* (the compiler can neither shorten nor lengthen it) and
//! *generative*: the only way to get one is [`with_brand`], which hands it
//! to a closure that must accept **every** lifetime (`for<'id>`). Two calls
//! of `with_brand`, nested or not, therefore give two lifetimes the compiler
//! must treat as unrelated, and a value typed with one never fits where the
//! other is expected.
//!
//! A brand is consumed when it names something: [`Session::log_create`]
//! (a new session), [`ParkedSession::brand`] (a session taken out of the
//! dynamic world), and the same two for apply transactions. A brand is not
//! `Clone` or `Copy`, so one brand names at most one session. Everything
//! that session's `log_*` methods mint, a [`Durable<'id, _>`](crate::Durable),
//! carries the same `'id`, and its transitions accept only proofs with that
//! `'id`: a proof of session A handed to session B does not compile.
//!
//! Nothing typed with `'id` can leave the closure (its return type is fixed
//! outside it, where `'id` cannot be named). To keep a session beyond the
//! scope, park it: [`Session::park`] (or `AnySession::from`) drops the brand
//! and keeps the data; [`ParkedSession::brand`] or [`ParkedSession::enter`]
//! takes it back into a new scope, with a new brand.
//!
//! This is the "generative lifetime" technique known from GhostCell, done
//! with a closure and no `unsafe`. The runtime check that a proof names the
//! session spending it (`lifecycle_proof_subject_mismatch`) stays, as
//! defence in depth.
//!
//! [`Session::log_create`]: crate::Session::log_create
//! [`Session::park`]: crate::Session::park
//! [`ParkedSession::brand`]: crate::ParkedSession::brand
//! [`ParkedSession::enter`]: crate::ParkedSession::enter

use core::fmt;
use core::marker::PhantomData;

/// Makes `'id` invariant: `fn(&'id ()) -> &'id ()` is contravariant in its
/// argument and covariant in its result, so `'id` can move neither way.
/// (Also `Send`, `Sync` and `Unpin`, unlike a raw pointer.)
pub(crate) type Invariant<'id> = PhantomData<fn(&'id ()) -> &'id ()>;

/// A unique compile-time name for one session or transaction in one scope.
///
/// Obtained only from [`with_brand`]; consumed by what it names. Not
/// `Clone`, `Copy`, `Default` or `Deserialize`.
pub struct Brand<'id> {
    _id: Invariant<'id>,
}

impl<'id> Brand<'id> {
    /// The brand carried forward by a value that consumed it earlier (a
    /// creation proof becoming the created session, a session moving to its
    /// next stage). Never call it to name a second value.
    pub(crate) fn carried(_from: Invariant<'id>) -> Self {
        Brand { _id: PhantomData }
    }

    /// The invariant marker of this brand, for proofs minted under it.
    pub(crate) fn marker(&self) -> Invariant<'id> {
        PhantomData
    }
}

impl fmt::Debug for Brand<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Brand")
    }
}

/// Runs `f` with a fresh [`Brand`], whose lifetime differs from every other
/// brand's as far as the compiler knows. `f`'s result cannot mention the
/// brand (nor any session or proof branded with it).
///
/// ```
/// use glove_lifecycle::with_brand;
/// let n = with_brand(|brand| {
///     // name one session with `brand` here …
///     drop(brand);
///     7
/// });
/// assert_eq!(n, 7);
/// ```
pub fn with_brand<R>(f: impl for<'id> FnOnce(Brand<'id>) -> R) -> R {
    f(Brand { _id: PhantomData })
}
