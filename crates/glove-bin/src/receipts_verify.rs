//! `glove receipts verify`: check a receipt journal offline — every record's
//! HMAC chain from a trusted anchor, with the receipt key — without a
//! running `gloved`.

use crate::protected::{self, Requirements};
use crate::report::{error_json, error_line, print_json, EXIT_OK, EXIT_REJECTED};
use clap::Args;
use glove_journal::receipt::{ReceiptHead, ReceiptKey};
use glove_journal::verify_file;
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
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
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
        verify_file(&a.file, &key, &anchor).map_err(|e| reject(&e, e.code()))
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
                }));
            } else {
                println!(
                    "receipt journal verified: {} receipts ({} after the anchor), head {}",
                    r.receipts, r.receipts_after_anchor, r.head
                );
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
