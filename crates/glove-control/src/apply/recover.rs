//! Start-up recovery of apply transactions: each one the journal does not
//! show as finished is classified from what sits at the source and beside
//! it (by descriptor, against its locator and manifests) into reserved,
//! prepared, committed or ambiguous (`glove_lifecycle::apply::classify`):
//!
//! * reserved or prepared (the source is the baseline): the candidate is
//!   removed and the transaction fails with `apply_interrupted` and a
//!   recovered receipt;
//! * committed (the candidate is at the source, the baseline beside it):
//!   the applied receipt, then the baseline removed;
//! * ambiguous: recorded as such (once), reported, never touched;
//! * applied: its baseline removed again if a crash cut the cleanup.

use super::books::Books;
use super::exchange::{self, Place};
use super::run::{append_receipt, fail, receipt_body, Cleanup};
use glove_journal::receipt::ReceiptJournal;
use glove_lifecycle::apply::{
    AnyApply, DescriptorFindings, LocatorCheck, RecoveredApply, TreeFinding,
};
use glove_types::codes::apply::*;
use glove_types::Rejection;
use std::path::Path;

/// What recovery did with one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovered {
    /// Ended as failed, the source untouched.
    Failed {
        /// The transaction.
        transaction_id: String,
        /// The failed receipt.
        receipt_seq: u64,
    },
    /// Ended as applied.
    Applied {
        /// The transaction.
        transaction_id: String,
        /// The applied receipt.
        receipt_seq: u64,
    },
    /// An applied transaction's baseline was removed.
    Cleaned {
        /// The transaction.
        transaction_id: String,
    },
    /// Ambiguous: left as it is, for the operator.
    Ambiguous {
        /// The transaction.
        transaction_id: String,
        /// What the evidence showed.
        reason: String,
    },
    /// Recovery could not finish it (it stays as it is; the next start
    /// tries again).
    Error {
        /// The transaction.
        transaction_id: String,
        /// Why.
        error: Rejection,
    },
}

/// Why a transaction is ambiguous, in words.
pub fn describe(r: glove_lifecycle::apply::AmbiguityReason) -> String {
    use glove_lifecycle::apply::AmbiguityReason as A;
    let tree = |t: TreeFinding| match t {
        TreeFinding::Absent => "nothing",
        TreeFinding::Baseline => "the old tree",
        TreeFinding::Candidate => "the new tree",
        TreeFinding::Incomplete => "part of the new tree",
        TreeFinding::Unrecognized => "a tree it does not recognise",
    };
    match r {
        A::Recorded { code } => format!("recorded as ambiguous ({})", code.as_str()),
        A::LocatorUnverified => {
            "its source's directory could not be opened again as recorded".to_owned()
        }
        A::EvidenceConflict {
            journal,
            source,
            staging,
        } => format!(
            "the journal says {} but the source holds {} and the staging name {}",
            serde_json::to_value(journal)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            tree(source),
            tree(staging)
        ),
        _ => "the evidence proves no one state".to_owned(),
    }
}

impl Recovered {
    /// What recovery did, as one JSON object (no host path).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            Recovered::Failed {
                transaction_id,
                receipt_seq,
            } => json!({
                "transaction_id": transaction_id, "outcome": "failed", "receipt_seq": receipt_seq}),
            Recovered::Applied {
                transaction_id,
                receipt_seq,
            } => json!({
                "transaction_id": transaction_id, "outcome": "applied", "receipt_seq": receipt_seq}),
            Recovered::Cleaned { transaction_id } => json!({
                "transaction_id": transaction_id, "outcome": "cleaned"}),
            Recovered::Ambiguous {
                transaction_id,
                reason,
            } => json!({
                "transaction_id": transaction_id, "outcome": "ambiguous", "reason": reason}),
            Recovered::Error {
                transaction_id,
                error,
            } => json!({
                "transaction_id": transaction_id, "outcome": "error",
                "code": error.code().as_str(), "message": error.message()}),
        }
    }
}

struct Evidence {
    locator: super::books::Locator,
    place: Option<Place>,
    findings: DescriptorFindings,
}

fn evidence(books: &Books, txn: &str, any: &AnyApply) -> Result<Evidence, Rejection> {
    let digest = any.reservation().locator_digest;
    let (locator, baseline, last) = books.read_locator(txn, &digest)?;
    let unavailable = |locator| Evidence {
        locator,
        place: None,
        findings: DescriptorFindings {
            locator: LocatorCheck::Unavailable,
            source: TreeFinding::Unrecognized,
            staging: TreeFinding::Unrecognized,
        },
    };
    let place = match Place::open(Path::new(&locator.source)) {
        Ok(p) => p,
        Err(_) => return Ok(unavailable(locator)),
    };
    if place.parent_identity != locator.parent_identity {
        return Ok(Evidence {
            locator,
            place: None,
            findings: DescriptorFindings {
                locator: LocatorCheck::Mismatch,
                source: TreeFinding::Unrecognized,
                staging: TreeFinding::Unrecognized,
            },
        });
    }
    let staging = exchange::staging_name(txn);
    let id = locator.source_identity;
    let source = exchange::find(&place, place.name(), id, &baseline, &last, false);
    let staged = exchange::find(&place, &staging, id, &baseline, &last, true);
    Ok(Evidence {
        locator,
        place: Some(place),
        findings: DescriptorFindings {
            locator: LocatorCheck::Verified,
            source,
            staging: staged,
        },
    })
}

