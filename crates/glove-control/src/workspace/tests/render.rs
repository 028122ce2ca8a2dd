//! The renderings of a fixed edit, and its patch through the real
//! `git apply`.

use super::{chmod, manifest, open, write};
use crate::workspace::content::Trees;
use crate::workspace::diff::compare;
use crate::workspace::render::{render_json, render_patch, render_stat, UnrepresentedReason};
use glove_types::codes::workspace::WORKSPACE_PATCH_INCOMPLETE;
use rustix::fd::AsFd;
use std::fs;
use std::path::Path;
use std::process::Command;

const MODIFY: &str = "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n";

fn source(r: &Path) {
    write(r, "keep.txt", b"same\n", 0o644);
    write(r, "modify.txt", MODIFY.as_bytes(), 0o644);
    write(r, "remove.txt", b"bye\nnow\n", 0o644);
    write(r, "run.sh", b"#!/bin/sh\necho hi\n", 0o644);
    write(r, "noeol.txt", b"a\nb", 0o644);
    write(r, "data.bin", &[0, 1, 2, 3], 0o644);
    write(r, "dir/inner.txt", b"x\n", 0o644);
    chmod(r, "dir", 0o755);
}

fn edit(r: &Path) {
    write(r, "added.txt", b"new\nfile\n", 0o644);
    fs::remove_file(r.join("remove.txt")).expect("rm");
    let m = MODIFY.replace("four", "FOUR") + "eleven\n";
    write(r, "modify.txt", m.as_bytes(), 0o644);
    chmod(r, "run.sh", 0o755);
    write(r, "noeol.txt", b"a\nc", 0o644);
    write(r, "data.bin", &[0, 1, 2, 3, 4, 5], 0o644);
    write(r, "nested/new/deep.txt", b"deep\n", 0o644);
    chmod(r, "nested", 0o755);
    chmod(r, "nested/new", 0o755);
}

struct Fixture {
    src: tempfile::TempDir,
    stage: tempfile::TempDir,
}

fn fixture() -> Fixture {
    let (src, stage) = (
        tempfile::tempdir().expect("src"),
        tempfile::tempdir().expect("stage"),
    );
    source(src.path());
    source(stage.path());
    edit(stage.path());
    Fixture { src, stage }
}

const STAT: &str = "\
\x20added.txt           | +2 -0
 data.bin            | Bin 4 -> 6 bytes
 modify.txt          | +2 -1
 nested              | new directory
 nested/new          | new directory
 nested/new/deep.txt | +1 -0
 noeol.txt           | +1 -1
 remove.txt          | +0 -2
 run.sh              | mode 0644 -> 0755
 9 paths changed, 6 insertions(+), 4 deletions(-)
";

#[test]
fn stat_and_json_of_a_fixed_edit() {
    let f = fixture();
    let baseline = manifest(f.src.path());
    let c = compare(&baseline, &manifest(f.stage.path()));
    let (s, g) = (open(f.src.path()), open(f.stage.path()));
    let trees = Trees {
        source: s.as_fd(),
        stage: g.as_fd(),
    };
    assert_eq!(render_stat(&c, &trees, false).expect("stat"), STAT);
    let coloured = render_stat(&c, &trees, true).expect("stat");
    assert!(
        coloured.contains("\x1b[32m+2\x1b[m \x1b[31m-1\x1b[m"),
        "{coloured}"
    );
    let j = render_json(&c, &trees).expect("json");
    assert_eq!(j["format"], "glove.workspace-diff-v1");
    assert_eq!(
        j["summary"],
        serde_json::json!({"changed": 9, "insertions": 6, "deletions": 4})
    );
    assert_eq!(j["root_mode"], serde_json::Value::Null);
    let changes = j["changes"].as_array().expect("changes");
    assert_eq!(changes.len(), 9);
    let m = &changes[2];
    assert_eq!(m["path"], "modify.txt");
    assert_eq!(m["change"], "modified");
    assert_eq!(
        m["content"],
        serde_json::json!({"type": "text", "insertions": 2, "deletions": 1})
    );
    assert_eq!(m["before"]["size"], MODIFY.len());
    assert_eq!(m["before"]["mode"], 0o644);
    assert_eq!(
        m["before"]["digest"],
        glove_types::Sha256Digest::of(MODIFY.as_bytes()).to_hex()
    );
    assert_eq!(changes[1]["content"]["type"], "binary");
    assert_eq!(changes[7]["after"], serde_json::Value::Null);
    assert_eq!(changes[7]["change"], "removed");
    assert_eq!(changes[8]["mode_changed"], true);
    assert_eq!(changes[8]["content"], serde_json::Value::Null);
    assert_eq!(j["blockers"], serde_json::json!([]));
}

