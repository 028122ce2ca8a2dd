//! `gloved` benchmark: `validate_plan` over the socket with 1, 8 and 64
//! concurrent clients, as a ratio to validating the same plan in-process
//! (`DecodedPlan::decode` + `admit`); and `gloved`'s resident memory idle,
//! after creating 10,000 sessions, and after a restart that replays them.
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-control cargo bench -p glove-bin --bench control
//! ```
//!
//! Plain `std::time`, no harness. It starts the `gloved` binary built with
//! the bench (release) in a temporary directory under `/var/tmp` (or
//! `GLOVE_BENCH_DIR`). `GLOVE_BENCH_QUICK=1` runs a small version.

use glove_bin::control::client::Client;
use glove_types::plan::{admit, DecodedPlan};
use glove_types::policy::ValidatedPolicy;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
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

/// The example plan, valid from now for the policy's longest TTL.
fn fresh_plan(edit: impl FnOnce(&mut Value)) -> String {
    let text = std::fs::read_to_string(repo().join("docs/examples/plan.json")).expect("plan");
    let mut v: Value = serde_json::from_str(&text).expect("json");
    let now = now_ms();
    v["issued_at_ms"] = json!(now);
    v["expires_at_ms"] = json!(now + 120_000);
    edit(&mut v);
    String::from_utf8(glove_types::canon::to_canonical(&v).expect("canonical")).expect("utf-8")
}

struct Daemon {
    child: Child,
    run: PathBuf,
}

impl Daemon {
    fn start(home: &Path) -> (Daemon, Duration) {
        let run = home.join("run");
        let p = |x: &Path| x.display().to_string();
        let t = Instant::now();
        let mut child = Command::new(env!("CARGO_BIN_EXE_gloved"))
            .args([
                "--runtime-dir",
                &p(&run),
                "--session-policy",
                &p(&home.join("policy.json")),
                "--session-store",
                &p(&home.join("state/sessions.journal")),
                "--receipt-journal",
                &p(&home.join("state/receipts.journal")),
                "--receipt-key",
                &p(&home.join("receipt.key")),
                "--max-connections",
                "128",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn gloved");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("ready line");
        assert!(
            line.starts_with("gloved ready"),
            "gloved did not start: {line:?}"
        );
        (Daemon { child, run }, t.elapsed())
    }

    fn rss_kib(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    fn stop(mut self) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).expect("pid");
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let _ = self.child.wait();
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

struct Stats {
    per_sec: f64,
    p50: Duration,
    p99: Duration,
}

fn stats(mut lat: Vec<Duration>, wall: Duration) -> Stats {
    lat.sort_unstable();
    Stats {
        per_sec: lat.len() as f64 / wall.as_secs_f64(),
        p50: percentile(&lat, 0.5),
        p99: percentile(&lat, 0.99),
    }
}

fn in_process(policy: &ValidatedPolicy, plan: &str, n: usize) -> Stats {
    let mut lat = Vec::with_capacity(n);
    let t0 = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        let d = DecodedPlan::decode(plan.as_bytes()).expect("decode");
        let a = admit(d, None, policy, now_ms()).expect("admit");
        std::hint::black_box(a);
        lat.push(t.elapsed());
    }
    stats(lat, t0.elapsed())
}

fn over_socket(run: &Path, plan: &str, clients: usize, per_client: usize) -> Stats {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(clients + 1));
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let (run, plan, barrier) = (run.to_path_buf(), plan.to_owned(), barrier.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&run).expect("connect");
                barrier.wait();
                let mut lat = Vec::with_capacity(per_client);
                for _ in 0..per_client {
                    let t = Instant::now();
                    let v = c.validate_plan(&plan, None).expect("validate");
                    lat.push(t.elapsed());
                    assert_eq!(v["admitted"], true);
                }
                lat
            })
        })
        .collect();
    barrier.wait();
    let t0 = Instant::now();
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.join().expect("worker"));
    }
    stats(all, t0.elapsed())
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn main() {
    let quick = std::env::var("GLOVE_BENCH_QUICK").is_ok_and(|v| v == "1");
    let base = std::env::var_os("GLOVE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp"));
    let dir = tempfile::Builder::new()
        .prefix("gb")
        .tempdir_in(base)
        .expect("tempdir");
    let home = dir.path();
    std::fs::create_dir(home.join("state")).expect("mkdir");
    std::fs::set_permissions(home.join("state"), std::fs::Permissions::from_mode(0o700))
        .expect("chmod");
    let policy_bytes = std::fs::read(repo().join("docs/examples/policy.json")).expect("policy");
    write_mode(&home.join("policy.json"), &policy_bytes, 0o600);
    write_mode(
        &home.join("receipt.key"),
        format!("{}\n", "cd".repeat(32)).as_bytes(),
        0o600,
    );
    let policy = ValidatedPolicy::from_json(&policy_bytes).expect("policy");
    let plan = fresh_plan(|_| {});

    let (d, _) = Daemon::start(home);
    Client::connect(&d.run)
        .expect("connect")
        .capabilities()
        .expect("caps");
    let rss_idle = d.rss_kib();

    let n_in = if quick { 2_000 } else { 50_000 };
    let base_stats = in_process(&policy, &plan, n_in);
    println!(
        "in-process decode+admit: {:.0}/s p50 {} p99 {}",
        base_stats.per_sec,
        us(base_stats.p50),
        us(base_stats.p99)
    );
    println!("| clients | requests/s | ratio to in-process | p50 | p99 | p50 ratio |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for clients in [1usize, 8, 64] {
        let total = if quick { 640 } else { 32_000 };
        let s = over_socket(&d.run, &plan, clients, total / clients);
        println!(
            "| {clients} | {:.0} | {:.3}× | {} | {} | {:.1}× |",
            s.per_sec,
            s.per_sec / base_stats.per_sec,
            us(s.p50),
            us(s.p99),
            s.p50.as_secs_f64() / base_stats.p50.as_secs_f64()
        );
    }

    // 10,000 sessions (the store's record bound), created through the
    // socket by 8 clients.
    let sessions = if quick { 400 } else { 10_000 };
    let t = Instant::now();
    let workers: Vec<_> = (0..8)
        .map(|w| {
            let run = d.run.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(&run).expect("connect");
                for i in (w..sessions).step_by(8) {
                    let p = fresh_plan(|v| {
                        v["session_id"] = json!(format!("s-{i}"));
                        v["idempotency_key"] = json!(format!("k-{i}"));
                    });
                    c.create_session(&p, None).expect("create");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("creator");
    }
    let create_wall = t.elapsed();
    let rss_full = d.rss_kib();
    d.stop();
    let (d, ready) = Daemon::start(home);
    let rss_restarted = d.rss_kib();
    d.stop();
    println!(
        "created {sessions} sessions in {:.2} s ({:.0}/s, 8 clients, one fsync'd append each)",
        create_wall.as_secs_f64(),
        sessions as f64 / create_wall.as_secs_f64()
    );
    println!("VmRSS idle: {rss_idle} KiB");
    println!("VmRSS after creating {sessions} sessions: {rss_full} KiB");
    println!(
        "VmRSS after a restart replaying {sessions} sessions: {rss_restarted} KiB (start to ready {:.0} ms)",
        ready.as_secs_f64() * 1e3
    );
}
