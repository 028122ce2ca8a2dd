//! The five agent harnesses from the npm registry, at the versions pinned in
//! `harnesses/package.json` (and its lock), run contained by `glove exec`:
//! each real executable (not the npm `bin` wrapper) prints its version and
//! its help inside the default sandbox with one read-only bind of the
//! package tree, offline.
//!
//! `.ci/run` installs them outside the repo and sets `GLOVE_HARNESSES` to
//! the `node_modules` directory. Without it the test says why and skips,
//! and fails under `GLOVE_REQUIRE_SANDBOX=1`.

#[path = "common/mod.rs"]
mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};

/// A harness: its npm package, and the file that really runs (relative to
/// `node_modules`) with the interpreter it needs, if any.
struct Harness {
    package: &'static str,
    executable: &'static str,
    interpreter: Option<&'static str>,
}

const HARNESSES: &[Harness] = &[
    Harness {
        package: "@openai/codex",
        executable: "@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex",
        interpreter: None,
    },
    Harness {
        package: "@anthropic-ai/claude-code",
        executable: "@anthropic-ai/claude-code-linux-x64/claude",
        interpreter: None,
    },
    Harness {
        package: "opencode-ai",
        executable: "opencode-linux-x64/bin/opencode",
        interpreter: None,
    },
    Harness {
        package: "@mariozechner/pi-coding-agent",
        executable: "@mariozechner/pi-coding-agent/dist/cli.js",
        interpreter: Some("/usr/bin/node"),
    },
    Harness {
        package: "@github/copilot",
        executable: "@github/copilot-linux-x64/copilot",
        interpreter: None,
    },
];

#[test]
fn every_pinned_harness_prints_its_version_contained() {
    let Some(nm) = common::harnesses() else {
        return;
    };
    if !common::need(common::sandbox_ok(common::As::Caller), "the sandbox") {
        return;
    }
    let pins = common::harness_pins();
    assert_eq!(pins.len(), HARNESSES.len(), "one pin per harness");
    let nm_s = nm.to_str().expect("utf-8 path");
    for h in HARNESSES {
        let version = pins[h.package].as_str().expect("pinned version");
        // The installed package is the pinned one.
        let pkg: Value = serde_json::from_slice(
            &std::fs::read(nm.join(h.package).join("package.json")).expect("package.json"),
        )
        .expect("json");
        assert_eq!(pkg["version"], version, "{}", h.package);
        let exe = nm.join(h.executable);
        assert!(
            Path::new(&exe).is_file(),
            "{} has no {}",
            h.package,
            h.executable
        );
        let exe_s = exe.to_str().expect("utf-8 path");
        let mut args = vec!["exec", "--json", "--ro-bind", nm_s, "--"];
        if let Some(i) = h.interpreter {
            args.push(i);
        }
        args.extend([exe_s, "--version"]);
        let out = common::glove(common::As::Caller, &args, None);
        // Some print their version on stderr (pi).
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let (outcome, _) = common::outcome(&out);
        assert_eq!(outcome["exit"]["code"], 0, "{}: {printed}", h.package);
        assert!(
            printed.contains(version),
            "{} printed no {version}: {printed}",
            h.package
        );
        assert_eq!(outcome["ended_by"], Value::Null, "{}: {outcome}", h.package);
        // And its help, in the same sandbox.
        let help_args: Vec<&str> = args
            .iter()
            .map(|a| if *a == "--version" { "--help" } else { *a })
            .collect();
        let out = common::glove(common::As::Caller, &help_args, None);
        let (outcome, _) = common::outcome(&out);
        assert_eq!(
            outcome["exit"]["code"], 0,
            "{} --help: {outcome}",
            h.package
        );
        assert_eq!(
            outcome["ended_by"],
            Value::Null,
            "{} --help: {outcome}",
            h.package
        );
        assert!(
            outcome["usage"]["terminal_bytes"].as_u64().unwrap_or(0) > 200,
            "{} --help printed almost nothing: {outcome}",
            h.package
        );
    }
}

#[test]
fn detect_finds_every_pinned_harness_in_the_npm_bin_directory_and_each_runs_contained() {
    let Some(nm) = common::harnesses() else {
        return;
    };
    if !common::need(common::sandbox_ok(common::As::Caller), "the sandbox") {
        return;
    }
    let bin = nm.join(".bin");
    let out = common::glove(
        common::As::Caller,
        &[
            "policy",
            "detect",
            "--json",
            "--search-path",
            bin.to_str().expect("utf-8"),
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(d["search_path_safe"], true, "{d}");
    let pins = common::harness_pins();
    let runtimes = d["runtimes"].as_array().expect("runtimes");
    assert_eq!(runtimes.len(), 5);
    let nm_s = nm.to_str().expect("utf-8");
    for r in runtimes {
        let rt = r["runtime"].as_str().expect("runtime");
        assert_eq!(r["installed"], true, "{rt}: {r}");
        let package = r["package"].as_str().expect("package");
        assert_eq!(r["version"], pins[package], "{rt}: {r}");
        assert_eq!(r["executable_safe"], true, "{rt}: {r}");
        assert_eq!(r["problems"], serde_json::json!([]), "{rt}: {r}");
        let exe = r["executable"].as_str().expect("executable");
        // What detect found is what runs: its version, contained.
        let mut args = vec!["exec", "--json", "--ro-bind", nm_s, "--"];
        match (rt, r["executable_kind"].as_str()) {
            ("pi", Some("script")) => {
                assert!(
                    r["interpreter"]
                        .as_str()
                        .is_some_and(|i| i.ends_with("node")),
                    "{r}"
                );
                args.push("/usr/bin/node");
            }
            (_, Some("elf")) => {}
            other => panic!("{rt}: unexpected kind {other:?}: {r}"),
        }
        args.extend([exe, "--version"]);
        let out = common::glove(common::As::Caller, &args, None);
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let version = pins[package].as_str().expect("pin");
        assert!(
            printed.contains(version),
            "{rt} printed no {version}: {printed}"
        );
        // And `policy generate` makes a template of it that a policy takes.
        if r["executable_kind"] == "elf" {
            let out = common::glove(
                common::As::Caller,
                &[
                    "policy",
                    "generate",
                    "--runtime",
                    rt,
                    "--executable",
                    exe,
                    "--template-id",
                    "gen",
                ],
                None,
            );
            let entry: Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|_| panic!("{rt}: {}", String::from_utf8_lossy(&out.stderr)));
            // The executable's own tree may not be a read-only path of its
            // template (it would overlap the pinned executable).
            assert_eq!(entry["launch"]["executable_path"], exe, "{rt}: {entry}");
            let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
            let mut policy: Value = serde_json::from_slice(
                &std::fs::read(root.join("docs/examples/policy.json")).expect("policy"),
            )
            .expect("json");
            policy["runtime_templates"] = Value::Array(vec![entry]);
            let t = tempfile::tempdir().expect("tempdir");
            let p = t.path().join("policy.json");
            std::fs::write(&p, serde_json::to_vec(&policy).expect("json")).expect("write");
            std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .expect("chmod");
            let v = common::glove(
                common::As::Caller,
                &["policy", "validate", "--file", p.to_str().expect("utf-8")],
                None,
            );
            assert_eq!(
                v.status.code(),
                Some(0),
                "{rt}: {}",
                String::from_utf8_lossy(&v.stderr)
            );
        }
    }
}