#[test]
fn a_source_changed_since_staging_is_said_not_diffed() {
    let f = fixture();
    let baseline = manifest(f.src.path());
    write(f.src.path(), "modify.txt", b"someone else's edit\n", 0o644);
    let c = compare(&baseline, &manifest(f.stage.path()));
    let (s, g) = (open(f.src.path()), open(f.stage.path()));
    let trees = Trees {
        source: s.as_fd(),
        stage: g.as_fd(),
    };
    let stat = render_stat(&c, &trees, false).expect("stat");
    assert!(
        stat.contains(" modify.txt          | source changed since staging; not compared\n"),
        "{stat}"
    );
    let j = render_json(&c, &trees).expect("json");
    assert_eq!(j["changes"][2]["content"]["type"], "source_changed");
    let p = render_patch(&c, &trees, false).expect("patch");
    assert!(p
        .unrepresented
        .iter()
        .any(|u| u.path == "modify.txt" && u.reason == UnrepresentedReason::SourceChanged));
    assert!(!p.text.contains("modify.txt"));
}

fn git(dir: &Path, args: &[&str], stdin: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("umask 022; exec git \"$@\"")
        .arg("sh")
        .args(args)
        .current_dir(dir)
        // No repository above the directory is ever found: git applies
        // the patch to the directory as a plain tree.
        .env("GIT_CEILING_DIRECTORIES", dir.parent().unwrap_or(dir))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("git");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write");
    child.wait_with_output().expect("git")
}

#[test]
fn the_patch_applies_with_git_and_names_what_it_cannot_carry() {
    let f = fixture();
    let c = compare(&manifest(f.src.path()), &manifest(f.stage.path()));
    let (s, g) = (open(f.src.path()), open(f.stage.path()));
    let trees = Trees {
        source: s.as_fd(),
        stage: g.as_fd(),
    };
    let patch = render_patch(&c, &trees, false).expect("patch");
    let snapshots = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../snapshots");
    insta::with_settings!({
        snapshot_path => snapshots.display().to_string(),
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!("workspace_patch", patch.text);
    });
    assert_eq!(patch.unrepresented.len(), 1);
    assert_eq!(patch.unrepresented[0].path, "data.bin");
    assert_eq!(patch.unrepresented[0].reason, UnrepresentedReason::Binary);
    let coloured = render_patch(&c, &trees, true).expect("patch");
    assert!(coloured.text.contains("\x1b[36m@@"));
    let e = patch.clone().complete().expect_err("incomplete");
    assert_eq!(e.code(), WORKSPACE_PATCH_INCOMPLETE);

    // Applied by the real git to a copy of the source, the patch gives the
    // stage, but for the binary file it does not carry.
    let copy = tempfile::tempdir().expect("copy");
    source(copy.path());
    let check = git(copy.path(), &["apply", "--check", "-"], &patch.text);
    assert!(
        check.status.success(),
        "git apply --check: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    let apply = git(copy.path(), &["apply", "-"], &patch.text);
    assert!(
        apply.status.success(),
        "git apply: {}",
        String::from_utf8_lossy(&apply.stderr)
    );
    let left = compare(&manifest(copy.path()), &manifest(f.stage.path()));
    let paths: Vec<&str> = left.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, ["data.bin"]);

    // Without the binary change the patch is complete and carries it all.
    write(copy.path(), "data.bin", &[0, 1, 2, 3, 4, 5], 0o644);
    let c2 = compare(&manifest(f.src.path()), &manifest(copy.path()));
    assert_eq!(c2.changes.len(), c.changes.len());
    let copy2 = tempfile::tempdir().expect("copy2");
    source(copy2.path());
    write(copy2.path(), "data.bin", &[0, 1, 2, 3, 4, 5], 0o644);
    let c3 = compare(&manifest(copy2.path()), &manifest(f.stage.path()));
    let (s3, g3) = (open(copy2.path()), open(f.stage.path()));
    let t3 = Trees {
        source: s3.as_fd(),
        stage: g3.as_fd(),
    };
    let text = render_patch(&c3, &t3, false)
        .expect("patch")
        .complete()
        .expect("complete");
    let apply = git(copy2.path(), &["apply", "-"], &text);
    assert!(
        apply.status.success(),
        "git apply: {}",
        String::from_utf8_lossy(&apply.stderr)
    );
    assert!(compare(&manifest(copy2.path()), &manifest(f.stage.path())).is_empty());
}

