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
//! The client gives its server a socket pair per stream, as a Node client
//! (every Node harness) does: `glove mcp-relay` hands those to the
//! mediator, which then reads and writes the client's sockets itself. A
//! second Glove row gives pipes (as Python and Rust clients do): those are
//! never handed over, so the relay copies (see `glove_mcp::handoff`).
//!
//! Three floors, with the same client on the host and no sandbox, policy
//! or audit format: a forwarder process between the client and the server
//! that only copies bytes (the one hop any mediator adds); the same
//! forwarder writing each chunk of the server's answers to a file and
//! `fdatasync`ing it before copying it on (the least "durable before
//! release" costs, with group commit for free: every answer that arrived
//! during a sync goes out after the next); and that forwarder writing into
//! a file of zeros written ahead (so no sync writes an inode).
//!
//! Plain `std::time`, no harness. Needs a working sandbox, node and the
//! servers; prints why and exits 0 otherwise. `GLOVE_BENCH_QUICK=1` runs a
//! small version.

use std::os::unix::fs::{FileExt, PermissionsExt};
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

/// The floor's forwarder, run as `<this bench> --floor-forward
/// plain|append|overwrite LOG -- SERVER_COMMAND…` by the client as its
/// "server": it starts the server and copies bytes both ways between its
/// own standard streams and the server's — one more process on the path,
/// like the mediator, with no sandbox, decision or audit format.
///
/// With `append` or `overwrite`, every chunk of the server's answers is
/// first written to LOG and `fdatasync`'d, and only then copied to the
/// client: the least that "durable before release" costs (no record
/// format, no hashing; every answer that arrived during a sync goes out
/// after the next one, while requests keep flowing to the server).
/// `overwrite` writes into a file of zeros written ahead, so a sync writes
/// no inode (the cheapest durable write this file system offers);
/// `append` appends, as a journal does.
fn floor_forward(args: &[String]) -> ! {
    use std::io::{Read, Write};
    let (how, log, cmd) = match args {
        [how, log, dashes, cmd @ ..]
            if ["plain", "append", "overwrite"].contains(&how.as_str())
                && dashes == "--"
                && !cmd.is_empty() =>
        {
            (how.as_str(), log, cmd)
        }
        _ => {
            eprintln!("usage: --floor-forward plain|append|overwrite LOG -- SERVER_COMMAND…");
            std::process::exit(2)
        }
    };
    let mut child = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("server");
    let (mut sin, mut sout) = (
        child.stdin.take().expect("stdin"),
        child.stdout.take().expect("stdout"),
    );
    let file = (how != "plain").then(|| {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(log)
            .expect("floor log");
        if how == "overwrite" {
            f.write_all_at(&vec![0u8; FLOOR_LOG as usize], 0)
                .and_then(|()| f.sync_all())
                .expect("floor log");
        }
        f
    });
    let overwrite = how == "overwrite";
    std::thread::spawn(move || {
        let mut b = vec![0u8; 1 << 16];
        let mut at = 0u64;
        let mut out = std::io::stdout().lock();
        while let Ok(n) = sout.read(&mut b) {
            if n == 0 {
                break;
            }
            if let Some(f) = &file {
                if overwrite && at + n as u64 > FLOOR_LOG {
                    at = 0;
                }
                f.write_all_at(&b[..n], at)
                    .and_then(|()| f.sync_data())
                    .expect("floor log");
                at += n as u64;
            }
            if out.write_all(&b[..n]).and_then(|()| out.flush()).is_err() {
                break;
            }
        }
    });
    let mut b = vec![0u8; 1 << 16];
    let mut input = std::io::stdin().lock();
    while let Ok(n) = input.read(&mut b) {
        if n == 0 || sin.write_all(&b[..n]).is_err() {
            break;
        }
    }
    drop(sin);
    let _ = child.wait();
    std::process::exit(0)
}

