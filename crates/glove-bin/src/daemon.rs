//! `glove daemon install|start|stop|status|uninstall`: `gloved` as a fixed
//! systemd service of this user (a user unit), or of the machine for root
//! (a system unit).
//!
//! * [`unit`] — the unit text, the path checks, the atomic write;
//! * [`systemctl`] — `systemctl` run without a shell, bounded in time.
//!
//! Nothing here is chosen by a controller: the unit name is fixed, the
//! executable is the `gloved` next to this `glove` (or one the operator
//! names with `--gloved`), the only argument is the protected configuration
//! file `glove setup` writes, and no environment is set. When systemd
//! cannot be reached (a machine not booted with it, a session without a
//! user manager) every subcommand says so with `daemon_systemd_unreachable`
//! and the command that runs the service by hand.

pub mod systemctl;
pub mod unit;

use crate::cli::fail;
use crate::control::client::Client;
use crate::control::config::GlovedArgs;
use crate::layout::Layout;
use crate::report::{print_json, EXIT_OK};
use clap::{Args, Subcommand};
use glove_types::codes::daemon::*;
use glove_types::codes::file::FILE_NOT_FOUND;
use glove_types::Rejection;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use systemctl::Systemctl;
use unit::{Existing, Scope, UNIT_NAME};

/// `glove daemon …`
#[derive(Debug, Subcommand)]
pub enum DaemonCommand {
    /// Write the glove.service unit that runs gloved with your protected
    /// configuration (a user unit; a system unit for root), and reload
    /// systemd; with --now also enable and start it.
    Install(InstallArgs),
    /// Start the installed service.
    Start(DaemonArgs),
    /// Stop the service.
    Stop(DaemonArgs),
    /// Show the unit's state and, when it runs, what the service advertises.
    Status(DaemonArgs),
    /// Stop and disable the service and remove the unit glove wrote.
    Uninstall(DaemonArgs),
}

/// Arguments of `glove daemon install`.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// Also enable the service and (re)start it.
    #[arg(long)]
    pub now: bool,
    /// The gloved executable [default: the gloved next to this glove].
    #[arg(long, value_name = "FILE")]
    pub gloved: Option<PathBuf>,
    /// Output and test hooks.
    #[command(flatten)]
    pub common: DaemonArgs,
}

/// What every `glove daemon` subcommand takes.
#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Tests: the directory the unit goes in, instead of systemd's.
    #[arg(long, value_name = "DIR", hide = true)]
    pub unit_dir: Option<PathBuf>,
    /// Tests: the systemctl to run (its answers are taken as they come: the
    /// reachability pre-check is skipped).
    #[arg(long, value_name = "FILE", hide = true)]
    pub systemctl: Option<PathBuf>,
}

/// Where things are for one invocation.
struct Context {
    layout: Layout,
    unit: PathBuf,
    scope: Scope,
    systemctl: Systemctl,
    test_systemctl: bool,
}

impl Context {
    fn new(a: &DaemonArgs) -> Result<Context, Rejection> {
        let layout = Layout::current().ok_or_else(|| {
            Rejection::new(
                DAEMON_LAYOUT_UNKNOWN,
                "cannot tell where your configuration lives: HOME is not an absolute path and XDG_CONFIG_HOME is not set",
            )
        })?;
        let scope = if layout.root {
            Scope::System
        } else {
            Scope::User
        };
        let unit = match &a.unit_dir {
            Some(d) => d.join(UNIT_NAME),
            None => layout.systemd_unit(),
        };
        let systemctl = Systemctl {
            program: a
                .systemctl
                .clone()
                .unwrap_or_else(|| PathBuf::from(systemctl::SYSTEMCTL)),
            scope,
        };
        Ok(Context {
            layout,
            unit,
            scope,
            systemctl,
            test_systemctl: a.systemctl.is_some(),
        })
    }

    fn config(&self) -> PathBuf {
        self.layout.gloved_config()
    }

    fn shown(&self, p: &Path) -> String {
        self.layout.show(p)
    }

    /// The error for an unreachable manager, with the way around it.
    fn unreachable(&self, why: &str) -> Rejection {
        Rejection::new(
            DAEMON_SYSTEMD_UNREACHABLE,
            format!(
                "systemd is not reachable here: {why}. Run the service by hand instead: {} --config {}",
                self.gloved_hint(),
                self.config().display()
            ),
        )
    }

