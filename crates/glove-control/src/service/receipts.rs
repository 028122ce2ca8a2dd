//! `receipts_page` and `receipts_ack`: paging the receipt journal and
//! acknowledging the exact head of the last page served.

use super::*;

impl Service {
    pub(super) fn receipts_page(&self, p: PageParams) -> Result<Value, ControlError> {
        let max_records = p.max_records.unwrap_or(DEFAULT_PAGE_RECORDS);
        if max_records == 0 || max_records > MAX_PAGE_RECORDS {
            return Err(invalid_params(
                &Rejection::new(
                    CONTROL_INVALID_PARAMS,
                    format!("max_records must be 1 to {MAX_PAGE_RECORDS}"),
                )
                .at("max_records"),
            ));
        }
        let max_bytes = p.max_bytes.unwrap_or(self.max_page_bytes);
        if max_bytes == 0 || max_bytes > self.max_page_bytes {
            return Err(invalid_params(
                &Rejection::new(
                    CONTROL_INVALID_PARAMS,
                    format!("max_bytes must be 1 to {}", self.max_page_bytes),
                )
                .at("max_bytes"),
            ));
        }
        let mut receipts = lock(self.receipts.as_ref().ok_or_else(internal)?)?;
        let page = receipts
            .page(
                p.after_seq,
                usize::try_from(max_records).unwrap_or(usize::MAX),
                max_bytes,
            )
            .map_err(ControlError::Journal)?;
        let items: Vec<Value> = page
            .receipts
            .iter()
            .map(|r| {
                json!({
                    "seq": r.seq,
                    "kind": r.kind.as_str(),
                    "chain": to_hex(&r.chain),
                    "envelope": String::from_utf8_lossy(&r.envelope),
                })
            })
            .collect();
        Ok(json!({"receipts": items, "head": page.head.to_string()}))
    }

    pub(super) fn receipts_ack(&self, p: AckParams) -> Result<Value, ControlError> {
        let head = ReceiptHead::parse(&p.head).map_err(|e| {
            ControlError::Refused(Rejection::new(e.code(), e.to_string()).at("head"))
        })?;
        let mut receipts = lock(self.receipts.as_ref().ok_or_else(internal)?)?;
        receipts.ack(&head).map_err(ControlError::Journal)?;
        tracing::info!(seq = head.seq, "receipts acknowledged");
        // The acknowledgement is durable whatever compaction does; a failed
        // compaction is logged and leaves the journal refusing writes.
        let compacted = crate::ports::compact_if_due(&mut receipts).ok();
        Ok(json!({"acknowledged": head.to_string(), "compacted": compacted}))
    }
}
