//! Starting and stopping a real `gloved`, and plan helpers.
#![allow(dead_code)]

use glove_bin::control::client::{Client, ClientError};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The fixed time the daemons run at (10 s after the example plan's issue).
pub(crate) const NOW_MS: u64 = 1_796_000_010_000;

/// How long to wait for gloved to become ready before failing.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub(crate) fn required() -> bool {
    std::env::var("GLOVE_REQUIRE_SANDBOX").is_ok_and(|v| v == "1")
}

pub(crate) fn example(name: &str) -> Vec<u8> {
    std::fs::read(repo().join("docs/examples").join(name)).expect("read example")
}

pub(crate) fn plan_text() -> String {
    String::from_utf8(example("plan.json")).expect("utf-8 plan")
}

/// The example plan with `edit` applied, re-encoded canonically.
pub(crate) fn plan_with(edit: impl FnOnce(&mut Value)) -> String {
    let mut v: Value = serde_json::from_str(&plan_text()).expect("plan json");
    edit(&mut v);
    String::from_utf8(glove_types::canon::to_canonical(&v).expect("canonical")).expect("utf-8")
}

/// A plan for `template` (a policy's runtime template) and `runtime` as
/// session `session`, under the resource profile `profile` (its
/// `cpu_rate_millicpus` dropped: a plan does not carry it), valid for two
/// minutes, with no library projection and no secret handle (the example
/// plan's egress and tool policies are kept) until `edit` changes them.
pub(crate) fn template_plan(
    template: &Value,
    runtime: &str,
    session: &str,
    profile: &Value,
    edit: impl FnOnce(&mut Value),
) -> String {
    plan_with(|v| {
        v["runtime_template_id"] = template["runtime_template_id"].clone();
        v["runtime_id"] = serde_json::json!(runtime);
        v["adapter_command_digest"] = template["adapter_command_digest"].clone();
        v["library_projections"] = serde_json::json!([]);
        v["secret_handles"] = serde_json::json!([]);
        v["session_id"] = serde_json::json!(session);
        v["idempotency_key"] = serde_json::json!(format!("key-{session}"));
        v["expires_at_ms"] =
            serde_json::json!(v["issued_at_ms"].as_u64().expect("issued") + 120_000);
        let mut profile = profile.clone();
        if let Some(p) = profile.as_object_mut() {
            p.remove("cpu_rate_millicpus");
        }
        v["resource_profile"] = profile;
        edit(v);
    })
}

