//! Managed-session benchmark: create → start → first byte of output as the
//! controller sees it, and PTY throughput through `attach` as a ratio to a
//! raw PTY copy (`script -qfc … /dev/null`, one PTY and one copy loop) of the
//! same bytes in the same run.
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-managed cargo bench -p glove-bin --bench managed
//! ```
//!
//! Plain `std::time`, no harness. Needs a working sandbox (root or user
//! namespaces with cgroups); prints why and exits 0 otherwise.
//! `GLOVE_BENCH_QUICK=1` runs a small version.

use glove_bin::control::client::Client;
use glove_bin::control::managed;
use glove_types::Sha256Digest;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn write_mode(path: &Path, bytes: &[u8], mode: u32) {
    std::fs::write(path, bytes).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn mkdir_mode(path: &Path, mode: u32) {
    std::fs::create_dir_all(path).expect("mkdir");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn launch() -> Value {
    json!({
        "executable_path": "/bin/sh",
        "arguments": [],
        "environment": ["PATH=/usr/bin:/bin", "PS1=$ ", "TERM=xterm-256color"],
        "read_only_paths": [],
    })
}

fn adapter() -> String {
    let mut v = launch();
    v["runtime_id"] = json!("codex");
    Sha256Digest::of_domain(
        "glove.adapter-command.v1",
        &glove_types::canon::to_canonical(&v).expect("canonical"),
    )
    .to_hex()
}

const OUTPUT_LIMIT: u64 = 1 << 30;

fn profile(v: &mut Value) {
    v["wall_time_ms"] = json!(60_000);
    v["cpu_time_ms"] = json!(60_000);
    v["memory_bytes"] = json!(512u64 << 20);
    v["pids"] = json!(64);
    v["terminal_output_bytes"] = json!(OUTPUT_LIMIT);
}

struct Daemon {
    child: Child,
    run: PathBuf,
}

fn start_daemon(home: &Path) -> Daemon {
    let run = home.join("run");
    let p = |x: &Path| x.display().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_gloved"))
        .args(["--runtime-dir", &p(&run)])
        .args(["--session-policy", &p(&home.join("policy.json"))])
        .args(["--session-store", &p(&home.join("state/sessions.journal"))])
        .args([
            "--receipt-journal",
            &p(&home.join("state/receipts.journal")),
        ])
        .args(["--receipt-key", &p(&home.join("receipt.key"))])
        .args(["--materialization-root", &p(&home.join("mat"))])
        .args(["--start-auth-key", &p(&home.join("start.key"))])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn gloved");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("ready line");
    assert!(line.starts_with("gloved ready"), "gloved: {line:?}");
    Daemon { child, run }
}

fn plan(session: &str) -> String {
    let text = std::fs::read_to_string(repo().join("docs/examples/plan.json")).expect("plan");
    let mut v: Value = serde_json::from_str(&text).expect("json");
    let now = now_ms();
    v["issued_at_ms"] = json!(now);
    v["expires_at_ms"] = json!(now + 100_000);
    v["session_id"] = json!(session);
    v["idempotency_key"] = json!(format!("k-{session}"));
    v["library_projections"] = json!([]);
    v["secret_handles"] = json!([]);
    v["adapter_command_digest"] = json!(adapter());
    profile(&mut v["resource_profile"]);
    String::from_utf8(glove_types::canon::to_canonical(&v).expect("canonical")).expect("utf-8")
}

/// Creates, authorizes and starts a session; returns the client (attached)
/// and the time from create to the first output byte seen.
fn started(d: &Daemon, key: &glove_lifecycle::ServiceKey, session: &str) -> (Client, Duration) {
    let mut c = Client::connect(&d.run).expect("connect");
    let t = Instant::now();
    let created = c.create_session(&plan(session), None).expect("create");
    let s = &created["session"];
    let auth = managed::issue_authorization(
        key,
        session,
        s["plan_content_digest"].as_str().expect("digest"),
        s["controller_plan_digest"].as_str().expect("digest"),
        now_ms(),
        30_000,
    )
    .expect("authorize");
    c.call(
        "start_session",
        json!({"session_id": session, "authorization": auth}),
    )
    .expect("start");
    let a = c
        .call("attach", json!({"session_id": session}))
        .expect("attach");
    if a["transcript"].as_array().is_none_or(|t| t.is_empty()) {
        loop {
            let n = c.next_notification().expect("notification");
            if n["method"] == "output" {
                break;
            }
        }
    }
    (c, t.elapsed())
}

fn until_ended(c: &mut Client) {
    loop {
        let n = c.next_notification().expect("notification");
        if n["method"] == "session_ended" {
            return;
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let quick = std::env::var("GLOVE_BENCH_QUICK").is_ok_and(|v| v == "1");
    if let Err(r) = managed::probe(
        &PathBuf::from(env!("CARGO_BIN_EXE_gloved"))
            .parent()
            .expect("dir")
            .join("glove-launcher"),
    ) {
        println!("skipping: the sandbox does not work here: {}", r.message());
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("glove-managed-bench")
        .tempdir_in(std::env::var("GLOVE_BENCH_DIR").unwrap_or_else(|_| "/var/tmp".into()))
        .expect("tempdir");
    let home = dir.path();
    std::fs::set_permissions(home, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    mkdir_mode(&home.join("state"), 0o700);
    mkdir_mode(&home.join("mat"), 0o700);
    std::fs::create_dir_all(home.join("project")).expect("mkdir");
    write_mode(
        &home.join("receipt.key"),
        format!("{}\n", "ab".repeat(32)).as_bytes(),
        0o600,
    );
    write_mode(
        &home.join("start.key"),
        format!("{}\n", "cd".repeat(32)).as_bytes(),
        0o600,
    );
    let mut policy: Value = serde_json::from_slice(
        &std::fs::read(repo().join("docs/examples/policy.json")).expect("policy"),
    )
    .expect("json");
    policy["runtime_templates"][0]["launch"] = launch();
    policy["runtime_templates"][0]["adapter_command_digest"] = json!(adapter());
    policy["path_aliases"][0]["host_path"] = json!(home.join("project").display().to_string());
    profile(&mut policy["resource_profiles"][0]);
    write_mode(
        &home.join("policy.json"),
        &glove_types::canon::to_canonical(&policy).expect("canonical"),
        0o600,
    );
    let key = managed::read_key(&home.join("start.key")).expect("key");
    let d = start_daemon(home);

    // Latency.
    let n = if quick { 5 } else { 30 };
    let mut lat = Vec::new();
    for i in 0..n {
        let (mut c, t) = started(&d, &key, &format!("lat-{i}"));
        lat.push(t);
        c.call(
            "write_stdin",
            json!({"session_id": format!("lat-{i}"), "data": "exit\n"}),
        )
        .expect("exit");
        until_ended(&mut c);
    }
    lat.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "create→start→first output byte: n={n} p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms",
        ms(lat[lat.len() / 2]),
        ms(lat[(lat.len() * 9 / 10).min(lat.len() - 1)]),
        ms(lat[lat.len() - 1])
    );

    // Throughput: the same bytes through attach and through a raw PTY copy.
    let bytes: u64 = if quick { 4 << 20 } else { 64 << 20 };
    let cmd = format!("head -c {bytes} /dev/zero | tr '\\0' a");
    let rounds = if quick { 1 } else { 3 };
    for round in 0..rounds {
        let session = format!("tp-{round}");
        let (mut c, _) = started(&d, &key, &session);
        let t = Instant::now();
        c.call(
            "write_stdin",
            json!({"session_id": session, "data": format!("{cmd}; exit\n")}),
        )
        .expect("stdin");
        let mut got = 0u64;
        loop {
            let n = c.next_notification().expect("notification");
            match n["method"].as_str() {
                Some("output") => {
                    got += n["params"]["data_hex"]
                        .as_str()
                        .map_or(0, |h| h.len() as u64 / 2)
                }
                Some("session_ended") => break,
                _ => {}
            }
        }
        let attach_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let mut child = Command::new("script")
            .args(["-qfc", &cmd, "/dev/null"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("script");
        let mut out = child.stdout.take().expect("stdout");
        let mut buf = vec![0u8; 1 << 16];
        let mut raw = 0u64;
        loop {
            match out.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => raw += k as u64,
            }
        }
        let _ = child.wait();
        let raw_s = t.elapsed().as_secs_f64();
        let mib = |b: u64, s: f64| b as f64 / (1 << 20) as f64 / s;
        println!(
            "PTY throughput round {round}: attach {:.1} MiB/s ({got} bytes incl. echo and prompt), raw PTY copy {:.1} MiB/s ({raw} bytes), ratio {:.2}",
            mib(got, attach_s),
            mib(raw, raw_s),
            mib(got, attach_s) / mib(raw, raw_s)
        );
    }
    let pid = rustix::process::Pid::from_raw(d.child.id() as i32).expect("pid");
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    let mut child = d.child;
    let _ = child.wait();
}
