// This file is over 600 lines because it is one battery on the managed runtime sharing one recording fake launcher and its rig.
//! The managed runtime's start, stop and failure logic against a recording
//! fake launcher (the same logic runs against the real `glove-launcher` in
//! `glove-bin`'s `control` tests). The store and receipt journal are the
//! real ones, on disk.

use glove_control::managed::{self, Launcher, LauncherLink, LauncherWriter, RuntimeConfig};
use glove_control::protocol::Request;
use glove_control::service::{Clock, Parts, Service};
use glove_control::Caller;
use glove_journal::receipt::{ReceiptConfig, ReceiptHead, ReceiptKey};
use glove_journal::{ReceiptJournal, SessionStore};
use glove_lifecycle::ServiceKey;
use glove_sandbox::outcome::{Enforcement, ExitStatus, Mechanism, Outcome, Usage};
use glove_sandbox::wire::{Failure, FromLauncher, Started, ToLauncher};
use glove_types::policy::ValidatedPolicy;
use glove_types::Sha256Digest;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

const NOW_MS: u64 = 1_796_000_010_000;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn example(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(repo().join("docs/examples").join(name)).expect("read"))
        .expect("json")
}

fn launch() -> Value {
    json!({
        "executable_path": "/bin/sh",
        "arguments": [],
        "environment": ["PATH=/usr/bin:/bin"],
        "read_only_paths": [],
    })
}

fn adapter_digest() -> String {
    let mut obj = launch();
    obj["runtime_id"] = json!("codex");
    let bytes = glove_types::canon::to_canonical(&obj).expect("canonical");
    Sha256Digest::of_domain("glove.adapter-command.v1", &bytes).to_hex()
}

/// What the fake does at each step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Script {
    /// Prepares, starts, echoes input, exits when told or stopped.
    Normal,
    /// Refuses to prepare.
    FailPrepare,
    /// Goes away after the release, without a `Started` frame.
    LostAfterRelease,
    /// Cannot be spawned at all.
    SpawnFails,
    /// Runs, but gives no second writer.
    WriterFails,
}

#[derive(Default)]
struct State {
    queue: VecDeque<FromLauncher>,
    closed: bool,
}

struct Channel {
    st: Mutex<State>,
    cv: Condvar,
    /// The process the fake reports as the sandbox init (this test process
    /// unless a test gives it a child it may kill).
    init_pid: Option<u32>,
}

impl Channel {
    fn push(&self, f: FromLauncher) {
        self.st.lock().expect("lock").queue.push_back(f);
        self.cv.notify_all();
    }

    fn close(&self) {
        self.st.lock().expect("lock").closed = true;
        self.cv.notify_all();
    }
}

/// A launcher that records every frame it is sent, in order, across every
/// link it handed out.
struct Fake {
    script: Script,
    log: Arc<Mutex<Vec<String>>>,
    links: Mutex<Vec<Arc<Channel>>>,
    /// Reads the durable stage of the session being started, so the log
    /// shows what was durable when each frame was sent.
    probe: Arc<Mutex<Option<Probe>>>,
    /// Runs once when the spec arrives (the sandbox is being prepared).
    on_spec: Arc<Mutex<Option<Hook>>>,
    /// The init the next links report.
    init_pid: Mutex<Option<u32>>,
}

type Probe = Box<dyn Fn() -> String + Send>;
type Hook = Box<dyn FnOnce() + Send>;

impl Fake {
    fn new(script: Script) -> Arc<Fake> {
        Arc::new(Fake {
            script,
            log: Arc::default(),
            links: Mutex::default(),
            probe: Arc::default(),
            on_spec: Arc::default(),
            init_pid: Mutex::default(),
        })
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().expect("lock").clone()
    }

    /// The agent of the last link exits with `code`.
    fn exit(&self, code: i32) {
        let link = self
            .links
            .lock()
            .expect("lock")
            .last()
            .cloned()
            .expect("link");
        link.push(FromLauncher::Exited(Box::new(outcome(code, false))));
    }
}

fn enforcement() -> Enforcement {
    Enforcement {
        cpu_time: Mechanism::CgroupV2,
        memory: Mechanism::CgroupV2,
        pids: Mechanism::CgroupV2,
        wall_time: Mechanism::CgroupV2,
        disk: Mechanism::CgroupV2,
        terminal_output: Mechanism::CgroupV2,
    }
}

