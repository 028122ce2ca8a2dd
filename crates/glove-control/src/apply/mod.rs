//! Apply authorizations, end to end on the owner's side and the service's:
//!
//! * [`key`] — the owner's Ed25519 signing key: [`key::keygen`] writes a
//!   new one (mode 0600, `O_EXCL`, never over an existing file),
//!   [`key::load_signing_key`] reads one back as a protected file;
//! * [`authorization`] — [`authorization::sign`] and
//!   [`authorization::verify`], which yields a [`VerifiedAuthorization`]
//!   only when the key is trusted, the signature verifies
//!   (`verify_strict`) and the authorization is current;
//! * [`trust`] — [`TrustPolicy::load`]: the trust policy must be a
//!   root-owned regular file, mode 0644 or stricter, in a directory only
//!   root can write, so the service user cannot add a key.
//!
//! The schemas are `glove_types::apply`; the single-use reservation of the
//! grant id, authorization digest and manifest digest is the lifecycle's
//! (`Txn::log_reserve`) over `glove_journal::apply::ApplyJournal`.

pub mod authorization;
pub mod books;
pub mod crash;
pub mod exchange;
pub mod key;
pub mod recover;
pub mod run;
pub mod trust;

pub use authorization::{sign, verify, VerifiedAuthorization};
pub use key::{keygen, load_signing_key, OwnerKey};
pub use trust::TrustPolicy;

#[cfg(test)]
mod tests;
