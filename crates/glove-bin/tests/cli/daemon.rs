//! `glove daemon` without a service manager: the unit it writes (checked
//! by `systemd-analyze verify`), what it refuses, idempotence, and the
//! systemctl calls it makes (a recording stand-in for systemctl, in a
//! temporary unit directory: never the real systemd directories).

use super::{repo, text};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `systemd-analyze`, where Debian's `systemd` package puts it.
const ANALYZE: &str = "/usr/bin/systemd-analyze";

pub(crate) fn required() -> bool {
    std::env::var("GLOVE_REQUIRE_SANDBOX").is_ok_and(|v| v == "1")
}

/// Skips (false, saying why) or, under `GLOVE_REQUIRE_SANDBOX=1`, fails.
pub(crate) fn need(ok: bool, what: &str) -> bool {
    if !ok {
        assert!(!required(), "GLOVE_REQUIRE_SANDBOX=1 but {what}");
        eprintln!("skipping: {what}");
    }
    ok
}

/// A receipt key: 64 hex characters.
pub(crate) fn key_hex() -> String {
    "0123456789abcdef".repeat(4)
}

/// A private directory tree for one test, below [`safe_base`] (not `/tmp`:
/// `install` refuses a unit directory below a directory others can write,
/// and so would it a `gloved` there).
pub(crate) struct Env {
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) base: PathBuf,
    pub(crate) config_home: PathBuf,
    pub(crate) units: PathBuf,
    pub(crate) systemctl: PathBuf,
}

