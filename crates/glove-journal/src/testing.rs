//! The test door (feature `test-support`; never enable it in production):
//! the session store's raw writers, for tests that build or damage a store
//! by hand.
//!
//! Outside this crate [`SessionStore::create_session`] and
//! [`SessionStore::transition`] are not public, and neither is
//! `StoreLog::store_mut`: a session transition is appended only through the
//! lifecycle ([`crate::lifecycle::StoreLog`]). Importing [`StoreWriter`]
//! (and [`StoreLogWriter`]) gives a test the same calls back, by the same
//! names.

use crate::lifecycle::StoreLog;
use crate::session::{Creation, NewSession, Transitioned};
use crate::{JournalError, SessionStore};
use core::borrow::BorrowMut;
use glove_types::ids::SessionId;
use glove_types::stage::SessionStage;

/// The session store's raw writers, for tests.
pub trait StoreWriter {
    /// See `SessionStore::create_session`.
    fn create_session(&mut self, req: NewSession<'_>) -> Result<Creation, JournalError>;

    /// See `SessionStore::transition`: any canonical-JSON evidence, whether
    /// or not it is a lifecycle record.
    fn transition(
        &mut self,
        id: &SessionId,
        to: SessionStage,
        evidence: &[u8],
    ) -> Result<Transitioned, JournalError>;
}

impl StoreWriter for SessionStore {
    fn create_session(&mut self, req: NewSession<'_>) -> Result<Creation, JournalError> {
        SessionStore::create_session(self, req)
    }

    fn transition(
        &mut self,
        id: &SessionId,
        to: SessionStage,
        evidence: &[u8],
    ) -> Result<Transitioned, JournalError> {
        SessionStore::transition(self, id, to, evidence)
    }
}

/// The adapter's store, writable, for tests.
pub trait StoreLogWriter {
    /// The store under the adapter.
    fn store_mut(&mut self) -> &mut SessionStore;
}

impl<S: BorrowMut<SessionStore>> StoreLogWriter for StoreLog<S> {
    fn store_mut(&mut self) -> &mut SessionStore {
        StoreLog::store_mut(self)
    }
}

/// Creates a journal of any kind, a session store or a receipt journal
/// included, holding `records` (see `Journal::create_with`, which refuses
/// those two kinds): for tests and benches that plant records the stores
/// would never write.
pub fn create_raw<'a>(
    path: &std::path::Path,
    spec: &crate::JournalSpec,
    records: impl IntoIterator<Item = (u16, &'a [u8])>,
) -> Result<crate::Journal, JournalError> {
    crate::Journal::create_with_unguarded(path, spec, records)
}
