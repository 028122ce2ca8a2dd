//! The service state and request dispatch, without any socket.
//!
//! [`Service`] holds what `gloved` constructed at startup — the frozen
//! policy, the session store, the receipt journal — and the capability set
//! derived from them. [`Service::dispatch`] takes an [`Caller`]
//! proof and one parsed request and returns the result or a wire error; it
//! is synchronous (journal appends sync to disk), so the server runs it on
//! the blocking pool. The fuzz target drives it directly.

use crate::capabilities::{Capabilities, Components, Method};
use crate::error::{lock, ControlError};
use crate::managed::Runtime;
use crate::ports::Transitions;
use crate::protocol::{Request, RpcError};
use crate::Caller;
use glove_journal::receipt::ReceiptHead;
use glove_journal::session::{NewSession, SessionRecord};
use glove_journal::{JournalError, ReceiptJournal, SessionStore};
use glove_lifecycle::{with_brand, PlanDigests, Session};
use glove_types::canon;
use glove_types::codes::control::CONTROL_INVALID_PARAMS;
use glove_types::digest::to_hex;
use glove_types::ids::SessionId;
use glove_types::plan::{admit, DecodedPlan};
use glove_types::policy::ValidatedPolicy;
use glove_types::{Blake3Digest, Rejection};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::sync::{Arc, Mutex};

mod exposures;
mod params;
mod receipts;
mod sessions;
mod stages;

use params::*;

/// What `attach` returns: the transcript document and, while the session
/// runs, a receiver of its later events.
pub type Attached = (
    Value,
    Option<tokio::sync::broadcast::Receiver<crate::managed::Event>>,
);

/// Default number of receipts in one page.
pub const DEFAULT_PAGE_RECORDS: u64 = 64;
/// Most receipts in one page.
pub const MAX_PAGE_RECORDS: u64 = 1024;

/// Where the service reads the time from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// The system wall clock.
    System,
    /// A fixed time in Unix milliseconds (tests only; `gloved` honours
    /// `GLOVE_TEST_NOW_MS` in debug builds only).
    Fixed(u64),
}

impl Clock {
    /// Milliseconds since the Unix epoch.
    pub fn now_ms(self) -> u64 {
        match self {
            Clock::Fixed(t) => t,
            Clock::System => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(0),
        }
    }
}

/// What a service is built from.
#[derive(Debug)]
pub struct Parts {
    /// The frozen policy.
    pub policy: Option<ValidatedPolicy>,
    /// The replayed session store.
    pub store: Option<SessionStore>,
    /// The replayed receipt journal.
    pub receipts: Option<ReceiptJournal>,
    /// Everything else that shapes the capability document.
    pub components: Components,
    /// The clock plan admission uses.
    pub clock: Clock,
    /// The frame bound, which caps page sizes.
    pub max_frame_bytes: u32,
}

/// The control service (see the module docs).
#[derive(Debug)]
pub struct Service {
    /// Read once at startup and never replaced: the spec freezes the policy
    /// for the process lifetime.
    policy: Option<ValidatedPolicy>,
    /// The one writer of the session store; requests take turns. The store
    /// rewrites its anchor file after every durable append itself.
    store: Option<Arc<Mutex<SessionStore>>>,
    /// The one writer of the receipt journal; it also remembers the head of
    /// the last page served, which is the only head `receipts_ack` accepts.
    receipts: Option<Arc<Mutex<ReceiptJournal>>>,
    /// The managed runtime, when constructed (it is advertised only when
    /// its probe passed).
    runtime: Option<Arc<Runtime>>,
    /// Apply's trust policy and books, when configured.
    apply: Option<stages::ApplyParts>,
    /// The path exposures, when configured (shared with the runtime, whose
    /// starts open the plans' exposures).
    exposures: Option<Arc<crate::exposures::Exposures>>,
    /// What was constructed.
    components: Components,
    /// Derived once from what was constructed above.
    caps: Capabilities,
    clock: Clock,
    /// Largest `max_bytes` a page may ask for, so a page always fits a frame.
    max_page_bytes: u64,
}