    fn gloved_hint(&self) -> String {
        default_gloved()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "gloved".to_owned())
    }

    /// The pre-check before systemctl is asked anything (skipped with a
    /// test's own `--systemctl`, whose answers are the test's).
    fn reachable(&self) -> Result<(), Rejection> {
        if self.test_systemctl {
            return Ok(());
        }
        systemctl::reachable(self.scope).map_err(|why| self.unreachable(&why))
    }

    /// Runs systemctl; an unreachable manager gets the hint.
    fn run(&self, args: &[&str]) -> Result<systemctl::Ran, Rejection> {
        self.systemctl.run(args).map_err(|e| {
            if e.code() == DAEMON_SYSTEMD_UNREACHABLE {
                self.unreachable(e.message())
            } else {
                e
            }
        })
    }

    /// ActiveState, SubState and MainPID of the unit.
    fn state(&self) -> Result<Value, Rejection> {
        let props = self.systemctl.show(&[
            "LoadState",
            "ActiveState",
            "SubState",
            "MainPID",
            "UnitFileState",
        ])?;
        let get = |k: &str| {
            props
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let pid = get("MainPID").parse::<u64>().ok().filter(|p| *p != 0);
        Ok(json!({
            "load_state": get("LoadState"),
            "active_state": get("ActiveState"),
            "sub_state": get("SubState"),
            "main_pid": pid,
            "unit_file_state": get("UnitFileState"),
        }))
    }

    fn head(&self) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        m.insert("unit".into(), json!(self.unit.display().to_string()));
        m.insert("scope".into(), json!(self.scope.as_str()));
        m
    }
}

/// The `gloved` next to the running `glove`.
fn default_gloved() -> Option<PathBuf> {
    let exe = std::fs::read_link("/proc/self/exe").ok()?;
    Some(exe.parent()?.join("gloved"))
}

/// Runs `glove daemon …`.
pub fn command(c: &DaemonCommand) -> i32 {
    let (a, r) = match c {
        DaemonCommand::Install(i) => (&i.common, install(i)),
        DaemonCommand::Start(a) => (a, start(a)),
        DaemonCommand::Stop(a) => (a, stop(a)),
        DaemonCommand::Status(a) => (a, status(a)),
        DaemonCommand::Uninstall(a) => (a, uninstall(a)),
    };
    match r {
        Ok((v, text)) => {
            if a.json {
                print_json(&v);
            } else {
                print!("{text}");
            }
            EXIT_OK
        }
        Err((e, extra)) => fail(&e, a.json, extra.map(|v| ("unit", v))),
    }
}

/// A result: the JSON object and the text, or the error and (when the
/// unit file was already touched) what happened to it.
type Outcome = Result<(Value, String), (Rejection, Option<Value>)>;

fn plain<T>(r: Result<T, Rejection>) -> Result<T, (Rejection, Option<Value>)> {
    r.map_err(|e| (e, None))
}

/// The configuration gloved would read, checked the way gloved checks it
/// (a protected file, strictly decoded, every required setting present);
/// returns its runtime directory.
fn check_config(config: &Path) -> Result<PathBuf, Rejection> {
    let args = GlovedArgs {
        config: Some(config.to_path_buf()),
        ..GlovedArgs::default()
    };
    match args.resolve(crate::control::service::Clock::System) {
        Ok((s, _)) => {
            // The unit runs gloved with this file for as long as it is installed:
            // nobody but root and the caller may be able to swap it or a
            // directory above it.
            let why = unit::unsafe_reasons(config);
            if !why.is_empty() {
                return Err(Rejection::new(
                    DAEMON_CONFIG_UNSAFE,
                    format!("{}: {}", config.display(), why.join("; ")),
                ));
            }
            Ok(s.runtime_dir)
        }
        Err(e) if e.code() == FILE_NOT_FOUND => Err(Rejection::new(
            FILE_NOT_FOUND,
            format!(
                "{}; `glove setup` writes gloved's configuration there",
                e.message()
            ),
        )),
        Err(e) => Err(e),
    }
}