fn outcome(code: i32, stopped: bool) -> Outcome {
    Outcome {
        exit: ExitStatus::Exited { code },
        ended_by: None,
        limits_reached: vec![],
        usage: Usage {
            wall_time_ms: 7,
            ..Usage::default()
        },
        enforcement: enforcement(),
        stopped,
        output_complete: true,
    }
}

struct FakeLink {
    script: Script,
    log: Arc<Mutex<Vec<String>>>,
    ch: Arc<Channel>,
    probe: Arc<Mutex<Option<Probe>>>,
    on_spec: Arc<Mutex<Option<Hook>>>,
}

fn name(m: &ToLauncher) -> String {
    match m {
        ToLauncher::Spec(_) => "spec".into(),
        ToLauncher::Stdin(d) => format!("stdin:{}", String::from_utf8_lossy(d)),
        ToLauncher::Resize(r, c) => format!("resize:{r}x{c}"),
        ToLauncher::Signal(s) => format!("signal:{s}"),
        ToLauncher::Stop(g) => format!("stop:{g}"),
        ToLauncher::Release => "release".into(),
        ToLauncher::ReleaseWith(_) => "release_with".into(),
    }
}

fn record(log: &Mutex<Vec<String>>, m: &ToLauncher) {
    log.lock().expect("lock").push(name(m));
}

fn answer_probed(
    script: Script,
    log: &Mutex<Vec<String>>,
    ch: &Channel,
    probe: &Mutex<Option<Probe>>,
    m: &ToLauncher,
) {
    if matches!(
        m,
        ToLauncher::Spec(_) | ToLauncher::Release | ToLauncher::Stop(_)
    ) {
        if let Some(p) = probe.lock().expect("lock").as_ref() {
            let stage = p();
            log.lock()
                .expect("lock")
                .push(format!("{}@{stage}", name(m)));
        }
    }
    record(log, m);
    reply(script, ch, m);
}

fn reply(script: Script, ch: &Channel, m: &ToLauncher) {
    match (m, script) {
        (ToLauncher::Spec(_), Script::FailPrepare) => ch.push(FromLauncher::Failed(Failure {
            code: "sandbox_setup_failed".into(),
            message: "bind source /home/operator/.private/project: ENOENT".into(),
        })),
        (ToLauncher::Spec(_), _) => ch.push(FromLauncher::Prepared(Box::new(
            glove_sandbox::launch::PreparedFacts {
                grants: vec![],
                bundles: vec![],
            },
        ))),
        (ToLauncher::Release, Script::LostAfterRelease) => ch.close(),
        (ToLauncher::Release, _) => {
            // The "init" is a real, live process: this test process, or a
            // child the test gave.
            let pid = ch.init_pid.unwrap_or(std::process::id());
            let init = glove_sandbox::identity::ProcessIdentity::of(pid as i32).expect("identity");
            ch.push(FromLauncher::Started(Box::new(Started {
                init,
                launcher_pid: std::process::id() as i32,
                enforcement: enforcement(),
            })));
        }
        (ToLauncher::Stdin(d), _) => ch.push(FromLauncher::Output(d.clone())),
        (ToLauncher::Stop(_), _) => ch.push(FromLauncher::Exited(Box::new(outcome(143, true)))),
        _ => {}
    }
}

impl LauncherLink for FakeLink {
    fn send(&mut self, m: &ToLauncher) -> Result<(), String> {
        if matches!(m, ToLauncher::Spec(_)) {
            let hook = self.on_spec.lock().expect("lock").take();
            if let Some(h) = hook {
                h();
            }
        }
        answer_probed(self.script, &self.log, &self.ch, &self.probe, m);
        Ok(())
    }

    fn recv(&mut self) -> Result<FromLauncher, String> {
        let mut st = self.ch.st.lock().expect("lock");
        loop {
            if let Some(f) = st.queue.pop_front() {
                return Ok(f);
            }
            if st.closed {
                return Err("the launcher closed its socket".into());
            }
            let (g, t) = self
                .ch
                .cv
                .wait_timeout(st, Duration::from_secs(30))
                .expect("wait");
            st = g;
            if t.timed_out() {
                return Err("timed out".into());
            }
        }
    }

    fn writer(&self) -> Result<Box<dyn LauncherWriter>, String> {
        if self.script == Script::WriterFails {
            return Err("no second writer".into());
        }
        Ok(Box::new(FakeWriter {
            script: self.script,
            log: self.log.clone(),
            ch: self.ch.clone(),
            probe: self.probe.clone(),
        }))
    }

