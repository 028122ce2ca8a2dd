//! Shared helpers: fixed inputs and "walk a session to stage X" (each
//! walk runs under its own brand and hands the session back parked).

use glove_lifecycle::memory::{ManualClock, MemoryLog, MemoryReceipts};
use glove_lifecycle::*;
use glove_types::ids::SessionId;
use glove_types::{Blake3Digest, Sha256Digest};

pub(crate) const NOW: u64 = 1_700_000_000_000;

pub(crate) fn sid(name: &str) -> SessionId {
    SessionId::new(name).expect("valid id")
}

pub(crate) fn digests_of(tag: &str) -> PlanDigests {
    PlanDigests::new(
        Sha256Digest::of(tag.as_bytes()),
        Blake3Digest::of(tag.as_bytes()),
    )
}

pub(crate) fn digests() -> PlanDigests {
    digests_of("plan")
}

pub(crate) fn key() -> ServiceKey {
    ServiceKey::new(&[0x5a; 32]).expect("32-byte key")
}

pub(crate) fn fields(id: &SessionId, d: PlanDigests, nonce: u8) -> StartAuthFields {
    StartAuthFields {
        session_id: id.clone(),
        digests: d,
        nonce: Nonce::from_bytes([nonce; 16]),
        issued_at_ms: NOW,
        expires_at_ms: NOW + 30_000,
    }
}

pub(crate) fn auth(id: &SessionId, d: PlanDigests, nonce: u8) -> StartAuthorization {
    StartAuthorization::issue(&key(), fields(id, d, nonce)).expect("issue")
}

pub(crate) fn binding(tag: u8) -> LaunchBinding {
    LaunchBinding::of_launch_spec(format!(r#"{{"launch":{tag}}}"#).as_bytes()).expect("canonical")
}

pub(crate) fn identity(pid: u32) -> ProcessIdentity {
    glove_lifecycle::memory::forge_identity("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", pid, 99, 7)
        .expect("valid identity")
}

/// A made-up receipt reference, not durable anywhere (see
/// [`World::with_receipt`] for one the receipt log hands out).
pub(crate) fn receipt(n: u64) -> TerminalReceiptRef {
    glove_lifecycle::memory::forge_receipt(n, Sha256Digest::of(&n.to_be_bytes()))
}

/// The ports one test uses.
pub(crate) struct World {
    pub(crate) log: MemoryLog,
    pub(crate) receipts: MemoryReceipts,
    pub(crate) clock: ManualClock,
    pub(crate) nonces: UsedNonces,
    next_nonce: u8,
}

impl World {
    pub(crate) fn new() -> Self {
        Self {
            log: MemoryLog::new(),
            receipts: MemoryReceipts::new(),
            clock: ManualClock::at(NOW),
            nonces: UsedNonces::new(64),
            next_nonce: 100,
        }
    }

    pub(crate) fn created(&mut self, id: &SessionId) -> ParkedSession<Created> {
        with_brand(|b| {
            let p = Session::log_create(b, id, digests(), &mut self.log).expect("log create");
            Session::create(p).expect("create").park()
        })
    }

    pub(crate) fn preparing(&mut self, id: &SessionId) -> ParkedSession<Preparing> {
        self.created(id).enter(|s| {
            let p = s.log_prepare(&mut self.log).expect("log prepare");
            s.prepare(p).expect("prepare").park()
        })
    }

    pub(crate) fn verified(&mut self, id: &SessionId, d: &PlanDigests, nonce: u8) -> VerifiedStart {
        auth(id, *d, nonce)
            .verify(
                &key(),
                id,
                d,
                StartAuthPolicy::default(),
                &self.clock,
                &mut self.nonces,
            )
            .expect("verify")
    }

    pub(crate) fn starting(&mut self, id: &SessionId) -> ParkedSession<Starting> {
        let s = self.preparing(id);
        self.next_nonce = self.next_nonce.wrapping_add(1);
        let v = self.verified(s.id(), s.digests(), self.next_nonce);
        s.enter(|s| {
            let p = s
                .log_start(binding(1), v, &mut self.log)
                .expect("log start");
            s.start(p).expect("start").park()
        })
    }

    pub(crate) fn running(&mut self, id: &SessionId) -> ParkedSession<Running> {
        self.starting(id).enter(|s| {
            let p = s.log_run(identity(4242), &mut self.log).expect("log run");
            s.run(p).expect("run").park()
        })
    }

    pub(crate) fn stopping(&mut self, id: &SessionId) -> ParkedSession<Stopping> {
        self.running(id).enter(|s| {
            let p = s
                .log_stop(StopReason::Requested, &mut self.log)
                .expect("log stop");
            s.stop(p).expect("stop").park()
        })
    }

    pub(crate) fn with_receipt(&mut self, id: &SessionId, n: u64) -> TerminalReceiptRef {
        self.receipts
            .append(Subject::Session(id), n, Sha256Digest::of(&n.to_be_bytes()))
    }

    pub(crate) fn session_records(&self) -> Vec<Vec<u8>> {
        self.log.records(SubjectKind::Session)
    }
}