fn install(i: &InstallArgs) -> Outcome {
    let cx = plain(Context::new(&i.common))?;
    let config = cx.config();
    plain(check_config(&config))?;
    let gloved = plain(resolve_gloved(i.gloved.as_deref()))?;
    let text = plain(unit::render(cx.scope, &gloved, &config))?;
    plain(prepare_unit_dir(&cx.unit))?;
    let changed = match plain(unit::existing(&cx.unit))? {
        Existing::Foreign(why) => {
            return Err((
                Rejection::new(
                    DAEMON_UNIT_FOREIGN,
                    format!("{why}; remove or rename it first, glove will not overwrite it"),
                ),
                None,
            ))
        }
        Existing::Ours { text: t, mode } => t != text || mode != 0o644,
        Existing::Absent => true,
    };
    if changed {
        plain(unit::write_atomically(&cx.unit, &text))?;
    }
    let touched = json!({"path": cx.unit.display().to_string(), "changed": changed});
    let shown_unit = cx.shown(&cx.unit);
    let with_unit = |e: Rejection| {
        let verb = if changed { "wrote" } else { "left unchanged" };
        let msg = format!("{verb} {shown_unit}, but {}", e.message());
        (Rejection::new(e.code(), msg), Some(touched.clone()))
    };
    cx.reachable().map_err(with_unit)?;
    if changed {
        cx.run(&["daemon-reload"]).map_err(with_unit)?;
    }
    if i.now {
        cx.run(&["enable", "--", UNIT_NAME]).map_err(with_unit)?;
        let verb = if changed { "restart" } else { "start" };
        cx.run(&[verb, "--", UNIT_NAME]).map_err(with_unit)?;
    }
    let mut v = cx.head();
    v.insert("changed".into(), json!(changed));
    v.insert("gloved".into(), json!(gloved.display().to_string()));
    v.insert("config".into(), json!(config.display().to_string()));
    v.insert("enabled_and_started".into(), json!(i.now));
    let mut t = format!(
        "{} {} ({} unit)\n  ExecStart={} --config {}\n",
        if changed { "installed" } else { "unchanged:" },
        cx.shown(&cx.unit),
        cx.scope.as_str(),
        gloved.display(),
        config.display()
    );
    if i.now {
        t.push_str("enabled and started; `glove daemon status` shows it\n");
    } else {
        t.push_str("next: glove daemon start (or install --now to enable it at login/boot too)\n");
    }
    Ok((Value::Object(v), t))
}

/// The checked, canonical `gloved` executable.
fn resolve_gloved(given: Option<&Path>) -> Result<PathBuf, Rejection> {
    let path = match given {
        Some(p) if !p.is_absolute() => {
            return Err(Rejection::new(
                DAEMON_PATH_UNSUPPORTED,
                format!("--gloved {} is not an absolute path", p.display()),
            ))
        }
        Some(p) => p.to_path_buf(),
        None => default_gloved().ok_or_else(|| {
            Rejection::new(
                DAEMON_GLOVED_NOT_FOUND,
                "cannot tell where this glove is (/proc/self/exe); name gloved with --gloved",
            )
        })?,
    };
    let canonical = std::fs::canonicalize(&path).map_err(|e| {
        Rejection::new(
            DAEMON_GLOVED_NOT_FOUND,
            format!(
                "no gloved at {}: {e}{}",
                path.display(),
                if given.is_none() {
                    " (it is installed next to glove; name another with --gloved)"
                } else {
                    ""
                }
            ),
        )
    })?;
    unit::check_gloved(&canonical)?;
    Ok(canonical)
}

