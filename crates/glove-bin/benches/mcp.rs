//! MCP benchmark: per-call latency (p50, p99, one call in flight) and
//! throughput (8 in flight) of server-everything's `echo`, from the same
//! client (`benches/mcp_client.py`) talking straight to the server over
//! stdio on the host, and contained by `glove run` talking through the
//! relay, the mediator (its decisions, pins and durable audit) to the same
//! server, in the same run.
//!
//! ```text
//! GLOVE_MCP_SERVERS=…/node_modules CARGO_TARGET_DIR=/work/target-bench \
//!   cargo bench -p glove-bin --bench mcp
//! ```
//!
//! A third path, the floor of a copying mediator on this machine: the same
//! client on the host running the same relay (`glove mcp-relay`, made to
//! copy with `GLOVE_MCP_RELAY_COPY`) to a plain forwarder thread that
//! copies bytes to and from the server's stdio — the relay and socket
//! hops, without sandbox, policy or audit (root only: the relay's socket
//! directory is `/run/glove/mcp`). Through Glove the relay hands its
//! standard streams to the mediator instead, which takes the relay's
//! copies off the path.
//!
//! Plain `std::time`, no harness. Needs a working sandbox, node and the
//! servers; prints why and exits 0 otherwise. `GLOVE_BENCH_QUICK=1` runs a
//! small version.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