#[test]
fn modes_git_cannot_write_are_named() {
    let f = fixture();
    chmod(f.stage.path(), "keep.txt", 0o600);
    write(f.stage.path(), "secret.txt", b"s\n", 0o600);
    fs::create_dir(f.stage.path().join("empty")).expect("mkdir");
    chmod(f.stage.path(), "empty", 0o755);
    let c = compare(&manifest(f.src.path()), &manifest(f.stage.path()));
    let (s, g) = (open(f.src.path()), open(f.stage.path()));
    let trees = Trees {
        source: s.as_fd(),
        stage: g.as_fd(),
    };
    let p = render_patch(&c, &trees, false).expect("patch");
    let got: Vec<(&str, UnrepresentedReason)> = p
        .unrepresented
        .iter()
        .map(|u| (u.path.as_str(), u.reason))
        .collect();
    assert_eq!(
        got,
        [
            ("data.bin", UnrepresentedReason::Binary),
            ("empty", UnrepresentedReason::DirectoryOnly),
            ("keep.txt", UnrepresentedReason::Mode),
            ("secret.txt", UnrepresentedReason::Mode),
        ]
    );
}

#[test]
fn names_git_quotes_still_apply() {
    let (src, stage) = (
        tempfile::tempdir().expect("src"),
        tempfile::tempdir().expect("stage"),
    );
    let names = [
        "a b.txt",
        "quote\"d",
        "tab\there",
        "caf\u{e9}",
        "back\\slash",
    ];
    for r in [src.path(), stage.path()] {
        for n in names {
            write(r, n, b"old\n", 0o644);
        }
    }
    for n in names {
        write(stage.path(), n, b"new\n", 0o644);
        write(stage.path(), &format!("new {n}"), b"x\n", 0o644);
    }
    let c = compare(&manifest(src.path()), &manifest(stage.path()));
    let (s, g) = (open(src.path()), open(stage.path()));
    let trees = Trees {
        source: s.as_fd(),
        stage: g.as_fd(),
    };
    let stat = render_stat(&c, &trees, false).expect("stat");
    assert!(stat.contains(" \"tab\\there\" "), "{stat}");
    assert!(!stat.contains('\t'), "{stat}");
    let text = render_patch(&c, &trees, false)
        .expect("patch")
        .complete()
        .expect("complete");
    let apply = git(src.path(), &["apply", "-"], &text);
    assert!(
        apply.status.success(),
        "git apply: {}\n{text}",
        String::from_utf8_lossy(&apply.stderr)
    );
    assert!(compare(&manifest(src.path()), &manifest(stage.path())).is_empty());
}

#[test]
fn type_changes_apply() {
    let (src, stage) = (
        tempfile::tempdir().expect("src"),
        tempfile::tempdir().expect("stage"),
    );
    for r in [src.path(), stage.path()] {
        write(r, "was_file", b"f\n", 0o644);
        write(r, "was_dir/a", b"a\n", 0o644);
        write(r, "was_dir/sub/b", b"b\n", 0o755);
        chmod(r, "was_dir", 0o755);
        chmod(r, "was_dir/sub", 0o755);
    }
    let g = stage.path();
    fs::remove_file(g.join("was_file")).expect("rm");
    write(g, "was_file/now", b"now\n", 0o644);
    chmod(g, "was_file", 0o755);
    fs::remove_dir_all(g.join("was_dir")).expect("rm");
    write(g, "was_dir", b"now a file\n", 0o755);
    let c = compare(&manifest(src.path()), &manifest(g));
    let (s, gf) = (open(src.path()), open(g));
    let trees = Trees {
        source: s.as_fd(),
        stage: gf.as_fd(),
    };
    let text = render_patch(&c, &trees, false)
        .expect("patch")
        .complete()
        .expect("complete");
    let apply = git(src.path(), &["apply", "-"], &text);
    assert!(
        apply.status.success(),
        "git apply: {}\n{text}",
        String::from_utf8_lossy(&apply.stderr)
    );
    assert!(compare(&manifest(src.path()), &manifest(g)).is_empty());
}
