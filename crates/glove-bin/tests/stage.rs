// This file is over 600 lines because it is one end-to-end battery on `glove policy stage` sharing its fake npm tree and staging-directory helpers.
//! `glove policy stage`: a fake npm tree made here (what it refuses, what
//! it writes, that a second stage is idempotent), and the five real
//! harnesses from `GLOVE_HARNESSES` staged into one protected directory,
//! found by `glove policy detect` as safe, and run contained from it.
//!
//! Staging directories live below `common::safe_base()`: `/tmp` is
//! world-writable (sticky), so nothing under it passes the directory rule.

#[path = "common/mod.rs"]
mod common;

use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

/// A fresh directory with safe ancestors (`common::safe_base`), removed
/// when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = common::safe_base().join(format!("stage-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("mkdir");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8")
}

fn stage_with_env(
    runtime: &str,
    source: &Path,
    d: &Path,
    mode: Option<&str>,
    env: &[(&str, &std::ffi::OsStr)],
) -> (Output, Value) {
    let mut args = vec![
        "policy",
        "stage",
        "--json",
        "--runtime",
        runtime,
        "--source",
        s(source),
        "--directory",
        s(d),
    ];
    args.extend(mode);
    let out = common::glove_with_env(common::As::Caller, &args, None, env);
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "no JSON: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out, v)
}

fn stage(runtime: &str, source: &Path, d: &Path, mode: &str) -> (Output, Value) {
    stage_with_env(runtime, source, d, Some(mode), &[])
}

fn staged(runtime: &str, source: &Path, d: &Path) -> Value {
    let (out, v) = stage(runtime, source, d, "--yes");
    assert!(out.status.success(), "{runtime}: {v}");
    v
}

fn refused(out: &Output, v: &Value, code: &str) {
    assert_eq!(out.status.code(), Some(1), "{v}");
    assert_eq!(v["code"], code, "{v}");
}

fn detect(bin: &Path) -> Value {
    let out = common::glove(
        common::As::Caller,
        &["policy", "detect", "--json", "--search-path", s(bin)],
        None,
    );
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).expect("json")
}

/// A fake opencode install: the platform package with an ELF, a link
/// inside it, and the main package's manifest. Returns the ELF.
fn fake_opencode(root: &Path) -> PathBuf {
    let nm = root.join("node_modules");
    let p = nm.join("opencode-linux-x64");
    std::fs::create_dir_all(p.join("bin")).expect("mkdir");
    std::fs::write(
        p.join("package.json"),
        r#"{"name":"opencode-linux-x64","version":"9.9.9"}"#,
    )
    .expect("write");
    let exe = p.join("bin/opencode");
    std::fs::copy("/usr/bin/true", &exe).expect("copy");
    // Readable by others (staging refuses what is not), one odd bit.
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o745)).expect("chmod");
    std::os::unix::fs::symlink("opencode", p.join("bin/alias")).expect("link");
    std::fs::create_dir_all(nm.join("opencode-ai")).expect("mkdir");
    std::fs::write(
        nm.join("opencode-ai/package.json"),
        r#"{"name":"opencode-ai","version":"9.9.9"}"#,
    )
    .expect("write");
    exe
}

