//! Applying a frozen stage to its source, through the apply typestate
//! (`glove_lifecycle::apply::Txn`), each state durable before the next
//! step:
//!
//! 1. **check** (nothing consumed on a refusal): the authorization
//!    verifies under the trust policy and names this stage (session,
//!    target, baseline and final manifest digests); the stage carries
//!    nothing apply cannot; the source is the directory the stage was
//!    filled from and still holds the baseline (else
//!    `apply_baseline_stale`); the candidate plus 64 MiB fits;
//! 2. **reserve**: the locator written, a receipt slot reserved, then the
//!    grant id, authorization digest and manifest digest consumed in the
//!    apply journal (each usable once, ever);
//! 3. **prepare**: the stage copied beside the source (every file checked
//!    against the frozen manifest as it is read), synced recursively, and
//!    recorded;
//! 4. **commit**: `renameat2(RENAME_EXCHANGE)` swaps the whole entry, the
//!    parent is synced, and the exchange recorded;
//! 5. **applied**: the applied receipt appended to the receipt journal,
//!    then the applied record; then the old tree (now beside the source
//!    under the staging name) removed, idempotently.
//!
//! A failure before the exchange discards the candidate and ends in a
//! failed receipt; an exchange whose outcome is unknown is recorded as
//! ambiguous and left for the operator.

use super::books::{receipt_subject, Books, Locator, LOCATOR_SCHEMA};
use super::exchange::{self, Place};
use super::{crash, TrustPolicy};
use crate::stages::{self, StageDir};
use glove_journal::receipt::ReceiptJournal;
use glove_lifecycle::apply::{Failable, TransactionId, Txn};
use glove_lifecycle::{with_brand, BaselineCleanup, PortError, TerminalReceiptRef};
use glove_types::apply::SignedApplyAuthorization;
use glove_types::codes::apply::*;
use glove_types::{ErrorCode, Rejection};

/// How an apply ended once its transaction existed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Applied: the source holds the stage's tree; the receipt is durable.
    Applied {
        /// The transaction.
        transaction_id: String,
        /// The applied receipt's sequence number.
        receipt_seq: u64,
        /// Whether the old tree was removed (else the next apply or
        /// start-up recovery removes it).
        cleaned: bool,
    },
    /// Failed before the exchange: the source is as it was; the receipt
    /// is durable.
    Failed {
        /// The transaction.
        transaction_id: String,
        /// Why.
        error: Rejection,
        /// The failed receipt's sequence number.
        receipt_seq: u64,
    },
    /// The exchange's outcome is unknown: recorded as ambiguous, never
    /// retried or finalised automatically.
    Ambiguous {
        /// The transaction.
        transaction_id: String,
        /// Why.
        error: Rejection,
    },
}

impl Ended {
    /// How it ended, as the CLI's `--json` and gloved's `stage_apply` say
    /// it (no host path).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Ended::Applied {
                transaction_id,
                receipt_seq,
                cleaned,
            } => serde_json::json!({
                "outcome": "applied", "transaction_id": transaction_id,
                "receipt_seq": receipt_seq, "cleaned": cleaned,
            }),
            Ended::Failed {
                transaction_id,
                error,
                receipt_seq,
            } => serde_json::json!({
                "outcome": "failed", "transaction_id": transaction_id,
                "receipt_seq": receipt_seq, "code": error.code().as_str(),
                "message": error.message(),
            }),
            Ended::Ambiguous {
                transaction_id,
                error,
            } => serde_json::json!({
                "outcome": "ambiguous", "transaction_id": transaction_id,
                "code": error.code().as_str(), "message": error.message(),
            }),
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn life(e: &glove_lifecycle::LifecycleError) -> Rejection {
    Rejection::new(e.code(), e.to_string())
}