    fn pid(&self) -> u32 {
        // Recorded as the launcher for recovery: never this test process
        // when the test gave a child it may kill.
        self.ch.init_pid.unwrap_or(std::process::id())
    }

    fn unbounded(&mut self) {}

    fn close(self: Box<Self>) {
        self.log.lock().expect("lock").push("closed".into());
    }
}

struct FakeWriter {
    script: Script,
    log: Arc<Mutex<Vec<String>>>,
    ch: Arc<Channel>,
    probe: Arc<Mutex<Option<Probe>>>,
}

impl LauncherWriter for FakeWriter {
    fn send(&mut self, m: &ToLauncher) -> Result<(), String> {
        answer_probed(self.script, &self.log, &self.ch, &self.probe, m);
        Ok(())
    }
}

impl Launcher for Fake {
    fn spawn(&self) -> Result<Box<dyn LauncherLink>, glove_types::Rejection> {
        self.log.lock().expect("lock").push("spawn".into());
        if self.script == Script::SpawnFails {
            return Err(glove_types::Rejection::new(
                glove_types::codes::control::SESSION_LAUNCH_FAILED,
                "the fake cannot be spawned",
            ));
        }
        let ch = Arc::new(Channel {
            st: Mutex::default(),
            cv: Condvar::new(),
            init_pid: *self.init_pid.lock().expect("lock"),
        });
        self.links.lock().expect("lock").push(ch.clone());
        Ok(Box::new(FakeLink {
            script: self.script,
            log: self.log.clone(),
            ch,
            probe: self.probe.clone(),
            on_spec: self.on_spec.clone(),
        }))
    }
}

/// A service with a real store and receipt journal in a temporary
/// directory, and the fake as its launcher.
struct Rig {
    _dir: tempfile::TempDir,
    service: Arc<Service>,
    fake: Arc<Fake>,
    key: ServiceKey,
    caller: Caller,
}

const START_KEY: [u8; 32] = [0x5a; 32];

impl Rig {
    fn new(script: Script) -> Rig {
        Rig::build(script, ReceiptConfig::default())
    }

    fn build(script: Script, receipt_config: ReceiptConfig) -> Rig {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("project")).expect("mkdir");
        let state = dir.path().join("state");
        std::fs::create_dir(&state).expect("mkdir");
        std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .expect("chmod");
        let mat = state.join("mat");
        std::fs::create_dir(&mat).expect("mkdir");
        std::fs::set_permissions(&mat, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .expect("chmod");
        Rig::open(dir, script, receipt_config, true)
    }

    /// The service over the journals in `dir` (created when `fresh`).
    fn open(
        dir: tempfile::TempDir,
        script: Script,
        receipt_config: ReceiptConfig,
        fresh: bool,
    ) -> Rig {
        let workspace = dir.path().join("project");
        let mut policy = example("policy.json");
        policy["runtime_templates"][0]["launch"] = launch();
        policy["runtime_templates"][0]["adapter_command_digest"] = json!(adapter_digest());
        policy["path_aliases"][0]["host_path"] = json!(workspace.display().to_string());
        let policy = ValidatedPolicy::from_json(
            &glove_types::canon::to_canonical(&policy).expect("canonical"),
        )
        .expect("policy");
        let state = dir.path().join("state");
        let (store_path, receipts_path) = (
            state.join("sessions.journal"),
            state.join("receipts.journal"),
        );
        let rkey = ReceiptKey::from_bytes([0xab; 32]);
        let genesis = ReceiptHead {
            seq: 0,
            chain: [0; 32],
        };
        let (store, receipts) = if fresh {
            (
                SessionStore::create(&store_path).expect("store"),
                ReceiptJournal::create(&receipts_path, rkey, &genesis, receipt_config)
                    .expect("receipts"),
            )
        } else {
            (
                SessionStore::open(&store_path, None).expect("store").0,
                ReceiptJournal::open(&receipts_path, rkey, &genesis, receipt_config)
                    .expect("receipts")
                    .0,
            )
        };
        let cfg = RuntimeConfig {
            launcher: PathBuf::from("/nonexistent/glove-launcher"),
            bundle_root: None,
            runtime_dir: dir.path().join("run"),
            held: glove_control::held::HeldPaths::new(),
            transcript_bytes: 4096,
            materialization_root: state.join("mat"),
            egress_extra_roots: Vec::new(),
        };
        let fake = Fake::new(script);
        let service = Service::new(Parts {
            policy: Some(policy),
            store: Some(store),
            receipts: Some(receipts),
            components: Default::default(),
            clock: Clock::Fixed(NOW_MS),
            max_frame_bytes: 1 << 20,
        })
        .with_runtime_on(
            cfg,
            ServiceKey::new(&START_KEY).expect("key"),
            true,
            fake.clone(),
        );
        Rig {
            _dir: dir,
            service: Arc::new(service),
            fake,
            key: ServiceKey::new(&START_KEY).expect("key"),
            caller: Caller::new("test"),
        }
    }