#[test]
fn a_fake_install_stages_once_and_a_second_stage_is_idempotent() {
    let src = tempfile::tempdir().expect("tempdir");
    let exe = fake_opencode(src.path());
    let t = Dir::new("fake");
    let d = t.0.join("harnesses");

    // A dry run writes nothing, not even D.
    let (out, dry) = stage("opencode", &exe, &d, "--dry-run");
    assert!(out.status.success(), "{dry}");
    assert_eq!(dry["dry_run"], true);
    assert!(!d.exists(), "a dry run wrote {}", d.display());

    let first = staged("opencode", &exe, &d);
    assert_eq!(first["digest"], dry["digest"], "{first}");
    assert_eq!(first["version"], "9.9.9");
    assert_eq!(first["already_stored"], false);
    // The platform package (two files and a link) and the main manifest.
    assert_eq!(first["files"], 3, "{first}");
    let store = PathBuf::from(first["store"].as_str().expect("store"));
    assert_eq!(
        store,
        d.join("store").join(dry["digest"].as_str().expect("hex"))
    );
    let link = std::fs::read_link(store.join("node_modules/opencode-linux-x64/bin/alias"));
    assert_eq!(link.expect("link kept"), Path::new("opencode"));
    // Modes normalised: 0745 became 0755, directories 0755.
    let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o7777;
    assert_eq!(
        mode(&store.join("node_modules/opencode-linux-x64/bin/opencode")),
        0o755
    );
    assert_eq!(
        mode(&store.join("node_modules/opencode-linux-x64/package.json")),
        0o644
    );
    for dir in [&d, &store, &d.join("bin")] {
        assert_eq!(mode(dir), 0o755, "{}", dir.display());
    }
    // The entry point is a relative link into the store.
    let entry = d.join("bin/opencode");
    let target = std::fs::read_link(&entry).expect("entry point");
    assert!(target.starts_with("../store/"), "{}", target.display());

    // Again, from the node_modules root: the same closure, verified.
    let second = staged("opencode", &src.path().join("node_modules"), &d);
    assert_eq!(second["digest"], first["digest"]);
    assert_eq!(second["already_stored"], true);
    assert_eq!(second["entry_point_existed"], true);

    let found = detect(&d.join("bin"));
    assert_eq!(found["search_path_safe"], true, "{found}");
    let oc = found["runtimes"]
        .as_array()
        .expect("runtimes")
        .iter()
        .find(|r| r["runtime"] == "opencode")
        .expect("opencode");
    assert_eq!(oc["version"], "9.9.9", "{oc}");
    assert_eq!(oc["executable_safe"], true, "{oc}");
    assert_eq!(oc["executable"], first["executable"], "{oc}");
}

#[test]
fn an_entry_point_that_points_elsewhere_is_never_overwritten() {
    let src = tempfile::tempdir().expect("tempdir");
    let exe = fake_opencode(src.path());
    let t = Dir::new("entry");
    let d = t.0.join("harnesses");
    std::fs::create_dir_all(d.join("bin")).expect("mkdir");
    std::os::unix::fs::symlink("/usr/bin/true", d.join("bin/opencode")).expect("link");
    let (out, v) = stage("opencode", &exe, &d, "--yes");
    refused(&out, &v, "stage_entry_point_exists");
    assert_eq!(
        std::fs::read_link(d.join("bin/opencode")).expect("link"),
        Path::new("/usr/bin/true"),
        "left as it was"
    );
    // A dry run says so too.
    let (out, v) = stage("opencode", &exe, &d, "--dry-run");
    refused(&out, &v, "stage_entry_point_exists");
}

#[test]
fn an_unsafe_directory_or_ancestor_is_refused() {
    let src = tempfile::tempdir().expect("tempdir");
    let exe = fake_opencode(src.path());
    let t = Dir::new("unsafe");
    let d = t.0.join("group-writable");
    std::fs::create_dir(&d).expect("mkdir");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o775)).expect("chmod");
    let (out, v) = stage("opencode", &exe, &d, "--yes");
    refused(&out, &v, "stage_directory_unsafe");
    // A missing D under a group-writable ancestor.
    let (out, v) = stage("opencode", &exe, &d.join("a/b"), "--yes");
    refused(&out, &v, "stage_directory_unsafe");
    assert!(!d.join("a").exists());
    // /tmp's sticky world-writable mode fails the rule as well.
    let (out, v) = stage("opencode", &exe, &src.path().join("d"), "--dry-run");
    refused(&out, &v, "stage_directory_unsafe");
}

#[test]
fn a_link_escaping_the_closure_is_refused() {
    let src = tempfile::tempdir().expect("tempdir");
    let exe = fake_opencode(src.path());
    std::os::unix::fs::symlink(
        "../../../../../etc/passwd",
        exe.parent().expect("bin").join("escape"),
    )
    .expect("link");
    let t = Dir::new("escape");
    let d = t.0.join("harnesses");
    let (out, v) = stage("opencode", &exe, &d, "--yes");
    refused(&out, &v, "stage_link_escapes");
    assert!(
        !d.join("store").exists() || std::fs::read_dir(d.join("store")).expect("ls").count() == 0
    );
    // An absolute link is refused as well.
    std::fs::remove_file(exe.parent().expect("bin").join("escape")).expect("rm");
    std::os::unix::fs::symlink("/etc", exe.parent().expect("bin").join("abs")).expect("link");
    let (out, v) = stage("opencode", &exe, &d, "--dry-run");
    refused(&out, &v, "stage_link_escapes");
}

