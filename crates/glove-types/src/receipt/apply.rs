//! The `apply_v1` receipt body: how an apply transaction ended (a retained
//! stage applied to its source, or the transaction failed before anything
//! was exchanged), as a typed value with one canonical encoding and a
//! strict decoder.
//!
//! ```text
//! {"authorization_digest":…,"baseline_digest":…,
//!  ["code":…,"failed_in":"reserved"|"prepared",]
//!  "grant_id":…,"manifest_digest":…,"outcome":"applied"|"failed",
//!  "receipt_kind":"apply_v1","recovered":bool,"session_id":…,
//!  "target":…,"transaction_id":…}
//! ```
//!
//! * `transaction_id` — the apply transaction (shared id charset); the
//!   receipt journal files the receipt under it.
//! * `session_id` — the session whose retained stage was applied.
//! * `target` — the alias (or exposure id) it was applied to.
//! * `grant_id`, `authorization_digest` — the single-use grant and the
//!   digest of the signed authorization that allowed it.
//! * `baseline_digest`, `manifest_digest` — the baseline manifest taken at
//!   staging and the staged manifest applied (SHA-256, 64 lowercase hex).
//! * `outcome` — `applied`, or `failed` with `code` (a stable code, in the
//!   code charset) and `failed_in` (the stage it failed from: `reserved` or
//!   `prepared`). `code` and `failed_in` are absent for `applied`.
//! * `recovered` — whether start-up recovery wrote the receipt.
//!
//! [`ApplyReceiptV1::decode`] accepts exactly the bytes
//! [`ApplyReceiptV1::encode`] produces for some value, and refuses
//! everything else with `receipt_body_invalid` (or the strict JSON
//! decoder's own `json_*` code): unknown or missing fields, another
//! `receipt_kind`, `code`/`failed_in` given for an applied transaction
//! (even as `null`) or missing for a failed one, an id outside the id
//! charset, a digest that is not 64 lowercase hex, a non-canonical form.

use super::wire::is_code;
use crate::canon::{self, Form};
use crate::codes::journal::RECEIPT_BODY_INVALID;
use crate::error::Rejection;
use crate::ids::{ApplyGrantId, ApplyTargetId, ApplyTransactionId, SessionId};
use crate::Sha256Digest;
use serde::{Deserialize, Serialize};

/// The `receipt_kind` of this body.
pub const APPLY_KIND: &str = "apply_v1";

/// Largest apply body accepted, in bytes (every field is bounded; the
/// largest valid body is well under this).
pub const MAX_APPLY_BODY_BYTES: usize = 4096;

/// The stage a failed apply transaction failed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailedIn {
    /// Reserved: nothing was copied yet.
    Reserved,
    /// Prepared: the copy beside the source was made and safely discarded.
    Prepared,
}

impl FailedIn {
    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            FailedIn::Reserved => "reserved",
            FailedIn::Prepared => "prepared",
        }
    }

    fn parse(s: &str) -> Option<FailedIn> {
        [FailedIn::Reserved, FailedIn::Prepared]
            .into_iter()
            .find(|f| f.as_str() == s)
    }
}

/// How the transaction ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApplyOutcome {
    /// The stage was exchanged into the source.
    Applied,
    /// The transaction failed before the exchange.
    Failed {
        /// The stable failure code (code charset).
        code: String,
        /// The stage it failed from.
        failed_in: FailedIn,
    },
}

impl ApplyOutcome {
    /// `"applied"` or `"failed"`.
    pub const fn as_str(&self) -> &'static str {
        match self {
            ApplyOutcome::Applied => "applied",
            ApplyOutcome::Failed { .. } => "failed",
        }
    }
}

/// An `apply_v1` receipt body (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplyReceiptV1 {
    /// The apply transaction.
    pub transaction_id: ApplyTransactionId,
    /// The session whose retained stage was applied.
    pub session_id: SessionId,
    /// The alias (or exposure id) it was applied to.
    pub target: ApplyTargetId,
    /// The single-use grant id.
    pub grant_id: ApplyGrantId,
    /// Digest of the signed apply authorization.
    pub authorization_digest: Sha256Digest,
    /// Digest of the baseline manifest taken at staging.
    pub baseline_digest: Sha256Digest,
    /// Digest of the staged manifest applied.
    pub manifest_digest: Sha256Digest,
    /// How it ended.
    pub outcome: ApplyOutcome,
    /// Whether start-up recovery wrote this receipt.
    pub recovered: bool,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    receipt_kind: String,
    transaction_id: String,
    session_id: String,
    target: String,
    grant_id: String,
    authorization_digest: String,
    baseline_digest: String,
    manifest_digest: String,
    outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failed_in: Option<String>,
    recovered: bool,
}

