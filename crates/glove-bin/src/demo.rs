//! `glove demo`: the whole managed-session flow in a temporary directory,
//! in one command.
//!
//! It writes the example policy (its template switched to `/bin/sh`, its
//! workspace alias pointed at a temporary project, a 30 s wall limit), a
//! receipt key and a start-authorization key, starts `gloved` (the one next
//! to this `glove`) with a materialization root, then as a controller:
//! creates a session from a fresh plan, issues a start authorization,
//! starts the session, attaches, types `echo hello from the sandbox` and
//! `exit` into the shell, prints what the terminal showed, waits for the
//! end, pages the receipt, prints its body and acknowledges it. Everything
//! is removed at the end; `gloved` is stopped with SIGTERM.

use crate::control::client::Client;
use crate::control::managed;
use crate::control::service::Clock;
use glove_types::Sha256Digest;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const POLICY: &[u8] = include_bytes!("../../../docs/examples/policy.json");
const PLAN: &[u8] = include_bytes!("../../../docs/examples/plan.json");

fn fail(msg: impl std::fmt::Display) -> i32 {
    eprintln!("glove demo: {msg}");
    1
}

fn write(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    std::fs::write(path, bytes)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

fn mkdir(path: &Path, mode: u32) -> std::io::Result<()> {
    std::fs::create_dir_all(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

fn hex32() -> Result<String, String> {
    crate::control::auth::random_bytes::<32>()
        .map(|b| glove_types::digest::to_hex(&b))
        .map_err(|r| r.message().to_owned())
}

/// A fresh directory under the system temporary directory, removed on drop.
pub(crate) struct TempDir(pub(crate) std::path::PathBuf);

impl TempDir {
    fn new() -> Result<TempDir, String> {
        TempDir::with_prefix("glove-demo-")
    }

    /// `<prefix><12 random hex digits>` under the system temporary directory.
    pub(crate) fn with_prefix(prefix: &str) -> Result<TempDir, String> {
        let name = format!("{prefix}{}", &hex32()?[..12]);
        let p = std::env::temp_dir().join(name);
        // Private from the start: never a moment when others may add to it.
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&p)
            .map_err(|x| format!("{}: {x}", p.display()))?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the demo; returns the exit status.
pub fn run() -> i32 {
    match demo() {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

fn demo() -> Result<(), String> {
    let e = |x: std::io::Error| x.to_string();
    let dir = TempDir::new()?;
    let d = dir.0.as_path();
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).map_err(e)?;
    let (run, state, mat, project) = (
        d.join("run"),
        d.join("state"),
        d.join("mat"),
        d.join("project"),
    );
    mkdir(&state, 0o700).map_err(e)?;
    mkdir(&mat, 0o700).map_err(e)?;
    mkdir(&project, 0o755).map_err(e)?;
    std::fs::write(project.join("README"), "a file from the host project\n").map_err(e)?;
    write(
        &d.join("receipt.key"),
        format!("{}\n", hex32()?).as_bytes(),
        0o600,
    )
    .map_err(e)?;
    write(
        &d.join("start.key"),
        format!("{}\n", hex32()?).as_bytes(),
        0o600,
    )
    .map_err(e)?;

    // The example policy with a shell as the runtime.
    let launch = json!({
        "executable_path": "/bin/sh",
        "arguments": [],
        "environment": ["PATH=/usr/bin:/bin", "PS1=$ ", "TERM=xterm-256color"],
        "read_only_paths": [],
    });
    let mut digest_input = launch.clone();
    digest_input["runtime_id"] = json!("codex");
    let adapter = Sha256Digest::of_domain(
        glove_types::policy::ADAPTER_COMMAND_DOMAIN,
        &glove_types::canon::to_canonical(&digest_input).map_err(|r| r.to_string())?,
    )
    .to_hex();
    let mut policy: Value = serde_json::from_slice(POLICY).map_err(|x| x.to_string())?;
    policy["runtime_templates"][0]["launch"] = launch;
    policy["runtime_templates"][0]["adapter_command_digest"] = json!(adapter);
    policy["path_aliases"][0]["host_path"] = json!(project.display().to_string());
    policy["resource_profiles"][0]["wall_time_ms"] = json!(30_000);
    policy["resource_profiles"][0]["cpu_time_ms"] = json!(10_000);
    policy["resource_profiles"][0]["memory_bytes"] = json!(256u64 << 20);
    policy["resource_profiles"][0]["pids"] = json!(64);
    let canon = |v: &Value| glove_types::canon::to_canonical(v).map_err(|r| r.to_string());
    write(&d.join("policy.json"), &canon(&policy)?, 0o600).map_err(e)?;

    let gloved = std::env::current_exe()
        .map_err(e)?
        .parent()
        .map(|p| p.join("gloved"))
        .ok_or("cannot find gloved next to glove")?;
    let p = |x: &Path| x.display().to_string();
    println!("== starting gloved in {}", d.display());
    let mut child = Command::new(&gloved)
        .args(["--runtime-dir", &p(&run)])
        .args(["--receipt-journal", &p(&state.join("receipts.journal"))])
        .args(["--receipt-key", &p(&d.join("receipt.key"))])
        .args(["--session-policy", &p(&d.join("policy.json"))])
        .args(["--session-store", &p(&state.join("sessions.journal"))])
        .args(["--materialization-root", &p(&mat)])
        .args(["--start-auth-key", &p(&d.join("start.key"))])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|x| format!("cannot run {}: {x}", gloved.display()))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let ready = lines.next().and_then(Result::ok).unwrap_or_default();
    std::thread::spawn(move || for _ in lines {});
    let result = if ready.starts_with("gloved ready ") {
        controller(&run, &canon, &d.join("start.key"))
    } else {
        Err("gloved did not start".to_owned())
    };
    if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    let _ = child.wait();
    result
}

fn controller(
    run: &Path,
    canon: &dyn Fn(&Value) -> Result<Vec<u8>, String>,
    key_path: &Path,
) -> Result<(), String> {
    let ce = |x: crate::control::client::ClientError| format!("{}: {}", x.code(), x);
    let mut c = Client::connect(run).map_err(ce)?;
    let caps = c.capabilities().map_err(ce)?;
    if !caps["methods"].to_string().contains("start_session") {
        return Err(
            "the managed runtime is not available here (gloved's strict sandbox probe failed)"
                .into(),
        );
    }
    let now = Clock::System.now_ms();
    let mut plan: Value = serde_json::from_slice(PLAN).map_err(|x| x.to_string())?;
    let session = format!("demo-{now}");
    plan["session_id"] = json!(session);
    plan["idempotency_key"] = json!(format!("demo-key-{now}"));
    plan["issued_at_ms"] = json!(now);
    plan["expires_at_ms"] = json!(now + 60_000);
    plan["library_projections"] = json!([]);
    // The demo's shell holds no credential (a handle needs a source).
    plan["secret_handles"] = json!([]);
    plan["resource_profile"]["wall_time_ms"] = json!(30_000);
    plan["resource_profile"]["cpu_time_ms"] = json!(10_000);
    plan["resource_profile"]["memory_bytes"] = json!(256u64 << 20);
    plan["resource_profile"]["pids"] = json!(64);
    let policy_adapter = {
        let launch = json!({
            "executable_path": "/bin/sh",
            "arguments": [],
            "environment": ["PATH=/usr/bin:/bin", "PS1=$ ", "TERM=xterm-256color"],
            "read_only_paths": [],
            "runtime_id": "codex",
        });
        Sha256Digest::of_domain(
            glove_types::policy::ADAPTER_COMMAND_DOMAIN,
            &canon(&launch)?,
        )
        .to_hex()
    };
    plan["adapter_command_digest"] = json!(policy_adapter);
    let plan_text = String::from_utf8(canon(&plan)?).map_err(|x| x.to_string())?;
    let created = c.create_session(&plan_text, None).map_err(ce)?;
    println!("== created session {session}");
    let st = &created["session"];
    let key = managed::read_key(key_path).map_err(|r| r.to_string())?;
    let auth = managed::issue_authorization(
        &key,
        &session,
        st["plan_content_digest"].as_str().unwrap_or(""),
        st["controller_plan_digest"].as_str().unwrap_or(""),
        now,
        30_000,
    )
    .map_err(|r| r.to_string())?;
    let started = c
        .call(
            "start_session",
            json!({"session_id": session, "authorization": auth}),
        )
        .map_err(ce)?;
    println!(
        "== started (launch binding {})",
        started["launch_binding_digest"].as_str().unwrap_or("")
    );
    c.call("attach", json!({"session_id": session}))
        .map_err(ce)?;
    c.set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(ce)?;
    c.call(
        "write_stdin",
        json!({"session_id": session, "data": "echo hello from the sandbox; cat /workspace/README; exit\n"}),
    )
    .map_err(ce)?;
    println!("== terminal:");
    let mut out = std::io::stdout();
    let ended = loop {
        let n = c.next_notification().map_err(ce)?;
        match n["method"].as_str() {
            Some("output") => {
                let b = managed::from_hex(n["params"]["data_hex"].as_str().unwrap_or(""))
                    .unwrap_or_default();
                let _ = out.write_all(&b);
                let _ = out.flush();
            }
            Some("session_ended") => break n["params"].clone(),
            _ => {}
        }
    };
    println!("\n== session ended: {ended}");
    let page = c.receipts_page(0, None).map_err(ce)?;
    for r in page["receipts"].as_array().cloned().unwrap_or_default() {
        let env: Value =
            serde_json::from_str(r["envelope"].as_str().unwrap_or("{}")).unwrap_or_default();
        if env["body"]["session_id"] == session.as_str() {
            println!("== receipt {} (envelope):", r["seq"]);
            println!("{}", r["envelope"].as_str().unwrap_or(""));
        }
    }
    let head = page["head"].as_str().unwrap_or("");
    c.receipts_ack(head).map_err(ce)?;
    println!("== acknowledged {head}");
    c.call("cleanup_session", json!({"session_id": session}))
        .map_err(ce)?;
    Ok(())
}