/// The receipt body of a transaction's end.
pub(super) fn receipt_body(
    l: &Locator,
    failed: Option<(ErrorCode, &str)>,
    recovered: bool,
) -> Result<Vec<u8>, Rejection> {
    use glove_types::receipt::{ApplyOutcome, ApplyReceiptV1, FailedIn};
    let digest = |s: &str| glove_types::Sha256Digest::parse(s);
    let outcome = match failed {
        None => ApplyOutcome::Applied,
        Some((code, state)) => ApplyOutcome::Failed {
            code: code.as_str().to_owned(),
            failed_in: if state == "prepared" {
                FailedIn::Prepared
            } else {
                FailedIn::Reserved
            },
        },
    };
    ApplyReceiptV1 {
        transaction_id: glove_types::ids::ApplyTransactionId::new(l.transaction_id.as_str())?,
        session_id: glove_types::ids::SessionId::new(l.session_id.as_str())?,
        target: glove_types::ids::ApplyTargetId::new(l.target.as_str())?,
        grant_id: glove_types::ids::ApplyGrantId::new(l.grant_id.as_str())?,
        authorization_digest: digest(&l.authorization_digest)?,
        baseline_digest: digest(&l.baseline_digest)?,
        manifest_digest: digest(&l.final_digest)?,
        outcome,
        recovered,
    }
    .encode()
}

/// Appends a transaction's terminal receipt (or finds the one a crash
/// left) and returns the durable reference.
pub(super) fn append_receipt(
    receipts: &mut ReceiptJournal,
    txn: &TransactionId,
    body: &[u8],
) -> Result<TerminalReceiptRef, Rejection> {
    glove_journal::lifecycle::StoreReceipts::new(&mut *receipts)
        .get_or_append_apply(txn, body)
        .map_err(|e| Rejection::new(e.code(), format!("the apply receipt: {e}")))
}

/// Removes the old tree beside the source (the baseline cleanup port): only
/// the source's own directory, by identity.
pub(super) struct Cleanup<'a> {
    pub(super) place: &'a Place,
    pub(super) staging: String,
    pub(super) baseline: (u64, u64),
}

impl BaselineCleanup for Cleanup<'_> {
    fn cleanup_baseline(&mut self, _txn: &TransactionId) -> Result<(), PortError> {
        exchange::remove_tree(self.place, &self.staging, self.baseline)
            .map_err(|_| PortError::new(glove_types::codes::lifecycle::APPLY_CLEANUP_FAILED))
    }
}

/// Ends a transaction that has not exchanged: the candidate removed (when
/// its identity is known: `candidate`), the failed receipt, the failed
/// record. A candidate that cannot be removed stays, and is reported in
/// the error's message.
#[allow(clippy::too_many_arguments)]
pub(super) fn fail<S: Failable>(
    t: Txn<'_, S>,
    books: &mut Books,
    receipts: &mut ReceiptJournal,
    place: Option<&Place>,
    candidate: Option<(u64, u64)>,
    l: &Locator,
    error: Rejection,
    recovered: bool,
) -> Result<Ended, Rejection> {
    let staging = exchange::staging_name(&l.transaction_id);
    let mut error = error;
    if let Some(p) = place {
        let removed = match candidate {
            Some(id) => exchange::remove_tree(p, &staging, id),
            None if !p.exists(&staging)? => Ok(()),
            None => Err(Rejection::new(
                APPLY_CLEANUP_REFUSED,
                "its identity was never recorded",
            )),
        };
        if let Err(e) = removed {
            error = Rejection::new(
                error.code(),
                format!(
                    "{} ({staging} was left beside the source: {})",
                    error.message(),
                    e.message()
                ),
            );
        }
    }
    let state = if S::STATE == glove_types::stage::ApplyState::Prepared {
        "prepared"
    } else {
        "reserved"
    };
    let body = receipt_body(l, Some((error.code(), state)), recovered)?;
    let r = append_receipt(receipts, t.id(), &body)?;
    let view = crate::ports::ReceiptView::new(&*receipts);
    let proof = t
        .log_fail(error.code(), r, &view, books.journal.log_mut())
        .map_err(|e| life(&e))?;
    let t = t.fail(proof).map_err(|e| life(e.error()))?;
    Ok(Ended::Failed {
        transaction_id: t.id().as_str().to_owned(),
        error,
        receipt_seq: r.receipt_seq(),
    })
}

/// What an apply needs besides the books.
pub struct ApplyInput<'a> {
    /// The stage.
    pub stage: &'a StageDir,
    /// The signed authorization.
    pub signed: &'a SignedApplyAuthorization,
    /// The trust policy that must list its key.
    pub trust: &'a TrustPolicy,
}

