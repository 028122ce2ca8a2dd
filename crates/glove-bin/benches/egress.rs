//! Egress benchmark: connection setup and throughput through the sandbox's
//! forwarder, the channel and the session's proxy (a `CONNECT` tunnel,
//! audited before the `200`), against the same client connecting straight
//! to the same loopback upstream on the host, in the same run.
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-bench cargo bench -p glove-bin --bench egress
//! ```
//!
//! Plain `std::time`, no harness; the client is `benches/egress_client.py`
//! (python3) on both sides, so the ratio compares the paths, not the
//! clients. Needs a working sandbox; prints why and exits 0 otherwise.
//! `GLOVE_BENCH_QUICK=1` runs a small version.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// An upstream on host loopback: `source` sends `total` bytes to each
/// connection, `ping` echoes one byte.
fn upstreams(total: u64) -> (u16, u16) {
    let source = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let ping = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let ports = (
        source.local_addr().expect("addr").port(),
        ping.local_addr().expect("addr").port(),
    );
    std::thread::spawn(move || {
        let chunk = vec![0u8; 1 << 20];
        for s in source.incoming() {
            let Ok(mut s) = s else { continue };
            let chunk = chunk.clone();
            std::thread::spawn(move || {
                let mut left = total;
                while left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    if s.write_all(&chunk[..n]).is_err() {
                        return;
                    }
                    left -= n as u64;
                }
            });
        }
    });
    std::thread::spawn(move || {
        for s in ping.incoming() {
            let Ok(mut s) = s else { continue };
            let mut b = [0u8; 1];
            if s.read_exact(&mut b).is_ok() {
                let _ = s.write_all(&b);
            }
        }
    });
    ports
}

/// The floor of any relay on this machine: a plain host process that
/// accepts on `127.0.0.1` and splices each connection to `to` (two
/// blocking threads, no policy, no audit, no sandbox). Returns its port.
fn splice_relay(to: u16) -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(a) = s else { continue };
            let Ok(b) = std::net::TcpStream::connect(("127.0.0.1", to)) else {
                continue;
            };
            let _ = a.set_nodelay(true);
            let _ = b.set_nodelay(true);
            let (a2, b2) = (a.try_clone().expect("dup"), b.try_clone().expect("dup"));
            std::thread::spawn(move || splice_loop(&a, &b));
            std::thread::spawn(move || splice_loop(&b2, &a2));
        }
    });
    port
}

fn splice_loop(from: &std::net::TcpStream, to: &std::net::TcpStream) {
    use rustix::pipe::{splice, SpliceFlags};
    let Ok((pr, pw)) = rustix::pipe::pipe() else {
        return;
    };
    let _ = rustix::pipe::fcntl_setpipe_size(&pw, 1 << 20);
    loop {
        let n = match splice(from, None, &pw, None, 1 << 20, SpliceFlags::MOVE) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut left = n;
        while left > 0 {
            match splice(&pr, None, to, None, left, SpliceFlags::MOVE) {
                Ok(0) | Err(_) => return,
                Ok(m) => left -= m,
            }
        }
    }
    let _ = rustix::net::shutdown(to, rustix::net::Shutdown::Write);
}

fn client() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/egress_client.py")
}

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

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let quick = std::env::var("GLOVE_BENCH_QUICK").is_ok_and(|v| v == "1");
    let (count, total): (u64, u64) = if quick {
        (50, 64 << 20)
    } else {
        (500, 1 << 30)
    };
    let glove = env!("CARGO_BIN_EXE_glove");
    let probe = Command::new(glove)
        .args(["exec", "--", "/bin/true"])
        .output()
        .expect("glove");
    if !probe.status.success() {
        eprintln!(
            "skipping: the sandbox does not run here: {}",
            String::from_utf8_lossy(&probe.stderr)
        );
        return;
    }
    let (source, ping) = upstreams(total);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let policy = serde_json::json!({
        "schema_version": 1,
        "egress_policy_id": "bench",
        "endpoints": [format!("up.test:{source}"), format!("up.test:{ping}")],
        "allow_private": true,
        "hosts": {"up.test": ["127.0.0.1"]},
    });
    let file = dir.path().join("egress.json");
    std::fs::write(&file, policy.to_string()).expect("write");
    let journal = dir.path().join("egress.journal");
    let args = |mode: &str, host: &str| {
        vec![
            mode.to_owned(),
            host.to_owned(),
            source.to_string(),
            ping.to_string(),
            count.to_string(),
            total.to_string(),
        ]
    };
    let bind = format!("{}:/bench/client.py", client().display());
    let (rs, rp) = (splice_relay(source), splice_relay(ping));
    let relay_args = vec![
        "direct".to_owned(),
        "127.0.0.1".to_owned(),
        rs.to_string(),
        rp.to_string(),
        count.to_string(),
        total.to_string(),
    ];
    let mut runs = Vec::new();
    for round in 0..2 {
        let direct = Command::new("/usr/bin/python3")
            .arg(client())
            .args(args("direct", "127.0.0.1"))
            .output()
            .expect("python3");
        let d = parse(&direct, "direct");
        let j = journal.with_extension(format!("{round}"));
        let proxied = Command::new(glove)
            .args(["exec", "--memory", "2G", "--egress"])
            .arg(&file)
            .arg("--egress-journal")
            .arg(&j)
            .args([
                "--ro-bind",
                &bind,
                "--",
                "/usr/bin/python3",
                "/bench/client.py",
            ])
            .args(args("proxy", "up.test"))
            .output()
            .expect("glove");
        let p = parse(&proxied, "proxied");
        let relayed = Command::new("/usr/bin/python3")
            .arg(client())
            .args(&relay_args)
            .output()
            .expect("python3");
        let r = parse(&relayed, "relayed");
        runs.push((d, p, r));
    }
    // The second round: both paths warm.
    let (d, p, r) = &runs[1];
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    println!(
        "egress: {count} connections each, {} MiB of throughput, host mode: {}",
        total >> 20,
        if rustix::process::geteuid().is_root() {
            "root"
        } else {
            "unprivileged"
        }
    );
    println!(
        "  connection setup p50: direct {:.3} ms, through the proxy {:.3} ms (+{:.3} ms; mean +{:.3} ms)",
        f(d, "p50_ms"),
        f(p, "p50_ms"),
        f(p, "p50_ms") - f(d, "p50_ms"),
        f(p, "mean_ms") - f(d, "mean_ms"),
    );
    println!(
        "  throughput: direct {:.0} MiB/s, through the proxy {:.0} MiB/s (ratio {:.2})",
        f(d, "mib_per_s"),
        f(p, "mib_per_s"),
        f(p, "mib_per_s") / f(d, "mib_per_s").max(1e-9),
    );
    println!(
        "  floor (a bare host splice relay, no sandbox, policy or audit): setup +{:.3} ms, throughput {:.0} MiB/s (ratio {:.2}); the proxy reaches {:.2} of it",
        f(r, "p50_ms") - f(d, "p50_ms"),
        f(r, "mib_per_s"),
        f(r, "mib_per_s") / f(d, "mib_per_s").max(1e-9),
        f(p, "mib_per_s") / f(r, "mib_per_s").max(1e-9),
    );
    let _ = Path::new(&journal);
}
