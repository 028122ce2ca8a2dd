//! The vectors in `docs/digests.md` are recomputed here.

use glove_types::bundle::{expand_skills, LibraryBundle};
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
    out.push_str("<!-- vectors:end -->\n");
    out
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