/// Recovers every unfinished transaction in `books` (see the module docs).
pub fn recover(books: &mut Books, receipts: &mut ReceiptJournal) -> Vec<Recovered> {
    let all = match books.journal.transactions() {
        Ok(a) => a,
        Err(e) => {
            return vec![Recovered::Error {
                transaction_id: String::new(),
                error: Rejection::new(e.code(), e.to_string()),
            }]
        }
    };
    let mut out = Vec::new();
    for any in all {
        let txn = match &any {
            AnyApply::Reserved(t) => t.id().clone(),
            AnyApply::Prepared(t) => t.id().clone(),
            AnyApply::Committed(t) => t.id().clone(),
            AnyApply::Applied(t) => t.id().clone(),
            AnyApply::Failed(t) => t.id().clone(),
            AnyApply::Ambiguous(t) => t.id().clone(),
        };
        let name = txn.as_str().to_owned();
        if let AnyApply::Failed(_) = any {
            continue;
        }
        if let AnyApply::Ambiguous(t) = &any {
            out.push(Recovered::Ambiguous {
                transaction_id: name,
                reason: describe(t.reason()),
            });
            continue;
        }
        match recover_one(books, receipts, &name, any) {
            Ok(Some(r)) => out.push(r),
            Ok(None) => {}
            Err(error) => out.push(Recovered::Error {
                transaction_id: name,
                error,
            }),
        }
    }
    out
}

fn life(e: &glove_lifecycle::LifecycleError) -> Rejection {
    Rejection::new(e.code(), e.to_string())
}

/// Ends a transaction proven not exchanged: its candidate removed (by
/// identity), a failed receipt (`apply_interrupted`, recovered).
fn discard<S: glove_lifecycle::apply::Failable>(
    p: glove_lifecycle::apply::ParkedTxn<S>,
    books: &mut Books,
    receipts: &mut ReceiptJournal,
    ev: &Evidence,
    candidate: Option<(u64, u64)>,
) -> Result<super::run::Ended, Rejection> {
    let why = Rejection::new(
        APPLY_INTERRUPTED,
        "the applying process stopped before the exchange",
    );
    p.enter(|t| {
        fail(
            t,
            books,
            receipts,
            ev.place.as_ref(),
            candidate,
            &ev.locator,
            why,
            true,
        )
    })
}

fn recover_one(
    books: &mut Books,
    receipts: &mut ReceiptJournal,
    txn: &str,
    any: AnyApply,
) -> Result<Option<Recovered>, Rejection> {
    let ev = evidence(books, txn, &any)?;
    let staging = exchange::staging_name(txn);
    if let AnyApply::Applied(mut t) = any {
        let Some(place) = &ev.place else {
            return Ok(None);
        };
        if place.exists(&staging)? {
            t.cleanup_baseline(&mut Cleanup {
                place,
                staging: staging.clone(),
                baseline: ev.locator.source_identity,
            })
            .map_err(|e| life(&e))?;
            return Ok(Some(Recovered::Cleaned {
                transaction_id: txn.to_owned(),
            }));
        }
        return Ok(None);
    }
    let classified = any
        .classify(&ev.findings, books.journal.log_mut())
        .map_err(|e| life(&e))?;
    let l = &ev.locator;
    let candidate = books.read_candidate(txn);
    let ended = match classified {
        RecoveredApply::Reserved(p) => discard(p, books, receipts, &ev, candidate)?,
        RecoveredApply::Prepared(p) => discard(p, books, receipts, &ev, candidate)?,
        RecoveredApply::Committed(p) => {
            let receipt_seq = p.enter(|t| -> Result<u64, Rejection> {
                let body = receipt_body(l, None, true)?;
                let r = append_receipt(receipts, t.id(), &body)?;
                let view = crate::ports::ReceiptView::new(&*receipts);
                let proof = t
                    .log_apply(r, &view, books.journal.log_mut())
                    .map_err(|e| life(&e))?;
                let mut t = t.apply(proof).map_err(|e| life(e.error()))?;
                if let Some(place) = &ev.place {
                    let _ = t.cleanup_baseline(&mut Cleanup {
                        place,
                        staging: staging.clone(),
                        baseline: l.source_identity,
                    });
                }
                Ok(r.receipt_seq())
            })?;
            return Ok(Some(Recovered::Applied {
                transaction_id: txn.to_owned(),
                receipt_seq,
            }));
        }
        RecoveredApply::Ambiguous(t) => {
            return Ok(Some(Recovered::Ambiguous {
                transaction_id: txn.to_owned(),
                reason: describe(t.reason()),
            }))
        }
        RecoveredApply::Applied(_) | RecoveredApply::Failed(_) => return Ok(None),
    };
    Ok(match ended {
        super::run::Ended::Failed { receipt_seq, .. } => Some(Recovered::Failed {
            transaction_id: txn.to_owned(),
            receipt_seq,
        }),
        _ => None,
    })
}