impl Service {
    /// Builds the service and derives its capabilities. `parts.components`
    /// is completed from the parts that are present.
    pub fn new(parts: Parts) -> Service {
        let mut components = parts.components;
        components.policy_revision = parts.policy.as_ref().map(ValidatedPolicy::revision);
        components.session_store = parts.store.is_some();
        components.receipt_journal = parts.receipts.is_some();
        // A page's envelopes are embedded as JSON strings; escaping at most
        // doubles them. Keep 4 KiB for the rest of the response.
        let max_page_bytes = (u64::from(parts.max_frame_bytes).saturating_sub(4096)) / 2;
        let store = parts.store.map(|s| Arc::new(Mutex::new(s)));
        let receipts = parts.receipts.map(|r| Arc::new(Mutex::new(r)));
        Service {
            components: components.clone(),
            policy: parts.policy,
            store,
            receipts,
            runtime: None,
            apply: None,
            exposures: None,
            caps: Capabilities::derive(&components),
            clock: parts.clock,
            max_page_bytes: max_page_bytes.max(1),
        }
    }

    /// Constructs the managed runtime (with its configuration, the
    /// start-authorization key, and whether its startup probe passed) over
    /// the service's store and journal; the lifecycle methods are
    /// advertised only when the probe passed.
    pub fn with_runtime(
        self,
        cfg: crate::managed::RuntimeConfig,
        key: glove_lifecycle::ServiceKey,
        operational: bool,
    ) -> Service {
        let launcher = Arc::new(crate::managed::ProcessLauncher::new(&cfg.launcher));
        self.with_runtime_on(cfg, key, operational, launcher)
    }

    /// [`Service::with_runtime`] with launchers from `launcher` (a test's
    /// recording fake, for one).
    pub fn with_runtime_on(
        mut self,
        cfg: crate::managed::RuntimeConfig,
        key: glove_lifecycle::ServiceKey,
        operational: bool,
        launcher: Arc<dyn crate::managed::Launcher>,
    ) -> Service {
        if let (Some(s), Some(r), Some(_)) = (&self.store, &self.receipts, &self.policy) {
            self.runtime = Some(Arc::new(
                Runtime::with_launcher(cfg, key, s.clone(), r.clone(), self.clock, launcher)
                    .with_exposures(self.exposures.clone()),
            ));
            self.components.managed_runtime_operational = operational;
            self.components.retained_workspaces = crate::assembly::retained::supported().is_ok();
            self.caps = Capabilities::derive(&self.components);
        }
        self
    }

    /// Enables `stage_apply` with the trust policy and the apply books
    /// (below the materialization root); needs the managed runtime.
    pub fn with_apply(mut self, trust: crate::apply::TrustPolicy) -> Result<Service, Rejection> {
        let Some(rt) = &self.runtime else {
            return Ok(self);
        };
        let books = crate::apply::books::Books::open(&rt.apply_dir())?;
        self.apply = Some(stages::ApplyParts {
            trust,
            books: Mutex::new(books),
        });
        self.components.apply_operational = true;
        self.caps = Capabilities::derive(&self.components);
        Ok(self)
    }

    /// The advertised capabilities.
    pub fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    /// Answers one authenticated request. Internal errors become wire
    /// errors here, once ([`ControlError::to_wire`]).
    pub fn dispatch(&self, auth: &Caller, req: &Request) -> Result<Value, RpcError> {
        self.answer(auth, req).map_err(|e| e.to_wire())
    }

