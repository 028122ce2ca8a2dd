//! `glove setup` in a fresh home: what it makes, that a second run makes
//! nothing, and what it refuses.

use super::*;
use std::os::unix::fs::MetadataExt;

/// A home below a directory with safe ancestors (staging refuses
/// world-writable ones such as /tmp), with the XDG variables pointing
/// into it.
struct Home {
    _t: tempfile::TempDir,
    root: PathBuf,
}

impl Home {
    fn new() -> Home {
        let base = if rustix::process::geteuid().is_root() {
            PathBuf::from("/var/lib/glove-tests")
        } else {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/glove-tests")
        };
        std::fs::create_dir_all(&base).expect("mkdir base");
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let t = tempfile::Builder::new()
            .prefix("setup-")
            .tempdir_in(&base)
            .expect("tempdir");
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let root = t.path().to_path_buf();
        std::fs::create_dir(root.join("run")).expect("mkdir run");
        std::fs::set_permissions(root.join("run"), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        Home { _t: t, root }
    }

    fn config(&self) -> PathBuf {
        self.root.join("config/glove")
    }

    fn glove(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_glove"))
            .args(args)
            .env("HOME", &self.root)
            .env("XDG_CONFIG_HOME", self.root.join("config"))
            .env("XDG_STATE_HOME", self.root.join("state"))
            .env("XDG_RUNTIME_DIR", self.root.join("run"))
            .output()
            .expect("run glove")
    }

    fn setup_json(&self, extra: &[&str]) -> serde_json::Value {
        let mut args = vec!["setup", "--json"];
        args.extend_from_slice(extra);
        let out = self.glove(&args);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "setup --json printed no JSON ({e}): {}{}",
                text(&out.stdout),
                text(&out.stderr)
            )
        })
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).expect("stat").mode() & 0o7777
}

fn action<'a>(v: &'a serde_json::Value, what: &str) -> &'a str {
    v["items"]
        .as_array()
        .expect("items")
        .iter()
        .rev()
        .find(|i| i["what"] == what)
        .and_then(|i| i["action"].as_str())
        .unwrap_or_else(|| panic!("no item {what:?} in {v}"))
}

