//! `glove-remote-executor --stdio` end to end: the real binary, its identity
//! at the real fixed path `/etc/glove/remote-executor.identity` — inside a
//! private mount namespace (`unshare --mount --propagation private`) whose
//! `/etc` is a fresh tmpfs, so the host's `/etc` is never touched — and
//! real frames over pipes.
//!
//! The namespace tests need root and util-linux's `unshare`; without them
//! they skip with the reason printed, and under `GLOVE_REQUIRE_SANDBOX=1`
//! they fail. The command-line tests and the identity properties run
//! everywhere.

mod common;

use glove_bin::control::capabilities::Method;
use glove_bin::control::frame;
use glove_bin::remote_executor::identity::{self, Identity, IDENTITY_SCHEMA};
use glove_bin::remote_executor::serve::MAX_FRAMES;
use glove_types::digest::Sha256Digest;
use proptest::prelude::*;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

const EXE: &str = env!("CARGO_BIN_EXE_glove-remote-executor");
const MAX_FRAME: u32 = 64 * 1024;

fn exe_digest() -> Sha256Digest {
    static D: OnceLock<Sha256Digest> = OnceLock::new();
    *D.get_or_init(|| Sha256Digest::of(&std::fs::read(EXE).expect("read the executor")))
}

fn image_digest() -> Sha256Digest {
    Sha256Digest::of(b"registry.example/glove-remote@image")
}

/// The identity an administrator writes for this executor, with the
/// newline `printf '...\n'` adds.
fn good_identity() -> Vec<u8> {
    let mut b = Identity::new(exe_digest(), image_digest()).to_bytes();
    b.push(b'\n');
    b
}

/// Whether the namespace tests can run here (else skip, or fail under
/// `GLOVE_REQUIRE_SANDBOX=1`).
fn namespaces_ok() -> bool {
    static OK: OnceLock<Result<(), String>> = OnceLock::new();
    let r = OK.get_or_init(|| {
        if !common::is_root() {
            return Err("the remote executor tests mount a private /etc: they need root".into());
        }
        let probe = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--"])
            .args(["sh", "-c", "mount -t tmpfs -o mode=0755 tmpfs /etc"])
            .output();
        match probe {
            Err(e) => Err(format!("unshare (util-linux) cannot be run: {e}")),
            Ok(o) if !o.status.success() => Err(format!(
                "unshare --mount with a tmpfs over /etc fails here: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Ok(_) => Ok(()),
        }
    });
    match r {
        Ok(()) => true,
        Err(why) => common::need(false, why),
    }
}

/// Starts the executor with `--stdio` in a private mount namespace whose
/// `/etc` is an empty tmpfs (mode 0755) holding `/etc/glove` (mode 0755);
/// `place` is shell run there before the `exec`, with `$1` the executor and
/// `$2` a directory holding `identity` (the `identity` bytes, when given).
fn spawn_in_namespace(
    place: &str,
    identity: Option<&[u8]>,
    stdin: Stdio,
) -> (Child, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    if let Some(bytes) = identity {
        std::fs::write(dir.path().join("identity"), bytes).expect("write identity");
    }
    let script = format!(
        "set -e\n\
         mount -t tmpfs -o mode=0755 tmpfs /etc\n\
         mkdir -m 0755 /etc/glove\n\
         {place}\n\
         exec \"$1\" --stdio\n"
    );
    let child = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            &script,
            "sh",
            EXE,
        ])
        .arg(dir.path())
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn unshare");
    (child, dir)
}

/// The administrator's install, as `docs/operations.md` gives it (numeric
/// owner: the namespace's `/etc` has no `passwd`).
const INSTALL: &str =
    "install -o 0 -g 0 -m 0644 \"$2/identity\" /etc/glove/remote-executor.identity";

fn frame_of(v: &Value) -> Vec<u8> {
    frame::encode(&serde_json::to_vec(v).expect("json"), MAX_FRAME).expect("frame")
}

fn request(id: u64, method: &str, ttl_ms: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"ttl_ms": ttl_ms}})
}

/// Every frame of `bytes`, decoded; the bytes must end at a frame boundary.
fn frames(mut bytes: &[u8]) -> Vec<Value> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let (payload, used) = frame::decode(bytes, MAX_FRAME)
            .expect("frame")
            .expect("whole frame");
        out.push(serde_json::from_slice(payload).expect("json reply"));
        bytes = &bytes[used..];
    }
    out
}

struct Ran {
    status: ExitStatus,
    replies: Vec<Value>,
    stderr: String,
}

