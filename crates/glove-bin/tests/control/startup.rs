//! Startup refuses bad paths and configurations with a code, exit 1.

use crate::harness::*;
use std::os::unix::fs::PermissionsExt;

fn refused(args: &[String]) -> String {
    let (status, stderr) = run_to_exit(args);
    assert_eq!(status.code(), Some(1), "{stderr}");
    let code = stderr
        .lines()
        .find_map(|l| l.strip_prefix("error[").and_then(|r| r.split(']').next()))
        .unwrap_or_else(|| panic!("no error line in {stderr}"));
    code.to_owned()
}

#[test]
fn runtime_directory_checks() {
    let home = Home::new();
    mkdir_mode(&home.run, 0o755);
    assert_eq!(refused(&home.args(&Config::base())), "control_dir_bad_mode");
    std::fs::remove_dir(&home.run).expect("rmdir");
    let real = home.dir.path().join("real");
    mkdir_mode(&real, 0o700);
    std::os::unix::fs::symlink(&real, &home.run).expect("symlink");
    assert_eq!(
        refused(&home.args(&Config::base())),
        "control_dir_not_directory"
    );
    std::fs::remove_file(&home.run).expect("rm");
    let mut args = home.args(&Config::base());
    args[1] = "relative/run".into();
    assert_eq!(refused(&args), "control_path_not_absolute");
    let mut args = home.args(&Config::base());
    args[1] = home.dir.path().join("no/such/run").display().to_string();
    assert_eq!(refused(&args), "control_dir_not_found");
}

#[test]
fn protected_file_checks() {
    let home = Home::new();
    let args = home.args(&Config::policy());
    let policy = home.dir.path().join("policy.json");
    std::fs::set_permissions(&policy, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    assert_eq!(refused(&args), "file_bad_mode");
    std::fs::set_permissions(&policy, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::set_permissions(&home.key, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    assert_eq!(refused(&args), "file_bad_mode");
    write_mode(&home.key, b"not hex\n", 0o600);
    assert_eq!(refused(&args), "receipt_key_invalid");
    std::fs::remove_file(&home.key).expect("rm");
    assert_eq!(refused(&args), "file_not_found");
}

#[test]
fn journal_directory_checks() {
    let home = Home::new();
    std::fs::set_permissions(&home.state, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    assert_eq!(refused(&home.args(&Config::full())), "control_dir_bad_mode");
}

#[test]
fn configuration_consistency() {
    let home = Home::new();
    let store = home.store().display().to_string();
    assert_eq!(
        refused(&home.args(&Config::base().with(&["--session-store", &store]))),
        "control_config_invalid"
    );
    let pol = home.dir.path().join("x.json").display().to_string();
    assert_eq!(
        refused(&home.args(&Config::base().with(&["--path-exposure-policy", &pol]))),
        "control_config_invalid"
    );
    let mat = home.dir.path().join("mat");
    mkdir_mode(&mat, 0o700);
    let remote = Config {
        policy: Some("cloudflare-os-session-policy.json"),
        ..Config::default()
    };
    let mat = mat.display().to_string();
    assert_eq!(
        refused(&home.args(&remote.with(&["--materialization-root", &mat]))),
        "control_remote_backend_conflict"
    );
    let (status, stderr) = run_to_exit(&["--receipt-key".into(), "/x".into()]);
    assert_eq!(status.code(), Some(1));
    assert!(stderr.contains("error[control_config_invalid]"), "{stderr}");
}

#[test]
fn a_second_service_on_the_same_directory_is_refused() {
    let home = Home::new();
    let _d = Daemon::start(&home, &Config::base());
    // Another store/journal pair, same runtime directory.
    let other = Home::new();
    let mut args = other.args(&Config::base());
    args[1] = home.run.display().to_string();
    assert_eq!(refused(&args), "control_already_running");
}

#[test]
fn config_file_is_strict() {
    let home = Home::new();
    let cfg = home.dir.path().join("gloved.json");
    let body = serde_json::json!({
        "runtime_dir": home.run,
        "receipt_journal": home.state.join("r.journal"),
        "receipt_key": home.key,
        "max_connections": 4,
    });
    write_mode(&cfg, body.to_string().as_bytes(), 0o600);
    let d = Daemon::spawn(
        std::process::Command::new(env!("CARGO_BIN_EXE_gloved")),
        &["--config".into(), cfg.display().to_string()],
        &home.run,
    );
    d.client().capabilities().expect("configured from the file");
    drop(d);
    let bad = home.dir.path().join("bad.json");
    write_mode(&bad, br#"{"runtime_dir":"/tmp","surprise":1}"#, 0o600);
    assert_eq!(
        refused(&["--config".into(), bad.display().to_string()]),
        "json_unknown_field"
    );
}

/// Issue 14, finding 3: a deleted receipt journal is not recreated at
/// start-up, and its acknowledged-head file (evidence) is not deleted.
#[test]
fn issue_14_a_deleted_receipt_journal_is_refused_and_its_ack_kept() {
    let home = Home::new();
    let d = Daemon::start(&home, &Config::base());
    let mut c = d.client();
    let page = c.receipts_page(0, None).expect("page");
    c.receipts_ack(page["head"].as_str().expect("head"))
        .expect("ack");
    drop(c);
    assert_eq!(d.stop().0.code(), Some(0));
    let journal = home.state.join("receipts.journal");
    let ack = home.state.join("receipts.journal.ack");
    let ack_bytes = std::fs::read(&ack).expect("ack file");
    std::fs::remove_file(&journal).expect("delete the journal");
    let (status, stderr) = run_expecting_refusal(&home.args(&Config::base()));
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error[journal_missing_but_anchored]"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&ack).expect("ack kept"), ack_bytes);
    assert!(!journal.exists());
}