#[test]
fn a_source_in_a_harness_home_is_refused() {
    let home = tempfile::tempdir().expect("tempdir");
    let exe = fake_opencode(&home.path().join(".opencode"));
    let t = Dir::new("home");
    let (out, v) = stage_with_env(
        "opencode",
        &exe,
        &t.0.join("harnesses"),
        Some("--dry-run"),
        &[("HOME", home.path().as_os_str())],
    );
    refused(&out, &v, "stage_source_in_harness_home");
}

#[test]
fn neither_dry_run_nor_yes_is_refused_and_bad_arguments_have_codes() {
    let src = tempfile::tempdir().expect("tempdir");
    let exe = fake_opencode(src.path());
    let t = Dir::new("flags");
    let d = t.0.join("harnesses");
    let (out, v) = stage_with_env("opencode", &exe, &d, None, &[]);
    refused(&out, &v, "cli_invalid_argument");
    let (out, v) = stage("nonesuch", &exe, &d, "--dry-run");
    refused(&out, &v, "cli_invalid_argument");
    let (out, v) = stage("opencode", Path::new("relative/x"), &d, "--dry-run");
    refused(&out, &v, "stage_source_invalid");
    // codex's layout does not hold an opencode binary.
    let (out, v) = stage("codex", &exe, &d, "--dry-run");
    refused(&out, &v, "stage_source_invalid");
    assert!(!d.exists());
}

/// All five into one directory (copilot's closure with its cache is about
/// 440 MB, so this is done once), twice, then detected and run.
#[test]
fn every_pinned_harness_stages_into_one_directory_detect_calls_safe_and_each_runs_contained() {
    let Some(nm) = common::harnesses() else {
        return;
    };
    if !common::need(common::sandbox_ok(common::As::Caller), "the sandbox") {
        return;
    }
    let t = Dir::new("harnesses");
    let d = t.0.join("harnesses");
    // Each source form at least once: a .bin entry, the node_modules root,
    // the real executable.
    let cases: &[(&str, &str, &str, PathBuf)] = &[
        ("codex", "codex", "@openai/codex", nm.clone()),
        (
            "claude-code",
            "claude",
            "@anthropic-ai/claude-code",
            nm.join(".bin/claude"),
        ),
        (
            "opencode",
            "opencode",
            "opencode-ai",
            nm.join("opencode-linux-x64/bin/opencode"),
        ),
        (
            "pi",
            "pi",
            "@mariozechner/pi-coding-agent",
            nm.join(".bin/pi"),
        ),
        (
            "copilot",
            "copilot",
            "@github/copilot",
            nm.join("@github/copilot-linux-x64/copilot"),
        ),
    ];
    let pins = common::harness_pins();
    let (out, dry) = stage("codex", &nm, &d, "--dry-run");
    assert!(out.status.success(), "{dry}");
    assert!(!d.exists(), "a dry run wrote {}", d.display());
    let mut reports = Vec::new();
    for (rt, _, package, source) in cases {
        let r = staged(rt, source, &d);
        assert_eq!(r["version"], pins[*package], "{rt}: {r}");
        assert_eq!(r["already_stored"], false, "{rt}: {r}");
        if *rt == "codex" {
            assert_eq!(r["digest"], dry["digest"], "the dry run's digest");
        }
        reports.push(r);
    }
    // Again: the same digests, nothing rewritten.
    for ((rt, _, _, source), first) in cases.iter().zip(&reports) {
        let again = staged(rt, source, &d);
        assert_eq!(again["digest"], first["digest"], "{rt}");
        assert_eq!(again["already_stored"], true, "{rt}: {again}");
        assert_eq!(again["entry_point_existed"], true, "{rt}: {again}");
    }

    let found = detect(&d.join("bin"));
    assert_eq!(found["search_path_safe"], true, "{found}");
    for ((rt, name, package, _), r) in cases.iter().zip(&reports) {
        let f = found["runtimes"]
            .as_array()
            .expect("runtimes")
            .iter()
            .find(|x| x["runtime"] == *rt)
            .expect("listed");
        assert_eq!(f["installed"], true, "{rt}: {f}");
        assert_eq!(f["version"], pins[*package], "{rt}: {f}");
        assert_eq!(f["executable_safe"], true, "{rt}: {f}");
        assert_eq!(f["problems"], serde_json::json!([]), "{rt}: {f}");
        assert_eq!(f["executable"], r["executable"], "{rt}: {f}");

        // Contained, with only D bound read-only and the environment the
        // report suggests (pi: the staged node first on PATH; copilot: the
        // staged package cache).
        let entry = d.join("bin").join(name);
        let mut args = vec!["exec", "--json", "--ro-bind", s(&d)];
        let env: Vec<String> = r["environment"]
            .as_array()
            .expect("environment")
            .iter()
            .map(|e| e.as_str().expect("entry").to_owned())
            .collect();
        for e in &env {
            args.extend(["--env", e.as_str()]);
        }
        args.push("--");
        let node = format!("{}/node/bin/node", r["store"].as_str().expect("store"));
        if *rt == "pi" {
            args.push(&node);
        }
        args.extend([s(&entry), "--version"]);
        let out = common::glove(common::As::Caller, &args, None);
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let (outcome, _) = common::outcome(&out);
        assert_eq!(outcome["exit"]["code"], 0, "{rt}: {printed}");
        let version = pins[*package].as_str().expect("pin");
        assert!(
            printed.contains(version),
            "{rt} printed no {version}: {printed}"
        );
        // Nothing written: copilot's cache is used read-only.
        if *rt == "copilot" {
            assert_eq!(outcome["usage"]["disk_bytes"], 0, "{rt}: {outcome}");
        }
    }
}

