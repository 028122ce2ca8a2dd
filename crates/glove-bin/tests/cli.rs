// This file is over 600 lines because it is one end-to-end battery of the `glove` command line sharing one set of helpers (the run --help snapshot pushed it past).
//! `glove` end to end: real binary, real files with real modes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "cli/plan_new.rs"]
mod plan_new;
#[path = "cli/setup.rs"]
mod setup;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn glove(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_glove"))
        .args(args)
        .env("NO_COLOR", "1")
        .env("COLUMNS", "100")
        .output()
        .expect("run glove")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Copies an example into a temp dir with mode 0600.
fn protected_copy(dir: &Path, name: &str) -> PathBuf {
    let dst = dir.join(name);
    std::fs::copy(repo().join("docs/examples").join(name), &dst).expect("copy");
    std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    dst
}

macro_rules! snap {
    ($name:expr, $value:expr) => {
        insta::with_settings!({
            snapshot_path => repo().join("snapshots").display().to_string(),
            prepend_module_to_snapshot => false,
            omit_expression => true,
        }, { insta::assert_snapshot!($name, $value) });
    };
}

#[path = "cli/daemon.rs"]
mod daemon;
#[path = "cli/daemon_systemd.rs"]
mod daemon_systemd;

#[test]
fn help_snapshots() {
    for (name, args) in [
        ("cli_help", vec!["--help"]),
        ("cli_policy_help", vec!["policy", "--help"]),
        (
            "cli_policy_explain_help",
            vec!["policy", "explain", "--help"],
        ),
        ("cli_plan_check_help", vec!["plan", "check", "--help"]),
        ("cli_plan_new_help", vec!["plan", "new", "--help"]),
        ("cli_plan_fmt_help", vec!["plan", "fmt", "--help"]),
        ("cli_apply_help", vec!["apply", "--help"]),
        ("cli_run_help", vec!["run", "--help"]),
        ("cli_receipts_help", vec!["receipts", "--help"]),
        ("cli_receipts_show_help", vec!["receipts", "show", "--help"]),
        ("cli_setup_help", vec!["setup", "--help"]),
        ("cli_session_help", vec!["session", "--help"]),
        ("cli_session_run_help", vec!["session", "run", "--help"]),
        ("cli_daemon_help", vec!["daemon", "--help"]),
        (
            "cli_daemon_install_help",
            vec!["daemon", "install", "--help"],
        ),
        ("cli_init_help", vec!["init", "--help"]),
        ("cli_exposures_help", vec!["exposures", "--help"]),
    ] {
        let out = glove(&args);
        assert_eq!(out.status.code(), Some(0), "{name}");
        snap!(name, text(&out.stdout));
    }
}

/// `glove apply keygen` then `glove apply sign --out`: the file decodes and
/// verifies under a trust policy holding the printed key; a second keygen
/// at the same place is refused.
#[test]
fn apply_keygen_and_sign() {
    use glove_types::apply::{ApplyTrustPolicy, SignedApplyAuthorization};
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("owner.key");
    let key_s = key.to_str().expect("utf-8");
    let out = glove(&["apply", "keygen", "--key", key_s, "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let entry = v["trust_entry"].to_string();
    let again = glove(&["apply", "keygen", "--key", key_s]);
    assert_eq!(again.status.code(), Some(1));
    assert!(text(&again.stderr).contains("apply_key_file_exists"));
    let auth = dir.path().join("auth.json");
    let digest = "ab".repeat(32);
    let out = glove(&[
        "apply",
        "sign",
        "--key",
        key_s,
        "--session",
        "s-1",
        "--target",
        "work",
        "--baseline",
        &digest,
        "--manifest",
        &"cd".repeat(32),
        "--grant",
        "g-1",
        "--ttl-secs",
        "60",
        "--out",
        auth.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let signed = SignedApplyAuthorization::decode_file(&std::fs::read(&auth).expect("read"))
        .expect("decodes");
    let policy = ApplyTrustPolicy::decode(
        format!("{{\"schema\":\"glove.apply-trust-v1\",\"keys\":[{entry}]}}").as_bytes(),
    )
    .expect("policy");
    let policy = glove_control::apply::TrustPolicy::from_policy(policy).expect("keys");
    let now = signed.authorization().issued_at_ms();
    let verified = glove_control::apply::verify(&policy, &signed, now).expect("verifies");
    assert_eq!(verified.authorization().grant_id().as_str(), "g-1");
    assert_eq!(signed.authorization().expires_at_ms() - now, 60_000);
}

#[test]
fn usage_error_is_status_2() {
    let out = glove(&["policy", "frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn validate_and_explain_examples() {
    let dir = tempfile::tempdir().expect("tempdir");
    for name in ["policy.json", "cloudflare-os-session-policy.json"] {
        let p = protected_copy(dir.path(), name);
        let p = p.to_str().expect("utf-8 path");
        let out = glove(&["policy", "validate", "--file", p]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let out = glove(&["policy", "validate", "--file", p, "--json"]);
        assert_eq!(
            text(&out.stdout).trim(),
            r#"{"code":null,"message":null,"valid":true}"#
        );
        let out = glove(&["policy", "explain", "--file", p]);
        assert_eq!(out.status.code(), Some(0));
        snap!(format!("explain_text_{name}"), text(&out.stdout));
        let out = glove(&["policy", "explain", "--file", p, "--json"]);
        assert_eq!(out.status.code(), Some(0));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        snap!(
            format!("explain_json_{name}"),
            serde_json::to_string_pretty(&v).expect("pretty")
        );
    }
}

#[test]
fn explain_shows_both_digests_on_mismatch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = protected_copy(dir.path(), "policy.json");
    let body = std::fs::read_to_string(&p).expect("read").replace(
        "9d1ee6f01f40c5813bf566765cef30fc98c0fed227945707f7c1c2e5d3608bf1",
        &"ab".repeat(32),
    );
    std::fs::write(&p, body).expect("write");
    let ps = p.to_str().expect("utf-8");
    let out = glove(&["policy", "explain", "--file", ps]);
    assert_eq!(out.status.code(), Some(1));
    let s = text(&out.stdout);
    assert!(
        s.contains(&"ab".repeat(32)) && s.contains("9d1ee6f01f40c581"),
        "{s}"
    );
    let out = glove(&["policy", "validate", "--file", ps]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("error[policy_adapter_digest_mismatch]: "));
    let out = glove(&["policy", "validate", "--file", ps, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["valid"], false);
    assert_eq!(v["code"], "policy_adapter_digest_mismatch");
}

fn validate_code(p: &Path) -> String {
    let out = glove(&[
        "policy",
        "validate",
        "--file",
        p.to_str().expect("utf-8"),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    v["code"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn policy_is_read_as_a_protected_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = protected_copy(dir.path(), "policy.json");

    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    assert_eq!(validate_code(&p), "file_bad_mode");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");

    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&p, &link).expect("symlink");
    assert_eq!(validate_code(&link), "file_symlink");

    let hard = dir.path().join("hard.json");
    std::fs::hard_link(&p, &hard).expect("hard link");
    assert_eq!(validate_code(&p), "file_link_count");
    std::fs::remove_file(&hard).expect("rm");

    assert_eq!(validate_code(dir.path()), "file_not_regular");
    assert_eq!(
        validate_code(&dir.path().join("missing.json")),
        "file_not_found"
    );

    let big = dir.path().join("big.json");
    std::fs::write(&big, vec![b' '; (1 << 20) + 1]).expect("write");
    std::fs::set_permissions(&big, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    assert_eq!(validate_code(&big), "file_too_large");

    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, b"{\"schema_version\":1,\"schema_version\":1}").expect("write");
    std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    assert_eq!(validate_code(&bad), "json_duplicate_key");

    // Another owner: only checkable as root (chown needs privilege).
    if rustix::process::geteuid().is_root() {
        std::os::unix::fs::chown(&p, Some(65534), None).expect("chown");
        assert_eq!(validate_code(&p), "file_wrong_owner");
    } else {
        eprintln!("skipping the wrong-owner case: needs root to chown");
    }
}

#[test]
fn plan_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = protected_copy(dir.path(), "policy.json");
    let plan = repo().join("docs/examples/plan.json");
    let (ps, plans) = (p.to_str().expect("utf-8"), plan.to_str().expect("utf-8"));
    let out = glove(&[
        "plan",
        "check",
        "--policy",
        ps,
        "--plan",
        plans,
        "--now",
        "1796000001000",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["admitted"], true);
    assert_eq!(
        v["plan_content_digest"],
        "9f93bcd6beac6d49bce352f16d1d3c26f71b0fee81a060f1afd87e716e881cae"
    );
    let out = glove(&[
        "plan",
        "check",
        "--policy",
        ps,
        "--plan",
        plans,
        "--now",
        "1796000061000",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("error[plan_expired]: "));
    let out = glove(&[
        "plan",
        "check",
        "--policy",
        ps,
        "--plan",
        plans,
        "--now",
        "1796000001000",
        "--controller-digest",
        &"00".repeat(32),
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["code"], "plan_controller_digest_mismatch");
    assert_eq!(v["admitted"], false);
}

#[test]
fn receipts_verify_offline() {
    use glove_journal::receipt::{ReceiptConfig, ReceiptHead, ReceiptKey, ReceiptKind};
    use glove_journal::ReceiptJournal;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let key_hex = "ab".repeat(32);
    let key_file = dir.path().join("receipt.key");
    std::fs::write(&key_file, format!("{key_hex}\n")).expect("write key");
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let journal = dir.path().join("receipts.journal");
    let anchor = format!("0:{}", "00".repeat(32));
    {
        let key = ReceiptKey::from_key_file(key_hex.as_bytes()).expect("key");
        let head = ReceiptHead::parse(&anchor).expect("anchor");
        let mut j =
            ReceiptJournal::create(&journal, key, &head, ReceiptConfig::default()).expect("create");
        for i in 0..3 {
            let sid = glove_types::ids::SessionId::new(format!("s{i}")).expect("id");
            let r = j.reserve(&sid).expect("reserve");
            let body = format!(r#"{{"receipt_kind":"resource_v1","session_id":"s{i}"}}"#);
            j.append_receipt(&r, ReceiptKind::ResourceV1, body.as_bytes())
                .expect("append");
        }
    }
    let (f, k) = (
        journal.to_str().expect("utf-8"),
        key_file.to_str().expect("utf-8"),
    );
    let out = glove(&[
        "receipts",
        "verify",
        "--file",
        f,
        "--key-file",
        k,
        "--anchor",
        &anchor,
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["valid"], true);
    assert_eq!(v["receipts"], 3);

    // The wrong key: the chain does not verify.
    let wrong = dir.path().join("wrong.key");
    std::fs::write(&wrong, "cd".repeat(32)).expect("write");
    std::fs::set_permissions(&wrong, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let out = glove(&[
        "receipts",
        "verify",
        "--file",
        f,
        "--key-file",
        wrong.to_str().expect("utf-8"),
        "--anchor",
        &anchor,
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["valid"], false);

    // One flipped byte in the middle: rejected.
    let mut bytes = std::fs::read(&journal).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&journal, &bytes).expect("write");
    let out = glove(&[
        "receipts",
        "verify",
        "--file",
        f,
        "--key-file",
        k,
        "--anchor",
        &anchor,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("error["),
        "{}",
        text(&out.stderr)
    );
}

/// Issue 14, finding 3: `glove receipts verify` checks the journal against
/// its anchor file (and the acknowledged-head file) beside it. Each case
/// below was reported VALID before.
#[test]
fn issue_14_receipts_verify_refuses_cut_rolled_back_and_replaced_journals() {
    use glove_journal::receipt::{ReceiptConfig, ReceiptHead, ReceiptKey, ReceiptKind};
    use glove_journal::ReceiptJournal;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let key_hex = "ab".repeat(32);
    let key_file = dir.path().join("receipt.key");
    std::fs::write(&key_file, format!("{key_hex}\n")).expect("write key");
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let key = ReceiptKey::from_key_file(key_hex.as_bytes()).expect("key");
    let anchor = format!("0:{}", "00".repeat(32));
    let head = ReceiptHead::parse(&anchor).expect("anchor");
    let append = |j: &mut ReceiptJournal, i: u32| {
        let sid = glove_types::ids::SessionId::new(format!("s{i}")).expect("id");
        let r = j.reserve(&sid).expect("reserve");
        let body = format!(r#"{{"receipt_kind":"resource_v1","session_id":"s{i}"}}"#);
        j.append_receipt(&r, ReceiptKind::ResourceV1, body.as_bytes())
            .expect("append");
    };
    let journal = dir.path().join("receipts.journal");
    let (older, at_boundary) = {
        let mut j = ReceiptJournal::create(&journal, key.clone(), &head, ReceiptConfig::default())
            .expect("create");
        append(&mut j, 0);
        let older = std::fs::read(&journal).expect("read");
        append(&mut j, 1);
        let at_boundary = std::fs::read(&journal).expect("read");
        append(&mut j, 2);
        (older, at_boundary)
    };
    let full = std::fs::read(&journal).expect("read");
    // A fresh journal made elsewhere, put in place of the real one.
    let other_dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(other_dir.path(), std::fs::Permissions::from_mode(0o700))
        .expect("chmod");
    let fresh = {
        let p = other_dir.path().join("receipts.journal");
        let mut j =
            ReceiptJournal::create(&p, key, &head, ReceiptConfig::default()).expect("create");
        append(&mut j, 0);
        drop(j);
        std::fs::read(&p).expect("read")
    };
    let (f, k) = (
        journal.to_str().expect("utf-8"),
        key_file.to_str().expect("utf-8"),
    );
    let verify = || {
        let out = glove(&[
            "receipts",
            "verify",
            "--file",
            f,
            "--key-file",
            k,
            "--anchor",
            &anchor,
            "--json",
        ]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        (out.status.code(), v)
    };
    let (status, v) = verify();
    assert_eq!(
        (status, &v["valid"]),
        (Some(0), &serde_json::json!(true)),
        "{v}"
    );
    let mut corrupted = full.clone();
    let n = corrupted.len();
    corrupted[n - 40] ^= 0x01;
    for (case, bytes) in [
        ("a corrupted last record", &corrupted),
        ("a cut at a record boundary", &at_boundary),
        ("a rollback to an older copy", &older),
        ("a replaced journal", &fresh),
    ] {
        std::fs::write(&journal, bytes).expect("write");
        let (status, v) = verify();
        assert_eq!(status, Some(1), "{case}: {v}");
        assert_eq!(v["valid"], false, "{case}: {v}");
    }
}

/// `glove receipts verify` checks apply receipts (`apply_v1`) in the same
/// chain as session receipts and gives each one line.
#[test]
fn receipts_verify_shows_apply_receipts() {
    use glove_journal::receipt::{ReceiptConfig, ReceiptHead, ReceiptKey, ReceiptKind};
    use glove_journal::ReceiptJournal;
    use glove_types::ids::{ApplyGrantId, ApplyTargetId, ApplyTransactionId, SessionId};
    use glove_types::receipt::{ApplyOutcome, ApplyReceiptV1, FailedIn};
    use glove_types::Sha256Digest;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let key_hex = "cd".repeat(32);
    let key_file = dir.path().join("receipt.key");
    std::fs::write(&key_file, format!("{key_hex}\n")).expect("write key");
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let key = ReceiptKey::from_key_file(key_hex.as_bytes()).expect("key");
    let anchor = format!("0:{}", "00".repeat(32));
    let head = ReceiptHead::parse(&anchor).expect("anchor");
    let journal = dir.path().join("receipts.journal");
    let mut j =
        ReceiptJournal::create(&journal, key, &head, ReceiptConfig::default()).expect("create");
    let id = |s: &str| SessionId::new(s).expect("id");
    let r = j.reserve(&id("s-1")).expect("reserve");
    j.append_receipt(
        &r,
        ReceiptKind::ResourceV1,
        br#"{"receipt_kind":"resource_v1","session_id":"s-1"}"#,
    )
    .expect("append");
    let apply = |t: &str, outcome| ApplyReceiptV1 {
        transaction_id: ApplyTransactionId::new(t).expect("id"),
        session_id: id("s-1"),
        target: ApplyTargetId::new("src").expect("id"),
        grant_id: ApplyGrantId::new(format!("g-{t}")).expect("id"),
        authorization_digest: Sha256Digest::from_bytes([1; 32]),
        baseline_digest: Sha256Digest::from_bytes([2; 32]),
        manifest_digest: Sha256Digest::from_bytes([3; 32]),
        outcome,
        recovered: false,
    };
    for (t, outcome) in [
        ("t-1", ApplyOutcome::Applied),
        (
            "t-2",
            ApplyOutcome::Failed {
                code: "apply_source_changed".into(),
                failed_in: FailedIn::Prepared,
            },
        ),
    ] {
        let r = j.reserve(&id(t)).expect("reserve");
        let body = apply(t, outcome).encode().expect("encode");
        j.append_receipt(&r, ReceiptKind::ApplyV1, &body)
            .expect("append");
    }
    drop(j);
    let (f, k) = (
        journal.to_str().expect("utf-8"),
        key_file.to_str().expect("utf-8"),
    );
    let args = [
        "receipts",
        "verify",
        "--file",
        f,
        "--key-file",
        k,
        "--anchor",
        &anchor,
    ];
    let out = glove(&args);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("3 receipts"), "{stdout}");
    assert!(
        stdout.contains("kinds: 1 resource_v1, 2 apply_v1\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("apply receipt 2: applied transaction t-1 session s-1 target src\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "apply receipt 3: failed transaction t-2 session s-1 target src \
             code apply_source_changed (in prepared)\n"
        ),
        "{stdout}"
    );
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let out = glove(&json_args);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        v["kinds"],
        serde_json::json!({"resource_v1": 1, "apply_v1": 2})
    );
    assert_eq!(v["apply_receipts"][1]["code"], "apply_source_changed");
    assert_eq!(v["apply_receipts"][0]["outcome"], "applied");
    assert_eq!(v["apply_receipts"][0]["code"], serde_json::Value::Null);
}

/// Output into a pipe nobody reads (`glove … | head` after head left)
/// ends glove quietly with 128 + SIGPIPE, not with a panic.
#[test]
fn a_closed_stdout_is_a_quiet_broken_pipe() {
    let (r, w) = rustix::pipe::pipe().expect("pipe");
    drop(r);
    let out = Command::new(env!("CARGO_BIN_EXE_glove"))
        .args(["policy", "detect", "--search-path", "/usr/bin"])
        .stdout(std::process::Stdio::from(w))
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run glove");
    assert_eq!(out.status.code(), Some(141), "{}", text(&out.stderr));
    assert!(
        !text(&out.stderr).contains("panicked"),
        "{}",
        text(&out.stderr)
    );
}
