//! Reusing glove-lifecycle from another project: implement the ports your
//! storage provides (append and look up, read back for recovery, receipts),
//! then drive sessions through the typestate.
//!
//! Run with `cargo run -p glove-lifecycle --example reuse`.

use glove_lifecycle::{
    recover_all, with_brand, AppendReceipt, LifecycleError, PendingRecord, PlanDigests, PortError,
    ReceiptEntry, ReceiptLog, RecordSource, Recovered, RecoveryDecision, Session, StoredRecord,
    Subject, SubjectKind, TerminalReceiptRef, TransitionLog,
};
use glove_types::codes::lifecycle::LIFECYCLE_LOG_UNAVAILABLE;
use glove_types::ids::SessionId;
use glove_types::{Blake3Digest, Sha256Digest};

/// Your durable store. Here a vector; in production an fsynced journal
/// (glove-journal's session store implements the same trait).
#[derive(Default)]
struct MyStore {
    rows: Vec<(SubjectKind, String, u64, Vec<u8>)>,
}

impl TransitionLog for MyStore {
    fn append(&mut self, r: &PendingRecord<'_>) -> Result<AppendReceipt, PortError> {
        let s = r.subject();
        if self.lookup(s, r.seq())?.is_some() {
            return Err(PortError::new(LIFECYCLE_LOG_UNAVAILABLE));
        }
        self.rows
            .push((s.kind(), s.id().to_owned(), r.seq(), r.bytes().to_vec()));
        // ... fsync here, and only then:
        Ok(r.acknowledge())
    }

    fn lookup(&self, s: Subject<'_>, seq: u64) -> Result<Option<StoredRecord>, PortError> {
        Ok(self
            .rows
            .iter()
            .find(|(k, id, q, _)| *k == s.kind() && id == s.id() && *q == seq)
            .map(|row| StoredRecord::Bytes(row.3.clone())))
    }
}

/// Recovery reads the records back from the same store.
impl RecordSource for MyStore {
    fn session_records(&self, id: &SessionId) -> Vec<StoredRecord> {
        let mut rows: Vec<_> = self
            .rows
            .iter()
            .filter(|(k, i, _, _)| *k == SubjectKind::Session && i == id.as_str())
            .collect();
        rows.sort_by_key(|r| r.2);
        rows.into_iter()
            .map(|r| StoredRecord::Bytes(r.3.clone()))
            .collect()
    }

    fn all_session_records(&self) -> Vec<StoredRecord> {
        self.rows
            .iter()
            .filter(|r| r.0 == SubjectKind::Session)
            .map(|r| StoredRecord::Bytes(r.3.clone()))
            .collect()
    }
}

/// Your receipt journal, read-only for the lifecycle.
struct NoReceipts;

impl ReceiptLog for NoReceipts {
    fn terminal_receipt(&self, _: Subject<'_>) -> Result<Option<ReceiptEntry>, PortError> {
        Ok(None)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut store = MyStore::default();
    let id = SessionId::new("example-1")?;
    let digests = PlanDigests::new(Sha256Digest::of(b"plan"), Blake3Digest::of(b"plan"));

    // A brand names this one session inside the closure: the proofs its
    // `log_*` methods return carry the brand, and no other session can spend
    // them. The closure's result cannot mention the brand, so the session
    // leaves parked (or, in a registry, as an `AnySession`).
    let parked = with_brand(|brand| -> Result<_, LifecycleError> {
        let created = Session::create(Session::log_create(brand, &id, digests, &mut store)?)?;
        let proof = created.log_prepare(&mut store)?;
        let preparing = created.prepare(proof)?;
        println!("{} is {}", preparing.id(), preparing.stage().as_str());

        // Without a durable terminal receipt a session cannot fail or exit:
        // only the receipt log hands out a `TerminalReceiptRef`.
        let code = glove_types::codes::lifecycle::LIFECYCLE_RECOVERY_PREPARING_INTERRUPTED;
        match TerminalReceiptRef::durable(&NoReceipts, Subject::Session(&id))? {
            Some(receipt) => {
                let p = preparing.log_fail(code, receipt, &NoReceipts, &mut store)?;
                drop(preparing.fail(p)?);
                return Ok(None);
            }
            None => println!("no durable receipt yet: the session cannot fail"),
        }
        Ok(Some(preparing.park()))
    })?;

    // "Crash": drop the session, keep the store, recover.
    drop(parked);
    let report = recover_all(&store);
    if let Some(Ok(Recovered::Interrupted(RecoveryDecision::AbandonPreparation(s)))) =
        report.sessions.get(&id)
    {
        // The recovered session is parked: `s.enter(|s| …)` gives it a new
        // brand to record the decision (`log_fail` with `d.code()`).
        println!("recovered {} as a decision: clean up, then fail", s.id());
    }
    Ok(())
}
