//! `glove receipts verify`: check a receipt journal offline — every record's
//! HMAC chain from a trusted anchor, with the receipt key — without a
//! running `gloved`. The evidence `gloved` keeps beside the journal is
//! checked too: the anchor file `<file>.anchor` (required; the journal must
//! match it, so a cut, an older copy or a replaced journal is INVALID) and
//! the acknowledged-head file `<file>.ack` (when present, it must verify
//! and name a head on the chain).
//!
//! The output counts receipts per kind and gives each apply receipt
//! (`apply_v1`) one line: applied or failed, transaction, session, target
//! and, for a failure, its code. [`envelope_line`] renders an apply
//! receipt the same way for `glove receipts page`.

use crate::protected::{self, Requirements};
use crate::report::{error_json, error_line, print_json, EXIT_OK, EXIT_REJECTED};
use clap::Args;
use glove_journal::receipt::{verify_file_with, EvidenceFiles, ReceiptHead, ReceiptKey};
use glove_types::receipt::{ApplyOutcome, ApplyReceiptV1, APPLY_KIND};
use glove_types::Rejection;
use serde_json::json;
use std::path::PathBuf;

/// Arguments of `glove receipts verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The receipt journal file.
    #[arg(long, value_name = "FILE")]
    pub file: PathBuf,
    /// The receipt key file (64 hex characters; protected: mode 0600, yours).
    #[arg(long, value_name = "FILE")]
    pub key_file: PathBuf,
    /// The trusted anchor `<seq>:<64 hex chain value>` (the controller's last
    /// acknowledged head, or `0:` and 64 zeros for a new journal).
    #[arg(long, value_name = "SEQ:HEX")]
    pub anchor: String,
    /// The journal's anchor file [default: <FILE>.anchor]; it must exist.
    #[arg(long, value_name = "FILE", conflicts_with = "no_anchor_file")]
    pub anchor_file: Option<PathBuf>,
    /// Do not check an anchor file (for a bare copy of a journal; a cut at
    /// a record boundary or an older copy then goes unnoticed).
    #[arg(long)]
    pub no_anchor_file: bool,
    /// The acknowledged-head file [default: <FILE>.ack]; checked when it
    /// exists.
    #[arg(long, value_name = "FILE")]
    pub ack_file: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// One line for a delivered receipt of `kind` whose envelope is
/// `envelope` (as `receipts.page` returns it): for an apply receipt its
/// [`ApplyReceiptV1::summary`], or why its body does not decode; `None`
/// for other kinds (shown by kind alone).
pub fn envelope_line(kind: &str, envelope: &str) -> Option<String> {
    if kind != APPLY_KIND {
        return None;
    }
    let body = serde_json::from_str::<serde_json::Value>(envelope)
        .ok()
        .and_then(|v| glove_types::canon::to_canonical(v.get("body")?).ok());
    Some(match body.map(|b| ApplyReceiptV1::decode(&b)) {
        Some(Ok(r)) => r.summary(),
        Some(Err(e)) => format!("apply body does not decode ({})", e.code()),
        None => "apply envelope without a body".to_owned(),
    })
}

/// An apply receipt as JSON for `--json`.
fn apply_json(seq: u64, r: &ApplyReceiptV1) -> serde_json::Value {
    let (code, failed_in) = match &r.outcome {
        ApplyOutcome::Applied => (None, None),
        ApplyOutcome::Failed { code, failed_in } => (Some(code.as_str()), Some(failed_in.as_str())),
    };
    json!({
        "seq": seq,
        "outcome": r.outcome.as_str(),
        "transaction_id": r.transaction_id.as_str(),
        "session_id": r.session_id.as_str(),
        "target": r.target.as_str(),
        "code": code,
        "failed_in": failed_in,
        "recovered": r.recovered,
    })
}

fn reject(e: impl std::fmt::Display, code: glove_types::ErrorCode) -> Rejection {
    Rejection::new(code, e.to_string())
}

