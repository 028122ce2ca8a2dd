//! The vectors in `docs/digests.md` are recomputed here.

use glove_types::bundle::{expand_skills, LibraryBundle};
use glove_types::manifest::{Entry, EntryKind, Manifest};
use glove_types::plan::{admit, DecodedPlan};
use glove_types::policy::{adapter_command_digest, ValidatedPolicy};
use glove_types::Sha256Digest;

fn vectors() -> String {
    let mut out = String::from("<!-- vectors:begin -->\n| vector | value |\n| --- | --- |\n");
    let mut row = |name: &str, v: String| out.push_str(&format!("| {name} | `{v}` |\n"));
    row(
        "`sha256(\"abc\")` (sanity)",
        Sha256Digest::of(b"abc").to_hex(),
    );
    row(
        "`sha256_domain(\"glove.test\", \"abc\")`",
        Sha256Digest::of_domain("glove.test", b"abc").to_hex(),
    );
    for (file, id) in [
        ("policy.json", "codex-safe"),
        ("policy.json", "codex-staged"),
        ("cloudflare-os-session-policy.json", "cloudflare-os-dev"),
    ] {
        let p = ValidatedPolicy::from_json(&crate::example(file)).expect("policy");
        let t = p.template(id).expect("template");
        let d = adapter_command_digest(t.runtime_id().as_str(), t.launch()).expect("digest");
        assert_eq!(&d, t.adapter_command_digest());
        row(
            &format!("adapter_command_digest of `{id}` ({file})"),
            d.to_hex(),
        );
    }
    let raw = crate::example("plan.json");
    let policy = ValidatedPolicy::from_json(&crate::example("policy.json")).expect("policy");
    let a = admit(
        DecodedPlan::decode(&raw).expect("plan"),
        None,
        &policy,
        crate::plan::NOW,
    )
    .expect("admit");
    row(
        "plan_content_digest of plan.json",
        a.plan_content_digest().to_hex(),
    );
    row(
        "controller_plan_digest of plan.json",
        a.controller_plan_digest().to_hex(),
    );
    row(
        "plan_context_digest of plan.json",
        a.plan_context_digest().to_hex(),
    );
    let bundle = crate::example("library-bundle.json");
    row(
        "sha256 of library-bundle.json",
        Sha256Digest::of(&bundle).to_hex(),
    );
    let b = LibraryBundle::verify(&bundle, &Sha256Digest::of(&bundle)).expect("bundle");
    row(
        "skill_expansion_digest of library-bundle.json under `/home/agent/.codex/skills`",
        expand_skills(&[&b], "/home/agent/.codex/skills")
            .expect("expansion")
            .digest()
            .to_hex(),
    );
    row(
        "workspace manifest digest of the tree in \"Workspace manifest\"",
        workspace_manifest().digest().expect("digest").to_hex(),
    );
    let auth =
        glove_types::apply::ApplyAuthorization::decode(&crate::example("apply-authorization.json"))
            .expect("authorization");
    row(
        "authorization_digest of apply-authorization.json",
        auth.digest().to_hex(),
    );
    out.push_str("<!-- vectors:end -->\n");
    out
}

/// The discovery-mode adapter digest from the written definition alone
/// (`docs/digests.md`): SHA-256 over the domain, a zero byte and the
/// canonical JSON of exactly these members, keys sorted, no whitespace.
#[test]
fn discovery_adapter_digest_from_the_definition() {
    use sha2::{Digest, Sha256};
    let c = br#"{"arguments":["exec","--skip-git-repo-check"],"environment":["PATH=/usr/bin:/bin"],"executable_search_paths":["/opt/glove/harnesses/codex/bin"],"read_only_paths":["/opt/glove/harnesses/codex/store"],"runtime_discovery":"codex","runtime_id":"codex"}"#;
    let mut h = Sha256::new();
    h.update(b"glove.adapter-command.v1");
    h.update([0u8]);
    h.update(c);
    let want: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let p = ValidatedPolicy::from_json(&crate::example("policy.json")).expect("policy");
    let t = p.template("codex-staged").expect("template");
    assert_eq!(t.adapter_command_digest().to_hex(), want);
    let doc = std::fs::read_to_string(crate::repo_root().join("docs/digests.md")).expect("doc");
    assert!(doc.contains(&want), "docs/digests.md lacks {want}");
}

