//! Reusing glove-lifecycle from another project: implement the two ports
//! your storage provides, then drive sessions through the typestate.
//!
//! Run with `cargo run -p glove-lifecycle --example reuse`.

use glove_lifecycle::{
    recover_all, with_brand, AppendReceipt, LifecycleError, PendingRecord, PlanDigests, PortError,
    ReceiptLog, Recovered, RecoveryDecision, Session, Subject, SubjectKind, TerminalReceiptRef,
    TransitionLog,
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

    fn lookup(&self, s: Subject<'_>, seq: u64) -> Result<Option<Vec<u8>>, PortError> {
        Ok(self
            .rows
            .iter()
            .find(|(k, id, q, _)| *k == s.kind() && id == s.id() && *q == seq)
            .map(|row| row.3.clone()))
    }
}

/// Your receipt journal, read-only for the lifecycle.
struct NoReceipts;

impl ReceiptLog for NoReceipts {
    fn terminal_receipt(&self, _: Subject<'_>) -> Result<Option<TerminalReceiptRef>, PortError> {
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

        // Without a durable terminal receipt a session cannot fail or exit.
        let receipt = TerminalReceiptRef::new(1, Sha256Digest::of(b"r"));
        let code = glove_types::codes::lifecycle::LIFECYCLE_RECOVERY_PREPARING_INTERRUPTED;
        if let Err(e) = preparing.log_fail(code, receipt, &NoReceipts, &mut store) {
            println!("fail without receipt: {}", e.code());
        }
        Ok(preparing.park())
    })?;

    // "Crash": drop the session, keep the store, recover.
    drop(parked);
    let rows: Vec<Vec<u8>> = store.rows.iter().map(|r| r.3.clone()).collect();
    let report = recover_all(rows);
    if let Some(Ok(Recovered::Interrupted(RecoveryDecision::AbandonPreparation(s)))) =
        report.sessions.get(&id)
    {
        // The recovered session is parked: `s.enter(|s| …)` gives it a new
        // brand to record the decision (`log_fail` with `d.code()`).
        println!("recovered {} as a decision: clean up, then fail", s.id());
    }
    Ok(())
}