    fn answer(&self, auth: &Caller, req: &Request) -> Result<Value, ControlError> {
        let Some(method) = self.caps.advertised(&req.method) else {
            return Err(ControlError::MethodNotFound(req.method.clone()));
        };
        match method {
            Method::Capabilities => {
                params::<NoParams>(&req.params)?;
                Ok(self.caps.document().clone())
            }
            Method::ValidatePlan => self.validate_plan(params(&req.params)?),
            Method::CreateSession => self.create_session(params(&req.params)?),
            Method::SessionStatus => self.session_status(params(&req.params)?),
            Method::SessionList => self.session_list(params(&req.params)?),
            Method::ReceiptsPage => self.receipts_page(params(&req.params)?),
            Method::ReceiptsAck => self.receipts_ack(params(&req.params)?),
            Method::StartSession => {
                let p: StartParams = params(&req.params)?;
                let id = session_id(p.session_id)?;
                self.runtime()?.start(
                    self.policy()?,
                    auth.client_id(),
                    &id,
                    &p.authorization,
                    (p.rows.unwrap_or(24), p.cols.unwrap_or(80)),
                )
            }
            Method::WriteStdin => {
                let p: StdinParams = params(&req.params)?;
                let id = session_id(p.session_id)?;
                let bytes = match (p.data, p.data_hex) {
                    (Some(d), None) => d.into_bytes(),
                    (None, Some(h)) => crate::managed::from_hex(&h).ok_or_else(|| {
                        invalid_params(
                            &Rejection::new(CONTROL_INVALID_PARAMS, "data_hex is not hex")
                                .at("data_hex"),
                        )
                    })?,
                    _ => {
                        return Err(invalid_params(&Rejection::new(
                            CONTROL_INVALID_PARAMS,
                            "give exactly one of data and data_hex",
                        )))
                    }
                };
                self.runtime()?.write_stdin(auth.client_id(), &id, &bytes)
            }
            Method::Resize => {
                let p: ResizeParams = params(&req.params)?;
                let id = session_id(p.session_id)?;
                self.runtime()?
                    .resize(auth.client_id(), &id, p.rows, p.cols)
            }
            Method::Signal => {
                let p: SignalParams = params(&req.params)?;
                let id = session_id(p.session_id)?;
                let n = crate::managed::signal_number(&p.signal).ok_or_else(|| {
                    invalid_params(
                        &Rejection::new(
                            CONTROL_INVALID_PARAMS,
                            "signal is one of HUP INT QUIT KILL USR1 USR2 TERM CONT STOP WINCH",
                        )
                        .at("signal"),
                    )
                })?;
                self.runtime()?.signal(auth.client_id(), &id, n)
            }
            Method::StopSession => {
                let p: StopParams = params(&req.params)?;
                let id = session_id(p.session_id)?;
                self.runtime()?.stop(
                    auth.client_id(),
                    &id,
                    p.grace_ms
                        .unwrap_or(crate::managed::DEFAULT_STOP_GRACE_MS)
                        .min(60_000),
                )
            }
            Method::CleanupSession => {
                let p: StatusParams = params(&req.params)?;
                let id = session_id(p.session_id)?;
                self.runtime()?.cleanup(auth.client_id(), &id)
            }
            // The server answers these itself (they hold the connection's
            // stream); reached only without a server.
            Method::Attach => {
                let (v, _) = self.attach_inner(auth, &req.params)?;
                Ok(v)
            }
            Method::Detach => {
                let p: StatusParams = params(&req.params)?;
                session_id(p.session_id)?;
                Ok(json!({"detached": false}))
            }
            Method::StagesList => {
                params::<NoParams>(&req.params)?;
                self.stages_list(auth)
            }
            Method::StageDiff => self.stage_diff(auth, params(&req.params)?),
            Method::StageRemove => self.stage_remove(auth, params(&req.params)?),
            Method::StageApply => self.stage_apply(auth, params(&req.params)?),
            Method::ExposureCreate => self.exposure_create(auth, params(&req.params)?),
            Method::ExposureRevoke => self.exposure_revoke(auth, params(&req.params)?),
            Method::ExposureCatalog => {
                params::<NoParams>(&req.params)?;
                self.exposure_catalog()
            }
        }
    }

    /// `attach`: the transcript and, while the session runs, a receiver of
    /// its later events.
    pub fn attach(&self, auth: &Caller, p: &Map<String, Value>) -> Result<Attached, RpcError> {
        self.attach_inner(auth, p).map_err(|e| e.to_wire())
    }

    fn attach_inner(
        &self,
        auth: &Caller,
        p: &Map<String, Value>,
    ) -> Result<Attached, ControlError> {
        let p: AttachParams = params(p)?;
        let id = session_id(p.session_id)?;
        self.runtime()?
            .attach(auth.client_id(), &id, p.after_seq.unwrap_or(0))
    }

    /// Checks `detach`'s parameters.
    pub fn attach_check(&self, p: &Map<String, Value>) -> Result<(), RpcError> {
        let p: StatusParams = params(p).map_err(|e| e.to_wire())?;
        session_id(p.session_id).map_err(|e| e.to_wire())?;
        Ok(())
    }

    /// Resolves sessions a previous run left starting, running or stopping
    /// (see `docs/operations.md`, "Recovery").
    pub fn recover(&self) -> Vec<Value> {
        self.runtime
            .as_ref()
            .map(|r| r.recover())
            .unwrap_or_default()
    }

    fn runtime(&self) -> Result<&Arc<Runtime>, ControlError> {
        self.runtime.as_ref().ok_or_else(internal)
    }