/// `authorization_digest` from the written definition alone: SHA-256 over
/// the domain, a zero byte and the authorization's canonical bytes (which
/// are also the Ed25519 signed message).
#[test]
fn authorization_digest_from_the_definition() {
    use sha2::{Digest, Sha256};
    let bytes = crate::example("apply-authorization.json");
    let mut h = Sha256::new();
    h.update(b"glove.apply-authorization-v1\0");
    h.update(&bytes);
    let want: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let a = glove_types::apply::ApplyAuthorization::decode(&bytes).expect("canonical example");
    assert_eq!(a.digest().to_hex(), want);
    assert_eq!(a.canonical_bytes(), bytes.as_slice());
    let mut msg = b"glove.apply-authorization-v1\0".to_vec();
    msg.extend_from_slice(&bytes);
    assert_eq!(a.signed_message(), msg);
}

#[test]
fn docs_digest_vectors_in_step() {
    let path = crate::repo_root().join("docs/digests.md");
    let doc = std::fs::read_to_string(&path).expect("docs/digests.md");
    let want = vectors();
    let (Some(b), Some(e)) = (
        doc.find("<!-- vectors:begin -->"),
        doc.find("<!-- vectors:end -->\n"),
    ) else {
        panic!("docs/digests.md lacks the vector markers");
    };
    let current = &doc[b..e + "<!-- vectors:end -->\n".len()];
    if std::env::var_os("GLOVE_BLESS").is_some() {
        std::fs::write(&path, doc.replace(current, &want)).expect("write");
        return;
    }
    assert_eq!(
        current, want,
        "docs/digests.md vectors are stale; rerun with GLOVE_BLESS=1"
    );
}

/// The tree of the "Workspace manifest" section of `docs/digests.md`.
fn workspace_manifest() -> Manifest {
    let e = |path: &str, kind, mode, body: Option<&[u8]>| Entry {
        path: path.into(),
        kind,
        mode,
        size: body.map_or(0, |b| b.len() as u64),
        digest: body.map(Sha256Digest::of),
        hardlink: false,
        sparse: false,
        xattr: false,
    };
    Manifest::new(
        0o755,
        vec![
            e("a.txt", EntryKind::File, 0o644, Some(b"abc")),
            e("bin", EntryKind::Dir, 0o755, None),
            e("bin/run", EntryKind::File, 0o755, Some(b"#!/bin/sh\n")),
            e("bin/link", EntryKind::Symlink, 0o777, Some(b"../a.txt")),
        ],
    )
    .expect("manifest")
}

/// The workspace manifest digest from the written definition alone.
#[test]
fn workspace_manifest_digest_from_the_definition() {
    use sha2::{Digest, Sha256};
    let hex = |b: &[u8]| -> String {
        Sha256::digest(b)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let f = |path: &str, kind: &str, mode: u32, body: Option<&[u8]>| {
        let digest = body.map_or("null".to_string(), |b| format!("\"{}\"", hex(b)));
        let size = body.map_or(0, <[u8]>::len);
        format!(
            r#"{{"digest":{digest},"hardlink":false,"kind":"{kind}","mode":{mode},"path":"{path}","size":{size},"sparse":false,"xattr":false}}"#
        )
    };
    let c = format!(
        r#"{{"entries":[{},{},{},{}],"format":"glove.workspace-manifest-v1","root_mode":493}}"#,
        f("a.txt", "file", 0o644, Some(b"abc")),
        f("bin", "dir", 0o755, None),
        f("bin/link", "symlink", 0o777, Some(b"../a.txt")),
        f("bin/run", "file", 0o755, Some(b"#!/bin/sh\n")),
    );
    let m = workspace_manifest();
    assert_eq!(m.canonical_bytes().expect("bytes"), c.as_bytes());
    let mut h = Sha256::new();
    h.update(b"glove.workspace-manifest-v1");
    h.update([0u8]);
    h.update(c.as_bytes());
    let want: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(m.digest().expect("digest").to_hex(), want);
    assert_eq!(Manifest::decode(c.as_bytes()).expect("decode"), m);
}