/// Review 2, H2: the closure was listed, then hashed and copied by path,
/// with only the last component opened without following links. The tree's
/// owner swaps a directory for a link after the listing and a file of the
/// listed size elsewhere (here a root-only 0600 file in a 0700 directory,
/// standing for /etc/shadow) was copied into the store at mode 0644. Now
/// every file is reopened beneath a held descriptor, one component at a
/// time without following links, and its dev:ino, size and mtime compared
/// with the listing's: the stage fails whenever the swap lands, and the
/// secret never reaches the store. (A sparse 1 GiB file listed first widens
/// the window; the swap may also land before the listing, then the link is
/// refused as absolute.) The deterministic version is the unit test
/// `closure::tests::a_directory_swapped_for_a_link_after_the_listing_is_a_change`.
#[test]
fn review2_a_directory_swapped_after_the_listing_never_stages_a_root_only_file() {
    let src = tempfile::tempdir().expect("tempdir");
    let exe = fake_opencode(src.path());
    let pkg = exe
        .parent()
        .and_then(Path::parent)
        .expect("pkg")
        .to_path_buf();
    let vault = tempfile::tempdir().expect("vault");
    std::fs::set_permissions(vault.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let secret = vault.path().join("secret");
    let body = b"root-only secret: hunter2\n";
    std::fs::write(&secret, body).expect("write");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::create_dir(pkg.join("z")).expect("mkdir");
    std::fs::write(pkg.join("z/secret"), vec![b'x'; body.len()]).expect("write");
    let big = std::fs::File::create(pkg.join("a-big")).expect("big");
    big.set_len(1 << 30).expect("sparse 1 GiB");
    drop(big);
    let t = Dir::new("review-swap");
    let d = t.0.join("D");
    let (pz, vault_p) = (pkg.join("z"), vault.path().to_path_buf());
    let swapper = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(400));
        std::fs::rename(&pz, pz.with_file_name("z-old")).expect("move decoy");
        std::os::unix::fs::symlink(&vault_p, &pz).expect("link");
    });
    let (out, v) = stage("opencode", &exe, &d, "--yes");
    swapper.join().expect("swapper");
    let stored = d.join("store");
    let leaked = walk_files(&stored)
        .into_iter()
        .any(|f| std::fs::read(&f).is_ok_and(|b| b == body));
    assert!(!leaked, "the root-only file reached the store: {v}");
    assert!(!out.status.success(), "the swap is noticed: {v}");
    let code = v["code"].as_str().expect("code");
    assert!(
        ["stage_source_changed", "stage_link_escapes"].contains(&code),
        "{v}"
    );
}

