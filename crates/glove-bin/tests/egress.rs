// This file is over 600 lines because it is one end-to-end battery on `glove exec --egress` sharing its loopback upstreams and proxy helpers.
//! `glove exec --egress`: an approved endpoint is reached through the
//! session's proxy (absolute URI, CONNECT, a port mapping), a brokered
//! credential is injected where it is bound and refused elsewhere, and
//! every way around the proxy is refused (and, where it reaches the
//! proxy, audited in the egress journal). Every target is on this
//! machine: an upstream on host loopback, names from the policy's own
//! hosts table, never the configured resolver.

mod common;

use common::{glove, kit, outcome, python_ok, sandbox_ok, As};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A loopback HTTP upstream that records each request head and answers
/// `upstream-ok <path>`.
struct Upstream {
    port: u16,
    heads: Arc<Mutex<Vec<String>>>,
}

fn upstream() -> Upstream {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let h = heads.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let h = h.clone();
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(10)));
                let mut data = Vec::new();
                let mut buf = [0u8; 4096];
                while !data.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => data.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&data).into_owned();
                let path = head.split(' ').nth(1).unwrap_or("").to_owned();
                h.lock().expect("lock").push(head);
                let body = format!("upstream-ok {path}");
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    Upstream { port, heads }
}

fn write_private(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

const REAL_KEY: &str = "sk-real-4f1c9a0e7b2d";

struct Run {
    lines: Vec<serde_json::Value>,
    outcome: serde_json::Value,
    journal: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

fn run(policy: serde_json::Value, cases: &[&str]) -> Run {
    run_with(policy, &[], cases)
}

/// [`run`] with more `glove exec` flags before the command.
fn run_with(policy: serde_json::Value, flags: &[&str], cases: &[&str]) -> Run {
    let dir = common::safe_tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let file = dir.path().join("egress.json");
    write_private(&file, &policy.to_string());
    let journal = dir.path().join("egress.journal");
    let k = kit();
    let probe = k.root.join("egress.py");
    if !probe.exists() {
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/probes/egress.py"),
            &probe,
        )
        .expect("copy probe");
        std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    let bind = format!("{}:/probe/egress.py", probe.display());
    let file_s = file.display().to_string();
    let journal_s = journal.display().to_string();
    let mut args = vec![
        "exec",
        "--json",
        "--egress",
        &file_s,
        "--egress-journal",
        &journal_s,
        "--ro-bind",
        &bind,
    ];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--", "/usr/bin/python3", "/probe/egress.py"]);
    args.extend_from_slice(cases);
    let out = glove(As::Caller, &args, None);
    let (v, text) = outcome(&out);
    let lines = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .collect();
    assert_eq!(
        v["exit"]["code"],
        0,
        "{v} {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Run {
        lines,
        outcome: v,
        journal,
        _dir: dir,
    }
}

fn line(r: &Run, i: usize) -> &serde_json::Value {
    r.lines
        .get(i)
        .unwrap_or_else(|| panic!("no line {i}: {:?}", r.lines))
}

fn refused(r: &Run, i: usize, status: &str, code: &str) {
    let l = line(r, i);
    assert_eq!(l["status"], status, "line {i}: {l}");
    assert_eq!(l["refusal"], code, "line {i}: {l}");
}

/// The codes of the events in the journal (empty for an allowed one),
/// decoded strictly.
fn journal_codes(path: &Path) -> Vec<String> {
    let spec = glove_egress::ProxyLimits::default().journal_spec();
    glove_egress::read_events(path, &spec)
        .expect("the journal replays")
        .into_iter()
        .map(|e| e.code.unwrap_or_default())
        .collect()
}

#[test]
fn approved_endpoints_are_reached_and_every_bypass_is_refused() {
    if !sandbox_ok(As::Caller) || !python_ok() {
        return;
    }
    let up = upstream();
    let p = up.port;
    let keydir = common::safe_tempdir();
    let key = keydir.path().join("openai.key");
    write_private(&key, &format!("{REAL_KEY}\n"));
    let model = format!("model.test:{p}");
    let other = format!("other.test:{p}");
    let tls_ep = format!("tls.test:{p}");
    let policy = serde_json::json!({
        "schema_version": 1,
        "egress_policy_id": "test-egress",
        "endpoints": [model, other, tls_ep, "meta.test:80"],
        "allow_private": true,
        "hosts": {"model.test": ["127.0.0.1"], "other.test": ["127.0.0.1"], "tls.test": ["127.0.0.1"],
                  "meta.test": ["169.254.169.254"]},
        "port_mappings": [{"listen_port": 18000, "endpoint": model}],
        "brokered": [{"secret_handle": "openai", "source_path": key.display().to_string(),
                      "env": "OPENAI_API_KEY", "header": "authorization", "endpoints": [model],
                      "scheme": "http"},
                     {"secret_handle": "tls-key", "source_path": key.display().to_string(),
                      "env": "TLS_API_KEY", "header": "authorization", "endpoints": [tls_ep]}],
    });
    let url = |host: &str, path: &str| format!("http://{host}:{p}{path}");
    let (a1, a2, a3, a4) = (
        url("model.test", "/via-proxy"),
        url("other.test", "/misdirected"),
        url("notlisted.test", "/"),
        url("127.0.0.1", "/direct-ip"),
    );
    let port1 = "http://model.test:1/".to_string();
    let ps = p.to_string();
    let v6 = format!("[::1]:{p}");
    let cases: Vec<&str> = vec![
        "get",
        &a1, // 0
        "connect",
        &other, // 1
        "get",
        "http://127.0.0.1:18000/mapped", // 2
        "get_header",
        "http://127.0.0.1:18000/brokered",
        "Authorization",
        "Bearer $OPENAI_API_KEY", // 3
        "get_header",
        &a2,
        "Authorization",
        "Bearer $OPENAI_API_KEY", // 4
        "get_header",
        "http://127.0.0.1:18000/elsewhere",
        "X-Other",
        "$OPENAI_API_KEY", // 5
        "get",
        &a3, // 6
        "get",
        &port1, // 7
        "absolute",
        &a4, // 8
        "connect",
        &v6, // 9
        "connect",
        "meta.test:80", // 10
        "connect",
        "169.254.169.254:80", // 11
        "origin_form",        // 12
        "big_header",
        &ps, // 13
        "direct",
        "127.0.0.1",
        &ps, // 14
        "direct",
        "::1",
        &ps, // 15
        "unset_proxy_get",
        &a1, // 16
        "dns",
        "model.test", // 17
        "udp",        // 18
        "env_has",
        REAL_KEY, // 19
        "env",
        "HTTP_PROXY", // 20
        "slowloris",  // 21
        "tls",
        &tls_ep, // 22
    ];
    let r = run(policy, &cases);
    for i in [0, 1, 2, 3] {
        let l = line(&r, i);
        assert_eq!(l["status"], "200", "line {i}: {l}");
        assert!(
            l["body"].as_str().unwrap_or("").contains("upstream-ok"),
            "line {i}: {l}"
        );
    }
    refused(&r, 4, "403", "egress_placeholder_misdirected");
    refused(&r, 5, "403", "egress_placeholder_misdirected");
    refused(&r, 6, "403", "egress_host_not_allowed");
    refused(&r, 7, "403", "egress_port_not_allowed");
    refused(&r, 8, "403", "egress_host_not_allowed");
    refused(&r, 9, "403", "egress_host_not_allowed");
    refused(&r, 10, "403", "egress_address_metadata");
    // Issue 26, finding 10: a metadata literal has its own code.
    refused(&r, 11, "403", "egress_address_metadata");
    refused(&r, 12, "400", "egress_request_invalid");
    let big = line(&r, 13);
    assert!(
        big["status"] == "431" || big["status"] == "400" || big.get("error").is_some(),
        "an oversized head is refused: {big}"
    );
    for i in [14, 15] {
        assert_eq!(
            line(&r, i)["connected"],
            false,
            "nothing routes: {}",
            line(&r, i)
        );
    }
    assert!(
        line(&r, 16).get("error").is_some(),
        "no proxy, no way: {}",
        line(&r, 16)
    );
    assert_eq!(line(&r, 17)["resolved"], false, "no DNS: {}", line(&r, 17));
    assert_eq!(line(&r, 18)["created"], false);
    assert_eq!(
        line(&r, 18)["errno"],
        1,
        "UDP sockets are refused by seccomp"
    );
    assert_eq!(
        line(&r, 19)["found"],
        false,
        "the real key is not in the sandbox"
    );
    assert_eq!(line(&r, 20)["value"], "http://127.0.0.1:3128");
    assert_eq!(
        line(&r, 21)["closed"],
        true,
        "a slow head is cut off: {}",
        line(&r, 21)
    );

    // The upstream saw the real key where it is bound, never a placeholder.
    let heads = up.heads.lock().expect("lock").clone();
    let brokered = heads
        .iter()
        .find(|h| h.starts_with("GET /brokered"))
        .expect("the brokered request arrived");
    assert!(
        brokered
            .to_ascii_lowercase()
            .contains(&format!("authorization: bearer {REAL_KEY}").to_ascii_lowercase()),
        "{brokered}"
    );
    assert!(
        heads.iter().all(|h| !h.contains("glove-placeholder")),
        "{heads:?}"
    );
    assert!(!heads
        .iter()
        .any(|h| h.contains("/misdirected") || h.contains("/elsewhere")));
    assert!(heads.iter().any(|h| h.starts_with("GET /via-proxy")));
    assert!(heads.iter().any(|h| h.starts_with("GET /mapped")));
    assert!(heads.iter().any(|h| h.starts_with("GET /tunnel")));

    // The journal holds every decision that reached the proxy.
    let codes = journal_codes(&r.journal);
    for c in [
        "egress_placeholder_misdirected",
        "egress_host_not_allowed",
        "egress_port_not_allowed",
        "egress_address_metadata",
        "egress_request_invalid",
    ] {
        assert!(codes.iter().any(|x| x == c), "{c} not journaled: {codes:?}");
    }
    let e = &r.outcome["egress"];
    assert_eq!(e["policy_id"], "test-egress", "{e}");
    assert!(e["requests_allowed"].as_u64().unwrap_or(0) >= 3, "{e}");
    assert!(e["connections_allowed"].as_u64().unwrap_or(0) >= 1, "{e}");
    assert!(
        e["requests_refused"].as_u64().unwrap_or(0)
            + e["connections_refused"].as_u64().unwrap_or(0)
            >= 8,
        "{e}"
    );
    assert_eq!(
        e["journal_records"].as_u64(),
        Some(codes.len() as u64),
        "{e}"
    );
}

#[test]
fn names_resolving_to_private_addresses_are_refused_without_allow_private() {
    if !sandbox_ok(As::Caller) || !python_ok() {
        return;
    }
    let up = upstream();
    let p = up.port;
    let policy = serde_json::json!({
        "schema_version": 1,
        "egress_policy_id": "public-only",
        "endpoints": [format!("model.test:{p}"), format!("rebind.test:{p}")],
        "allow_private": false,
        "hosts": {"model.test": ["127.0.0.1"], "rebind.test": ["10.1.2.3", "127.0.0.1"]},
    });
    let (a, b) = (
        format!("http://model.test:{p}/"),
        format!("http://rebind.test:{p}/"),
    );
    let m = format!("model.test:{p}");
    let r = run(policy, &["get", &a, "get", &b, "connect", &m]);
    refused(&r, 0, "403", "egress_address_private");
    refused(&r, 1, "403", "egress_address_private");
    refused(&r, 2, "403", "egress_address_private");
    assert!(
        up.heads.lock().expect("lock").is_empty(),
        "nothing reached the upstream"
    );
    assert_eq!(journal_codes(&r.journal).len(), 3);
}

#[test]
fn a_bad_egress_policy_fails_the_launch_with_its_code() {
    let dir = common::safe_tempdir();
    let file = dir.path().join("bad.json");
    write_private(
        &file,
        r#"{"schema_version":1,"egress_policy_id":"x","endpoints":["169.254.169.254:80"],"allow_private":false}"#,
    );
    let f = file.display().to_string();
    let out = glove(
        As::Caller,
        &["exec", "--json", "--egress", &f, "--", "/bin/true"],
        None,
    );
    assert_eq!(out.status.code(), Some(125));
    let (v, _) = outcome(&out);
    assert_eq!(v["code"], "egress_policy_invalid", "{v}");
}

/// A journal put in a directory others may read is the operator's
/// placement mistake, said with the placement's code.
#[test]
fn a_journal_in_a_loose_directory_is_a_placement_error() {
    let dir = common::safe_tempdir();
    let file = dir.path().join("egress.json");
    write_private(
        &file,
        r#"{"schema_version":1,"egress_policy_id":"x","endpoints":["model.test:8000"],"allow_private":true,"hosts":{"model.test":["127.0.0.1"]}}"#,
    );
    // safe_tempdir is mode 0755: fine to launch from, too loose for a journal.
    let journal = dir.path().join("j.journal").display().to_string();
    let f = file.display().to_string();
    let out = glove(
        As::Caller,
        &[
            "exec",
            "--json",
            "--egress",
            &f,
            "--egress-journal",
            &journal,
            "--",
            "/bin/true",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(125));
    let (v, _) = outcome(&out);
    assert_eq!(v["code"], "journal_dir_bad_mode", "{v}");
}

#[test]
fn the_forwarder_counts_against_the_sessions_pid_limit() {
    if !sandbox_ok(As::Caller) {
        return;
    }
    let dir = common::safe_tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let file = dir.path().join("egress.json");
    write_private(
        &file,
        r#"{"schema_version":1,"egress_policy_id":"pids","endpoints":["up.test:9"],"allow_private":true,"hosts":{"up.test":["127.0.0.1"]}}"#,
    );
    let f = file.display().to_string();
    let j = dir.path().join("j").display().to_string();
    let script = "/bin/true && echo forked";
    // Offline, two processes fit: the shell and the one it forks.
    let out = glove(
        As::Caller,
        &[
            "exec", "--json", "--pids", "2", "--", "/bin/sh", "-c", script,
        ],
        None,
    );
    let (v, text) = outcome(&out);
    assert!(text.contains("forked"), "{v} {text}");
    if !v["enforcement"]["pids"]
        .as_str()
        .unwrap_or("")
        .starts_with("cgroup")
    {
        // Per-user rlimits count users, and the forwarder is not the agent's.
        eprintln!("skipping: no pids cgroup here ({})", v["enforcement"]);
        return;
    }
    // With egress the forwarder is the second: the shell cannot fork.
    let out = glove(
        As::Caller,
        &[
            "exec",
            "--json",
            "--pids",
            "2",
            "--egress",
            &f,
            "--egress-journal",
            &j,
            "--",
            "/bin/sh",
            "-c",
            script,
        ],
        None,
    );
    let (v, text) = outcome(&out);
    assert!(!text.contains("forked"), "{v} {text}");
    assert_ne!(v["exit"]["code"], 0, "{v}");
}

/// Review finding: `glove egress show` opened the journal as a writer,
/// which cuts a torn tail: a display command changed the evidence. It
/// replays the bytes read-only, names the head the outcome commits, and
/// fails on a torn tail without touching the file.
#[test]
fn egress_show_reads_the_journal_without_changing_it() {
    if !sandbox_ok(As::Caller) || !python_ok() {
        return;
    }
    let up = upstream();
    let p = up.port;
    let policy = serde_json::json!({
        "schema_version": 1,
        "egress_policy_id": "show",
        "endpoints": [format!("model.test:{p}")],
        "allow_private": true,
        "hosts": {"model.test": ["127.0.0.1"]},
    });
    let (a, b) = (
        format!("http://model.test:{p}/one"),
        format!("http://other.test:{p}/two"),
    );
    let m = format!("model.test:{p}");
    let r = run(policy, &["get", &a, "get", &b, "connect", &m]);
    let j = r.journal.display().to_string();
    let before = std::fs::read(&r.journal).expect("journal");
    let out = glove(
        As::Caller,
        &["egress", "show", "--json", "--journal", &j],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["head"], r.outcome["egress"]["journal_head"], "{v}");
    assert_eq!(v["records"], r.outcome["egress"]["journal_records"], "{v}");
    let events = v["events"].as_array().expect("events");
    assert!(
        events
            .iter()
            .any(|e| e["code"] == "egress_host_not_allowed"),
        "{v}"
    );
    let text = glove(As::Caller, &["egress", "show", "--journal", &j], None);
    assert!(text.status.success());
    let shown = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(shown.contains("REFUSED egress_host_not_allowed"), "{shown}");
    // Issue 26, finding 10: the tunnel's end event reads as its end, not
    // as a second "connection allowed".
    let tunnel = |verdict: &str| {
        shown
            .lines()
            .filter(|l| l.contains(" connection ") && l.contains(&format!("  {verdict}  ")))
            .count()
    };
    assert_eq!((tunnel("allowed"), tunnel("ended")), (1, 1), "{shown}");
    assert_eq!(std::fs::read(&r.journal).expect("journal"), before);
    // Cut inside the last record: show fails, every byte stays.
    let cut = &before[..before.len() - 10];
    std::fs::write(&r.journal, cut).expect("write");
    let out = glove(As::Caller, &["egress", "show", "--journal", &j], None);
    assert!(
        !out.status.success(),
        "a torn journal must not show as whole"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("torn"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (v, _) = outcome(&glove(
        As::Caller,
        &["egress", "show", "--json", "--journal", &j],
        None,
    ));
    assert_eq!(v["code"], "egress_audit_failed", "{v}");
    assert_eq!(std::fs::read(&r.journal).expect("journal"), cut);
    let dir = r.journal.parent().expect("dir");
    let names: Vec<String> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.contains(".torn.")), "{names:?}");
}

/// Review finding: the read-only show opened whatever the path named. A
/// FIFO in the journal's place is refused at once (not waited on for a
/// writer), a symbolic link is not followed.
#[test]
fn egress_show_refuses_a_fifo_or_a_symlink_at_once() {
    let dir = common::safe_tempdir();
    let fifo = dir.path().join("fifo");
    common::mkfifo(&fifo);
    let link = dir.path().join("link");
    std::os::unix::fs::symlink("/etc/hostname", &link).expect("symlink");
    // A journal path that names no journal is a placement error, with the
    // placement's code; the message says why.
    for (path, why, code) in [
        (&fifo, "the path names no regular file", "file_not_regular"),
        (&link, "the path names a symbolic link", "file_symlink"),
    ] {
        let p = path.display().to_string();
        let out = glove(
            As::Caller,
            &["egress", "show", "--json", "--journal", &p],
            None,
        );
        assert!(!out.status.success());
        let (v, _) = outcome(&out);
        assert_eq!(v["code"], code, "{v}");
        assert!(
            v["message"].as_str().is_some_and(|m| m.contains(why)),
            "{v}"
        );
    }
}

/// Issue 26, finding 10: the summary line without `--json` counted only
/// the refusals journaled one by one (`64 refused` when 82 were).
#[test]
fn issue26_the_summary_line_counts_every_refusal() {
    let v = serde_json::json!({
        "policy_id": "p",
        "connections_allowed": 1,
        "requests_allowed": 2,
        "connections_refused": 4,
        "requests_refused": 60,
        "refusals_unjournaled": 18,
        "audit_failed": false,
        "bytes_up": 10,
        "bytes_down": 20,
        "journal": "/j",
    });
    let line = glove_bin::egress::summary_line(&v);
    assert!(line.contains(" 82 refused"), "{line}");
    assert!(line.contains("18 of them counted"), "{line}");
}

/// Issue 26, finding 10: `glove egress show` rendered an end event as a
/// second decision; a request that failed after it was let through reads
/// as failed, not refused.
#[test]
fn issue26_egress_show_renders_end_events_as_ends() {
    use glove_types::egress::event::{Decision, EgressEvent, EventKind, Phase};
    let ev = |kind, decision, phase, code: Option<&str>| EgressEvent {
        session_id: glove_types::ids::SessionId::new("s").expect("id"),
        seq: 1,
        kind,
        decision,
        phase,
        host: "model.test".into(),
        port: 443,
        method: (kind == EventKind::Request).then(|| "GET".to_owned()),
        credential: None,
        code: code.map(str::to_owned),
        bytes_up: 5,
        bytes_down: 7,
        started_at_ms: 0,
        duration_ms: 1,
    };
    let line = |e: &EgressEvent| glove_bin::egress::event_line(e);
    let opened = line(&ev(
        EventKind::Connection,
        Decision::Allowed,
        Phase::Decision,
        None,
    ));
    let ended = line(&ev(
        EventKind::Connection,
        Decision::Allowed,
        Phase::End,
        None,
    ));
    let failed = line(&ev(
        EventKind::Request,
        Decision::Refused,
        Phase::End,
        Some("egress_upstream_failed"),
    ));
    let refused = line(&ev(
        EventKind::Request,
        Decision::Refused,
        Phase::Decision,
        Some("egress_host_not_allowed"),
    ));
    assert!(opened.contains("  allowed  "), "{opened}");
    assert!(
        ended.contains("  ended  ") && !ended.contains("allowed"),
        "{ended}"
    );
    assert!(failed.contains("FAILED egress_upstream_failed"), "{failed}");
    assert!(
        refused.contains("REFUSED egress_host_not_allowed"),
        "{refused}"
    );
}

/// A loopback HTTPS upstream for `name` whose leaf is signed by a private
/// CA (returned, PEM); it records each request head and answers
/// `tls-upstream-ok`.
fn tls_upstream(name: &str) -> (String, Upstream) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let ca_key = KeyPair::generate().expect("key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let issuer = CertifiedIssuer::self_signed(ca, ca_key).expect("ca");
    let key = KeyPair::generate().expect("key");
    let leaf = CertificateParams::new(vec![name.to_owned()])
        .expect("params")
        .signed_by(&key, &issuer)
        .expect("leaf");
    let der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone()], der)
            .expect("server config"),
    );
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let h = heads.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            let (h, config) = (h.clone(), config.clone());
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(10)));
                let Ok(conn) = rustls::ServerConnection::new(config) else {
                    return;
                };
                let mut t = rustls::StreamOwned::new(conn, s);
                let mut data = Vec::new();
                let mut buf = [0u8; 4096];
                while !data.windows(4).any(|w| w == b"\r\n\r\n") {
                    match t.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => data.extend_from_slice(&buf[..n]),
                    }
                }
                h.lock()
                    .expect("lock")
                    .push(String::from_utf8_lossy(&data).into_owned());
                let body = "tls-upstream-ok";
                let _ = write!(
                    t,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = t.flush();
                t.conn.send_close_notify();
                let _ = t.flush();
            });
        }
    });
    (issuer.pem(), Upstream { port, heads })
}