/// Runs the verification and returns the exit status.
pub fn run(a: &VerifyArgs) -> i32 {
    let result = (|| {
        let key_bytes = protected::read(
            &a.key_file,
            Requirements {
                max_bytes: 4096,
                mode: 0o600,
            },
        )?;
        let key = ReceiptKey::from_key_file(&key_bytes).map_err(|e| reject(&e, e.code()))?;
        let anchor = ReceiptHead::parse(&a.anchor).map_err(|e| reject(&e, e.code()))?;
        let beside = |ext: &str| {
            let mut name = a.file.as_os_str().to_os_string();
            name.push(ext);
            PathBuf::from(name)
        };
        let anchor_file =
            (!a.no_anchor_file).then(|| a.anchor_file.clone().unwrap_or_else(|| beside(".anchor")));
        let ack_file = a.ack_file.clone().unwrap_or_else(|| beside(".ack"));
        let files = EvidenceFiles {
            anchor_file: anchor_file.as_deref(),
            ack_file: Some(&ack_file),
        };
        verify_file_with(&a.file, &key, &anchor, &files).map_err(|e| reject(&e, e.code()))
    })();
    match result {
        Ok(r) => {
            if a.json {
                print_json(&json!({
                    "valid": true,
                    "receipts": r.receipts,
                    "receipts_after_anchor": r.receipts_after_anchor,
                    "base": r.base.to_string(),
                    "head": r.head.to_string(),
                    "outstanding_reservations": r.outstanding_reservations,
                    "torn_tail_bytes": r.torn_tail_bytes,
                    "anchor_file_checked": r.anchor_checked,
                    "acknowledged": r.acknowledged.map(|h| h.to_string()),
                    "kinds": r
                        .by_kind
                        .iter()
                        .map(|(k, n)| (k.as_str().to_owned(), json!(n)))
                        .collect::<serde_json::Map<_, _>>(),
                    "apply_receipts": r
                        .apply_receipts
                        .iter()
                        .map(|(seq, a)| apply_json(*seq, a))
                        .collect::<Vec<_>>(),
                }));
            } else {
                println!(
                    "receipt journal verified: {} receipts ({} after the anchor), head {}",
                    r.receipts, r.receipts_after_anchor, r.head
                );
                if !r.by_kind.is_empty() {
                    let kinds: Vec<String> = r
                        .by_kind
                        .iter()
                        .map(|(k, n)| format!("{n} {}", k.as_str()))
                        .collect();
                    println!("kinds: {}", kinds.join(", "));
                }
                for (seq, a) in &r.apply_receipts {
                    println!("apply receipt {seq}: {}", a.summary());
                }
                if !r.anchor_checked {
                    println!("note: no anchor file was checked; a cut at a record boundary or an older copy would not be noticed");
                }
                if let Some(h) = r.acknowledged {
                    println!("acknowledged head {h}");
                }
                if let Some(t) = r.torn_tail_bytes {
                    println!("note: a torn tail of {t} bytes would be cut off by the next writer");
                }
            }
            EXIT_OK
        }
        Err(e) => {
            if a.json {
                let mut v = error_json(&e);
                if let Some(m) = v.as_object_mut() {
                    m.insert("valid".into(), json!(false));
                }
                print_json(&v);
            } else {
                eprintln!("{}", error_line(&e));
            }
            EXIT_REJECTED
        }
    }
}

#[cfg(test)]
mod tests {
    use super::envelope_line;

    #[test]
    fn a_paged_apply_receipt_gets_one_line() {
        let body = concat!(
            r#"{"authorization_digest":""#,
            "0101010101010101010101010101010101010101010101010101010101010101",
            r#"","baseline_digest":""#,
            "0202020202020202020202020202020202020202020202020202020202020202",
            r#"","code":"apply_source_changed","failed_in":"reserved","grant_id":"g-1","manifest_digest":""#,
            "0303030303030303030303030303030303030303030303030303030303030303",
            r#"","outcome":"failed","receipt_kind":"apply_v1","recovered":true,"session_id":"s-1","target":"src","transaction_id":"t-1"}"#
        );
        let env = format!(r#"{{"body":{body},"receipt_kind":"apply_v1"}}"#);
        assert_eq!(
            envelope_line("apply_v1", &env).as_deref(),
            Some(
                "failed transaction t-1 session s-1 target src code apply_source_changed \
                 (in reserved) (recovered)"
            )
        );
        assert_eq!(envelope_line("resource_v1", &env), None);
        let bad = r#"{"body":{"receipt_kind":"apply_v1"},"receipt_kind":"apply_v1"}"#;
        assert_eq!(
            envelope_line("apply_v1", bad).as_deref(),
            Some("apply body does not decode (json_missing_field)")
        );
        assert_eq!(
            envelope_line("apply_v1", "not json").as_deref(),
            Some("apply envelope without a body")
        );
    }
}