    /// Stops the running managed sessions with the reason
    /// `service_shutdown` and waits (bounded) for their receipts. Shutdown
    /// calls it whatever the connections are doing: it needs no client.
    pub fn stop_sessions(&self) {
        if let Some(rt) = &self.runtime {
            rt.shutdown(1_000, std::time::Duration::from_secs(5));
        }
    }

    /// Releases the journals (their appends are already durable; dropping
    /// the handles releases the writer locks). Sessions are stopped first
    /// with [`Service::stop_sessions`].
    pub fn close(self) {
        drop(self.store);
        drop(self.receipts);
    }

    fn policy(&self) -> Result<&ValidatedPolicy, ControlError> {
        self.policy.as_ref().ok_or_else(internal)
    }

    fn admit(&self, p: &PlanParams) -> Result<glove_types::plan::AdmittedPlan, ControlError> {
        let policy = self.policy()?;
        let supplied = supplied_digest(p)?;
        let plan = DecodedPlan::decode(p.plan.as_bytes()).map_err(|r| reject(&r.at("plan")))?;
        admit(plan, supplied.as_ref(), policy, self.clock.now_ms()).map_err(|r| reject(&r))
    }

    fn validate_plan(&self, p: PlanParams) -> Result<Value, ControlError> {
        let a = self.admit(&p)?;
        self.check_exposures(a.plan())?;
        tracing::debug!(session_id = ?a.plan().session_id().as_str(), "plan validated");
        Ok(json!({
            "admitted": true,
            "session_id": a.plan().session_id().as_str(),
            "idempotency_key": a.plan().idempotency_key().as_str(),
            "expires_at_ms": a.expires_at_ms(),
            "plan_content_digest": a.plan_content_digest().to_hex(),
            "controller_plan_digest": a.controller_plan_digest().to_hex(),
            "plan_context_digest": a.plan_context_digest().to_hex(),
        }))
    }

    fn create_session(&self, p: PlanParams) -> Result<Value, ControlError> {
        let store = self.store.as_ref().ok_or_else(internal)?;
        let supplied = supplied_digest(&p)?;
        let plan = DecodedPlan::decode(p.plan.as_bytes()).map_err(|r| reject(&r.at("plan")))?;
        let mut store = lock(store)?;
        let known = store.by_idempotency_key(plan.idempotency_key()).is_some()
            || store.get(plan.session_id()).is_some();
        if known {
            // A retry (or a conflict): the store compares the exact bytes.
            // A byte-identical retry returns the original even after the
            // plan's expiry, since nothing new is admitted.
            if let Some(s) = &supplied {
                if *s != plan.controller_plan_digest() {
                    return Err(reject(&Rejection::new(
                        glove_types::codes::plan::PLAN_CONTROLLER_DIGEST_MISMATCH,
                        "controller_plan_digest is not the BLAKE3 digest of the canonical plan",
                    )));
                }
            }
            let req = NewSession {
                session_id: plan.session_id(),
                idempotency_key: plan.idempotency_key(),
                controller_plan_digest: plan.controller_plan_digest(),
                plan: plan.canonical_bytes(),
            };
            // Answered by the store without writing (the session is known).
            let creation = glove_journal::lifecycle::repeat_creation(&mut store, req)
                .ok_or_else(internal)?
                .map_err(ControlError::Journal)?;
            tracing::info!(session_id = ?plan.session_id().as_str(), "create_session retry returned the original");
            return Ok(session_result(creation.record(), false));
        }
        // A session id compaction forgot may still have its receipt: the id
        // is taken until the controller acknowledged that receipt and it was
        // compacted away too (docs/journal.md, "Compaction").
        if let Some(receipts) = &self.receipts {
            let j = lock(receipts)?;
            let subject = glove_lifecycle::Subject::Session(plan.session_id());
            let view = crate::ports::ReceiptView::new(&j);
            // A lookup that fails (two receipts for one id) refuses too.
            if let Some(r) = glove_lifecycle::TerminalReceiptRef::durable(&view, subject)
                .map_err(ControlError::Lifecycle)?
            {
                return Err(ControlError::refused(
                    glove_types::codes::journal::SESSION_CONFLICT,
                    format!(
                        "session {} already ended (receipt {}); a new session needs a new id",
                        plan.session_id().as_str(),
                        r.receipt_seq()
                    ),
                ));
            }
        }
        if store.needs_compaction() {
            // Without a runtime nothing was started in this process: the
            // used nonces are those of the stored start records.
            let carry = match &self.runtime {
                Some(r) => r.nonce_carry(),
                None => Some(
                    glove_lifecycle::recover_all(&*store)
                        .used_nonces
                        .iter()
                        .map(|(n, e)| (*n.as_bytes(), *e))
                        .collect(),
                ),
            };
            crate::ports::compact_store_if_due(&mut store, carry.as_deref(), self.clock.now_ms());
        }
        let policy = self.policy()?;
        let admitted =
            admit(plan, supplied.as_ref(), policy, self.clock.now_ms()).map_err(|r| reject(&r))?;
        let plan = admitted.plan();
        self.check_exposures(plan)?;
        let digests = PlanDigests::new(
            *admitted.plan_content_digest(),
            *admitted.controller_plan_digest(),
        );
        // A refinement evaluation ends only with a refinement receipt: the
        // creation record says so, and the lifecycle holds it to that.
        let digests = if admitted.refinement().is_some() {
            digests.refinement()
        } else {
            digests
        };
        // The shared adapter creates the session in the store from the staged
        // plan when the lifecycle appends record 0 (see
        // `glove_journal::lifecycle`).
        let mut log = Transitions::new(&mut store);
        log.stage_plan(
            plan.session_id(),
            plan.idempotency_key().clone(),
            plan.canonical_bytes().to_vec(),
        );
        let session = with_brand(|brand| -> Result<_, ControlError> {
            let proof = Session::log_create(brand, plan.session_id(), digests, &mut log)
                .map_err(|e| lifecycle(&e))?;
            Ok(Session::create(proof).map_err(|e| lifecycle(&e))?.park())
        })?;
        let record = store.get(session.id()).ok_or_else(internal)?.clone();
        tracing::info!(session_id = ?session.id().as_str(), "session created");
        Ok(session_result(&record, true))
    }