    /// Closes the journals and opens them again (a restart).
    fn reopen(self, script: Script) -> Rig {
        let Rig { _dir, service, .. } = self;
        let service = Arc::into_inner(service).expect("no other holder of the service");
        service.stop_sessions();
        service.close();
        Rig::open(_dir, script, ReceiptConfig::default(), false)
    }

    fn call(
        &self,
        method: &str,
        params: Value,
    ) -> Result<Value, glove_control::protocol::RpcError> {
        let Value::Object(params) = params else {
            panic!("params object")
        };
        self.service.dispatch(
            &self.caller,
            &Request {
                id: Some(json!(1)),
                method: method.into(),
                params,
            },
        )
    }

    /// Creates `session` and returns a fresh start authorization for it.
    fn created(&self, session: &str) -> String {
        let mut plan = example("plan.json");
        plan["adapter_command_digest"] = json!(adapter_digest());
        plan["library_projections"] = json!([]);
        plan["secret_handles"] = json!([]);
        plan["session_id"] = json!(session);
        plan["idempotency_key"] = json!(format!("key-{session}"));
        let plan = String::from_utf8(glove_types::canon::to_canonical(&plan).expect("canon"))
            .expect("utf-8");
        let v = self
            .call("create_session", json!({"plan": plan}))
            .expect("create");
        let s = &v["session"];
        managed::issue_authorization(
            &self.key,
            session,
            s["plan_content_digest"].as_str().expect("digest"),
            s["controller_plan_digest"].as_str().expect("digest"),
            NOW_MS,
            30_000,
        )
        .expect("authorization")
    }

    fn start(&self, session: &str, auth: &str) -> Result<Value, glove_control::protocol::RpcError> {
        // What the store holds durably for `session` when the fake gets a
        // frame (the runtime holds no store lock while it talks to the
        // launcher).
        let service = Arc::downgrade(&self.service);
        let id = session.to_owned();
        *self.fake.probe.lock().expect("lock") = Some(Box::new(move || {
            let Some(s) = service.upgrade() else {
                return "gone".into();
            };
            let Value::Object(params) = json!({"session_id": id}) else {
                unreachable!()
            };
            let req = Request {
                id: None,
                method: "session_status".into(),
                params,
            };
            s.dispatch(&Caller::new("probe"), &req)
                .map(|v| v["stage"].as_str().unwrap_or("?").to_owned())
                .unwrap_or_else(|e| e.code.as_str().to_owned())
        }));
        self.call(
            "start_session",
            json!({"session_id": session, "authorization": auth}),
        )
    }

    fn stage(&self, session: &str) -> String {
        self.call("session_status", json!({"session_id": session}))
            .expect("status")["stage"]
            .as_str()
            .expect("stage")
            .to_owned()
    }