#[test]
fn setup_makes_everything_once_then_nothing() {
    let h = Home::new();
    let first = h.setup_json(&[]);
    assert!(first.get("code").is_none(), "{first}");
    for what in [
        "config directory",
        "state directory",
        "runtime directory",
        "receipt key",
        "start-authorization key",
        "apply signing key",
        "session policy",
        "gloved config",
    ] {
        assert_eq!(action(&first, what), "created", "{what}: {first}");
    }
    let cfg = h.config();
    for f in [
        "receipt.key",
        "start-auth.key",
        "apply-key",
        "session-policy.json",
        "gloved.json",
    ] {
        assert_eq!(mode(&cfg.join(f)), 0o600, "{f}");
    }
    for d in [
        "config/glove",
        "state/glove",
        "run/glove",
        "state/glove/sessions",
    ] {
        assert_eq!(mode(&h.root.join(d)), 0o700, "{d}");
    }
    let key = std::fs::read(cfg.join("receipt.key")).expect("key");
    assert_eq!(key.len(), 65, "64 hex digits and a newline");
    assert_ne!(key, std::fs::read(cfg.join("start-auth.key")).expect("key"));

    // The config names every file, and they exist (or are directories
    // whose parents exist: journals are made by gloved).
    let conf: serde_json::Value =
        serde_json::from_slice(&std::fs::read(cfg.join("gloved.json")).expect("read"))
            .expect("json");
    for k in [
        "session_policy",
        "receipt_key",
        "start_auth_key",
        "materialization_root",
    ] {
        let p = PathBuf::from(conf[k].as_str().expect(k));
        assert!(p.exists(), "{k}: {}", p.display());
    }
    for k in ["session_store", "receipt_journal"] {
        let p = PathBuf::from(conf[k].as_str().expect(k));
        assert!(p.parent().expect("parent").is_dir(), "{k}");
    }
    // The starter policy is valid as `policy validate` reads it.
    let v = h.glove(&[
        "policy",
        "validate",
        "--file",
        conf["session_policy"].as_str().expect("p"),
    ]);
    assert!(v.status.success(), "{}", text(&v.stderr));

    // A second run changes nothing, byte for byte.
    let before: Vec<Vec<u8>> = ["receipt.key", "start-auth.key", "apply-key", "gloved.json"]
        .iter()
        .map(|f| std::fs::read(cfg.join(f)).expect("read"))
        .collect();
    let second = h.setup_json(&[]);
    assert_eq!(second["changed"], 0, "{second}");
    let after: Vec<Vec<u8>> = ["receipt.key", "start-auth.key", "apply-key", "gloved.json"]
        .iter()
        .map(|f| std::fs::read(cfg.join(f)).expect("read"))
        .collect();
    assert_eq!(before, after);
    let out = h.glove(&["setup"]);
    assert!(
        text(&out.stdout).contains("nothing to do"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn rotate_keys_keeps_the_old_ones_aside_and_the_receipt_key_while_a_journal_exists() {
    let h = Home::new();
    h.setup_json(&[]);
    let cfg = h.config();
    let receipt = std::fs::read(cfg.join("receipt.key")).expect("read");
    let start = std::fs::read(cfg.join("start-auth.key")).expect("read");
    // A receipt journal (its content does not matter to setup).
    let conf: serde_json::Value =
        serde_json::from_slice(&std::fs::read(cfg.join("gloved.json")).expect("read"))
            .expect("json");
    let journal = PathBuf::from(conf["receipt_journal"].as_str().expect("journal"));
    std::fs::write(&journal, b"").expect("journal");
    let r = h.setup_json(&["--rotate-keys"]);
    assert_eq!(action(&r, "start-authorization key"), "rotated", "{r}");
    assert_eq!(action(&r, "apply signing key"), "rotated", "{r}");
    assert_eq!(action(&r, "receipt key"), "unchanged", "{r}");
    assert_eq!(
        std::fs::read(cfg.join("receipt.key")).expect("read"),
        receipt
    );
    assert_ne!(
        std::fs::read(cfg.join("start-auth.key")).expect("read"),
        start
    );
    let aside: Vec<_> = std::fs::read_dir(&cfg)
        .expect("list")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("start-auth.key.old-")
        })
        .collect();
    assert_eq!(aside.len(), 1);
    assert_eq!(std::fs::read(aside[0].path()).expect("read"), start);
}

fn refusal(h: &Home) -> String {
    let out = h.glove(&["setup", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    v["code"].as_str().expect("code").to_owned()
}

#[test]
fn setup_refuses_loose_or_foreign_directories_and_replaced_files() {
    // A config directory others may read.
    let h = Home::new();
    std::fs::create_dir_all(h.config()).expect("mkdir");
    std::fs::set_permissions(h.config(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    assert_eq!(refusal(&h), "control_dir_bad_mode");
    assert!(!h.config().join("receipt.key").exists(), "nothing made");

    // Someone else's directory.
    if rustix::process::geteuid().is_root() {
        let h = Home::new();
        std::fs::create_dir_all(h.config()).expect("mkdir");
        std::fs::set_permissions(h.config(), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        std::os::unix::fs::chown(h.config(), Some(65534), Some(65534)).expect("chown");
        assert_eq!(refusal(&h), "control_dir_wrong_owner");
    } else {
        eprintln!("skipping the foreign-owner case: chown needs root");
    }

    // A home others may write (a root shell that kept a user's XDG
    // variables, a home under /tmp): nothing is made there.
    let h = Home::new();
    std::fs::set_permissions(&h.root, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    assert_eq!(refusal(&h), "setup_ancestor_unsafe");
    assert!(!h.root.join("config").exists());
    std::fs::set_permissions(&h.root, std::fs::Permissions::from_mode(0o755)).expect("chmod");

    // An exposure root others may write.
    let h = Home::new();
    let open = h.root.join("shared");
    std::fs::create_dir(&open).expect("mkdir");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let out = h.glove(&[
        "setup",
        "--json",
        "--path-root",
        open.to_str().expect("utf8"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("setup_ancestor_unsafe"),
        "{}",
        text(&out.stdout)
    );

    // A policy replaced by a symbolic link.
    let h = Home::new();
    h.setup_json(&[]);
    let policy = h.config().join("session-policy.json");
    let elsewhere = h.root.join("elsewhere.json");
    std::fs::rename(&policy, &elsewhere).expect("move");
    std::os::unix::fs::symlink(&elsewhere, &policy).expect("symlink");
    assert_eq!(refusal(&h), "file_symlink");

    // A key that is not a key.
    let h = Home::new();
    h.setup_json(&[]);
    let key = h.config().join("start-auth.key");
    std::fs::write(&key, b"not a key\n").expect("write");
    assert_eq!(refusal(&h), "setup_key_invalid");

    // A key others may read.
    std::fs::write(&key, b"00\n").expect("write");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    assert_eq!(refusal(&h), "file_bad_mode");
}

#[test]
fn setup_stages_the_harnesses_it_finds_into_the_policy() {
    let Some(tree) = std::env::var_os("GLOVE_HARNESSES").map(PathBuf::from) else {
        assert!(
            std::env::var("GLOVE_REQUIRE_SANDBOX").as_deref() != Ok("1"),
            "GLOVE_REQUIRE_SANDBOX=1 but GLOVE_HARNESSES is not set"
        );
        eprintln!(
            "skipping: GLOVE_HARNESSES names no installed harness tree (.ci/run installs them)"
        );
        return;
    };
    let h = Home::new();
    let bin = tree.join(".bin");
    let v = h.setup_json(&["--search-path", bin.to_str().expect("utf8")]);
    let staged = v["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|i| i["what"] == "staged harness")
        .count();
    assert_eq!(staged, 5, "{v}");
    let policy = std::fs::read(h.config().join("session-policy.json")).expect("policy");
    let p: serde_json::Value = serde_json::from_slice(&policy).expect("json");
    let ids: Vec<&str> = p["runtime_templates"]
        .as_array()
        .expect("templates")
        .iter()
        .map(|t| t["runtime_template_id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids.len(), 6, "{ids:?}");
    assert!(ids.contains(&"shell"));
    // Every harness template discovers its executable in the staged tree.
    let staged_bin = h.root.join("state/glove/harnesses/bin");
    for t in p["runtime_templates"].as_array().expect("templates") {
        if t["runtime_template_id"] != "shell" {
            assert_eq!(
                t["launch"]["executable_search_paths"][0],
                staged_bin.to_str().expect("utf8"),
                "{t}"
            );
        }
    }
}