fn walk_files(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(d) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => out.extend(walk_files(&p)),
            Ok(m) if m.is_file() => out.push(p),
            _ => {}
        }
    }
    out
}

/// Review 2, H2: the store is world-readable and bound into sandboxes, so
/// a source file nobody else may read (or a directory nobody else may
/// search) is refused rather than widened to 0644.
#[test]
fn review2_a_source_file_or_directory_not_world_readable_is_refused() {
    let src = tempfile::tempdir().expect("tempdir");
    let exe = fake_opencode(src.path());
    let pkg = exe
        .parent()
        .and_then(Path::parent)
        .expect("pkg")
        .to_path_buf();
    let t = Dir::new("unreadable");
    let d = t.0.join("D");
    let secret = pkg.join("secret");
    std::fs::write(&secret, b"x").expect("write");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let (out, v) = stage("opencode", &exe, &d, "--dry-run");
    refused(&out, &v, "stage_source_not_readable");
    let (out, v) = stage("opencode", &exe, &d, "--yes");
    refused(&out, &v, "stage_source_not_readable");
    std::fs::remove_file(&secret).expect("rm");
    let private = pkg.join("private");
    std::fs::create_dir(&private).expect("mkdir");
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o750)).expect("chmod");
    let (out, v) = stage("opencode", &exe, &d, "--dry-run");
    refused(&out, &v, "stage_source_not_readable");
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let (out, v) = stage("opencode", &exe, &d, "--dry-run");
    assert!(out.status.success(), "{v}");
}

/// A fake copilot install whose platform "binary" is a small C program:
/// it writes `marker` (an absolute host path) if it can, then, as the real
/// one does in extract-only mode, a complete cache for 9.9.9 under
/// `$COPILOT_PKG_CACHE_HOME`, with its uid and whether `/proc/self/exe` is
/// the staged copy beside it.
/// Returns the program, or `None` without a C compiler.
fn fake_copilot(root: &Path, marker: &Path) -> Option<PathBuf> {
    let nm = root.join("node_modules");
    let p = nm.join("@github/copilot-linux-x64");
    std::fs::create_dir_all(&p).expect("mkdir");
    std::fs::write(
        p.join("package.json"),
        r#"{"name":"@github/copilot-linux-x64","version":"9.9.9"}"#,
    )
    .expect("write");
    std::fs::create_dir_all(nm.join("@github/copilot")).expect("mkdir");
    std::fs::write(
        nm.join("@github/copilot/package.json"),
        r#"{"name":"@github/copilot","version":"9.9.9"}"#,
    )
    .expect("write");
    let c = root.join("evil.c");
    let program = r#"#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(void) {
  FILE *f = fopen("MARKER", "w");
  if (f) { fprintf(f, "uid=%d\n", (int)getuid()); fclose(f); }
  char exe[4096]; ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n < 0 ? 0 : n] = 0;
  const char *c = getenv("COPILOT_PKG_CACHE_HOME");
  if (!c) return 2;
  char cmd[12288];
  snprintf(cmd, sizeof cmd, "d='%s/pkg/linux-x64/9.9.9' && mkdir -p \"$d\" && cd \"$d\" && "
           "touch .extraction-complete index.js app.js cli-main.js && id -u > ran-as && "
           "case '%s' in */store/.tmp-*/node_modules/@github/copilot-linux-x64/copilot) "
           "echo staged-copy;; *) echo '%s';; esac > exe", c, exe, exe);
  return system(cmd) == 0 ? 0 : 1;
}
"#;
    std::fs::write(&c, program.replace("MARKER", s(marker))).expect("write c");
    let exe = p.join("copilot");
    let built = std::process::Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(&c)
        .status()
        .is_ok_and(|st| st.success());
    built.then_some(exe)
}

