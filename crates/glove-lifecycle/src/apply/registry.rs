//! The single-use registry of apply grants, authorizations and manifests.

use super::{GrantId, Reservation};
use crate::error::LifecycleError;
use glove_types::Sha256Digest;
use std::collections::BTreeSet;

/// Every grant id, authorization digest and manifest digest ever reserved.
/// Each is single-use across all transactions; a reuse fails closed.
///
/// Rebuild it at startup from every reservation record in the apply journal
/// ([`SingleUseRegistry::insert_recovered`]); entries are never removed, not
/// even for failed or ambiguous transactions.
/// Not `Clone`: two copies would each accept the same value once.
#[derive(Debug)]
pub struct SingleUseRegistry {
    grants: BTreeSet<GrantId>,
    authorizations: BTreeSet<Sha256Digest>,
    manifests: BTreeSet<Sha256Digest>,
    capacity: usize,
}

impl SingleUseRegistry {
    /// An empty registry accepting at most `capacity` new reservations.
    pub fn new(capacity: usize) -> Self {
        Self {
            grants: BTreeSet::new(),
            authorizations: BTreeSet::new(),
            manifests: BTreeSet::new(),
            capacity,
        }
    }

    /// Number of reservations held.
    pub fn len(&self) -> usize {
        self.grants.len()
    }

    /// Whether nothing is reserved.
    pub fn is_empty(&self) -> bool {
        self.grants.is_empty()
    }

    /// Whether `grant` was reserved.
    pub fn contains_grant(&self, grant: &GrantId) -> bool {
        self.grants.contains(grant)
    }

    /// Checks that no value of `r` was used, then consumes all three at once
    /// (all or nothing).
    pub fn consume(&mut self, r: &Reservation) -> Result<(), LifecycleError> {
        self.check(r)?;
        if self.len() >= self.capacity {
            return Err(LifecycleError::RegistryFull {
                capacity: self.capacity,
            });
        }
        self.insert(r);
        Ok(())
    }

    /// Inserts a reservation found in durable history, ignoring the bound.
    /// A value reserved twice in history is refused: the journal is corrupt
    /// or was tampered with.
    pub fn insert_recovered(&mut self, r: &Reservation) -> Result<(), LifecycleError> {
        self.check(r)?;
        self.insert(r);
        Ok(())
    }

    fn check(&self, r: &Reservation) -> Result<(), LifecycleError> {
        if self.grants.contains(&r.grant_id) {
            return Err(LifecycleError::GrantReused);
        }
        if self.authorizations.contains(&r.authorization_digest) {
            return Err(LifecycleError::AuthorizationReused);
        }
        if self.manifests.contains(&r.manifest_digest) {
            return Err(LifecycleError::ManifestReused);
        }
        Ok(())
    }

    fn insert(&mut self, r: &Reservation) {
        self.grants.insert(r.grant_id.clone());
        self.authorizations.insert(r.authorization_digest);
        self.manifests.insert(r.manifest_digest);
    }
}
