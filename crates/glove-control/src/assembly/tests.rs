//! The assembly's steps over a recording door and a recording spec (the
//! parts themselves are real: a real channel, a real proxy and journal).
//! The doors' own tests are end to end: `glove-bin`'s `exec`, `run`,
//! `egress` and `control` suites.

use super::*;
use glove_types::egress::settings::EgressSettings;
use std::os::fd::OwnedFd;

#[derive(Default)]
struct Recorded {
    env: Vec<String>,
    egress: Option<(Vec<u16>, OwnedFd)>,
    files: Vec<(String, String)>,
    sockets: Vec<Bind>,
    read_only: Vec<Bind>,
    seed_dirs: Vec<String>,
    seed_files: Vec<SeedFile>,
    retained: Vec<String>,
}

impl SpecParts for Recorded {
    fn set_env(&mut self, entry: String) {
        set_env_in(&mut self.env, entry);
    }
    fn set_egress(&mut self, ports: Vec<u16>, channel: OwnedFd) {
        self.egress = Some((ports, channel));
    }
    fn put_file(&mut self, path: String, text: String) {
        self.files.push((path, text));
    }
    fn bind_socket(&mut self, bind: Bind) {
        self.sockets.push(bind);
    }
    fn bind_read_only(&mut self, bind: Bind) {
        self.read_only.push(bind);
    }
    fn seed_dir(&mut self, dir: String) {
        self.seed_dirs.push(dir);
    }
    fn seed_file(&mut self, file: SeedFile) {
        self.seed_files.push(file);
    }
    fn add_retained(&mut self, mount: glove_sandbox::spec::RetainedMount) {
        self.retained.push(mount.target);
    }
}

/// A door that records its steps and fails where it is told to.
#[derive(Default)]
struct Recording {
    steps: Vec<&'static str>,
    fail_build: bool,
    fail_release: bool,
}

impl Door for Recording {
    type Spec = Recorded;
    type Built = bool;
    type Running = Recorded;
    type Error = &'static str;

    fn build(&mut self, _spec: Recorded, hold: bool) -> Result<bool, &'static str> {
        self.steps.push(if hold { "build held" } else { "build" });
        if self.fail_build {
            return Err("build failed");
        }
        Ok(hold)
    }
    fn abort(&mut self, _built: bool) {
        self.steps.push("abort");
    }
    fn release(&mut self, _built: bool) -> Result<Recorded, &'static str> {
        self.steps.push("release");
        if self.fail_release {
            return Err("release failed");
        }
        Ok(Recorded::default())
    }
}

fn offline_free_egress(journal: std::path::PathBuf) -> egress::EgressInput {
    let settings = EgressSettings::from_json(
        br#"{"schema_version": 1, "egress_policy_id": "unit", "endpoints": ["model.test:9"],
             "allow_private": true, "hosts": {"model.test": ["127.0.0.1"]}}"#,
    )
    .expect("settings");
    egress::EgressInput {
        settings,
        extra_roots: Vec::new(),
        journal,
    }
}

/// A journal path in a new private directory under `dir`.
fn journal_in(dir: &std::path::Path) -> std::path::PathBuf {
    let d = dir.join("journals");
    egress::journal_dir(&d).expect("journal dir");
    d.join("unit.journal")
}

fn inputs(egress: Option<egress::EgressInput>) -> Inputs {
    Inputs {
        session_id: SessionId::new("unit-1").expect("id"),
        egress,
        mcp: None,
        leases: Vec::new(),
        retained: Vec::new(),
    }
}

#[test]
fn a_part_s_variable_replaces_the_spec_s_own() {
    let mut env = vec![
        "A=1".to_owned(),
        "HTTPS_PROXY=mine".to_owned(),
        "B=2".to_owned(),
    ];
    set_env_in(&mut env, "HTTPS_PROXY=http://127.0.0.1:3128".into());
    set_env_in(&mut env, "C=3".into());
    assert_eq!(
        env,
        ["A=1", "B=2", "HTTPS_PROXY=http://127.0.0.1:3128", "C=3"]
    );
}

