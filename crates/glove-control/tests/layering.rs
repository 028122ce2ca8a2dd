//! The crate layering: every arrow points down, only `glove-bin` uses
//! `glove-control`, and the egress and MCP mediators use only the data and
//! journal crates (README, "Map").

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Each workspace crate's rank: a crate may depend only on lower ranks.
const RANKS: &[(&str, u32)] = &[
    ("glove-fs", 0),
    ("glove-types", 0),
    ("glove-lifecycle", 1),
    ("glove-sandbox", 1),
    ("glove-journal", 2),
    ("glove-egress", 3),
    ("glove-mcp", 3),
    ("glove-control", 4),
    ("glove-bin", 5),
];

/// The shared descriptor-relative file layer: the journals, the control
/// core and the sandbox use it; it uses no Glove crate.
#[test]
fn the_file_layer_is_shared_by_the_journal_the_control_core_and_the_sandbox() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    for krate in ["glove-journal", "glove-control", "glove-sandbox"] {
        let manifest =
            std::fs::read_to_string(root.join(krate).join("Cargo.toml")).expect("manifest");
        assert!(
            deps(&manifest).iter().any(|d| d == "glove-fs"),
            "{krate} does not use glove-fs"
        );
    }
    let manifest = std::fs::read_to_string(root.join("glove-fs/Cargo.toml")).expect("manifest");
    assert!(deps(&manifest).is_empty(), "glove-fs uses a Glove crate");
}

/// The two mediators (egress and MCP) use the data and the journal only:
/// never each other, the sandbox or the control core.
const MEDIATORS: &[&str] = &["glove-egress", "glove-mcp"];

/// The `glove-*` crates named in a manifest's `[dependencies]` table (dev
/// and build dependencies are not arrows of the library).
fn deps(manifest: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_deps = t == "[dependencies]";
            continue;
        }
        if in_deps {
            if let Some(name) = t.split(['=', '.', ' ']).next() {
                if name.starts_with("glove-") {
                    out.push(name.to_owned());
                }
            }
        }
    }
    out
}

#[test]
fn every_dependency_points_down_and_only_the_binaries_use_the_control_crate() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let rank: BTreeMap<&str, u32> = RANKS.iter().copied().collect();
    for (krate, r) in RANKS {
        let manifest =
            std::fs::read_to_string(root.join(krate).join("Cargo.toml")).expect("manifest");
        for d in deps(&manifest) {
            let dr = *rank
                .get(d.as_str())
                .unwrap_or_else(|| panic!("{krate} depends on unknown {d}"));
            assert!(dr < *r, "{krate} (rank {r}) depends on {d} (rank {dr})");
            if d == "glove-control" {
                assert_eq!(*krate, "glove-bin", "only glove-bin uses glove-control");
            }
            if MEDIATORS.contains(krate) {
                assert!(
                    d == "glove-types" || d == "glove-journal",
                    "{krate} uses {d}: the mediators use glove-types and glove-journal only"
                );
            }
        }
    }
    // And the list is complete: every crate directory is ranked.
    for e in std::fs::read_dir(&root).expect("crates") {
        let name = e.expect("entry").file_name().into_string().expect("utf-8");
        assert!(rank.contains_key(name.as_str()), "{name} has no rank");
    }
}

#[test]
fn the_manifest_reader_sees_dependencies() {
    let m = "[package]\nname = \"x\"\n[dependencies]\nglove-types.workspace = true\nglove-journal = { path = \"..\" }\nserde = \"1\"\n[dev-dependencies]\nglove-bin = \"1\"\n";
    assert_eq!(deps(m), ["glove-types", "glove-journal"]);
}

/// The Rust sources under `dir` (recursively), with their paths.
fn sources(dir: &std::path::Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).expect("source");
                out.push((p, text));
            }
        }
    }
    out
}

