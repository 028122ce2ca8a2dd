//! Authentication: wrong secret, no handshake, replay, another user,
//! handshake timeout.

use crate::harness::*;
use glove_bin::control::auth::BootstrapSecret;
use glove_bin::control::client::{read_secret, Client, ClientError};
use serde_json::json;
use std::io::Read;
use std::os::unix::net::UnixStream;

fn remote_code(e: &ClientError) -> &str {
    match e {
        ClientError::Remote { code, .. } => code,
        ClientError::Local(r) => panic!("expected a service error, got local {r}"),
    }
}

/// Reads until EOF and returns what arrived (the service closed the
/// connection when this returns).
fn drain(mut s: UnixStream) -> Vec<u8> {
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    rest
}

#[test]
fn wrong_secret_is_refused() {
    let home = Home::new();
    let d = Daemon::start(&home, &Config::base());
    let stream = UnixStream::connect(d.socket()).expect("connect");
    let wrong = BootstrapSecret::from_bytes([0x55; 32]);
    let e = Client::over(stream, &wrong, [1; 32]).expect_err("refused");
    assert_eq!(remote_code(&e), "auth_failed");
    // The right secret still works afterwards.
    d.client().capabilities().expect("capabilities");
}

#[test]
fn nothing_is_answered_before_the_handshake() {
    let home = Home::new();
    let d = Daemon::start(&home, &Config::full());
    let secret = read_secret(&d.run).expect("secret");
    // A client that skips `authenticate`: reuse the client's framing by
    // authenticating over a stream we then abandon is not possible, so
    // speak raw frames.
    let mut s = UnixStream::connect(d.socket()).expect("connect");
    let hello = read_frame(&mut s);
    assert_eq!(hello["method"], "hello");
    write_frame(
        &mut s,
        br#"{"id":1,"jsonrpc":"2.0","method":"capabilities","params":{}}"#,
    );
    let reply = read_frame(&mut s);
    assert_eq!(reply["error"]["data"]["code"], "auth_required");
    assert_eq!(reply["error"]["code"], -32001);
    assert!(
        drain(s).is_empty(),
        "the connection is closed after refusal"
    );
    drop(secret);
}

#[test]
fn replayed_handshakes_are_refused() {
    let home = Home::new();
    let d = Daemon::start(&home, &Config::base());
    let secret = read_secret(&d.run).expect("secret");
    let nonce = [7u8; 32];
    let s = UnixStream::connect(d.socket()).expect("connect");
    Client::over(s, &secret, nonce).expect("first use of the nonce");
    // The same client nonce with a correct MAC over a fresh server nonce.
    let s = UnixStream::connect(d.socket()).expect("connect");
    let e = Client::over(s, &secret, nonce).expect_err("replayed nonce");
    assert_eq!(remote_code(&e), "auth_replayed");
    // The exact bytes of an earlier authenticate message on a new
    // connection: the server nonce differs, so the MAC fails.
    let mut s = UnixStream::connect(d.socket()).expect("connect");
    let hello = read_frame(&mut s);
    let server_nonce = hello["params"]["server_nonce"]
        .as_str()
        .expect("nonce")
        .to_owned();
    let mut s2 = UnixStream::connect(d.socket()).expect("connect");
    let _ = read_frame(&mut s2);
    let sn = glove_bin::control::auth::parse_hex32(&server_nonce).expect("hex");
    let mac = secret.client_mac(&sn, &[9; 32]);
    let msg = json!({"jsonrpc":"2.0","id":1,"method":"authenticate","params":{
        "client_nonce": hex(&[9; 32]), "client_mac": hex(&mac)}});
    let bytes = glove_types::canon::to_canonical(&msg).expect("canonical");
    write_frame(&mut s2, &bytes);
    let reply = read_frame(&mut s2);
    assert_eq!(reply["error"]["data"]["code"], "auth_failed");
    assert!(drain(s2).is_empty());
    // The original connection can still use its own nonce once.
    write_frame(&mut s, &bytes);
    let reply = read_frame(&mut s);
    assert!(reply["result"]["server_mac"].is_string(), "{reply}");
}

#[test]
fn handshake_timeout_closes_the_connection() {
    let home = Home::new();
    let d = Daemon::start(
        &home,
        &Config::base().with(&["--handshake-timeout-secs", "1"]),
    );
    let mut s = UnixStream::connect(d.socket()).expect("connect");
    let _hello = read_frame(&mut s);
    // Say nothing; wait for the service's answer (an event, not a sleep).
    let reply = read_frame(&mut s);
    assert_eq!(reply["error"]["data"]["code"], "auth_timeout");
    assert!(drain(s).is_empty());
}

#[test]
fn another_user_is_refused() {
    if !rustix::process::geteuid().is_root() {
        assert!(
            !required(),
            "GLOVE_REQUIRE_SANDBOX=1 but the test is not root: it cannot run gloved as another user"
        );
        eprintln!("skipping another_user_is_refused: needs root to run gloved as uid 65534");
        return;
    }
    if !std::path::Path::new("/usr/bin/setpriv").exists() {
        assert!(
            !required(),
            "GLOVE_REQUIRE_SANDBOX=1 but setpriv is missing"
        );
        eprintln!("skipping another_user_is_refused: /usr/bin/setpriv is missing");
        return;
    }
    // gloved runs as uid 65534 in directories it owns; this test (root)
    // connects, so the peer uid (0) differs from the service uid.
    let home = Home::new();
    let chown = |p: &std::path::Path| {
        rustix::fs::chown(
            p,
            Some(rustix::fs::Uid::from_raw(65534)),
            Some(rustix::fs::Gid::from_raw(65534)),
        )
        .expect("chown");
    };
    mkdir_mode(&home.run, 0o700);
    std::fs::set_permissions(
        home.dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    for p in [&home.run, &home.state, &home.key] {
        chown(p);
    }
    let bin_dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(
        bin_dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let bin = bin_dir.path().join("gloved");
    std::fs::copy(env!("CARGO_BIN_EXE_gloved"), &bin).expect("copy gloved");
    let mut cmd = std::process::Command::new("/usr/bin/setpriv");
    cmd.args([
        "--reuid",
        "65534",
        "--regid",
        "65534",
        "--clear-groups",
        "--",
    ])
    .arg(&bin);
    let d = Daemon::spawn(cmd, &home.args(&Config::base()), &home.run);
    let s = UnixStream::connect(d.socket()).expect("root can reach the socket");
    assert!(
        drain(s).is_empty(),
        "a peer of another uid gets no hello, not a byte"
    );
    let (status, log) = d.stop();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(log.contains("auth_peer_uid_mismatch"), "{log}");
}

pub(crate) fn hex(b: &[u8]) -> String {
    glove_types::digest::to_hex(b)
}

pub(crate) fn write_frame(s: &mut UnixStream, payload: &[u8]) {
    use std::io::Write;
    let len = u32::try_from(payload.len()).expect("len");
    s.write_all(&len.to_be_bytes()).expect("write");
    s.write_all(payload).expect("write");
}

pub(crate) fn read_frame(s: &mut UnixStream) -> serde_json::Value {
    let mut h = [0u8; 4];
    s.read_exact(&mut h).expect("frame header");
    let mut buf = vec![0u8; u32::from_be_bytes(h) as usize];
    s.read_exact(&mut buf).expect("frame payload");
    serde_json::from_slice(&buf).expect("json")
}