/// Issue 27: an upstream whose CA is an operator's private one is reached
/// (verified, the credential brokered) when `--egress-ca` names it, and
/// refused without it; a missing or garbage `--egress-ca` refuses the
/// launch with its code.
#[test]
fn issue27_an_upstream_with_a_private_ca_is_reached_with_egress_ca() {
    if !sandbox_ok(As::Caller) || !python_ok() {
        return;
    }
    let (ca_pem, up) = tls_upstream("tls.test");
    let dir = common::safe_tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let key = dir.path().join("tls.key");
    write_private(&key, &format!("{REAL_KEY}\n"));
    let ca = dir.path().join("ca.pem");
    write_private(&ca, &ca_pem);
    let ca_s = ca.display().to_string();
    let tls_ep = format!("tls.test:{}", up.port);
    let policy = serde_json::json!({
        "schema_version": 1,
        "egress_policy_id": "private-ca",
        "endpoints": [tls_ep],
        "allow_private": true,
        "hosts": {"tls.test": ["127.0.0.1"]},
        "brokered": [{"secret_handle": "tls-key", "source_path": key.display().to_string(),
                      "env": "TLS_API_KEY", "header": "authorization", "endpoints": [tls_ep]}],
    });
    let r = run_with(policy.clone(), &["--egress-ca", &ca_s], &["tls", &tls_ep]);
    let l = line(&r, 0);
    assert_eq!(l["connect"], "200", "{l}");
    assert_eq!(l["verified"], true, "{l}");
    assert_eq!(
        l["status"], "200",
        "the upstream was verified and reached: {l}"
    );
    let heads = up.heads.lock().expect("lock").clone();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(
        heads[0]
            .to_ascii_lowercase()
            .contains(&format!("authorization: bearer {REAL_KEY}").to_ascii_lowercase()),
        "{heads:?}"
    );

    // Without it, the system bundle alone does not verify the upstream.
    let r = run(policy.clone(), &["tls", &tls_ep]);
    refused(&r, 0, "502", "egress_upstream_failed");
    assert_eq!(up.heads.lock().expect("lock").len(), 1);

    // A missing, a garbage and a world-readable root file refuse the launch.
    let garbage = dir.path().join("garbage.pem");
    write_private(&garbage, "not a certificate\n");
    let open = dir.path().join("open.pem");
    std::fs::write(&open, &ca_pem).expect("write");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let file = dir.path().join("egress.json");
    write_private(&file, &policy.to_string());
    let f = file.display().to_string();
    for bad in [dir.path().join("missing.pem"), garbage, open] {
        let b = bad.display().to_string();
        let out = glove(
            As::Caller,
            &[
                "exec",
                "--json",
                "--egress",
                &f,
                "--egress-ca",
                &b,
                "--",
                "/bin/true",
            ],
            None,
        );
        assert_eq!(out.status.code(), Some(125), "{b}");
        let (v, _) = outcome(&out);
        assert_eq!(v["code"], "egress_trust_roots_invalid", "{b}: {v}");
    }
}