/// The session's steps live in one place, `glove_control::assembly`: only
/// it starts an egress proxy or an MCP mediator, makes an egress channel,
/// or builds a held sandbox in this process; the doors (`glove exec`,
/// `glove run`, gloved's managed start) reach them through it. And the
/// assembly sits below the managed runtime and the service: it never
/// uses them.
#[test]
fn the_session_steps_live_only_in_the_assembly() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let steps = [
        "glove_egress::start(",
        "SocketServer::start(",
        "egress_channel()",
        "glove_sandbox::prepare(",
        "Broker::prepare(",
    ];
    let assembly = root.join("glove-control/src/assembly");
    for krate in ["glove-control", "glove-bin"] {
        for (path, text) in sources(&root.join(krate).join("src")) {
            if path.starts_with(&assembly) {
                continue;
            }
            for s in steps {
                assert!(
                    !text.contains(s),
                    "{} calls {s}: a session step outside glove_control::assembly",
                    path.display()
                );
            }
        }
    }
    let mut seen = 0;
    for (path, text) in sources(&assembly) {
        seen += 1;
        for above in ["crate::managed", "crate::service", "super::managed"] {
            assert!(
                !text.contains(above),
                "{} uses {above}: the assembly is below the managed runtime",
                path.display()
            );
        }
    }
    assert!(seen >= 4, "the assembly's sources were not found");
    // Both doors go through it.
    for door in [
        "glove-bin/src/exec.rs",
        "glove-control/src/managed/start.rs",
    ] {
        let text = std::fs::read_to_string(root.join(door)).expect("door");
        assert!(
            text.contains("assembly::") || text.contains("Attachments"),
            "{door} does not go through the assembly"
        );
    }
}

/// What only a harness's file may say (issue 27): its runtime id or
/// executable name as a literal, a path in its private home, its managed
/// variables and its model endpoint's variables.
const HARNESS_WORDS: &[&str] = &[
    "\"codex\"",
    "\"claude-code\"",
    "\"claude\"",
    "\"pi\"",
    "\"copilot\"",
    "\"opencode\"",
    "\"/home/agent/.",
    "CODEX_HOME",
    "CLAUDE_CONFIG_DIR",
    "PI_CODING_AGENT_DIR",
    "COPILOT_HOME",
    "ANTHROPIC_",
    "OPENAI_API_KEY",
    "AZURE_OPENAI",
    "OPENCODE_",
];

/// Library sources allowed to name one harness: the I/O behind copilot's
/// package cache (reached through its descriptor), and the demo policy
/// that names a runtime id as sample data.
const HARNESS_WORDS_ALLOWED: &[&str] = &[
    "glove-control/src/stage/copilot.rs",
    "glove-bin/src/demo.rs",
];

/// The source before its unit tests.
fn library_part(text: &str) -> &str {
    text.find("#[cfg(test)]").map_or(text, |i| &text[..i])
}

#[test]
fn harness_knowledge_lives_in_the_harness_files_and_they_do_no_io() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let harness_dir = root.join("glove-types/src/harness");
    let mut files = Vec::new();
    for krate in [
        "glove-types",
        "glove-control",
        "glove-mcp",
        "glove-bin",
        "glove-egress",
    ] {
        files.extend(sources(&root.join(krate).join("src")));
    }
    let mut seen_harness_files = 0;
    for (f, text) in &files {
        let rel = f
            .strip_prefix(&root)
            .expect("under crates")
            .display()
            .to_string();
        if f.starts_with(&harness_dir) {
            seen_harness_files += 1;
            for io in [
                "std::fs",
                "std::process",
                "std::net",
                "std::env",
                "std::io",
                "unsafe",
            ] {
                assert!(
                    !text.contains(io),
                    "{rel} uses {io}: harness files are pure data"
                );
            }
            continue;
        }
        if HARNESS_WORDS_ALLOWED.iter().any(|a| rel.ends_with(a)) {
            continue;
        }
        for (i, line) in library_part(text).lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for w in HARNESS_WORDS {
                assert!(
                    !code.contains(w),
                    "{rel}:{}: {w} belongs in a harness file (crates/glove-types/src/harness/)",
                    i + 1
                );
            }
        }
    }
    assert!(
        seen_harness_files > 1,
        "no harness files under {}",
        harness_dir.display()
    );
}