    fn session_status(&self, p: StatusParams) -> Result<Value, ControlError> {
        let id = SessionId::new(p.session_id).map_err(|r| invalid_params(&r.at("session_id")))?;
        {
            let store = lock(self.store.as_ref().ok_or_else(internal)?)?;
            if let Some(record) = store.get(&id) {
                return Ok(status_json(record));
            }
        }
        // Compacted away: an ended session whose receipt is still kept is
        // answered from the receipt.
        if let Some(receipts) = &self.receipts {
            let j = lock(receipts)?;
            if let Some(r) = j.receipts_of(&id).first() {
                let env: Value = serde_json::from_slice(&r.envelope).map_err(|_| internal())?;
                let body = glove_types::canon::to_canonical(&env["body"])?;
                let typed = glove_types::receipt::ResourceReceiptV1::decode(&body)?;
                let stage = match typed.termination {
                    glove_types::receipt::Termination::Failed { .. } => "failed",
                    _ => "exited",
                };
                return Ok(json!({
                    "session_id": id.as_str(),
                    "stage": stage,
                    "plan_content_digest": typed.plan_content_digest.to_hex(),
                    "controller_plan_digest": typed.controller_plan_digest.to_hex(),
                    "receipt_seq": r.seq,
                    "compacted": true,
                }));
            }
        }
        Err(ControlError::Journal(JournalError::SessionNotFound {
            session: id.clone(),
        }))
    }
}

fn invalid_params(r: &Rejection) -> ControlError {
    ControlError::InvalidParams(r.clone())
}

fn reject(r: &Rejection) -> ControlError {
    ControlError::Refused(r.clone())
}

fn internal() -> ControlError {
    ControlError::Internal("a service component is missing")
}

fn lifecycle(e: &glove_lifecycle::LifecycleError) -> ControlError {
    ControlError::Lifecycle(e.clone())
}

fn status_json(r: &SessionRecord) -> Value {
    json!({
        "session_id": r.session_id().as_str(),
        "idempotency_key": r.idempotency_key().as_str(),
        "stage": r.stage().as_str(),
        "plan_content_digest": r.plan_content_digest().to_hex(),
        "controller_plan_digest": r.controller_plan_digest().to_hex(),
        "created_seq": r.created_seq(),
        "stage_seq": r.stage_seq(),
    })
}

fn session_result(r: &SessionRecord, created: bool) -> Value {
    json!({"created": created, "session": status_json(r)})
}