/// Review 2, H1: staging copilot ran the platform binary found in the
/// (untrusted) npm tree, uncontained, as the operator, even in a dry run.
/// Now a dry run runs nothing (and says the cache is pending), and `--yes`
/// runs the staged copy, inside the sandbox: the host marker never
/// appears, and the cache it made is in the store.
#[test]
fn review2_staging_copilot_never_runs_the_source_binary_on_the_host() {
    let src = tempfile::tempdir().expect("tempdir");
    let t = Dir::new("review-copilot");
    // Not under /tmp: inside the sandbox /tmp is its own tmpfs.
    let marker = t.0.join("ran-on-the-host");
    let Some(exe) = fake_copilot(src.path(), &marker) else {
        assert!(!common::required(), "no C compiler (cc)");
        eprintln!("skipping: no C compiler (cc)");
        return;
    };
    let d = t.0.join("D");
    let (out, dry) = stage("copilot", &exe, &d, "--dry-run");
    assert!(out.status.success(), "{dry}");
    assert!(!marker.exists(), "a dry run ran the source binary");
    assert_eq!(dry["package_cache_pending"], true, "{dry}");
    assert_eq!(dry["files"], 3, "without the cache: {dry}");
    assert!(!d.exists(), "a dry run wrote {}", d.display());

    if !common::need(common::sandbox_ok(common::As::Caller), "the sandbox") {
        return;
    }
    let (out, v) = stage("copilot", &exe, &d, "--yes");
    assert!(out.status.success(), "{v}");
    assert!(!marker.exists(), "the binary ran on the host");
    assert_eq!(v["package_cache_pending"], false, "{v}");
    assert_ne!(v["digest"], dry["digest"], "the cache is in the digest");
    let store = PathBuf::from(v["store"].as_str().expect("store"));
    let cache = store.join("pkg-cache/pkg/linux-x64/9.9.9");
    assert!(cache.join(".extraction-complete").is_file(), "{v}");
    let uid = std::fs::read_to_string(cache.join("ran-as")).expect("ran-as");
    assert_ne!(uid.trim(), "0", "contained, not as root");
    // The staged copy ran (in the temporary store directory), not the
    // source's (the fake says which, without the random name, so that the
    // cache and the digest are the same each time).
    let ran = std::fs::read_to_string(cache.join("exe")).expect("exe");
    assert_eq!(ran.trim(), "staged-copy");
    assert_eq!(
        v["environment"][0],
        format!("COPILOT_PKG_CACHE_HOME={}/pkg-cache", s(&store))
    );
    // Again: the same digest, verified.
    let (out, again) = stage("copilot", &exe, &d, "--yes");
    assert!(out.status.success(), "{again}");
    assert_eq!(again["digest"], v["digest"]);
    assert_eq!(again["already_stored"], true, "{again}");
    assert_eq!(again["entry_point_existed"], true, "{again}");
}

/// A staged copilot whose extraction fails is `stage_copilot_cache`, and
/// leaves no temporary directory behind.
#[test]
fn a_failing_copilot_extraction_is_stage_copilot_cache() {
    let src = tempfile::tempdir().expect("tempdir");
    let t = Dir::new("copilot-fails");
    let Some(exe) = fake_copilot(src.path(), &t.0.join("m")) else {
        assert!(!common::required(), "no C compiler (cc)");
        return;
    };
    // Made a copilot that exits 1 without extracting.
    std::fs::copy("/usr/bin/false", &exe).expect("copy");
    if !common::need(common::sandbox_ok(common::As::Caller), "the sandbox") {
        return;
    }
    let d = t.0.join("D");
    let (out, v) = stage("copilot", &exe, &d, "--yes");
    refused(&out, &v, "stage_copilot_cache");
    let left: Vec<_> = std::fs::read_dir(d.join("store")).expect("store").collect();
    assert!(left.is_empty(), "{left:?}");
}
