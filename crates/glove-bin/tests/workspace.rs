//! Retained workspaces end to end, on real ext4 images and loop devices:
//! `glove exec --workspace` stages a directory, the command edits it, the
//! source stays as it was, `glove diff` shows exactly the edits (and its
//! `--patch` goes through the real `git apply`), `glove stages` lists and
//! removes the stage; planted entries apply cannot carry are named; the
//! loop devices are gone after each use.

mod common;

use common::apply_env::snapshot;
use common::{glove_with_env, is_root, need, safe_tempdir, sandbox_ok, As};
use std::path::Path;
use std::process::Output;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn retained_ok() -> bool {
    sandbox_ok(As::Caller)
        && need(is_root(), "retained workspaces need root")
        && need(
            Path::new("/usr/sbin/mkfs.ext4").exists() || Path::new("/sbin/mkfs.ext4").exists(),
            "mkfs.ext4 (e2fsprogs) is missing",
        )
        && need(
            Path::new("/dev/loop-control").exists(),
            "/dev/loop-control is missing",
        )
}

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let dir = safe_tempdir();
        std::fs::create_dir(dir.path().join("src")).expect("mkdir src");
        Env { dir }
    }
    fn src(&self) -> std::path::PathBuf {
        self.dir.path().join("src")
    }
    fn stages(&self) -> std::path::PathBuf {
        self.dir.path().join("stages")
    }
    fn run(&self, args: &[&str]) -> Output {
        let stages = self.stages();
        glove_with_env(
            As::Caller,
            args,
            None,
            &[("GLOVE_STAGE_DIR", stages.as_os_str())],
        )
    }
    fn write(&self, rel: &str, body: &str) {
        let p = self.src().join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, body).expect("write");
    }
}

fn outcome_of(out: &Output) -> serde_json::Value {
    let s = text(&out.stdout);
    let last = s.lines().last().unwrap_or_default().to_owned();
    serde_json::from_str(&last).unwrap_or_else(|e| panic!("{e}: {s} / {}", text(&out.stderr)))
}

/// Every loop device backed by a file below `dir`.
fn loops_below(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/sys/block")
        .expect("sys/block")
        .flatten()
    {
        let f = e.path().join("loop/backing_file");
        if let Ok(b) = std::fs::read_to_string(&f) {
            if Path::new(b.trim()).starts_with(dir) {
                out.push(e.file_name().to_string_lossy().into_owned());
            }
        }
    }
    out
}