#[test]
fn the_egress_part_changes_the_spec_and_starts_only_after_the_build() {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = journal_in(dir.path());
    let mut spec = Recorded::default();
    let a = Attachments::prepare(
        inputs(Some(offline_free_egress(journal.clone()))),
        &mut spec,
    )
    .map_err(|e| e.0)
    .expect("prepare");
    // Prepared: the spec has the channel, the ports and the proxy's
    // variables; nothing runs yet and the journal does not exist.
    let (ports, _channel) = spec.egress.take().expect("channel");
    assert!(ports.contains(&3128), "{ports:?}");
    assert!(spec.env.iter().any(|e| e.starts_with("HTTPS_PROXY=")));
    assert!(!a.hold(), "egress alone does not hold the agent");
    assert!(!journal.exists());
    // Released: the proxy ran (its journal exists) and reports at the end.
    let mut door = Recording::default();
    let (_running, started) = match a.launch(&mut door, spec) {
        Ok(v) => v,
        Err(f) => panic!("{:?}", f.fault),
    };
    assert_eq!(door.steps, ["build", "release"]);
    assert!(journal.exists());
    let reports = started.finish();
    let e = reports.egress.expect("egress report");
    let summary = e.result.as_ref().expect("summary");
    assert_eq!(summary.policy_id.as_str(), "unit");
    assert!(!e.receipt().audit_failed);
    assert!(reports.mcp.is_none());
}

#[test]
fn a_failed_build_starts_no_part() {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = journal_in(dir.path());
    let mut spec = Recorded::default();
    let a = Attachments::prepare(
        inputs(Some(offline_free_egress(journal.clone()))),
        &mut spec,
    )
    .map_err(|e| e.0)
    .expect("prepare");
    let mut door = Recording {
        fail_build: true,
        ..Recording::default()
    };
    let f = a.launch(&mut door, spec).err().expect("fails");
    assert!(matches!(f.fault, Fault::Door("build failed")));
    assert!(f.reports.egress.is_none(), "the proxy never started");
    assert!(!journal.exists());
    assert_eq!(door.steps, ["build"]);
}

#[test]
fn a_failed_release_stops_the_started_parts_and_reports_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = journal_in(dir.path());
    let mut door = Recording {
        fail_release: true,
        ..Recording::default()
    };
    let f = assemble(
        &mut door,
        inputs(Some(offline_free_egress(journal.clone()))),
        Recorded::default(),
    )
    .err()
    .expect("fails");
    assert!(matches!(f.fault, Fault::Door("release failed")));
    let e = f.reports.egress.expect("the proxy reports");
    assert!(e.result.is_ok());
    assert!(journal.exists());
}

#[test]
fn a_part_that_cannot_be_prepared_has_its_own_code_and_a_summary_without_paths() {
    let dir = tempfile::tempdir().expect("tempdir");
    let profile = dir.path().join("no-such-profile.json");
    let mut spec = Recorded::default();
    let input = Inputs {
        mcp: Some(mcp::McpInput {
            profile: profile.clone(),
            tool_policy_id: None,
            runtime_base: dir.path().join("run"),
            relay: "/bin/true".into(),
            audit: dir.path().join("audit.journal"),
            pins: dir.path().join("pins.json"),
        }),
        ..inputs(None)
    };
    let (e, _) = *Attachments::prepare(input, &mut spec)
        .err()
        .expect("refused");
    assert!(
        e.code().as_str().starts_with("file_"),
        "{}",
        e.code().as_str()
    );
    assert!(e.local().message().contains(&*profile.to_string_lossy()));
    assert!(
        !e.public().message().contains('/'),
        "{}",
        e.public().message()
    );
    assert_eq!(e.public().code(), e.local().code());
    assert!(spec.sockets.is_empty() && spec.seed_files.is_empty());
}

#[test]
fn the_mcp_part_holds_the_agent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let profile = dir.path().join("profile.json");
    std::fs::write(
        &profile,
        br#"{"schema_version": 1, "servers": [{"server_id": "one",
            "command": {"path": "/bin/cat", "arguments": [], "environment": [], "working_directory": "/"},
            "tools": [{"name": "echo"}]}]}"#,
    )
    .expect("profile");
    std::fs::set_permissions(
        &profile,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("chmod");
    let mut spec = Recorded::default();
    let input = Inputs {
        mcp: Some(mcp::McpInput {
            profile,
            tool_policy_id: None,
            runtime_base: dir.path().join("run"),
            relay: "/bin/true".into(),
            audit: dir.path().join("audit.journal"),
            pins: dir.path().join("pins.json"),
        }),
        ..inputs(None)
    };
    let a = Attachments::prepare(input, &mut spec)
        .map_err(|e| e.0)
        .expect("prepare");
    assert!(a.hold());
    assert_eq!(spec.sockets.len(), 1);
    assert_eq!(spec.sockets[0].target, "/run/glove/mcp/one.sock");
    assert_eq!(spec.read_only.len(), 1, "the relay");
    assert!(!spec.seed_files.is_empty(), "the harness configurations");
    // Abandoned before the build: the runtime directory goes.
    let runtime = std::path::PathBuf::from(&spec.sockets[0].source)
        .parent()
        .expect("dir")
        .to_owned();
    assert!(runtime.exists());
    drop(a.abandon());
    assert!(!runtime.exists());
}