    /// Waits (bounded) for `session` to reach `stage`.
    fn wait_stage(&self, session: &str, stage: &str) {
        for _ in 0..500 {
            if self.stage(session) == stage {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!(
            "{session} never reached {stage}; it is {}",
            self.stage(session)
        );
    }

    /// The receipt body naming `session`.
    fn receipt(&self, session: &str) -> Value {
        let page = self
            .call("receipts_page", json!({"after_seq": 0}))
            .expect("page");
        for r in page["receipts"].as_array().expect("receipts") {
            let env: Value =
                serde_json::from_str(r["envelope"].as_str().expect("envelope")).expect("json");
            if env["body"]["session_id"] == session {
                // Every body the runtime writes is a valid typed receipt.
                let bytes = glove_types::canon::to_canonical(&env["body"]).expect("canonical");
                glove_types::receipt::ResourceReceiptV1::decode(&bytes).expect("typed receipt");
                return env["body"].clone();
            }
        }
        panic!("no receipt for {session} in {page}");
    }
}

fn lifecycle_available() -> bool {
    // The fake's "init" is this process; its identity needs its cgroup
    // directory, which every Linux host with cgroups has.
    Path::new("/sys/fs/cgroup").exists()
}

#[test]
fn a_session_runs_only_after_its_binding_is_durable_and_ends_with_a_receipt() {
    if !lifecycle_available() {
        eprintln!("skipping: no /sys/fs/cgroup");
        return;
    }
    let rig = Rig::new(Script::Normal);
    let auth = rig.created("s-normal");
    let started = rig.start("s-normal", &auth).expect("start");
    assert_eq!(started["stage"], "running");
    assert_eq!(rig.stage("s-normal"), "running");
    // Spawned once; the spec went out with `preparing` durable, the release
    // with `starting` (and so the launch binding) durable; nothing else.
    assert_eq!(
        rig.fake.log(),
        [
            "spawn",
            "spec@preparing",
            "spec",
            "release@starting",
            "release"
        ]
    );

    rig.call(
        "write_stdin",
        json!({"session_id": "s-normal", "data": "hello"}),
    )
    .expect("stdin");
    rig.fake.exit(3);
    rig.wait_stage("s-normal", "exited");
    let body = rig.receipt("s-normal");
    assert_eq!(body["termination"]["reason"], "exited");
    assert_eq!(body["termination"]["exit"]["code"], 3);
    assert_eq!(
        body["launch_binding_digest"], started["launch_binding_digest"],
        "the receipt names the binding the start recorded"
    );
    assert_eq!(body["limits"]["wall_time_ms"], 2000);
    assert_eq!(body["recovered"], false);
    let log = rig.fake.log();
    assert_eq!(log[5], "stdin:hello");
    assert_eq!(log.last().map(String::as_str), Some("closed"));
}

#[test]
fn a_replayed_authorization_spawns_nothing() {
    if !lifecycle_available() {
        eprintln!("skipping: no /sys/fs/cgroup");
        return;
    }
    let rig = Rig::new(Script::Normal);
    let auth = rig.created("s-replay");
    rig.start("s-replay", &auth).expect("start");
    let e = rig.start("s-replay", &auth).expect_err("replayed");
    assert_eq!(e.code.as_str(), "start_auth_replayed");
    assert_eq!(
        rig.fake.log().iter().filter(|l| *l == "spawn").count(),
        1,
        "the replay never reached the launcher"
    );
    rig.fake.exit(0);
    rig.wait_stage("s-replay", "exited");
}

#[test]
fn a_refused_prepare_fails_the_session_with_a_receipt_and_no_release() {
    let rig = Rig::new(Script::FailPrepare);
    let auth = rig.created("s-prep");
    let e = rig.start("s-prep", &auth).expect_err("refused");
    // The sandbox's own code, as `glove exec` gives it for the same fault.
    assert_eq!(e.code.as_str(), "sandbox_setup_failed");
    assert_eq!(rig.stage("s-prep"), "failed");
    assert_eq!(
        rig.fake.log(),
        ["spawn", "spec@preparing", "spec", "closed"]
    );
    let body = rig.receipt("s-prep");
    // The launcher's message names a host path: it goes to the log, not to
    // the wire or the receipt.
    assert!(!e.message.contains("/home/operator"), "{}", e.message);
    assert!(
        !body["termination"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("/home/operator"),
        "{body}"
    );
    assert!(
        e.message.starts_with("sandbox_setup_failed"),
        "{}",
        e.message
    );
    assert_eq!(body["termination"]["reason"], "failed");
    assert_eq!(body["termination"]["code"], "sandbox_setup_failed");
    assert_eq!(
        body["launch_binding_digest"],
        Value::Null,
        "no binding was made"
    );
}

#[test]
fn a_launcher_that_cannot_be_spawned_fails_the_session_with_a_receipt() {
    let rig = Rig::new(Script::SpawnFails);
    let auth = rig.created("s-spawn");
    let e = rig.start("s-spawn", &auth).expect_err("refused");
    assert_eq!(e.code.as_str(), "session_launch_failed");
    assert_eq!(rig.stage("s-spawn"), "failed");
    assert_eq!(rig.fake.log(), ["spawn"]);
    assert_eq!(rig.receipt("s-spawn")["termination"]["reason"], "failed");
}

#[test]
fn a_launcher_lost_after_the_release_fails_the_session_as_lost() {
    let rig = Rig::new(Script::LostAfterRelease);
    let auth = rig.created("s-lost");
    let e = rig.start("s-lost", &auth).expect_err("lost");
    assert_eq!(e.code.as_str(), "session_launcher_lost");
    assert_eq!(rig.stage("s-lost"), "failed");
    assert_eq!(
        rig.fake.log(),
        [
            "spawn",
            "spec@preparing",
            "spec",
            "release@starting",
            "release",
            "closed"
        ]
    );
    let body = rig.receipt("s-lost");
    assert_eq!(body["termination"]["code"], "session_launcher_lost");
    assert_ne!(
        body["launch_binding_digest"],
        Value::Null,
        "the binding was durable before the release"
    );
}

#[test]
fn stop_sends_the_grace_after_the_stop_record_and_the_receipt_says_stopped() {
    if !lifecycle_available() {
        eprintln!("skipping: no /sys/fs/cgroup");
        return;
    }
    let rig = Rig::new(Script::Normal);
    let auth = rig.created("s-stop");
    rig.start("s-stop", &auth).expect("start");
    let v = rig
        .call(
            "stop_session",
            json!({"session_id": "s-stop", "grace_ms": 250}),
        )
        .expect("stop");
    assert_eq!(v["stage"], "stopping");
    rig.wait_stage("s-stop", "exited");
    let log = rig.fake.log();
    let at = log.iter().position(|l| l == "stop:250").expect("stop sent");
    assert_eq!(
        log[at - 1],
        "stop:250@stopping",
        "the stop intent was durable first"
    );
    assert_eq!(rig.receipt("s-stop")["termination"]["reason"], "stopped");
    // A second stop of an ended session is refused, and sends nothing.
    let before = rig.fake.log().len();
    let e = rig
        .call("stop_session", json!({"session_id": "s-stop"}))
        .expect_err("ended");
    assert_eq!(e.code.as_str(), "session_not_live");
    assert_eq!(rig.fake.log().len(), before);
}

#[test]
fn another_client_cannot_drive_a_session() {
    if !lifecycle_available() {
        eprintln!("skipping: no /sys/fs/cgroup");
        return;
    }
    let rig = Rig::new(Script::Normal);
    let auth = rig.created("s-owned");
    rig.start("s-owned", &auth).expect("start");
    let other = Caller::new("someone-else");
    let Value::Object(params) = json!({"session_id": "s-owned", "data": "x"}) else {
        unreachable!()
    };
    let e = rig
        .service
        .dispatch(
            &other,
            &Request {
                id: Some(json!(2)),
                method: "write_stdin".into(),
                params,
            },
        )
        .expect_err("not owned");
    assert_eq!(e.code.as_str(), "session_not_owned");
    assert!(!rig.fake.log().iter().any(|l| l.starts_with("stdin")));
    rig.fake.exit(0);
    rig.wait_stage("s-owned", "exited");
}

#[test]
fn acknowledged_receipts_are_compacted_so_sessions_outlive_the_receipt_budget() {
    // Room for about a dozen records: without compaction after the
    // acknowledgements the fifth or so session's reservation is refused.
    let rig = Rig::build(
        Script::FailPrepare,
        ReceiptConfig {
            max_bytes: 256 * 1024,
            max_records: 16,
            max_body_bytes: 8192,
        },
    );
    let mut compactions = 0;
    let mut acked = 0;
    for i in 0..40 {
        let id = format!("s-budget-{i}");
        let auth = rig.created(&id);
        let e = rig.start(&id, &auth).expect_err("the fake refuses");
        assert_eq!(e.code.as_str(), "sandbox_setup_failed", "session {i}");
        let page = rig
            .call("receipts_page", json!({"after_seq": acked}))
            .expect("page");
        let head = page["head"].as_str().expect("head").to_owned();
        acked = ReceiptHead::parse(&head).expect("head").seq;
        let ack = rig
            .call("receipts_ack", json!({"head": head}))
            .expect("ack");
        if ack["compacted"].as_u64().unwrap_or(0) > 0 {
            compactions += 1;
        }
    }
    assert!(compactions > 0, "the journal was compacted");
}

#[test]
fn a_start_racing_shutdown_is_not_released() {
    let rig = Rig::new(Script::Normal);
    let auth = rig.created("s-race");
    // While the sandbox is being prepared, shutdown begins (in a thread of
    // its own, as the server's signal handler would run it).
    let service = rig.service.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    *rig.fake.on_spec.lock().expect("lock") = Some(Box::new(move || {
        let s = service.clone();
        let t = std::thread::spawn(move || s.stop_sessions());
        // Wait until the runtime refuses new starts: shutdown has begun.
        let Value::Object(params) = json!({"session_id": "nobody", "authorization": "x"}) else {
            unreachable!()
        };
        let req = Request {
            id: None,
            method: "start_session".into(),
            params,
        };
        for _ in 0..1000 {
            let e = service
                .dispatch(&Caller::new("probe"), &req)
                .expect_err("refused");
            if e.code.as_str() == "control_shutting_down" {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        tx.send(t).expect("send");
    }));
    let e = rig.start("s-race", &auth).expect_err("not released");
    assert_eq!(e.code.as_str(), "control_shutting_down");
    rx.recv()
        .expect("shutdown thread")
        .join()
        .expect("shutdown");
    assert!(
        !rig.fake.log().iter().any(|l| l == "release"),
        "the sandbox was never released: {:?}",
        rig.fake.log()
    );
    assert_eq!(rig.stage("s-race"), "failed");
    assert_eq!(
        rig.receipt("s-race")["termination"]["code"],
        "control_shutting_down"
    );
}

/// Acknowledges every receipt after `after`, page by page; returns the
/// last head's seq and how many receipts the compactions dropped.
fn ack_all(rig: &Rig, mut after: u64) -> (u64, u64) {
    let mut compacted = 0;
    loop {
        let page = rig
            .call(
                "receipts_page",
                json!({"after_seq": after, "max_records": 1024}),
            )
            .expect("page");
        if page["receipts"].as_array().is_none_or(Vec::is_empty) {
            return (after, compacted);
        }
        let head = page["head"].as_str().expect("head").to_owned();
        let ack = rig
            .call("receipts_ack", json!({"head": head}))
            .expect("ack");
        compacted += ack["compacted"].as_u64().unwrap_or(0);
        after = ReceiptHead::parse(&head).expect("head").seq;
    }
}

#[test]
fn the_store_is_compacted_so_sessions_outlive_its_record_budget() {
    // 10,000 records are about 3,300 sessions that fail at prepare (create,
    // prepare, failed): without compaction the store is full long before
    // 4,000 of them.
    let rig = Rig::new(Script::FailPrepare);
    let mut acked = 0;
    for i in 0..4_000 {
        let id = format!("s-many-{i}");
        let auth = rig.created(&id);
        let e = rig.start(&id, &auth).expect_err("the fake refuses");
        assert_eq!(e.code.as_str(), "sandbox_setup_failed", "session {i}");
        if i % 500 == 499 {
            acked = ack_all(&rig, acked).0;
        }
    }
    // A session compaction dropped is gone from the store; while its
    // receipt is kept, its status is answered from the receipt.
    let v = rig
        .call("session_status", json!({"session_id": "s-many-0"}))
        .expect("status from the receipt");
    assert_eq!(v["compacted"], true, "{v}");
    assert_eq!(v["stage"], "failed");
}

#[test]
fn an_id_with_a_receipt_is_not_reused_and_a_carried_nonce_is_not_replayed() {
    // A receipt budget small enough that acknowledging everything compacts.
    let rig = Rig::build(
        Script::FailPrepare,
        ReceiptConfig {
            max_records: 8_000,
            ..ReceiptConfig::default()
        },
    );
    let auth = rig.created("s-once");
    rig.start("s-once", &auth).expect_err("the fake refuses");
    // Many more sessions, until a compaction drops `s-once`.
    let mut i = 0;
    while rig
        .call("session_status", json!({"session_id": "s-once"}))
        .expect("status")["compacted"]
        != true
    {
        let id = format!("s-fill-{i}");
        let a = rig.created(&id);
        rig.start(&id, &a).expect_err("the fake refuses");
        i += 1;
        assert!(i < 5_000, "s-once was never compacted away");
    }
    // Its receipt still holds the id.
    let mut plan = example("plan.json");
    plan["adapter_command_digest"] = json!(adapter_digest());
    plan["library_projections"] = json!([]);
    plan["secret_handles"] = json!([]);
    plan["session_id"] = json!("s-once");
    plan["idempotency_key"] = json!("key-s-once");
    let plan =
        String::from_utf8(glove_types::canon::to_canonical(&plan).expect("canon")).expect("utf-8");
    let e = rig
        .call("create_session", json!({"plan": plan}))
        .expect_err("the id is taken");
    assert_eq!(e.code.as_str(), "session_conflict");
    // Once every receipt is acknowledged and compacted away, and after a
    // restart, the id may be created again, but the old authorization (not
    // expired) is still refused: the store's snapshot carried its nonce.
    let (_, compacted) = ack_all(&rig, 0);
    assert!(
        compacted > 0,
        "the acknowledged receipts were compacted away"
    );
    let rig = rig.reopen(Script::Normal);
    rig.call("create_session", json!({"plan": plan}))
        .expect("the id is free again");
    let e = rig.start("s-once", &auth).expect_err("replayed");
    assert_eq!(e.code.as_str(), "start_auth_replayed");
    assert!(
        !rig.fake.log().iter().any(|l| l == "spawn"),
        "the replay never reached a launcher"
    );
}

#[test]
fn recovery_kills_a_running_sessions_init_through_its_identity_and_writes_a_receipt() {
    if !lifecycle_available() {
        eprintln!("skipping: no /sys/fs/cgroup");
        return;
    }
    // The "sandbox init" is a child this test may kill.
    let mut init = std::process::Command::new("/bin/sleep")
        .arg("600")
        .spawn()
        .expect("spawn sleep");
    let rig = Rig::new(Script::Normal);
    *rig.fake.init_pid.lock().expect("lock") = Some(init.id());
    let auth = rig.created("s-crash");
    rig.start("s-crash", &auth).expect("start");
    // The durable state at this moment is what a crash leaves: copy it.
    let copy = tempfile::tempdir().expect("tempdir");
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", rig._dir.path().display()))
        .arg(copy.path())
        .status()
        .expect("cp");
    assert!(status.success());
    let after = Rig::open(copy, Script::Normal, ReceiptConfig::default(), false);
    assert_eq!(after.stage("s-crash"), "running");
    let out = after.service.recover();
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(after.stage("s-crash"), "failed");
    let body = after.receipt("s-crash");
    assert_eq!(body["recovered"], true);
    assert_eq!(body["recovery"]["stage"], "running");
    assert_eq!(body["recovery"]["identity_matched"], true);
    assert_eq!(
        body["termination"]["code"],
        "lifecycle_recovery_running_interrupted"
    );
    // The recorded init was killed, through its pidfd.
    let st = init.wait().expect("wait");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&st),
        Some(9),
        "the init was SIGKILLed"
    );
    // Nothing was spawned to recover it.
    assert!(!after.fake.log().iter().any(|l| l == "spawn"));
    rig.fake.exit(0);
    rig.wait_stage("s-crash", "exited");
}

#[test]
fn a_session_the_store_compacted_away_can_still_be_cleaned_up() {
    if !lifecycle_available() {
        eprintln!("skipping: no /sys/fs/cgroup");
        return;
    }
    let rig = Rig::new(Script::Normal);
    let mut i = 0;
    loop {
        let id = format!("s-live-{i}");
        let auth = rig.created(&id);
        rig.start(&id, &auth).expect("start");
        rig.fake.exit(0);
        rig.wait_stage(&id, "exited");
        i += 1;
        let first = rig
            .call("session_status", json!({"session_id": "s-live-0"}))
            .expect("status");
        if first["compacted"] == true {
            assert_eq!(first["stage"], "exited");
            break;
        }
        assert!(i < 3_000, "s-live-0 was never compacted away");
    }
    // Its live state (transcript, writer) is still held until cleanup,
    // which the compaction must not have made impossible.
    let v = rig
        .call("cleanup_session", json!({"session_id": "s-live-0"}))
        .expect("cleanup");
    assert_eq!(v["live_state_removed"], true);
}

#[test]
fn a_running_session_without_a_second_writer_is_stopped_and_failed_with_a_receipt() {
    if !lifecycle_available() {
        eprintln!("skipping: no /sys/fs/cgroup");
        return;
    }
    let rig = Rig::new(Script::WriterFails);
    let auth = rig.created("s-writer");
    let e = rig.start("s-writer", &auth).expect_err("failed");
    assert_eq!(e.code.as_str(), "session_launch_failed");
    assert!(
        rig.fake.log().iter().any(|l| l == "stop:0"),
        "{:?}",
        rig.fake.log()
    );
    assert_eq!(rig.stage("s-writer"), "failed");
    assert_eq!(
        rig.receipt("s-writer")["termination"]["code"],
        "session_launch_failed"
    );
}