/// Runs a correctly installed executor, sending `chunks` with `pauses`
/// between them, then closing its input.
fn converse(chunks: &[(Vec<u8>, Duration)]) -> Ran {
    let (mut child, _dir) = spawn_in_namespace(INSTALL, Some(&good_identity()), Stdio::piped());
    let mut stdin = child.stdin.take().expect("stdin");
    for (bytes, pause) in chunks {
        stdin.write_all(bytes).expect("send");
        stdin.flush().expect("flush");
        std::thread::sleep(*pause);
    }
    drop(stdin);
    let out = child.wait_with_output().expect("wait");
    Ran {
        status: out.status,
        replies: frames(&out.stdout),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn error_code(reply: &Value) -> (&Value, &str) {
    (
        &reply["error"]["code"],
        reply["error"]["data"]["code"].as_str().unwrap_or_default(),
    )
}

#[test]
fn health_answers_not_operational_with_the_digests() {
    if !namespaces_ok() {
        return;
    }
    let ran = converse(&[(
        frame_of(&request(7, "remote_health", 30_000)),
        Duration::ZERO,
    )]);
    assert_eq!(ran.status.code(), Some(0), "{}", ran.stderr);
    assert_eq!(
        ran.replies,
        [json!({
            "jsonrpc": "2.0",
            "id": 7,
            "result": {
                "executable_sha256": exe_digest().to_hex(),
                "image_sha256": image_digest().to_hex(),
                "protocol_version": 1,
                "status": "not_operational",
            }
        })]
    );
    assert!(ran.stderr.is_empty(), "{}", ran.stderr);
}

#[test]
fn lifecycle_methods_are_not_found() {
    if !namespaces_ok() {
        return;
    }
    let mut names: Vec<&str> = Method::ALL.iter().map(|m| m.as_str()).collect();
    names.extend([
        "session_create",
        "session_start",
        "session_attach",
        "remote_launch",
    ]);
    let mut input = Vec::new();
    for (i, name) in names.iter().enumerate() {
        input.extend(frame_of(&request(i as u64, name, 30_000)));
    }
    // A notification is never answered, whatever its method.
    input.extend(frame_of(
        &json!({"jsonrpc": "2.0", "method": "remote_health", "params": {"ttl_ms": 30_000}}),
    ));
    let ran = converse(&[(input, Duration::ZERO)]);
    assert_eq!(ran.status.code(), Some(0), "{}", ran.stderr);
    assert_eq!(ran.replies.len(), names.len());
    for (i, (reply, name)) in ran.replies.iter().zip(&names).enumerate() {
        assert_eq!(reply["id"], json!(i), "{name}");
        assert_eq!(
            error_code(reply),
            (&json!(-32601), "method_not_found"),
            "{name}"
        );
    }
}

#[test]
fn ttl_is_required_and_bounded() {
    if !namespaces_ok() {
        return;
    }
    let mut input = Vec::new();
    for (id, params) in [
        (1, json!({})),
        (2, json!({"ttl_ms": 0})),
        (3, json!({"ttl_ms": 60_001})),
        (4, json!({"ttl_ms": "30000"})),
        // Even an unknown method needs a TTL: the reply's deadline comes from it.
        (5, json!({"ttl_ms": null})),
    ] {
        let method = if id == 5 {
            "session_create"
        } else {
            "remote_health"
        };
        input.extend(frame_of(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        ));
    }
    input.extend(frame_of(&json!({"jsonrpc": "2.0", "id": 6, "method": "remote_health", "params": {"ttl_ms": 30_000, "verbose": true}})));
    let ran = converse(&[(input, Duration::ZERO)]);
    assert_eq!(ran.status.code(), Some(0), "{}", ran.stderr);
    let codes: Vec<_> = ran.replies.iter().map(error_code).collect();
    let ttl = (&json!(-32602), "remote_ttl_invalid");
    assert_eq!(
        codes,
        [
            ttl,
            ttl,
            ttl,
            ttl,
            ttl,
            (&json!(-32602), "control_invalid_params")
        ]
    );
    assert_eq!(ran.replies[0]["error"]["data"]["location"], "ttl_ms");
}

/// A sender that takes longer than the TTL to deliver one frame: the time
/// spent waiting for the rest of the frame counts, the request is refused
/// as expired, and since its deadline has passed no reply is written; the
/// channel then serves the next request normally.
#[test]
fn a_frame_that_used_up_its_ttl_is_refused() {
    if !namespaces_ok() {
        return;
    }
    let slow = frame_of(&request(1, "remote_health", 200));
    let (head, rest) = slow.split_at(frame::HEADER_LEN);
    let ran = converse(&[
        (head.to_vec(), Duration::from_millis(1500)),
        (rest.to_vec(), Duration::ZERO),
        (
            frame_of(&request(2, "remote_health", 30_000)),
            Duration::ZERO,
        ),
    ]);
    assert_eq!(ran.status.code(), Some(0), "{}", ran.stderr);
    assert_eq!(ran.replies.len(), 1, "{:?}", ran.replies);
    assert_eq!(ran.replies[0]["id"], 2);
    assert_eq!(ran.replies[0]["result"]["status"], "not_operational");
    let line = ran
        .stderr
        .lines()
        .find(|l| l.contains("remote_request_expired"))
        .unwrap_or_else(|| panic!("no expiry line in {:?}", ran.stderr));
    assert!(
        line.starts_with(
            "glove-remote-executor: remote_request_expired: receiving the frame took "
        ),
        "{line}"
    );
    assert!(line.contains("request 1 was not written"), "{line}");
}

#[test]
fn framing_errors_end_the_channel() {
    if !namespaces_ok() {
        return;
    }
    // Oversized: answered from the header, then the channel ends.
    let mut big = (MAX_FRAME + 1).to_be_bytes().to_vec();
    big.extend_from_slice(b"{}");
    let ran = converse(&[(big, Duration::ZERO)]);
    assert_eq!(ran.status.code(), Some(65), "{}", ran.stderr);
    assert_eq!(ran.replies.len(), 1);
    assert_eq!(
        error_code(&ran.replies[0]),
        (&json!(-32600), "control_frame_too_large")
    );
    // The input ends inside a frame.
    let whole = frame_of(&request(1, "remote_health", 30_000));
    let ran = converse(&[(whole[..whole.len() - 1].to_vec(), Duration::ZERO)]);
    assert_eq!(ran.status.code(), Some(65), "{}", ran.stderr);
    assert!(ran.replies.is_empty());
    assert!(
        ran.stderr.contains("control_protocol_violation"),
        "{}",
        ran.stderr
    );
    // Not JSON: answered, and the channel goes on.
    let mut input = frame::encode(b"{", MAX_FRAME).expect("frame");
    input.extend(frame_of(&request(2, "remote_health", 30_000)));
    let ran = converse(&[(input, Duration::ZERO)]);
    assert_eq!(ran.status.code(), Some(0), "{}", ran.stderr);
    assert_eq!(error_code(&ran.replies[0]), (&json!(-32700), "json_syntax"));
    assert_eq!(ran.replies[1]["result"]["status"], "not_operational");
}

#[test]
fn a_channel_carries_a_bounded_number_of_frames() {
    if !namespaces_ok() {
        return;
    }
    let mut input = Vec::new();
    for id in 0..=u64::from(MAX_FRAMES) {
        input.extend(frame_of(&request(id, "remote_health", 30_000)));
    }
    let ran = converse(&[(input, Duration::ZERO)]);
    assert_eq!(ran.status.code(), Some(75), "{}", ran.stderr);
    assert_eq!(ran.replies.len(), MAX_FRAMES as usize + 1);
    let last = ran.replies.last().expect("last");
    assert_eq!(
        error_code(last),
        (&json!(-32002), "remote_too_many_requests")
    );
    assert!(
        ran.stderr.contains("remote_too_many_requests"),
        "{}",
        ran.stderr
    );
}

/// A socket holding one whole request and then the end of input, as the
/// executor's standard input; the test keeps another descriptor of the same
/// end, so it can tell afterwards whether anything was consumed (and an
/// executor that wrongly serves ends at once instead of waiting).
fn loaded_stdin() -> (UnixStream, Stdio, Vec<u8>) {
    let (mut writer, reader) = UnixStream::pair().expect("pair");
    let sent = frame_of(&request(1, "remote_health", 30_000));
    writer.write_all(&sent).expect("load");
    drop(writer);
    let child_end: OwnedFd = reader.try_clone().expect("dup").into();
    (reader, Stdio::from(child_end), sent)
}

/// Everything still unread on `reader`.
fn unread(mut reader: UnixStream) -> Vec<u8> {
    let mut left = Vec::new();
    reader.read_to_end(&mut left).expect("read back");
    left
}

#[test]
fn bad_command_lines_are_refused_without_reading_stdin() {
    for args in [
        &[][..],
        &["--stdio", "--stdio"][..],
        &["--stdio", "x"][..],
        &["-stdio"][..],
        &["--help"][..],
    ] {
        let (reader, stdin, sent) = loaded_stdin();
        let out = Command::new(EXE)
            .args(args)
            .stdin(stdin)
            .output()
            .expect("run the executor");
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with("glove-remote-executor: remote_usage: "),
            "{args:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
        assert_eq!(unread(reader), sent, "{args:?} read its standard input");
    }
}

/// Each refusal of the identity: its code, exit status 78 before any frame
/// is read, nothing written on standard output.
#[test]
fn identity_refusals() {
    if !namespaces_ok() {
        return;
    }
    let good = good_identity();
    let mut wrong =
        Identity::new(Sha256Digest::of(b"another executable"), image_digest()).to_bytes();
    wrong.push(b'\n');
    let spaced = String::from_utf8(good.clone())
        .expect("utf8")
        .replace(',', ", ");
    let real = "install -o 0 -g 0 -m 0644 \"$2/identity\" /etc/glove/real.identity";
    let cases: Vec<(&str, String, Vec<u8>, &str)> = vec![
        (
            "missing",
            String::new(),
            good.clone(),
            "remote_identity_missing",
        ),
        (
            "missing directory",
            "rmdir /etc/glove".into(),
            good.clone(),
            "remote_identity_missing",
        ),
        ("empty", INSTALL.into(), Vec::new(), "remote_identity_empty"),
        (
            "malformed",
            INSTALL.into(),
            b"executable_sha256=abc\n".to_vec(),
            "remote_identity_malformed",
        ),
        (
            "not canonical",
            INSTALL.into(),
            spaced.into_bytes(),
            "remote_identity_malformed",
        ),
        (
            "group-writable",
            INSTALL.replace("0644", "0664"),
            good.clone(),
            "remote_identity_unsafe",
        ),
        (
            "other-writable",
            INSTALL.replace("0644", "0646"),
            good.clone(),
            "remote_identity_unsafe",
        ),
        (
            "owned by a user",
            INSTALL.replace("-o 0", "-o 65534"),
            good.clone(),
            "remote_identity_unsafe",
        ),
        (
            "a symbolic link",
            format!("{real}\nln -s real.identity /etc/glove/remote-executor.identity"),
            good.clone(),
            "remote_identity_unsafe",
        ),
        (
            "a directory",
            "mkdir -m 0755 /etc/glove/remote-executor.identity".into(),
            good.clone(),
            "remote_identity_unsafe",
        ),
        (
            "a writable directory above",
            format!("{INSTALL}\nchmod 0775 /etc/glove"),
            good.clone(),
            "remote_identity_unsafe",
        ),
        (
            "a directory above owned by a user",
            format!("{INSTALL}\nchown 65534 /etc/glove"),
            good.clone(),
            "remote_identity_unsafe",
        ),
        (
            "mismatched executable",
            INSTALL.into(),
            wrong,
            "remote_executable_mismatch",
        ),
    ];
    for (name, place, bytes, code) in cases {
        let (reader, stdin, sent) = loaded_stdin();
        let (child, _dir) = spawn_in_namespace(&place, Some(&bytes), stdin);
        let out = child.wait_with_output().expect("wait");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{name}: {err}");
        assert!(out.stdout.is_empty(), "{name}");
        assert!(
            err.starts_with(&format!("glove-remote-executor: {code}: ")),
            "{name}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert_eq!(unread(reader), sent, "{name}: standard input was read");
    }
}

/// The same executor with a correct identity does read its input: the
/// refusals above are refusals, not a broken namespace.
#[test]
fn a_correct_identity_serves_the_loaded_request() {
    if !namespaces_ok() {
        return;
    }
    let (reader, stdin, _sent) = loaded_stdin();
    let (child, _dir) = spawn_in_namespace(INSTALL, Some(&good_identity()), stdin);
    let out = child.wait_with_output().expect("wait");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        frames(&out.stdout)[0]["result"]["status"],
        "not_operational"
    );
    assert!(unread(reader).is_empty(), "the request was not consumed");
}

fn digest() -> impl Strategy<Value = Sha256Digest> {
    any::<[u8; 32]>().prop_map(Sha256Digest::from_bytes)
}

proptest! {
    #[test]
    fn decoding_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = identity::decode(&bytes);
    }

    #[test]
    fn decoding_near_valid_documents_never_panics(cut in 0usize..200, flip in any::<u8>(), at in 0usize..200) {
        let mut b = Identity::new(exe_digest(), image_digest()).to_bytes();
        if let Some(x) = b.get_mut(at) {
            *x ^= flip;
        }
        b.truncate(cut.max(1));
        let _ = identity::decode(&b);
    }

    #[test]
    fn a_valid_identity_round_trips(exe in digest(), image in digest(), newline in any::<bool>()) {
        let id = Identity::new(exe, image);
        let mut bytes = id.to_bytes();
        let head: &[u8] = br#"{"executable_sha256":""#;
        let tail = format!(r#""schema":"{IDENTITY_SCHEMA}"}}"#);
        prop_assert!(bytes.starts_with(head), "{:?}", bytes);
        prop_assert!(bytes.ends_with(tail.as_bytes()), "{:?}", bytes);
        if newline {
            bytes.push(b'\n');
        }
        prop_assert_eq!(identity::decode(&bytes), Ok(id));
    }
}

#[test]
fn the_identity_path_is_fixed() {
    assert_eq!(
        identity::IDENTITY_PATH,
        "/etc/glove/remote-executor.identity"
    );
    assert!(Path::new(EXE).is_file());
}