fn bad(msg: impl Into<String>) -> Rejection {
    Rejection::new(RECEIPT_BODY_INVALID, msg)
}

impl ApplyReceiptV1 {
    /// The canonical encoding. Fails (with `receipt_body_invalid`) only for
    /// a value [`decode`](Self::decode) would refuse: a failure code
    /// outside the code charset.
    pub fn encode(&self) -> Result<Vec<u8>, Rejection> {
        let (code, failed_in) = match &self.outcome {
            ApplyOutcome::Applied => (None, None),
            ApplyOutcome::Failed { code, failed_in } => {
                if !is_code(code) {
                    return Err(bad("the failure code is not a code").at("code"));
                }
                (Some(code.clone()), Some(failed_in.as_str().to_owned()))
            }
        };
        let bytes = canon::encode(&Wire {
            receipt_kind: APPLY_KIND.to_owned(),
            transaction_id: self.transaction_id.as_str().to_owned(),
            session_id: self.session_id.as_str().to_owned(),
            target: self.target.as_str().to_owned(),
            grant_id: self.grant_id.as_str().to_owned(),
            authorization_digest: self.authorization_digest.to_hex(),
            baseline_digest: self.baseline_digest.to_hex(),
            manifest_digest: self.manifest_digest.to_hex(),
            outcome: self.outcome.as_str().to_owned(),
            code,
            failed_in,
            recovered: self.recovered,
        })?;
        if bytes.len() > MAX_APPLY_BODY_BYTES {
            return Err(bad(format!(
                "the body is {} bytes; the bound is {MAX_APPLY_BODY_BYTES}",
                bytes.len()
            )));
        }
        Ok(bytes)
    }

    /// Decodes a body strictly: only the canonical encoding of a valid
    /// value is accepted.
    pub fn decode(bytes: &[u8]) -> Result<ApplyReceiptV1, Rejection> {
        let w: Wire = canon::decode(bytes, MAX_APPLY_BODY_BYTES, Form::Canonical)?;
        if w.receipt_kind != APPLY_KIND {
            return Err(bad(format!("receipt_kind is not {APPLY_KIND}")).at("receipt_kind"));
        }
        let outcome = match (w.outcome.as_str(), w.code, w.failed_in) {
            ("applied", None, None) => ApplyOutcome::Applied,
            ("applied", _, _) => {
                return Err(bad("an applied transaction has no code or failed_in").at("code"))
            }
            ("failed", Some(code), Some(failed_in)) => {
                if !is_code(&code) {
                    return Err(bad("the failure code is not a code").at("code"));
                }
                let failed_in = FailedIn::parse(&failed_in)
                    .ok_or_else(|| bad("failed_in is reserved or prepared").at("failed_in"))?;
                ApplyOutcome::Failed { code, failed_in }
            }
            ("failed", _, _) => {
                return Err(bad("a failed transaction has a code and failed_in").at("code"))
            }
            _ => return Err(bad("outcome is applied or failed").at("outcome")),
        };
        let sha = |s: &str, at: &str| Sha256Digest::parse(s).map_err(|r| r.at(at));
        let v = ApplyReceiptV1 {
            transaction_id: ApplyTransactionId::new(w.transaction_id)
                .map_err(|r| r.at("transaction_id"))?,
            session_id: SessionId::new(w.session_id).map_err(|r| r.at("session_id"))?,
            target: ApplyTargetId::new(w.target).map_err(|r| r.at("target"))?,
            grant_id: ApplyGrantId::new(w.grant_id).map_err(|r| r.at("grant_id"))?,
            authorization_digest: sha(&w.authorization_digest, "authorization_digest")?,
            baseline_digest: sha(&w.baseline_digest, "baseline_digest")?,
            manifest_digest: sha(&w.manifest_digest, "manifest_digest")?,
            outcome,
            recovered: w.recovered,
        };
        // One encoding per value: a field that must be absent given as
        // null, for one, decodes but does not re-encode to these bytes.
        if v.encode()? != bytes {
            return Err(bad("the body is not the encoding of its value"));
        }
        Ok(v)
    }