/// Checks everything that can be checked without consuming anything.
fn check(
    input: &ApplyInput<'_>,
    seen: &stages::Inspection,
) -> Result<(Locator, Place, super::VerifiedAuthorization), Rejection> {
    let verified = super::verify(input.trust, input.signed, now_ms())?;
    let a = verified.authorization();
    let record = seen.record.clone();
    let mismatch = |what: &str| {
        Rejection::new(
            APPLY_MISMATCH,
            format!("the authorization's {what} is not this stage's"),
        )
    };
    if a.session_id().as_str() != record.session_id {
        return Err(mismatch("session"));
    }
    if a.target().as_str() != record.alias {
        return Err(mismatch("target"));
    }
    if Some(*a.baseline_digest()) != record.baseline() {
        return Err(mismatch("baseline digest"));
    }
    if Some(*a.manifest_digest()) != record.final_manifest() {
        return Err(mismatch("manifest digest"));
    }
    // The root's own mode is never carried (the source's stays), so a
    // special bit on it blocks nothing.
    let blockers: Vec<_> = seen
        .last
        .blockers()
        .into_iter()
        .filter(|b| b.path != ".")
        .collect();
    if !blockers.is_empty() {
        let names: Vec<String> = blockers
            .iter()
            .map(|b| format!("{} ({})", b.path, b.reason.describe()))
            .collect();
        return Err(Rejection::new(APPLY_BLOCKED, names.join(", ")));
    }
    let source = record.source.clone().ok_or_else(|| {
        Rejection::new(
            APPLY_SOURCE_INVALID,
            "the stage was started empty: it has no source",
        )
    })?;
    let place = Place::open(std::path::Path::new(&source))?;
    let fd = place
        .open_dir(place.name())?
        .ok_or_else(|| Rejection::new(APPLY_SOURCE_INVALID, format!("{source} is gone")))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| Rejection::new(APPLY_FILE_IO, e.to_string()))?;
    if Some((st.st_dev, st.st_ino)) != record.source_identity {
        return Err(Rejection::new(
            APPLY_SOURCE_INVALID,
            format!("{source} is no longer the directory the stage was filled from"),
        ));
    }
    let now = exchange::manifest_of(rustix::fd::AsFd::as_fd(&fd))?;
    if !exchange::same_content(&now, &seen.baseline) {
        return Err(Rejection::new(
            APPLY_BASELINE_STALE,
            format!("{source} changed after the stage was filled from it"),
        ));
    }
    exchange::check_space(&place, &seen.last)?;
    let txn = format!(
        "apply-{}",
        glove_types::digest::to_hex(&crate::random_bytes::<8>()?)
    );
    let l = Locator {
        schema: LOCATOR_SCHEMA.into(),
        transaction_id: txn,
        session_id: record.session_id.clone(),
        target: record.alias.clone(),
        grant_id: a.grant_id().as_str().to_owned(),
        authorization_digest: verified.digest().to_string(),
        source,
        parent_identity: place.parent_identity,
        source_identity: (st.st_dev, st.st_ino),
        root_mode: now.root_mode(),
        baseline_digest: record.baseline_digest.clone(),
        final_digest: record.final_digest.clone().unwrap_or_default(),
    };
    Ok((l, place, verified))
}

/// Refuses an authorization whose grant id was used already (before
/// anything else is looked at: a replay is named as one).
pub fn check_grant(books: &Books, signed: &SignedApplyAuthorization) -> Result<(), Rejection> {
    let grant = glove_lifecycle::apply::GrantId::new(signed.authorization().grant_id().as_str())?;
    if books.journal.registry().contains_grant(&grant) {
        return Err(Rejection::new(
            glove_types::codes::lifecycle::APPLY_GRANT_REUSED,
            format!("the grant {} was already used", grant.as_str()),
        ));
    }
    Ok(())
}