/// The size of the overwritten floor log (written ahead as zeros).
const FLOOR_LOG: u64 = 16 << 20;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--floor-forward") {
        floor_forward(&args[i + 1..]);
    }
    if args.iter().any(|a| a == "--list") {
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
    let me = std::env::current_exe().expect("the bench's own path");
    let me = me.to_string_lossy().into_owned();
    let floors = [
        ("plain", "a forwarder process copying bytes"),
        (
            "append",
            "a forwarder process, each answer chunk appended and fdatasync'd before release",
        ),
        (
            "overwrite",
            "the same, the file's zeros written ahead (no inode write per sync)",
        ),
    ];
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    for round in 0..2 {
        // The client gives the server (or the relay) a socket pair per
        // stream, as a Node client does, unless TRANSPORT says pipes (as
        // Python and Rust clients give): then the relay copies instead of
        // handing the streams to the mediator.
        let client_run = |mode: &str, transport: &str, argv: &[&str], env: &[(&str, &str)]| {
            let mut c = Command::new("/usr/bin/python3");
            c.arg(&client)
                .args([mode, &n, &w, "--"])
                .args(argv)
                .env("MCP_BENCH_TRANSPORT", transport);
            for (k, v) in env {
                c.env(k, v);
            }
            let out = c.output().expect("python3");
            parse(&out, mode)
        };
        let server_s = server.to_string_lossy().into_owned();
        let d = client_run(
            "direct",
            "socketpair",
            &["/usr/bin/node", &server_s, "stdio"],
            &[],
        );
        let line = |what: &str, v: &serde_json::Value| {
            println!(
                "round {round}: {what}: p50 {:.3} ms (+{:.3} ms); p99 {:.3} ms; \
                 8 in flight {:.0} calls/s ({:.2}x direct)",
                f(v, "p50_ms"),
                f(v, "p50_ms") - f(&d, "p50_ms"),
                f(v, "p99_ms"),
                f(v, "calls_per_s"),
                f(v, "calls_per_s") / f(&d, "calls_per_s"),
            );
        };
        println!(
            "round {round}: direct: p50 {:.3} ms; p99 {:.3} ms; 8 in flight {:.0} calls/s",
            f(&d, "p50_ms"),
            f(&d, "p99_ms"),
            f(&d, "calls_per_s"),
        );
        let mut rates = std::collections::BTreeMap::new();
        for transport in ["socketpair", "pipe"] {
            let audit = dir
                .path()
                .join(format!("audit-{round}-{transport}.journal"));
            let mediated = Command::new(glove)
                .arg("run")
                .arg("--profile")
                .arg(&profile)
                .arg("--audit-journal")
                .arg(&audit)
                .arg("--pins")
                .arg(dir.path().join("pins.json"))
                .args(["--env", &format!("MCP_BENCH_TRANSPORT={transport}")])
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
            rates.insert(transport, f(&g, "calls_per_s"));
            line(
                &format!(
                    "glove run, {}",
                    if transport == "pipe" {
                        "pipes (the relay copies)"
                    } else {
                        "socket pairs (handed to the mediator)"
                    }
                ),
                &g,
            );
        }
        for (how, what) in floors {
            let log = dir.path().join(format!("floor-{how}.log"));
            let log = log.to_string_lossy().into_owned();
            let fl = client_run(
                "floor",
                "socketpair",
                &[
                    &me,
                    "--floor-forward",
                    how,
                    &log,
                    "--",
                    "/usr/bin/node",
                    &server_s,
                    "stdio",
                ],
                &[],
            );
            line(&format!("floor, {what}"), &fl);
            rates.insert(how, f(&fl, "calls_per_s"));
        }
        let r = |a: &str, b: &str| rates[a] / rates[b];
        println!(
            "round {round}: glove run (socket pairs) is {:.2}x the plain floor, \
             {:.2}x the durable floor (append)",
            r("socketpair", "plain"),
            r("socketpair", "append"),
        );
    }
    println!("(calls: {count} per mode; goal: added p50 <= 0.5 ms, throughput >= 0.8x)");
}
