//! `glove policy detect` on layouts made here: what it refuses, what it
//! calls unsafe, and how it reports a partial or non-npm install. (The real
//! npm tree of the five harnesses is in `harnesses.rs`.)

#[path = "common/mod.rs"]
mod common;

use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn detect(dir: &Path) -> Value {
    let out = common::glove(
        common::As::Caller,
        &[
            "policy",
            "detect",
            "--json",
            "--search-path",
            dir.to_str().expect("utf-8"),
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

fn runtime<'a>(d: &'a Value, rt: &str) -> &'a Value {
    d["runtimes"]
        .as_array()
        .expect("runtimes")
        .iter()
        .find(|r| r["runtime"] == rt)
        .expect("runtime listed")
}

#[test]
fn a_relative_or_missing_search_path_is_refused_with_a_code() {
    for bad in [
        "relative/bin",
        "/nonexistent/glove-detect",
        "/usr/../usr/bin",
    ] {
        let out = common::glove(
            common::As::Caller,
            &["policy", "detect", "--json", "--search-path", bad],
            None,
        );
        assert_eq!(out.status.code(), Some(1), "{bad}");
        let v: Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(v["code"], "cli_invalid_argument", "{bad}: {v}");
    }
}

#[test]
fn a_group_writable_search_path_is_not_safe() {
    let t = tempfile::tempdir().expect("tempdir");
    let bin = t.path().join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o775)).expect("chmod");
    let d = detect(&bin);
    assert_eq!(d["search_path_safe"], false);
    let problems: Vec<&str> = d["search_path_problems"]
        .as_array()
        .expect("problems")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        problems
            .iter()
            .any(|p| p.ends_with("/bin is group-writable")),
        "{problems:?}"
    );
    // Nothing is installed there.
    for r in d["runtimes"].as_array().expect("runtimes") {
        assert_eq!(r["installed"], false, "{r}");
    }
}

#[test]
fn a_partial_npm_install_and_a_plain_executable_are_reported_as_they_are() {
    let t = tempfile::tempdir().expect("tempdir");
    let nm = t.path().join("node_modules");
    // codex's npm package without its platform package: a node wrapper only.
    let pkg = nm.join("@openai/codex");
    std::fs::create_dir_all(pkg.join("bin")).expect("mkdir");
    std::fs::write(
        pkg.join("package.json"),
        r#"{"name":"@openai/codex","version":"9.9.9","bin":{"codex":"bin/codex.js"}}"#,
    )
    .expect("write");
    std::fs::write(pkg.join("bin/codex.js"), "#!/usr/bin/env node\n").expect("write");
    let bin = nm.join(".bin");
    std::fs::create_dir(&bin).expect("mkdir");
    std::os::unix::fs::symlink("../@openai/codex/bin/codex.js", bin.join("codex")).expect("link");
    // An ELF that is no npm package, and a dangling link.
    std::fs::copy("/bin/true", bin.join("opencode")).expect("copy");
    std::os::unix::fs::symlink("../nowhere/cli.js", bin.join("pi")).expect("link");
    let d = detect(&bin);

    let codex = runtime(&d, "codex");
    assert_eq!(codex["installed"], true);
    assert_eq!(codex["version"], "9.9.9");
    assert_eq!(codex["executable"], Value::Null, "{codex}");
    assert!(
        codex["problems"][0]
            .as_str()
            .is_some_and(|p| p.contains("@openai/codex-linux-x64 is not installed")),
        "{codex}"
    );

    let opencode = runtime(&d, "opencode");
    assert_eq!(opencode["installed"], true);
    assert_eq!(opencode["executable_kind"], "elf");
    assert_eq!(opencode["version"], Value::Null);
    assert_eq!(
        opencode["problems"],
        serde_json::json!(["no package manifest: version unknown"])
    );

    assert_eq!(runtime(&d, "pi")["installed"], false, "a dangling link");
    assert_eq!(runtime(&d, "claude-code")["installed"], false);
}