impl Env {
    pub(crate) fn new() -> Env {
        let dir = tempfile::Builder::new()
            .prefix("daemon-")
            .tempdir_in(safe_base())
            .expect("tempdir");
        let base = dir.path().to_path_buf();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let config_home = base.join("config");
        let glove = config_home.join("glove");
        std::fs::create_dir_all(&glove).expect("mkdir");
        std::fs::set_permissions(&glove, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let state = base.join("state");
        std::fs::create_dir(&state).expect("mkdir");
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let key = glove.join("receipt.key");
        protected_write(&key, &key_hex());
        let cfg = format!(
            "{{\"receipt_journal\":\"{}\",\"receipt_key\":\"{}\",\"runtime_dir\":\"{}\"}}",
            state.join("receipts.journal").display(),
            key.display(),
            base.join("run").display()
        );
        protected_write(&glove.join("gloved.json"), &cfg);
        let systemctl = base.join("systemctl");
        std::fs::write(
            &systemctl,
            "#!/bin/sh\n\
             echo \"$*\" >> \"$(dirname \"$0\")/calls\"\n\
             case \"$*\" in *show*) printf 'LoadState=loaded\\nActiveState=inactive\\nSubState=dead\\nMainPID=0\\n' ;; esac\n",
        )
        .expect("write");
        std::fs::set_permissions(&systemctl, std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        Env {
            units: base.join("units"),
            _dir: dir,
            base,
            config_home,
            systemctl,
        }
    }

    pub(crate) fn config(&self) -> PathBuf {
        self.config_home.join("glove/gloved.json")
    }

    pub(crate) fn unit(&self) -> PathBuf {
        self.units.join("glove.service")
    }

    /// `glove daemon <args> --unit-dir … --systemctl …`.
    fn daemon(&self, args: &[&str]) -> Output {
        let mut all = vec!["daemon"];
        all.extend_from_slice(args);
        let units = self.units.to_str().expect("utf-8");
        let sc = self.systemctl.to_str().expect("utf-8");
        all.extend_from_slice(&["--unit-dir", units, "--systemctl", sc]);
        kit_run(&all, &self.config_home)
    }

    fn calls(&self) -> String {
        std::fs::read_to_string(self.base.join("calls")).unwrap_or_default()
    }
}

pub(crate) fn protected_write(p: &Path, s: &str) {
    std::fs::write(p, s).expect("write");
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} / {}", text(&out.stdout), text(&out.stderr)))
}

/// A directory nobody else can write, down from `/` (`install` refuses a
/// unit, a configuration or a `gloved` below one others may write, and a
/// checkout may live under `/tmp`): `/var/lib/glove-tests` for root,
/// `~/.cache/glove-tests` otherwise.
pub(crate) fn safe_base() -> PathBuf {
    let base = if rustix::process::geteuid().is_root() {
        PathBuf::from("/var/lib/glove-tests")
    } else {
        PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/glove-tests")
    };
    std::fs::create_dir_all(&base).expect("mkdir safe base");
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    base
}

/// The kit's `glove` with `args`, its configuration home `config_home`.
pub(crate) fn kit_run(args: &[&str], config_home: &Path) -> Output {
    Command::new(kit_glove())
        .args(args)
        .env("NO_COLOR", "1")
        .env("COLUMNS", "100")
        .env("XDG_CONFIG_HOME", config_home)
        .output()
        .expect("run glove")
}

/// `glove` beside the kit's [`gloved`] (what `install` finds next to it).
pub(crate) fn kit_glove() -> PathBuf {
    gloved().with_file_name("glove")
}

/// The `gloved` under test (with `glove` and `glove-launcher`), copied once per test
/// process into [`safe_base`] (`daemon-kit-<pid>`; kits of processes that
/// are gone are removed first).
pub(crate) fn gloved() -> PathBuf {
    static KIT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    KIT.get_or_init(|| {
        let base = safe_base();
        for e in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("daemon-kit-") {
                if !Path::new("/proc").join(pid).exists() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let kit = base.join(format!("daemon-kit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&kit);
        std::fs::create_dir(&kit).expect("mkdir kit");
        std::fs::set_permissions(&kit, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        for (exe, name) in [
            (env!("CARGO_BIN_EXE_glove"), "glove"),
            (env!("CARGO_BIN_EXE_gloved"), "gloved"),
            (env!("CARGO_BIN_EXE_glove-launcher"), "glove-launcher"),
        ] {
            std::fs::copy(exe, kit.join(name)).expect("copy");
            std::fs::set_permissions(kit.join(name), std::fs::Permissions::from_mode(0o755))
                .expect("chmod");
        }
        kit.join("gloved")
    })
    .clone()
}

/// `systemd-analyze verify` of `unit` offline (no manager, no man pages,
/// no generators); for a user unit with a private runtime directory (the
/// user-mode lookup needs `$XDG_RUNTIME_DIR`). Unknown keys and other
/// complaints only warn (the exit status stays 0), so stderr must be empty.
pub(crate) fn verify(unit: &Path, user: bool, runtime: &Path) -> Result<(), String> {
    let mut c = Command::new(ANALYZE);
    if user {
        c.arg("--user").env("XDG_RUNTIME_DIR", runtime);
    }
    let out = c
        .args(["--man=no", "--generators=no", "verify"])
        .arg(unit)
        .output()
        .map_err(|e| format!("{ANALYZE}: {e}"))?;
    let err = text(&out.stderr);
    if out.status.success() && err.trim().is_empty() {
        Ok(())
    } else {
        Err(format!(
            "verify {}: {:?}: {err}",
            unit.display(),
            out.status
        ))
    }
}

#[test]
fn install_writes_a_unit_systemd_verifies_and_a_second_install_changes_nothing() {
    let env = Env::new();
    let out = env.daemon(&["install", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v = json(&out);
    assert_eq!(v["changed"], true);
    assert_eq!(v["unit"], env.unit().display().to_string());
    let m = std::fs::metadata(env.unit()).expect("unit");
    assert_eq!(m.mode() & 0o7777, 0o644);
    let unit = std::fs::read_to_string(env.unit()).expect("read");
    let exec = format!(
        "\nExecStart={} --config {}\n",
        gloved().display(),
        env.config().display()
    );
    assert!(unit.contains(&exec), "{unit}");
    assert_eq!(env.calls(), "--no-ask-password daemon-reload\n");
    // No temporary file is left beside it.
    let names: Vec<_> = std::fs::read_dir(&env.units)
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["glove.service"]);

    let again = env.daemon(&["install"]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert!(
        text(&again.stdout).starts_with("unchanged:"),
        "{}",
        text(&again.stdout)
    );
    assert_eq!(env.calls(), "--no-ask-password daemon-reload\n");
    assert_eq!(std::fs::read_to_string(env.unit()).expect("read"), unit);

    // A mode changed by hand is put back (and that is a change).
    std::fs::set_permissions(env.unit(), std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let v = json(&env.daemon(&["install", "--now", "--json"]));
    assert_eq!(v["changed"], true);
    assert_eq!(
        std::fs::metadata(env.unit()).expect("unit").mode() & 0o7777,
        0o644
    );
    let v = json(&env.daemon(&["install", "--now", "--json"]));
    assert_eq!(v["changed"], false);
    assert_eq!(
        env.calls(),
        "--no-ask-password daemon-reload\n\
         --no-ask-password daemon-reload\n\
         --no-ask-password enable -- glove.service\n\
         --no-ask-password restart -- glove.service\n\
         --no-ask-password enable -- glove.service\n\
         --no-ask-password start -- glove.service\n"
    );

    if need(
        Path::new(ANALYZE).exists(),
        "systemd-analyze is not installed",
    ) {
        let rt = env.base.join("analyze-runtime");
        std::fs::create_dir(&rt).expect("mkdir");
        verify(&env.unit(), false, &rt).expect("the unit verifies");
    }
}

/// The text of both units, with the two paths as placeholders; the user
/// unit (the tests run as root, so `glove` writes a system unit) is
/// rendered by the library and verified in user mode too.
#[test]
fn the_units_read_as_documented() {
    use glove_bin::daemon::unit::{render, Scope};
    let env = Env::new();
    let g = gloved();
    let mut both = String::new();
    for scope in [Scope::User, Scope::System] {
        let u = render(scope, &g, &env.config()).expect("render");
        let path = env.base.join(format!("{}.service", scope.as_str()));
        std::fs::write(&path, &u).expect("write");
        if need(
            Path::new(ANALYZE).exists(),
            "systemd-analyze is not installed",
        ) {
            let rt = env.base.join(format!("rt-{}", scope.as_str()));
            std::fs::create_dir(&rt).expect("mkdir");
            verify(&path, scope == Scope::User, &rt).expect("verifies");
        }
        both.push_str(&format!("## {} unit\n", scope.as_str()));
        both.push_str(
            &u.replace(&g.display().to_string(), "<gloved>")
                .replace(&env.config().display().to_string(), "<config>"),
        );
    }
    snap!("daemon_units", both);
}

#[test]
fn install_refuses_a_config_that_is_not_protected() {
    let env = Env::new();
    let cfg = env.config();
    // Loose mode.
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let v = json(&env.daemon(&["install", "--json"]));
    assert_eq!(v["code"], "file_bad_mode", "{v}");
    // A symbolic link to a good file.
    let real = env.base.join("real.json");
    std::fs::rename(&cfg, &real).expect("mv");
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::os::unix::fs::symlink(&real, &cfg).expect("symlink");
    let v = json(&env.daemon(&["install", "--json"]));
    assert_eq!(v["code"], "file_symlink", "{v}");
    // Missing, with the way to make it.
    std::fs::remove_file(&cfg).expect("rm");
    let out = env.daemon(&["install"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.starts_with("error[file_not_found]: "), "{err}");
    assert!(err.contains("glove setup"), "{err}");
    // Not what gloved would accept.
    protected_write(&cfg, "{\"receipt_key\":\"/k\"}");
    let v = json(&env.daemon(&["install", "--json"]));
    assert_eq!(v["code"], "control_config_invalid", "{v}");
    protected_write(&cfg, "{\"bogus\":1}");
    let v = json(&env.daemon(&["install", "--json"]));
    assert_eq!(v["code"], "json_unknown_field", "{v}");
    // Nothing was written, nothing was asked of systemd.
    assert!(!env.unit().exists());
    assert_eq!(env.calls(), "");
}

#[test]
fn install_refuses_a_gloved_others_can_replace() {
    let env = Env::new();
    let bin = env.base.join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    let copy = bin.join("gloved");
    std::fs::copy(gloved(), &copy).expect("cp");
    let s = copy.to_str().expect("utf-8");
    let code = |mode: u32, dir_mode: u32| {
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(mode)).expect("chmod");
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(dir_mode)).expect("chmod");
        let v = json(&env.daemon(&["install", "--gloved", s, "--json"]));
        v["code"].as_str().map(str::to_owned).unwrap_or_default()
    };
    assert_eq!(code(0o757, 0o755), "daemon_gloved_unsafe");
    assert_eq!(code(0o775, 0o755), "daemon_gloved_unsafe");
    assert_eq!(code(0o755, 0o777), "daemon_gloved_unsafe");
    assert_eq!(code(0o644, 0o755), "daemon_gloved_unsafe");
    assert!(!env.unit().exists());
    // The same file, safe, is accepted.
    assert_eq!(code(0o755, 0o755), "");
    assert!(env.unit().exists());
    // A relative path, a missing file, a path systemd would have to unescape.
    let v = json(&env.daemon(&["install", "--gloved", "bin/gloved", "--json"]));
    assert_eq!(v["code"], "daemon_path_unsupported", "{v}");
    let missing = env.base.join("nope/gloved");
    let v = json(&env.daemon(&[
        "install",
        "--gloved",
        missing.to_str().expect("utf-8"),
        "--json",
    ]));
    assert_eq!(v["code"], "daemon_gloved_not_found", "{v}");
    let spaced = env.base.join("a dir");
    std::fs::create_dir(&spaced).expect("mkdir");
    std::fs::copy(gloved(), spaced.join("gloved")).expect("cp");
    let p = spaced.join("gloved");
    let v = json(&env.daemon(&["install", "--gloved", p.to_str().expect("utf-8"), "--json"]));
    assert_eq!(v["code"], "daemon_path_unsupported", "{v}");
}

#[test]
fn a_unit_glove_did_not_write_is_left_alone() {
    let env = Env::new();
    std::fs::create_dir_all(&env.units).expect("mkdir");
    std::fs::write(env.unit(), "[Service]\nExecStart=/bin/true\n").expect("write");
    for args in [
        &["install", "--json"][..],
        &["uninstall", "--json"],
        &["start", "--json"],
    ] {
        let v = json(&env.daemon(args));
        assert_eq!(v["code"], "daemon_unit_foreign", "{args:?}: {v}");
    }
    assert_eq!(
        std::fs::read_to_string(env.unit()).expect("read"),
        "[Service]\nExecStart=/bin/true\n"
    );
    assert_eq!(env.calls(), "");
}

#[test]
fn start_stop_status_uninstall_drive_the_one_unit() {
    let env = Env::new();
    let v = json(&env.daemon(&["start", "--json"]));
    assert_eq!(v["code"], "daemon_not_installed", "{v}");
    let v = json(&env.daemon(&["uninstall", "--json"]));
    assert_eq!(v["removed"], false, "{v}");
    assert_eq!(env.daemon(&["install"]).status.code(), Some(0));
    let v = json(&env.daemon(&["status", "--json"]));
    assert_eq!(v["unit_file"], "installed", "{v}");
    assert_eq!(v["state"]["active_state"], "inactive", "{v}");
    assert_eq!(v["state"]["main_pid"], serde_json::Value::Null, "{v}");
    assert_eq!(env.daemon(&["start"]).status.code(), Some(0));
    assert_eq!(env.daemon(&["stop"]).status.code(), Some(0));
    let v = json(&env.daemon(&["uninstall", "--json"]));
    assert_eq!(v["removed"], true, "{v}");
    assert!(!env.unit().exists());
    let show = "--no-ask-password show --property=LoadState,ActiveState,SubState,MainPID,UnitFileState -- glove.service\n";
    assert_eq!(
        env.calls(),
        format!(
            "--no-ask-password daemon-reload\n{show}\
             --no-ask-password start -- glove.service\n{show}\
             --no-ask-password stop -- glove.service\n{show}\
             --no-ask-password disable --now -- glove.service\n\
             --no-ask-password daemon-reload\n"
        )
    );
}

/// With the real systemctl and no systemd (these machines are not booted
/// with it): a stable code and the command that runs gloved by hand; the
/// unit that `install` wrote is reported.
#[test]
fn without_systemd_every_subcommand_says_how_to_run_gloved_by_hand() {
    if Path::new("/run/systemd/system").exists() {
        eprintln!("skipping: this machine was booted with systemd, so it is reachable");
        return;
    }
    let env = Env::new();
    let units = env.units.to_str().expect("utf-8");
    let run = |args: &[&str]| {
        let mut all = vec!["daemon"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--unit-dir", units, "--json"]);
        json(&kit_run(&all, &env.config_home))
    };
    let v = run(&["install"]);
    assert_eq!(v["code"], "daemon_systemd_unreachable", "{v}");
    assert_eq!(v["unit"]["changed"], true, "{v}");
    let hint = format!("--config {}", env.config().display());
    assert!(
        v["message"].as_str().expect("message").contains(&hint),
        "{v}"
    );
    for sub in ["start", "stop", "status"] {
        let v = run(&[sub]);
        assert_eq!(v["code"], "daemon_systemd_unreachable", "{sub}: {v}");
    }
    // Uninstall still removes the unit: nothing can run under an absent
    // manager.
    let v = run(&["uninstall"]);
    assert_eq!(v["removed"], true, "{v}");
    assert_eq!(v["systemd_reachable"], false, "{v}");
}
