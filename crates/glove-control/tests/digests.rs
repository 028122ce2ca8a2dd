//! The launch-binding vector in `docs/digests.md`, recomputed from
//! `docs/examples/launch-spec.json` and `docs/examples/launch-prepared.json`
//! two ways: through the runtime's own `launch_binding`, and from the
//! definition in the docs (domain, document shape) with nothing of the
//! runtime's. `GLOVE_BLESS=1` rewrites the table.

use glove_control::managed::{launch_binding, LAUNCH_DOCUMENT_TAG};
use glove_sandbox::launch::PreparedFacts;
use glove_sandbox::wire::SpecWire;
use glove_types::Sha256Digest;
use serde_json::{json, Value};
use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn example(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(repo().join("docs/examples").join(name)).expect("read"))
        .expect("json")
}

#[test]
fn the_launch_binding_vector_matches_its_definition() {
    let spec_v = example("launch-spec.json");
    let prepared_v = example("launch-prepared.json");
    let spec: SpecWire = serde_json::from_value(spec_v.clone()).expect("a launch spec");
    let prepared: PreparedFacts =
        serde_json::from_value(prepared_v.clone()).expect("prepared facts");
    let ours = launch_binding(&spec, &prepared).expect("binding").digest();

    // The definition, independently: the canonical document under the
    // lifecycle's launch-binding domain.
    let doc = json!({"binding": "glove.control.launch.v1", "prepared": prepared_v, "spec": spec_v});
    assert_eq!(LAUNCH_DOCUMENT_TAG, "glove.control.launch.v1");
    let bytes = glove_types::canon::to_canonical(&doc).expect("canonical");
    let by_definition = Sha256Digest::of_domain("glove.lifecycle.launch-binding.v1", &bytes);
    assert_eq!(
        ours, by_definition,
        "the runtime computes what docs/digests.md defines"
    );

    // Any change to the spec or the prepared facts changes the binding.
    let mut other = spec.clone();
    other.arguments.push("x".into());
    assert_ne!(
        launch_binding(&other, &prepared).expect("binding").digest(),
        ours
    );
    let mut moved = prepared.clone();
    if let Some(g) = moved.grants.first_mut() {
        g.ino = g.ino.map(|i| i + 1);
    }
    assert_ne!(
        launch_binding(&spec, &moved).expect("binding").digest(),
        ours
    );

    let table = format!(
        "<!-- launch-vectors:begin -->\n| vector | value |\n| --- | --- |\n| launch_binding of launch-spec.json with launch-prepared.json | `{}` |\n<!-- launch-vectors:end -->",
        ours.to_hex()
    );
    let path = repo().join("docs/digests.md");
    let text = std::fs::read_to_string(&path).expect("docs/digests.md");
    let (Some(a), Some(b)) = (
        text.find("<!-- launch-vectors:begin -->"),
        text.find("<!-- launch-vectors:end -->"),
    ) else {
        panic!("docs/digests.md lacks the launch vector markers");
    };
    let current = &text[a..b + "<!-- launch-vectors:end -->".len()];
    if current != table {
        if std::env::var("GLOVE_BLESS").is_ok_and(|v| v == "1") {
            std::fs::write(&path, text.replace(current, &table)).expect("write");
        } else {
            panic!("docs/digests.md launch vector is stale; rerun with GLOVE_BLESS=1:\n{table}");
        }
    }
}