/// Creates the unit directory if needed and checks that nobody else can
/// write it or a directory above it.
fn prepare_unit_dir(unit_path: &Path) -> Result<(), Rejection> {
    let dir = unit_path.parent().unwrap_or(Path::new("/"));
    let io = |e: std::io::Error| {
        Rejection::new(
            DAEMON_UNIT_IO,
            format!("cannot create the unit directory {}: {e}", dir.display()),
        )
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let canonical = std::fs::canonicalize(dir).map_err(io)?;
    let why = unit::unsafe_reasons(&canonical);
    if !why.is_empty() {
        return Err(Rejection::new(
            DAEMON_UNIT_DIR_UNSAFE,
            format!(
                "the unit directory {} is not safe to install into: {}",
                dir.display(),
                why.join("; ")
            ),
        ));
    }
    Ok(())
}

/// Refuses when the unit is missing or not ours.
fn require_ours(cx: &Context) -> Result<(), Rejection> {
    match unit::existing(&cx.unit)? {
        Existing::Ours { .. } => Ok(()),
        Existing::Absent => Err(Rejection::new(
            DAEMON_NOT_INSTALLED,
            format!(
                "{} is not installed; run `glove daemon install` first",
                cx.shown(&cx.unit)
            ),
        )),
        Existing::Foreign(why) => Err(Rejection::new(
            DAEMON_UNIT_FOREIGN,
            format!("{why}; glove daemon only drives the unit it wrote"),
        )),
    }
}

fn state_text(cx: &Context, s: &Value) -> String {
    let pid = match s["main_pid"].as_u64() {
        Some(p) => format!(", pid {p}"),
        None => String::new(),
    };
    format!(
        "{UNIT_NAME} ({} unit): {} ({}){pid}\n",
        cx.scope.as_str(),
        s["active_state"].as_str().unwrap_or("unknown"),
        s["sub_state"].as_str().unwrap_or("unknown"),
    )
}

fn start(a: &DaemonArgs) -> Outcome {
    let cx = plain(Context::new(a))?;
    plain(require_ours(&cx))?;
    plain(cx.reachable())?;
    plain(cx.run(&["start", "--", UNIT_NAME]))?;
    let s = plain(cx.state())?;
    let mut v = cx.head();
    v.insert("state".into(), s.clone());
    Ok((Value::Object(v), state_text(&cx, &s)))
}

fn stop(a: &DaemonArgs) -> Outcome {
    let cx = plain(Context::new(a))?;
    plain(cx.reachable())?;
    plain(cx.run(&["stop", "--", UNIT_NAME]))?;
    let s = plain(cx.state())?;
    let mut v = cx.head();
    v.insert("state".into(), s.clone());
    Ok((Value::Object(v), state_text(&cx, &s)))
}

fn status(a: &DaemonArgs) -> Outcome {
    let cx = plain(Context::new(a))?;
    let installed = match plain(unit::existing(&cx.unit))? {
        Existing::Absent => "absent",
        Existing::Ours { .. } => "installed",
        Existing::Foreign(_) => "foreign",
    };
    plain(cx.reachable())?;
    let s = plain(cx.state())?;
    let mut v = cx.head();
    v.insert("unit_file".into(), json!(installed));
    v.insert("state".into(), s.clone());
    let mut t = state_text(&cx, &s);
    t.push_str(&format!(
        "  unit file: {} ({installed})\n",
        cx.shown(&cx.unit)
    ));
    if s["active_state"] == "active" {
        let runtime = check_config(&cx.config()).unwrap_or_else(|_| cx.layout.runtime.clone());
        match Client::connect(&runtime).and_then(|mut c| c.capabilities()) {
            Ok(caps) => {
                let methods: Vec<&str> = caps["methods"]
                    .as_array()
                    .map(|m| m.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                t.push_str(&format!(
                    "  service: protocol version {}, {} methods: {}\n",
                    caps["protocol_version"],
                    methods.len(),
                    methods.join(", ")
                ));
                v.insert("capabilities".into(), caps);
            }
            Err(e) => {
                t.push_str(&format!(
                    "  service: not answering at {} (error[{}]: {e})\n",
                    runtime.display(),
                    e.code()
                ));
                v.insert(
                    "capabilities_error".into(),
                    json!({"code": e.code(), "message": e.message()}),
                );
            }
        }
    }
    Ok((Value::Object(v), t))
}

fn uninstall(a: &DaemonArgs) -> Outcome {
    let cx = plain(Context::new(a))?;
    match plain(unit::existing(&cx.unit))? {
        Existing::Absent => {
            let mut v = cx.head();
            v.insert("removed".into(), json!(false));
            let t = format!("{} is not installed; nothing to do\n", cx.shown(&cx.unit));
            return Ok((Value::Object(v), t));
        }
        Existing::Foreign(why) => {
            return Err((
                Rejection::new(
                    DAEMON_UNIT_FOREIGN,
                    format!("{why}; glove daemon only removes the unit it wrote"),
                ),
                None,
            ))
        }
        Existing::Ours { .. } => {}
    }
    // With a manager: stop and disable first (never leave a service
    // running without its unit). Without one, nothing can run under it.
    let managed = cx.reachable().is_ok();
    if managed {
        plain(cx.run(&["disable", "--now", "--", UNIT_NAME]))?;
    }
    plain(unit::remove(&cx.unit))?;
    if managed {
        plain(cx.run(&["daemon-reload"]))?;
    }
    let mut v = cx.head();
    v.insert("removed".into(), json!(true));
    v.insert("systemd_reachable".into(), json!(managed));
    let t = format!(
        "removed {}{}\n",
        cx.shown(&cx.unit),
        if managed {
            " (stopped and disabled first)"
        } else {
            " (systemd is not reachable here, so nothing ran under it)"
        }
    );
    Ok((Value::Object(v), t))
}
