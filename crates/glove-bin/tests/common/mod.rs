//! Shared helpers for the sandbox tests: run `glove exec`, decide whether the
//! sandbox can run here (skip with a reason, or fail when
//! `GLOVE_REQUIRE_SANDBOX=1`), and run as an unprivileged user.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

pub(crate) mod agent_turn;
pub(crate) mod apply_env;
pub(crate) mod model_stub;

pub(crate) fn required() -> bool {
    std::env::var("GLOVE_REQUIRE_SANDBOX").is_ok_and(|v| v == "1")
}

/// Skips (returns false, printing why) or fails when a prerequisite is missing.
pub(crate) fn need(ok: bool, what: &str) -> bool {
    if ok {
        return true;
    }
    assert!(!required(), "GLOVE_REQUIRE_SANDBOX=1 but {what}");
    eprintln!("skipping: {what}");
    false
}

pub(crate) fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A directory everybody can traverse holding copies of the `glove` binary
/// and the probe script, so an unprivileged user can run them wherever the
/// checkout lives.
pub(crate) struct Kit {
    _dir: tempfile::TempDir,
    pub(crate) glove: PathBuf,
    pub(crate) probe: PathBuf,
    pub(crate) root: PathBuf,
}

pub(crate) fn kit() -> &'static Kit {
    static KIT: OnceLock<Kit> = OnceLock::new();
    KIT.get_or_init(|| {
        // A static is never dropped, so the kit outlives the test process;
        // kits of test processes that are gone are removed here instead.
        remove_stale_kits();
        let dir = tempfile::Builder::new()
            .prefix(&format!("glove-kit-{}-", std::process::id()))
            .tempdir()
            .expect("tempdir");
        let root = dir.path().to_path_buf();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let glove = root.join("glove");
        std::fs::copy(env!("CARGO_BIN_EXE_glove"), &glove).expect("copy glove");
        std::fs::set_permissions(&glove, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let probe = root.join("escape.py");
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/probes/escape.py"),
            &probe,
        )
        .expect("copy probe");
        std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        Kit {
            _dir: dir,
            glove,
            probe,
            root,
        }
    })
}