/// Writes the example files from a spec the runtime builds (run by hand
/// with `GLOVE_WRITE_LAUNCH_EXAMPLES=1` when the spec format changes).
#[test]
fn write_launch_examples_on_request() {
    if std::env::var("GLOVE_WRITE_LAUNCH_EXAMPLES").ok().as_deref() != Some("1") {
        return;
    }
    let mut spec = SpecWire::from_spec(
        &glove_sandbox::profile::exec_spec(glove_sandbox::profile::ExecRequest::new(vec![
            "/usr/bin/true".into(),
        ]))
        .expect("spec"),
    )
    .expect("wire");
    spec.grants = vec![glove_sandbox::spec::Grant {
        host_path: "/srv/work/sage-protocol".into(),
        target: "/workspace".into(),
        mode: glove_sandbox::spec::GrantMode::EphemeralCopy { max_bytes: 2097152 },
        create_if_missing: false,
    }];
    let prepared = PreparedFacts {
        grants: vec![glove_sandbox::grants::ResolvedGrant {
            target: "/workspace".into(),
            dev: Some(2049),
            ino: Some(131_073),
        }],
        bundles: vec![],
    };
    let w = |name: &str, v: Value| {
        let mut text = serde_json::to_string_pretty(&v).expect("json");
        text.push('\n');
        std::fs::write(repo().join("docs/examples").join(name), text).expect("write");
    };
    w(
        "launch-spec.json",
        serde_json::to_value(&spec).expect("json"),
    );
    w(
        "launch-prepared.json",
        serde_json::to_value(&prepared).expect("json"),
    );
}

/// The closure-digest vector: a small fixed tree (a file, an executable
/// whose 0705 mode normalises to 0755, a link inside, an empty directory),
/// digested by the runtime and again from the definition alone.
#[test]
fn the_stage_closure_vector_matches_its_definition() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().expect("tempdir");
    let r = t.path();
    std::fs::create_dir_all(r.join("bin")).expect("mkdir");
    std::fs::create_dir_all(r.join("empty")).expect("mkdir");
    std::fs::write(r.join("a.txt"), b"abc").expect("write");
    std::fs::write(r.join("bin/run"), b"#!/bin/sh\n").expect("write");
    std::fs::set_permissions(r.join("bin/run"), std::fs::Permissions::from_mode(0o705))
        .expect("chmod");
    std::os::unix::fs::symlink("../a.txt", r.join("bin/link")).expect("link");
    let ours = glove_control::stage::closure_digest(r).expect("digest");

    let sha = |b: &[u8]| Sha256Digest::of(b).to_hex();
    let listing = json!([
        {"kind": "file", "mode": 0o644, "path": "a.txt", "sha256": sha(b"abc"), "size": 3},
        {"kind": "dir", "mode": 0o755, "path": "bin"},
        {"kind": "link", "path": "bin/link", "target": "../a.txt"},
        {"kind": "file", "mode": 0o755, "path": "bin/run", "sha256": sha(b"#!/bin/sh\n"), "size": 10},
        {"kind": "dir", "mode": 0o755, "path": "empty"},
    ]);
    assert_eq!(
        glove_control::stage::closure_listing(r).expect("listing"),
        listing
    );
    let bytes = glove_types::canon::to_canonical(&listing).expect("canonical");
    let by_definition = Sha256Digest::of_domain("glove.stage.closure.v1", &bytes);
    assert_eq!(
        ours, by_definition,
        "the runtime computes what docs/digests.md defines"
    );

    let table = format!(
        "<!-- stage-vectors:begin -->\n| vector | value |\n| --- | --- |\n| closure digest of the tree above | `{}` |\n<!-- stage-vectors:end -->",
        ours.to_hex()
    );
    let path = repo().join("docs/digests.md");
    let text = std::fs::read_to_string(&path).expect("docs/digests.md");
    let (Some(a), Some(b)) = (
        text.find("<!-- stage-vectors:begin -->"),
        text.find("<!-- stage-vectors:end -->"),
    ) else {
        panic!("docs/digests.md lacks the stage vector markers");
    };
    let current = &text[a..b + "<!-- stage-vectors:end -->".len()];
    if current != table {
        if std::env::var("GLOVE_BLESS").is_ok_and(|v| v == "1") {
            std::fs::write(&path, text.replace(current, &table)).expect("write");
        } else {
            panic!("docs/digests.md stage vector is stale; rerun with GLOVE_BLESS=1:\n{table}");
        }
    }
}