    /// One line for a person: outcome, transaction, session, target and,
    /// for a failure, its code and stage (every part is an identifier or a
    /// code, so the line is safe to print).
    pub fn summary(&self) -> String {
        let mut line = format!(
            "{} transaction {} session {} target {}",
            self.outcome.as_str(),
            self.transaction_id,
            self.session_id,
            self.target
        );
        if let ApplyOutcome::Failed { code, failed_in } = &self.outcome {
            line.push_str(&format!(" code {code} (in {})", failed_in.as_str()));
        }
        if self.recovered {
            line.push_str(" (recovered)");
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied() -> ApplyReceiptV1 {
        ApplyReceiptV1 {
            transaction_id: ApplyTransactionId::new("t-1").unwrap(),
            session_id: SessionId::new("s-1").unwrap(),
            target: ApplyTargetId::new("src").unwrap(),
            grant_id: ApplyGrantId::new("g-1").unwrap(),
            authorization_digest: Sha256Digest::from_bytes([1; 32]),
            baseline_digest: Sha256Digest::from_bytes([2; 32]),
            manifest_digest: Sha256Digest::from_bytes([3; 32]),
            outcome: ApplyOutcome::Applied,
            recovered: false,
        }
    }

    fn failed() -> ApplyReceiptV1 {
        ApplyReceiptV1 {
            outcome: ApplyOutcome::Failed {
                code: "apply_source_changed".into(),
                failed_in: FailedIn::Prepared,
            },
            recovered: true,
            ..applied()
        }
    }

    fn code_of(b: &[u8]) -> String {
        ApplyReceiptV1::decode(b)
            .unwrap_err()
            .code()
            .as_str()
            .to_owned()
    }

    #[test]
    fn round_trips_and_is_canonical() {
        for r in [applied(), failed()] {
            let b = r.encode().unwrap();
            assert_eq!(ApplyReceiptV1::decode(&b).unwrap(), r);
            let s = String::from_utf8(b).unwrap();
            assert!(s.contains("\"receipt_kind\":\"apply_v1\""), "{s}");
        }
        let s = String::from_utf8(applied().encode().unwrap()).unwrap();
        assert!(!s.contains("\"code\"") && !s.contains("failed_in"), "{s}");
        assert_eq!(
            failed().summary(),
            "failed transaction t-1 session s-1 target src code apply_source_changed (in prepared) (recovered)"
        );
        assert_eq!(
            applied().summary(),
            "applied transaction t-1 session s-1 target src"
        );
    }

    #[test]
    fn refuses_what_is_not_the_encoding_of_a_value() {
        let ok = String::from_utf8(applied().encode().unwrap()).unwrap();
        let fail = String::from_utf8(failed().encode().unwrap()).unwrap();
        let cases = [
            // null where the field must be absent
            ok.replacen(
                "\"baseline_digest\"",
                "\"code\":null,\"baseline_digest\"",
                1,
            ),
            // a failure's fields on an applied receipt
            ok.replacen("\"grant_id\"", "\"failed_in\":\"reserved\",\"grant_id\"", 1),
            // a failure without its stage or with an unknown one
            fail.replacen(",\"failed_in\":\"prepared\"", "", 1),
            fail.replacen("\"prepared\"", "\"committed\"", 1),
            fail.replacen("apply_source_changed", "Apply-Source", 1),
            // unknown field, other kind, bad outcome, bad id, bad digest
            ok.replacen("\"grant_id\"", "\"extra\":1,\"grant_id\"", 1),
            ok.replacen("apply_v1", "resource_v1", 1),
            ok.replacen("\"applied\"", "\"ambiguous\"", 1),
            ok.replacen("\"t-1\"", "\"T-1\"", 1),
            ok.replacen(&"01".repeat(32), &"0G".repeat(32), 1),
            // not canonical
            ok.replacen(':', ": ", 1),
            format!("{ok}\n"),
        ];
        for c in cases {
            assert_ne!(c, ok);
            let code = code_of(c.as_bytes());
            let known = ["receipt_body_invalid", "id_invalid", "digest_invalid"];
            assert!(
                known.contains(&code.as_str()) || code.starts_with("json_"),
                "{code}: {c}"
            );
        }
        let mut bad_code = failed();
        bad_code.outcome = ApplyOutcome::Failed {
            code: String::new(),
            failed_in: FailedIn::Reserved,
        };
        assert!(bad_code.encode().is_err());
    }
}