pub(crate) fn write_mode(path: &Path, bytes: &[u8], mode: u32) {
    std::fs::write(path, bytes).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

pub(crate) fn mkdir_mode(path: &Path, mode: u32) {
    std::fs::create_dir_all(path).expect("mkdir");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// Which optional components a daemon gets.
#[derive(Clone, Debug, Default)]
pub(crate) struct Config {
    /// Policy example file name, copied with mode 0600.
    pub(crate) policy: Option<&'static str>,
    /// Add a session store.
    pub(crate) store: bool,
    /// Extra flags.
    pub(crate) extra: Vec<String>,
}

impl Config {
    pub(crate) fn base() -> Self {
        Config::default()
    }
    pub(crate) fn policy() -> Self {
        Config {
            policy: Some("policy.json"),
            ..Config::default()
        }
    }
    pub(crate) fn full() -> Self {
        Config {
            policy: Some("policy.json"),
            store: true,
            ..Config::default()
        }
    }
    pub(crate) fn with(mut self, flags: &[&str]) -> Self {
        self.extra.extend(flags.iter().map(|s| (*s).to_owned()));
        self
    }
}

/// The temporary files of one service (kept across restarts).
pub(crate) struct Home {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) run: PathBuf,
    pub(crate) state: PathBuf,
    pub(crate) key: PathBuf,
}

impl Home {
    pub(crate) fn new() -> Home {
        let dir = tempfile::Builder::new()
            .prefix("gd")
            .tempdir()
            .expect("tempdir");
        let run = dir.path().join("run");
        let state = dir.path().join("state");
        mkdir_mode(&state, 0o700);
        let key = dir.path().join("receipt.key");
        write_mode(&key, format!("{}\n", "ab".repeat(32)).as_bytes(), 0o600);
        Home {
            dir,
            run,
            state,
            key,
        }
    }

    pub(crate) fn store(&self) -> PathBuf {
        self.state.join("sessions.journal")
    }

    /// The arguments for `cfg`.
    pub(crate) fn args(&self, cfg: &Config) -> Vec<String> {
        let p = |p: &Path| p.display().to_string();
        let mut a = vec![
            "--runtime-dir".into(),
            p(&self.run),
            "--receipt-journal".into(),
            p(&self.state.join("receipts.journal")),
            "--receipt-key".into(),
            p(&self.key),
        ];
        if let Some(name) = cfg.policy {
            let dst = self.dir.path().join(name);
            write_mode(&dst, &example(name), 0o600);
            a.extend(["--session-policy".into(), p(&dst)]);
        }
        if cfg.store {
            a.extend(["--session-store".into(), p(&self.store())]);
        }
        a.extend(cfg.extra.iter().cloned());
        a
    }
}

/// A running gloved.
pub(crate) struct Daemon {
    pub(crate) child: Child,
    pub(crate) run: PathBuf,
    stderr: Option<std::thread::JoinHandle<String>>,
}

/// Runs gloved to completion (for startup refusals) and returns its status
/// and stderr.
pub(crate) fn run_to_exit(args: &[String]) -> (ExitStatus, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gloved"))
        .args(args)
        .env("GLOVE_TEST_NOW_MS", NOW_MS.to_string())
        .stdin(Stdio::null())
        .output()
        .expect("run gloved");
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs gloved expecting a start-up refusal; returns its status and stderr.
/// A gloved that becomes ready instead is killed and the test fails (it
/// would otherwise serve forever).
pub(crate) fn run_expecting_refusal(args: &[String]) -> (ExitStatus, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gloved"))
        .args(args)
        .env("GLOVE_TEST_NOW_MS", NOW_MS.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gloved");
    let stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let first = BufReader::new(stdout).lines().next().and_then(Result::ok);
        let _ = tx.send(first);
    });
    let first = rx.recv_timeout(READY_TIMEOUT);
    if let Ok(Some(line)) = &first {
        let _ = child.kill();
        let _ = child.wait();
        let err = err_thread.join().unwrap_or_default();
        panic!("gloved started ({line}) where it must refuse; stderr:\n{err}");
    }
    let status = child.wait().expect("wait");
    (status, err_thread.join().unwrap_or_default())
}

impl Daemon {
    pub(crate) fn start(home: &Home, cfg: &Config) -> Daemon {
        Daemon::spawn(
            Command::new(env!("CARGO_BIN_EXE_gloved")),
            &home.args(cfg),
            &home.run,
        )
    }

    /// Spawns `cmd` (gloved, possibly under setpriv) and waits for readiness.
    pub(crate) fn spawn(mut cmd: Command, args: &[String], run: &Path) -> Daemon {
        cmd.env("GLOVE_TEST_NOW_MS", NOW_MS.to_string());
        Daemon::spawn_on_system_clock(cmd, args, run)
    }

    /// Like [`Daemon::spawn`], on the real clock (for plans and start
    /// authorizations the `glove` commands make with the real time).
    pub(crate) fn spawn_on_system_clock(mut cmd: Command, args: &[String], run: &Path) -> Daemon {
        let mut child = cmd
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn gloved");
        let stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let err_thread = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next().and_then(Result::ok);
            let _ = tx.send(first);
            for _ in lines {}
        });
        match rx.recv_timeout(READY_TIMEOUT) {
            Ok(Some(line)) if line.starts_with("gloved ready ") => Daemon {
                child,
                run: run.to_path_buf(),
                stderr: Some(err_thread),
            },
            other => {
                let _ = child.kill();
                let _ = child.wait();
                let err = err_thread.join().unwrap_or_default();
                panic!("gloved did not become ready ({other:?}); stderr:\n{err}");
            }
        }
    }

    pub(crate) fn client(&self) -> Client {
        Client::connect(&self.run).expect("connect and authenticate")
    }

    pub(crate) fn client_as(&self, client_id: &str) -> Result<Client, ClientError> {
        Client::connect_as(&self.run, Some(client_id))
    }

    pub(crate) fn try_client(&self) -> Result<Client, ClientError> {
        Client::connect(&self.run)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn socket(&self) -> PathBuf {
        self.run.join("gloved.sock")
    }

    /// SIGTERM, then waits; returns the status and the log.
    pub(crate) fn stop(mut self) -> (ExitStatus, String) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).expect("pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("kill");
        let status = self.child.wait().expect("wait");
        let log = self
            .stderr
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        (status, log)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The stable code of a failed call.
pub(crate) fn code(r: Result<Value, ClientError>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v}"),
        Err(e) => e.code().to_owned(),
    }
}