#[test]
fn an_agents_edits_stay_in_the_stage_and_diff_shows_exactly_them() {
    if !retained_ok() {
        return;
    }
    let env = Env::new();
    env.write("keep.txt", "unchanged\n");
    env.write("edit.txt", "one\ntwo\nthree\n");
    env.write("gone.txt", "bye\n");
    env.write("sub/mode.sh", "#!/bin/sh\n");
    let before = snapshot(&env.src());
    let src = env.src().display().to_string();
    let out = env.run(&[
        "exec",
        "--json",
        "--disk",
        "64M",
        "--workspace",
        &src,
        "--",
        "/bin/sh",
        "-c",
        "printf 'one\\n2\\nthree\\n' > edit.txt && rm gone.txt && mkdir -p new/dir \
         && echo fresh > new/dir/added.txt && chmod 755 sub/mode.sh && pwd",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let o = outcome_of(&out);
    assert_eq!(o["workspace"]["state"], "frozen", "{o}");
    assert_eq!(o["workspace"]["changed"], true);
    let session = o["workspace"]["session_id"]
        .as_str()
        .expect("session")
        .to_owned();
    assert!(text(&out.stdout).starts_with("/workspace\n"));
    // The source is exactly as it was.
    assert_eq!(snapshot(&env.src()), before);
    assert!(loops_below(env.dir.path()).is_empty());

    let stat = env.run(&["diff", &session, "--stat"]);
    assert_eq!(stat.status.code(), Some(0), "{}", text(&stat.stderr));
    let stat = text(&stat.stdout);
    for row in [
        "edit.txt",
        "gone.txt",
        "new/dir/added.txt",
        "sub/mode.sh",
        "6 paths changed",
    ] {
        assert!(stat.contains(row), "{row} missing from:\n{stat}");
    }
    assert!(!stat.contains("keep.txt"), "{stat}");
    assert!(!stat.contains('\u{1b}'), "no colour in a pipe: {stat:?}");

    let json = env.run(&["diff", &session, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    let kinds: Vec<(String, String)> = v["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap_or_default().to_owned(),
                c["change"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let want = [
        ("edit.txt", "modified"),
        ("gone.txt", "removed"),
        ("new", "added"),
        ("new/dir", "added"),
        ("new/dir/added.txt", "added"),
        ("sub/mode.sh", "modified"),
    ];
    assert_eq!(
        kinds,
        want.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect::<Vec<_>>(),
        "{v}"
    );
    assert_eq!(v["blockers"], serde_json::json!([]));

    // The patch goes through the real git, onto a copy of the source.
    let patch = env.run(&["diff", &session, "--patch"]);
    assert_eq!(patch.status.code(), Some(0), "{}", text(&patch.stderr));
    let copy = env.dir.path().join("copy");
    let cp = std::process::Command::new("cp")
        .args(["-a"])
        .arg(env.src())
        .arg(&copy)
        .status()
        .expect("cp");
    assert!(cp.success());
    let patch_file = env.dir.path().join("p.diff");
    std::fs::write(&patch_file, &patch.stdout).expect("write patch");
    // Its own repository: inside another (the checkout's target), git
    // apply would skip every path outside the current directory.
    for args in [vec!["init", "-q"], vec!["apply", "--check"], vec!["apply"]] {
        let mut g = std::process::Command::new("git");
        g.args(&args);
        if args[0] == "apply" {
            g.arg(&patch_file);
        }
        let g = g.current_dir(&copy).output().expect("git");
        assert!(g.status.success(), "git {args:?}: {}", text(&g.stderr));
    }
    assert_eq!(
        std::fs::read_to_string(copy.join("edit.txt")).expect("edit"),
        "one\n2\nthree\n"
    );
    assert!(!copy.join("gone.txt").exists());
    assert_eq!(
        std::fs::read_to_string(copy.join("new/dir/added.txt")).expect("added"),
        "fresh\n"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(copy.join("sub/mode.sh"))
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);

    // Inspecting again (a second attach) sees the same, and leaves no loop
    // device behind.
    let again = env.run(&["diff", &session, "--stat"]);
    assert_eq!(text(&again.stdout), stat);
    assert!(loops_below(env.dir.path()).is_empty());

    let list = env.run(&["stages", "list", "--json"]);
    let l: serde_json::Value = serde_json::from_slice(&list.stdout).expect("list json");
    assert_eq!(l["stages"][0]["session_id"], session.as_str(), "{l}");
    assert_eq!(l["stages"][0]["state"], "frozen");
    let rm = env.run(&["stages", "rm", &session]);
    assert_eq!(rm.status.code(), Some(0), "{}", text(&rm.stderr));
    let list = env.run(&["stages", "list", "--json"]);
    let l: serde_json::Value = serde_json::from_slice(&list.stdout).expect("list json");
    assert_eq!(l["stages"], serde_json::json!([]));
    let gone = env.run(&["diff", &session]);
    assert_ne!(gone.status.code(), Some(0));
    assert!(text(&gone.stderr).contains("retained_stage_not_found"));
}

#[test]
fn entries_apply_cannot_carry_are_named() {
    if !retained_ok() {
        return;
    }
    let env = Env::new();
    env.write("a.txt", "a\n");
    let src = env.src().display().to_string();
    let out = env.run(&[
        "exec",
        "--json",
        "--disk",
        "64M",
        "--workspace",
        &src,
        "--",
        "/bin/sh",
        "-c",
        "ln -s a.txt link && mkfifo fifo && ln a.txt hard && echo x > suid && chmod 4755 suid \
         && dd if=/dev/zero of=sparse bs=1 count=1 seek=1048576 2>/dev/null",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let o = outcome_of(&out);
    let session = o["workspace"]["session_id"]
        .as_str()
        .expect("session")
        .to_owned();
    let shown = env.run(&["diff", &session]);
    assert_eq!(shown.status.code(), Some(0), "{}", text(&shown.stderr));
    let shown = text(&shown.stdout);
    let tail = shown
        .split("apply cannot carry:")
        .nth(1)
        .unwrap_or_else(|| panic!("no blockers in:\n{shown}"));
    for name in ["link", "fifo", "hard", "a.txt", "suid", "sparse"] {
        assert!(
            tail.lines()
                .any(|l| l.trim_start().starts_with(&format!("{name}:"))),
            "{name} not named in:\n{tail}"
        );
    }
    let json = env.run(&["diff", &session, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    assert!(
        v["blockers"].as_array().is_some_and(|b| b.len() >= 6),
        "{v}"
    );
}

#[test]
fn without_mount_capability_the_workspace_says_why_and_ephemeral_works() {
    if !sandbox_ok(As::Nobody) {
        return;
    }
    let env = Env::new();
    env.write("a.txt", "a\n");
    let src = env.src().display().to_string();
    let stages = env.stages();
    let out = glove_with_env(
        As::Nobody,
        &["exec", "--workspace", &src, "--", "/bin/true"],
        None,
        &[("GLOVE_STAGE_DIR", stages.as_os_str())],
    );
    assert_eq!(out.status.code(), Some(125));
    let err = text(&out.stderr);
    assert!(err.contains("error[retained_unsupported]"), "{err}");
    assert!(err.contains("--workspace-mode ephemeral"), "{err}");
    let out = glove_with_env(
        As::Nobody,
        &[
            "exec",
            "--workspace",
            &src,
            "--workspace-mode",
            "ephemeral",
            "--",
            "/bin/sh",
            "-c",
            "cat a.txt && echo b > a.txt",
        ],
        None,
        &[("GLOVE_STAGE_DIR", stages.as_os_str())],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "a\n");
    assert_eq!(
        std::fs::read_to_string(env.src().join("a.txt")).expect("a"),
        "a\n"
    );
}