/// Removes `glove-kit-<pid>-*` directories whose process no longer exists.
fn remove_stale_kits() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("glove-kit")) else {
            continue;
        };
        let pid = rest
            .strip_prefix('-')
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok());
        let alive = pid.is_some_and(|p| Path::new(&format!("/proc/{p}")).exists());
        if !alive {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Who runs `glove`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum As {
    /// The test's own user.
    Caller,
    /// uid/gid 65534 (only when the caller is root).
    Nobody,
}

/// Whether the sandbox works for `who` here.
pub(crate) fn sandbox_ok(who: As) -> bool {
    if who == As::Nobody && !need(is_root(), "running as another user needs root") {
        return false;
    }
    if who == As::Nobody
        && !need(
            Path::new("/usr/bin/setpriv").exists(),
            "setpriv (util-linux) is missing",
        )
    {
        return false;
    }
    let out = glove(who, &["exec", "--", "/bin/true"], None);
    need(
        out.status.success(),
        &format!(
            "the sandbox does not start here: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

pub(crate) fn python_ok() -> bool {
    need(
        Path::new("/usr/bin/python3").exists(),
        "/usr/bin/python3 is missing (the escape probes use it)",
    )
}

/// Runs the kit's `glove` with `args` as `who`, feeding `stdin`.
pub(crate) fn glove(who: As, args: &[&str], stdin: Option<&[u8]>) -> Output {
    glove_with_env(who, args, stdin, &[])
}

/// [`glove`] with `env` added to its environment.
#[allow(dead_code)]
pub(crate) fn glove_with_env(
    who: As,
    args: &[&str],
    stdin: Option<&[u8]>,
    env: &[(&str, &std::ffi::OsStr)],
) -> Output {
    let mut cmd = command(who);
    cmd.args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = cmd.spawn().expect("spawn glove");
    if let (Some(input), Some(mut w)) = (stdin, child.stdin.take()) {
        use std::io::Write;
        let _ = w.write_all(input);
    }
    child.wait_with_output().expect("wait glove")
}

/// The kit's `glove` as `who`, run in the kit's directory (arguments to
/// be added).
pub(crate) fn command(who: As) -> Command {
    let k = kit();
    let mut cmd = match who {
        As::Caller => Command::new(&k.glove),
        As::Nobody => {
            let mut c = Command::new("/usr/bin/setpriv");
            c.args([
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                "--",
            ])
            .arg(&k.glove);
            c
        }
    };
    cmd.current_dir(&k.root);
    cmd
}

/// Runs the escape probe (`tests/probes/escape.py`, bound read-only) as
/// `who` with `glove exec --json`, `extra` options and the probe's `args`;
/// returns the outcome record, the output before it and the process.
pub(crate) fn probe(who: As, extra: &[&str], args: &[&str]) -> (serde_json::Value, String, Output) {
    let k = kit();
    let bind = format!("{}:/probe/escape.py", k.probe.display());
    let mut a: Vec<&str> = vec!["exec", "--json", "--ro-bind", &bind];
    a.extend_from_slice(extra);
    a.extend_from_slice(&["--", "/usr/bin/python3", "/probe/escape.py"]);
    a.extend_from_slice(args);
    let out = glove(who, &a, None);
    let (v, text) = outcome(&out);
    (v, text, out)
}

/// The outcome record (last stdout line of `--json`) and everything before it.
pub(crate) fn outcome(out: &Output) -> (serde_json::Value, String) {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let trimmed = text.trim_end_matches('\n');
    let (before, last) = match trimmed.rfind('\n') {
        Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
        None => ("", trimmed),
    };
    let v: serde_json::Value = serde_json::from_str(last).unwrap_or_else(|e| {
        let head: String = text.chars().take(400).collect();
        let tail: String = last.chars().take(400).collect();
        panic!(
            "no outcome line ({e}); stdout starts {head:?}, last line {tail:?}, stderr {:?}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (v, before.to_owned())
}

/// The base of directories whose every ancestor passes the launch rule
/// (owned by root or us, writable by nobody else) and that lie outside
/// the sandbox's own writable `/tmp`, `/home/agent` and `/workspace`: the
/// target's temporary directory when it qualifies (a checkout under
/// `/tmp` does not), else `/var/lib/glove-tests` as root, else
/// `~/.cache/glove-tests`.
pub(crate) fn safe_base() -> PathBuf {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| {
        let ok = |p: &Path| {
            std::fs::create_dir_all(p).is_ok()
                && !["/tmp", "/home/agent", "/workspace"]
                    .iter()
                    .any(|w| p.starts_with(w))
                && glove_control::harness::unsafe_reasons(p).is_empty()
        };
        let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        if ok(&target) {
            return target;
        }
        let fallback = if is_root() {
            PathBuf::from("/var/lib/glove-tests")
        } else {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/glove-tests")
        };
        std::fs::create_dir_all(&fallback).expect("mkdir safe base");
        std::fs::set_permissions(&fallback, std::fs::Permissions::from_mode(0o755))
            .expect("chmod safe base");
        assert!(
            ok(&fallback),
            "no directory with safe ancestors: {:?}",
            glove_control::harness::unsafe_reasons(&fallback)
        );
        fallback
    })
    .clone()
}

/// A fresh directory (mode 0755) below [`safe_base`], removed when dropped.
pub(crate) fn safe_tempdir() -> tempfile::TempDir {
    let t = tempfile::Builder::new()
        .prefix("glove-")
        .tempdir_in(safe_base())
        .expect("tempdir");
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    t
}

/// Makes a FIFO (mode 0600) at `path`.
pub(crate) fn mkfifo(path: &std::path::Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
}

/// The installed harness tree (`GLOVE_HARNESSES`, a `node_modules`
/// directory; `.ci/run` installs it), or `None` after saying why the test
/// skips (a failure under `GLOVE_REQUIRE_SANDBOX=1`).
pub(crate) fn harnesses() -> Option<PathBuf> {
    let d = std::env::var_os("GLOVE_HARNESSES").map(PathBuf::from);
    let ok = d.as_deref().is_some_and(Path::is_dir);
    need(
        ok,
        "GLOVE_HARNESSES names no installed harness tree (.ci/run installs them)",
    )
    .then(|| d.unwrap_or_default())
}

/// The pinned versions (`harnesses/package.json`'s dependencies).
pub(crate) fn harness_pins() -> serde_json::Map<String, serde_json::Value> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let v: serde_json::Value = serde_json::from_slice(
        &std::fs::read(root.join("harnesses/package.json")).expect("harnesses/package.json"),
    )
    .expect("json");
    v["dependencies"].as_object().expect("dependencies").clone()
}