fn parse(out: &std::process::Output, what: &str) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .filter(|v| v.get("mode").is_some())
        })
        .unwrap_or_else(|| {
            panic!(
                "{what}: no result line: {text} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

/// The floor's forwarder: a socket at `/run/glove/mcp/<id>.sock` whose
/// connections each get a fresh `node <server> stdio`, bytes copied both
/// ways. Returns the server id the relay names.
fn floor_forwarder(server: &std::path::Path) -> Option<String> {
    use std::io::{Read, Write};
    let id = format!("bench-floor-{}", std::process::id());
    let dir = std::path::Path::new("/run/glove/mcp");
    std::fs::create_dir_all(dir).ok()?;
    let path = dir.join(format!("{id}.sock"));
    let _ = std::fs::remove_file(&path);
    let l = std::os::unix::net::UnixListener::bind(&path).ok()?;
    let server = server.to_owned();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut up) = c else { continue };
            let Ok(mut child) = Command::new("/usr/bin/node")
                .arg(&server)
                .arg("stdio")
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
            else {
                continue;
            };
            let (Some(mut sin), Some(mut sout)) = (child.stdin.take(), child.stdout.take()) else {
                continue;
            };
            let Ok(mut down) = up.try_clone() else {
                continue;
            };
            std::thread::spawn(move || {
                let mut b = vec![0u8; 1 << 16];
                while let Ok(n) = sout.read(&mut b) {
                    if n == 0 || down.write_all(&b[..n]).is_err() {
                        break;
                    }
                }
            });
            std::thread::spawn(move || {
                let mut b = vec![0u8; 1 << 16];
                while let Ok(n) = up.read(&mut b) {
                    if n == 0 || sin.write_all(&b[..n]).is_err() {
                        break;
                    }
                }
                drop(sin);
                let _ = child.wait();
            });
        }
    });
    Some(id)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let quick = std::env::var("GLOVE_BENCH_QUICK").is_ok_and(|v| v == "1");
    let count: u32 = if quick { 200 } else { 2000 };
    let Some(nm) = std::env::var_os("GLOVE_MCP_SERVERS").map(PathBuf::from) else {
        eprintln!("skipping: GLOVE_MCP_SERVERS is not set (see mcp/package.json)");
        return;
    };
    let server = nm.join("@modelcontextprotocol/server-everything/dist/index.js");
    let glove = env!("CARGO_BIN_EXE_glove");
    let probe = Command::new(glove)
        .args(["exec", "--", "/bin/true"])
        .output()
        .expect("glove");
    if !probe.status.success() || !server.is_file() {
        eprintln!(
            "skipping: the sandbox or server-everything is not here: {}",
            String::from_utf8_lossy(&probe.stderr)
        );
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let profile = dir.path().join("profile.json");
    std::fs::write(
        &profile,
        serde_json::json!({"schema_version": 1, "servers": [{
            "server_id": "everything",
            "command": {"path": "/usr/bin/node", "arguments": [server, "stdio"],
                        "environment": ["PATH=/usr/bin:/bin"], "working_directory": "/"},
            "tools": [{"name": "echo", "arguments": {"message": {"length": {"max": 64}}}}],
        }]})
        .to_string(),
    )
    .expect("write");
    std::fs::set_permissions(&profile, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let client = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/mcp_client.py");
    let bind = format!("{}:/bench/mcp_client.py", client.display());
    let (n, w) = (count.to_string(), "8".to_owned());
    let floor = if rustix::process::geteuid().is_root() {
        floor_forwarder(&server)
    } else {
        eprintln!("(no floor: the relay's socket directory is root's)");
        None
    };
    let mut rows = Vec::new();
    for round in 0..2 {
        let direct = Command::new("/usr/bin/python3")
            .arg(&client)
            .args(["direct", &n, &w, "--", "/usr/bin/node"])
            .arg(&server)
            .arg("stdio")
            .output()
            .expect("python3");
        let d = parse(&direct, "direct");
        let audit = dir.path().join(format!("audit-{round}.journal"));
        let mediated = Command::new(glove)
            .arg("run")
            .arg("--profile")
            .arg(&profile)
            .arg("--audit-journal")
            .arg(&audit)
            .arg("--pins")
            .arg(dir.path().join("pins.json"))
            .args([
                "--ro-bind",
                &bind,
                "--",
                "/usr/bin/python3",
                "/bench/mcp_client.py",
            ])
            .args([
                "glove",
                &n,
                &w,
                "--",
                "/run/glove/bin/glove",
                "mcp-relay",
                "everything",
            ])
            .env("XDG_STATE_HOME", dir.path())
            .output()
            .expect("glove");
        let g = parse(&mediated, "glove run");
        let fl = floor.as_ref().map(|id| {
            let out = Command::new("/usr/bin/python3")
                .arg(&client)
                .args(["floor", &n, &w, "--", glove, "mcp-relay", id])
                // The floor's forwarder copies bytes: the relay copies too.
                .env("GLOVE_MCP_RELAY_COPY", "1")
                .output()
                .expect("python3");
            parse(&out, "floor")
        });
        let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
        println!(
            "round {round}: p50 {:.3} ms direct, {:.3} ms through glove (+{:.3} ms); p99 {:.3} / {:.3} ms; \
             throughput at 8 in flight {:.0} / {:.0} calls/s ({:.2}x)",
            f(&d, "p50_ms"),
            f(&g, "p50_ms"),
            f(&g, "p50_ms") - f(&d, "p50_ms"),
            f(&d, "p99_ms"),
            f(&g, "p99_ms"),
            f(&d, "calls_per_s"),
            f(&g, "calls_per_s"),
            f(&g, "calls_per_s") / f(&d, "calls_per_s"),
        );
        if let Some(fl) = &fl {
            println!(
                "round {round}: floor (host relay + plain forwarder, no sandbox, policy or audit): p50 {:.3} ms (+{:.3} ms), \
                 {:.0} calls/s ({:.2}x direct); glove run is {:.2}x the floor",
                f(fl, "p50_ms"),
                f(fl, "p50_ms") - f(&d, "p50_ms"),
                f(fl, "calls_per_s"),
                f(fl, "calls_per_s") / f(&d, "calls_per_s"),
                f(&g, "calls_per_s") / f(fl, "calls_per_s"),
            );
        }
        rows.push((d, g));
    }
    println!("(calls: {count} per mode; goal: added p50 <= 0.5 ms, throughput >= 0.8x)");
    if let Some(id) = floor {
        let _ = std::fs::remove_file(format!("/run/glove/mcp/{id}.sock"));
    }
}
