//! The rules a receipt body obeys beyond its envelope, by kind.
//!
//! An `apply_v1` body must decode strictly as
//! [`ApplyReceiptV1`](glove_types::receipt::ApplyReceiptV1) (its canonical
//! encoding, no unknown field, no `null` for an absent one) and name, in
//! its `transaction_id`, the key its record is filed under (the
//! reservation it spent; a receipt a compaction carried over has no record
//! key and is filed under the body's). Checked by
//! [`append_receipt`](super::ReceiptJournal::append_receipt) before
//! anything is written (refused with `receipt_body_invalid`; the
//! reservation stays held), and on every replay — open, and the offline
//! verifier's file and page checks — where a stored apply receipt that
//! breaks them is `receipt_record_invalid`.
//!
//! A `refinement_v1` body must likewise decode strictly as
//! [`RefinementReceiptV1`](glove_types::receipt::RefinementReceiptV1)
//! (its outcome commitment recomputed, its nested resource receipt naming
//! the same session) and name, in its `session_id`, the key it is filed
//! under.
//!
//! Session receipt bodies (`resource_v1`) keep their old rule: the journal
//! checks their kind and canonical form; their schema is the writer's
//! (`ResourceReceiptV1::encode` in glove-control) and the consumer's.

use super::envelope::ReceiptKind;
use glove_types::canon::to_canonical;
use glove_types::codes::journal::RECEIPT_BODY_INVALID;
use glove_types::ids::SessionId;
use glove_types::receipt::{ApplyReceiptV1, RefinementReceiptV1};
use glove_types::Rejection;

/// Checks `body` (canonical bytes of a `kind` body) by its kind's rules;
/// `key` is the subject key its record is filed under, when it has one.
pub(crate) fn check_body(
    kind: ReceiptKind,
    body: &[u8],
    key: Option<&SessionId>,
) -> Result<(), Rejection> {
    match kind {
        ReceiptKind::ResourceV1 => Ok(()),
        ReceiptKind::RefinementV1 => {
            let r = RefinementReceiptV1::decode(body)?;
            match key {
                Some(k) if k != &r.session_id => Err(Rejection::new(
                    RECEIPT_BODY_INVALID,
                    "the body names another session than the key it is filed under",
                )
                .at("session_id")),
                _ => Ok(()),
            }
        }
        ReceiptKind::ApplyV1 => {
            let r = ApplyReceiptV1::decode(body)?;
            match key {
                Some(k) if k.as_str() != r.transaction_id.as_str() => Err(Rejection::new(
                    RECEIPT_BODY_INVALID,
                    "the body names another transaction than the key it is filed under",
                )
                .at("transaction_id")),
                _ => Ok(()),
            }
        }
    }
}

/// The body of a stored `apply_v1` envelope (already verified), decoded
/// strictly.
pub(crate) fn apply_body(envelope: &[u8]) -> Result<ApplyReceiptV1, Rejection> {
    ApplyReceiptV1::decode(&stored_body(envelope)?)
}

/// The canonical bytes of a stored envelope's body.
fn stored_body(envelope: &[u8]) -> Result<Vec<u8>, Rejection> {
    let invalid = || Rejection::new(RECEIPT_BODY_INVALID, "the envelope has no body");
    let v: serde_json::Value = serde_json::from_slice(envelope).map_err(|_| invalid())?;
    to_canonical(v.get("body").ok_or_else(invalid)?)
}

/// [`check_body`] on a stored envelope (already verified: canonical, with
/// a body of `kind`).
pub(crate) fn check_stored(
    kind: ReceiptKind,
    envelope: &[u8],
    key: Option<&SessionId>,
) -> Result<(), Rejection> {
    if kind == ReceiptKind::ResourceV1 {
        // Nothing to check: do not parse the envelope again.
        return Ok(());
    }
    check_body(kind, &stored_body(envelope)?, key)
}