/// Applies a frozen stage (see the module docs). `Err` is a refusal before
/// anything was consumed (or a fault of the books themselves); `Ok` is how
/// the transaction ended.
pub fn apply(
    books: &mut Books,
    receipts: &mut ReceiptJournal,
    input: &ApplyInput<'_>,
) -> Result<Ended, Rejection> {
    check_grant(books, input.signed)?;
    // The stage stays mounted read-only from the checks to the copy.
    let seen = stages::inspect(input.stage, now_ms())?;
    let (l, place, verified) = match check(input, &seen) {
        Ok(x) => x,
        Err(e) => {
            let _ = seen.release();
            return Err(e);
        }
    };
    let last = seen.last.clone();
    let locator_digest = books.write_locator(&l, &seen.baseline, &last)?;
    let reservation = verified.reservation(locator_digest)?;
    if !books.journal.room_for_reservation() {
        return Err(Rejection::new(
            APPLY_JOURNAL_NO_ROOM,
            "the apply journal is full; rotate it (docs/apply.md)",
        ));
    }
    let txn = TransactionId::new(l.transaction_id.clone())?;
    let subject = receipt_subject(txn.as_str())?;
    let receipt_slot = receipts
        .reserve(&subject)
        .map_err(|e| Rejection::new(e.code(), format!("receipt reservation: {e}")))?;
    let staging = exchange::staging_name(txn.as_str());
    let ended = with_brand(|b| -> Result<Ended, Rejection> {
        let (registry, log) = books.journal.registry_and_log();
        let proof = match Txn::log_reserve(b, &txn, &reservation, registry, log) {
            Ok(p) => p,
            Err(e) => {
                let _ = receipts.release(receipt_slot);
                return Err(life(&e));
            }
        };
        let t = Txn::reserve(proof).map_err(|e| life(&e))?;
        crash::reached("reserve");
        let mut made = None;
        let copied = exchange::copy_candidate(
            &place,
            &staging,
            seen.stage_root(),
            &last,
            l.root_mode,
            |id| {
                made = Some(id);
                books.write_candidate(txn.as_str(), id)
            },
        );
        if let Err(e) = copied {
            return fail(t, books, receipts, Some(&place), made, &l, e, false);
        }
        let Some(candidate) = made else {
            let e = Rejection::new(APPLY_COPY_FAILED, "the candidate was not made");
            return fail(t, books, receipts, Some(&place), None, &l, e, false);
        };
        crash::reached("copy");
        if let Err(e) = exchange::sync_tree(&place, &staging) {
            let e = Rejection::new(APPLY_COPY_FAILED, e.message());
            return fail(
                t,
                books,
                receipts,
                Some(&place),
                Some(candidate),
                &l,
                e,
                false,
            );
        }
        let proof = t
            .log_prepare(last.digest()?, books.journal.log_mut())
            .map_err(|e| life(&e))?;
        let t = t.prepare(proof).map_err(|e| life(e.error()))?;
        crash::reached("sync");
        match exchange::exchange(&place, &staging, l.source_identity, candidate) {
            Ok(()) => {}
            Err((false, e)) => {
                let e = Rejection::new(APPLY_EXCHANGE_FAILED, e.message());
                return fail(
                    t,
                    books,
                    receipts,
                    Some(&place),
                    Some(candidate),
                    &l,
                    e,
                    false,
                );
            }
            Err((true, e)) => {
                let e = Rejection::new(APPLY_EXCHANGE_FAILED, e.message());
                let proof = t
                    .log_ambiguous(
                        glove_types::codes::lifecycle::APPLY_AMBIGUOUS,
                        books.journal.log_mut(),
                    )
                    .map_err(|x| life(&x))?;
                let t = t.mark_ambiguous(proof).map_err(|x| life(x.error()))?;
                return Ok(Ended::Ambiguous {
                    transaction_id: t.id().as_str().to_owned(),
                    error: e,
                });
            }
        }
        crash::reached("exchange");
        let proof = t
            .log_commit(books.journal.log_mut())
            .map_err(|e| life(&e))?;
        let t = t.commit(proof).map_err(|e| life(e.error()))?;
        crash::reached("commit");
        let body = receipt_body(&l, None, false)?;
        let r = append_receipt(receipts, &txn, &body)?;
        let view = crate::ports::ReceiptView::new(&*receipts);
        let proof = t
            .log_apply(r, &view, books.journal.log_mut())
            .map_err(|e| life(&e))?;
        let mut t = t.apply(proof).map_err(|e| life(e.error()))?;
        // The stage is spent: it says so (best effort; its source has a new
        // identity now, which inspection refuses anyway).
        if let Ok(mut rec) = input.stage.record() {
            rec.applied_by = Some(txn.as_str().to_owned());
            let _ = input.stage.write_record(&rec);
        }
        let cleaned = t
            .cleanup_baseline(&mut Cleanup {
                place: &place,
                staging: staging.clone(),
                baseline: l.source_identity,
            })
            .is_ok();
        Ok(Ended::Applied {
            transaction_id: txn.as_str().to_owned(),
            receipt_seq: r.receipt_seq(),
            cleaned,
        })
    });
    let _ = seen.release();
    ended
}
