//! Library bundles: every refusal has its code, the example round-trips,
//! the skill layout is as documented and the expansion digest in
//! `docs/digests.md` is recomputed from its written definition alone.

use glove_types::bundle::*;
use glove_types::canon::to_canonical;
use glove_types::codes::bundle::*;
use glove_types::codes::json::*;
use glove_types::{ErrorCode, Sha256Digest};
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

const SKILL_DIR: &str = "/home/agent/.codex/skills";

fn example_bytes() -> Vec<u8> {
    crate::example("library-bundle.json")
}

fn example_value() -> Value {
    serde_json::from_slice(&example_bytes()).expect("example JSON")
}

/// The example with one change, canonically encoded.
fn with(f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v = example_value();
    f(&mut v);
    to_canonical(&v).expect("encodable")
}

fn code_of(bytes: &[u8]) -> ErrorCode {
    LibraryBundle::decode(bytes)
        .expect_err("must be refused")
        .code()
}

fn skill_md(name: &str) -> String {
    format!("---\nname: {name}\ndescription: A test skill.\n---\nBody.\n")
}

fn skill(name: &str) -> Value {
    json!({"kind":"skill","name":name,"files":[{"path":"SKILL.md","text":skill_md(name)}]})
}

fn bundle_of(entries: Vec<Value>) -> Vec<u8> {
    to_canonical(&json!({"format": FORMAT, "entries": entries})).expect("encodable")
}

fn skill_entry_path(v: &mut Value) -> &mut Value {
    &mut v["entries"][1]["files"][1]["path"]
}

#[test]
fn example_round_trips() {
    let bytes = example_bytes();
    let b = LibraryBundle::decode(&bytes).expect("the example decodes");
    assert_eq!(b.encode().expect("encode"), bytes);
    assert_eq!(b.sha256(), &Sha256Digest::of(&bytes));
    assert!(b.has_non_skill_entries());
    let names: Vec<(&str, EntryKind)> = b.entries().iter().map(|e| (e.name(), e.kind())).collect();
    assert_eq!(
        names,
        [
            ("careful-commits", EntryKind::Behavior),
            ("code-review", EntryKind::Skill)
        ]
    );
    let review = b.entry("code-review").expect("entry");
    let files: Vec<(&str, bool)> = review
        .files()
        .iter()
        .map(|f| (f.path(), f.executable()))
        .collect();
    assert_eq!(
        files,
        [
            ("SKILL.md", false),
            ("references/checklist.md", false),
            ("scripts/check.sh", true)
        ]
    );
    assert!(b.entry("nope").is_none());
    assert_eq!(b.skills().count(), 1);
    // A bundle of skills only needs no raw projection.
    let only = LibraryBundle::decode(&bundle_of(vec![skill("a")])).expect("decodes");
    assert!(!only.has_non_skill_entries());
}

#[test]
fn verify_checks_the_digest_first() {
    let bytes = example_bytes();
    let d = Sha256Digest::of(&bytes);
    assert_eq!(
        LibraryBundle::verify(&bytes, &d)
            .expect("verifies")
            .sha256(),
        &d
    );
    let other = Sha256Digest::of(b"something else");
    assert_eq!(
        LibraryBundle::verify(&bytes, &other).unwrap_err().code(),
        BUNDLE_DIGEST_MISMATCH
    );
    // Garbage under the wrong digest is a digest mismatch, not a parse error:
    // nothing is read before the digest matches.
    assert_eq!(
        LibraryBundle::verify(b"{not json", &other)
            .unwrap_err()
            .code(),
        BUNDLE_DIGEST_MISMATCH
    );
    // Under its own digest, garbage is refused by the decoder.
    let g = b"{not json";
    assert_eq!(
        LibraryBundle::verify(g, &Sha256Digest::of(g))
            .unwrap_err()
            .code(),
        JSON_SYNTAX
    );
}

#[test]
fn json_level_refusals() {
    let bytes = example_bytes();
    // Not canonical: a space, reordered members, a trailing newline.
    let mut spaced = bytes.clone();
    spaced.insert(1, b' ');
    assert_eq!(code_of(&spaced), JSON_NONCANONICAL);
    let text = example_value()["entries"][0]["files"][0]["text"].clone();
    let text = serde_json::to_string(&text).expect("string");
    let reordered = String::from_utf8(bytes.clone()).expect("utf-8").replacen(
        &format!(r#"{{"path":"BEHAVIOR.md","text":{text}}}"#),
        &format!(r#"{{"text":{text},"path":"BEHAVIOR.md"}}"#),
        1,
    );
    assert_eq!(reordered.len(), bytes.len());
    assert_eq!(code_of(reordered.as_bytes()), JSON_NONCANONICAL);
    let mut trailing = bytes.clone();
    trailing.push(b'\n');
    assert_eq!(code_of(&trailing), JSON_NONCANONICAL);
    // A repeated key, at the top and deep inside.
    let dup_top = format!(r#"{{"entries":[],"format":"{FORMAT}","format":"{FORMAT}"}}"#);
    assert_eq!(code_of(dup_top.as_bytes()), JSON_DUPLICATE_KEY);
    let dup_deep = String::from_utf8(bytes.clone()).expect("utf-8").replacen(
        r#""kind":"behavior","#,
        r#""kind":"behavior","kind":"behavior","#,
        1,
    );
    assert_eq!(code_of(dup_deep.as_bytes()), JSON_DUPLICATE_KEY);
    // Unknown and missing fields, wrong types.
    assert_eq!(
        code_of(&with(|v| v["extra"] = json!(1))),
        JSON_UNKNOWN_FIELD
    );
    assert_eq!(
        code_of(&with(|v| v["entries"][0]["mode"] = json!("x"))),
        JSON_UNKNOWN_FIELD
    );
    assert_eq!(
        code_of(&with(|v| v["entries"][0]["files"][0]["mode"] = json!(420))),
        JSON_UNKNOWN_FIELD
    );
    assert_eq!(
        code_of(&with(|v| {
            v["entries"][0]
                .as_object_mut()
                .expect("object")
                .remove("files");
        })),
        JSON_MISSING_FIELD
    );
    assert_eq!(
        code_of(&with(|v| v["entries"][1]["files"][0]["text"] = json!(7))),
        JSON_INVALID_TYPE
    );
    assert_eq!(
        code_of(&with(
            |v| v["entries"][1]["files"][2]["executable"] = json!(null)
        )),
        BUNDLE_NONCANONICAL
    );
    assert_eq!(code_of(b"\xff"), JSON_INVALID_UTF8);
    assert_eq!(code_of(b""), JSON_SYNTAX);
}

#[test]
fn format_and_kind() {
    assert_eq!(
        code_of(&with(|v| v["format"] = json!("glove.library-bundle.v2"))),
        BUNDLE_FORMAT_UNKNOWN
    );
    for kind in ["agent", "Skill", "skills", ""] {
        assert_eq!(
            code_of(&with(|v| v["entries"][0]["kind"] = json!(kind))),
            BUNDLE_ENTRY_KIND_UNKNOWN,
            "{kind:?}"
        );
    }
    // Every known non-skill kind is admitted and needs no SKILL.md.
    for kind in ["behavior", "prompt", "template", "workflow"] {
        let b =
            LibraryBundle::decode(&with(|v| v["entries"][0]["kind"] = json!(kind))).expect(kind);
        assert!(b.has_non_skill_entries());
    }
    // A skill without its manifest is refused.
    assert_eq!(
        code_of(&with(|v| v["entries"][0]["kind"] = json!("skill"))),
        BUNDLE_SKILL_MANIFEST_MISSING
    );
}

#[test]
fn names_order_and_duplicates() {
    for bad in [
        "Code-review",
        "code--review",
        "-code",
        "code-",
        "code_review",
        "",
    ] {
        assert_eq!(
            code_of(&with(|v| v["entries"][0]["name"] = json!(bad))),
            BUNDLE_ENTRY_NAME_INVALID,
            "{bad:?}"
        );
    }
    assert_eq!(
        code_of(&bundle_of(vec![skill("b"), skill("a")])),
        BUNDLE_NOT_SORTED
    );
    assert_eq!(
        code_of(&bundle_of(vec![skill("a"), skill("a")])),
        BUNDLE_ENTRY_DUPLICATE
    );
    // Unique across kinds too.
    let behavior_a = json!({"kind":"behavior","name":"a","files":[{"path":"x","text":""}]});
    assert_eq!(
        code_of(&bundle_of(vec![behavior_a, skill("a")])),
        BUNDLE_ENTRY_DUPLICATE
    );
}

#[test]
fn file_paths() {
    for bad in [
        "../x",
        "/etc/passwd",
        "a//b",
        "a/",
        "",
        ".",
        "..",
        "a/./b",
        "a\\b",
        "scripts/../../x",
        "a b",
        "é",
    ] {
        assert_eq!(
            code_of(&with(|v| *skill_entry_path(v) = json!(bad))),
            BUNDLE_PATH_INVALID,
            "{bad:?}"
        );
    }
    let deep = ["d"; 9].join("/");
    let long = ["a".repeat(100), "b".repeat(100), "c".repeat(54)].join("/");
    for bad in [deep, long, "x".repeat(101)] {
        assert_eq!(
            code_of(&with(|v| *skill_entry_path(v) = json!(bad))),
            BUNDLE_PATH_INVALID
        );
    }
    // At the bounds, accepted (kept in sort order between SKILL.md and
    // scripts/).
    let most = ["r".repeat(100), "b".repeat(100), "c".repeat(53)].join("/");
    assert_eq!(most.len(), 255);
    for ok in [most, ["rr"; 8].join("/")] {
        assert!(LibraryBundle::decode(&with(|v| *skill_entry_path(v) = json!(ok))).is_ok());
    }
    // Order and duplicates within an entry.
    assert_eq!(
        code_of(&with(|v| *skill_entry_path(v) = json!("zzz"))),
        BUNDLE_NOT_SORTED
    );
    assert_eq!(
        code_of(&with(|v| *skill_entry_path(v) = json!("scripts/check.sh"))),
        BUNDLE_FILE_DUPLICATE
    );
    // A file that is also a directory of another file.
    assert_eq!(
        code_of(&with(|v| *skill_entry_path(v) = json!("scripts"))),
        BUNDLE_PATH_CONFLICT
    );
    // `SKILL.md` must be top-level.
    assert_eq!(
        code_of(&with(
            |v| v["entries"][1]["files"][0]["path"] = json!("a/SKILL.md")
        )),
        BUNDLE_SKILL_MANIFEST_MISSING
    );
}

#[test]
fn executable_has_one_encoding() {
    assert_eq!(
        code_of(&with(
            |v| v["entries"][1]["files"][0]["executable"] = json!(false)
        )),
        BUNDLE_NONCANONICAL
    );
    let b = LibraryBundle::decode(&with(|v| {
        v["entries"][1]["files"][0]["executable"] = json!(true)
    }))
    .expect("executable:true is allowed anywhere");
    assert!(b.entries()[1].files()[0].executable());
}

#[test]
fn skill_manifest_front_matter() {
    let set = |text: &str| with(|v| v["entries"][1]["files"][0]["text"] = json!(text));
    assert_eq!(
        code_of(&set("# Code review\n")),
        BUNDLE_SKILL_MANIFEST_INVALID
    );
    assert_eq!(
        code_of(&set(&skill_md("other-name"))),
        BUNDLE_SKILL_MANIFEST_INVALID
    );
    assert_eq!(
        code_of(&set("---\nname: code-review\n---\n")),
        BUNDLE_SKILL_MANIFEST_INVALID
    );
    assert!(LibraryBundle::decode(&set(&skill_md("code-review"))).is_ok());
    // A non-skill entry's files are never read as a manifest.
    let b = bundle_of(vec![json!({"kind":"prompt","name":"p",
        "files":[{"path":"SKILL.md","text":"no front matter"}]})]);
    assert!(LibraryBundle::decode(&b).is_ok());
}

#[test]
fn bounds() {
    // Empty lists.
    assert_eq!(code_of(&bundle_of(vec![])), BUNDLE_EMPTY);
    assert_eq!(
        code_of(&with(|v| v["entries"][0]["files"] = json!([]))),
        BUNDLE_EMPTY
    );
    // Entries: 256 accepted, 257 refused.
    let names = |n: usize| -> Vec<Value> {
        let mut v: Vec<String> = (0..n).map(|i| format!("s{i:04}")).collect();
        v.sort();
        v.iter().map(|n| skill(n)).collect()
    };
    assert!(LibraryBundle::decode(&bundle_of(names(MAX_ENTRIES))).is_ok());
    assert_eq!(code_of(&bundle_of(names(MAX_ENTRIES + 1))), BUNDLE_TOO_MANY);
    // Files: 128 accepted, 129 refused.
    let files = |n: usize| -> Vec<u8> {
        let mut fs = vec![json!({"path":"SKILL.md","text":skill_md("a")})];
        let mut paths: Vec<String> = (1..n).map(|i| format!("f{i:04}")).collect();
        paths.sort();
        fs.extend(paths.iter().map(|p| json!({"path":p,"text":"x"})));
        bundle_of(vec![json!({"kind":"skill","name":"a","files":fs})])
    };
    assert!(LibraryBundle::decode(&files(MAX_FILES)).is_ok());
    assert_eq!(code_of(&files(MAX_FILES + 1)), BUNDLE_TOO_MANY);
    // Text: 1 MiB accepted, one byte more refused.
    let text = |n: usize| with(|v| v["entries"][1]["files"][1]["text"] = json!("t".repeat(n)));
    assert!(LibraryBundle::decode(&text(MAX_TEXT_BYTES)).is_ok());
    assert_eq!(code_of(&text(MAX_TEXT_BYTES + 1)), BUNDLE_FILE_TOO_LARGE);
    // The whole bundle: refused on size before it is parsed.
    let big = vec![b' '; MAX_BUNDLE_BYTES + 1];
    assert_eq!(code_of(&big), BUNDLE_TOO_LARGE);
    assert_eq!(
        LibraryBundle::verify(&big, &Sha256Digest::of(&big))
            .unwrap_err()
            .code(),
        BUNDLE_TOO_LARGE
    );
}

#[test]
fn locations_name_the_field() {
    let e = LibraryBundle::decode(&with(|v| *skill_entry_path(v) = json!("../x")))
        .expect_err("refused");
    assert_eq!(e.location(), "entries[1].files[1].path");
    let e = LibraryBundle::decode(&with(|v| v["entries"][0]["kind"] = json!("agent")))
        .expect_err("refused");
    assert_eq!(e.location(), "entries[0].kind");
}

#[test]
fn expansion_layout() {
    let b = LibraryBundle::decode(&example_bytes()).expect("decodes");
    let x = expand_skills(&[&b], SKILL_DIR).expect("expands");
    let files: Vec<(&str, bool)> = x
        .files()
        .iter()
        .map(|f| (f.path(), f.executable()))
        .collect();
    assert_eq!(
        files,
        [
            ("/home/agent/.codex/skills/code-review/SKILL.md", false),
            (
                "/home/agent/.codex/skills/code-review/references/checklist.md",
                false
            ),
            (
                "/home/agent/.codex/skills/code-review/scripts/check.sh",
                true
            ),
        ]
    );
    assert_eq!(
        x.directories(),
        [
            "/home/agent/.codex/skills/code-review",
            "/home/agent/.codex/skills/code-review/references",
            "/home/agent/.codex/skills/code-review/scripts",
        ]
    );
    assert_eq!(x.skill_names(), ["code-review"]);
    assert_eq!(x.skill_dir(), SKILL_DIR);
    let review = b.entry("code-review").expect("entry");
    assert_eq!(x.files()[0].text(), review.files()[0].text());
    // The behavior entry is not expanded anywhere.
    assert!(x
        .files()
        .iter()
        .all(|f| !f.path().contains("careful-commits")));
    // Every expanded path is canonical and beneath the skill directory.
    for f in x.files() {
        glove_types::paths::check_canonical(f.path()).expect("canonical");
        assert!(glove_types::paths::is_within(f.path(), SKILL_DIR));
    }
    // Another directory gives another digest; no bundles give an empty
    // layout with a digest of its own.
    let y = expand_skills(&[&b], "/home/agent/.claude/skills").expect("expands");
    assert_ne!(x.digest(), y.digest());
    let none = expand_skills(&[], SKILL_DIR).expect("empty");
    assert!(none.files().is_empty() && none.skill_names().is_empty());
    assert_ne!(none.digest(), x.digest());
}

#[test]
fn expansion_merges_and_conflicts() {
    let a = LibraryBundle::decode(&bundle_of(vec![skill("alpha"), skill("gamma")])).expect("a");
    let b = LibraryBundle::decode(&bundle_of(vec![skill("beta")])).expect("b");
    let x = expand_skills(&[&a, &b], SKILL_DIR).expect("expands");
    assert_eq!(x.skill_names(), ["alpha", "beta", "gamma"]);
    let paths: Vec<&str> = x.files().iter().map(|f| f.path()).collect();
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted);
    // Bundle order does not matter.
    let y = expand_skills(&[&b, &a], SKILL_DIR).expect("expands");
    assert_eq!(x, y);
    // The same skill name in two bundles, or one bundle given twice.
    let c = LibraryBundle::decode(&bundle_of(vec![skill("beta")])).expect("c");
    for set in [vec![&a, &b, &c], vec![&b, &b]] {
        assert_eq!(
            expand_skills(&set, SKILL_DIR).unwrap_err().code(),
            BUNDLE_SKILL_CONFLICT
        );
    }
    // A non-skill entry of the same name as a skill elsewhere is no conflict.
    let d = LibraryBundle::decode(&bundle_of(vec![json!({"kind":"workflow","name":"beta",
        "files":[{"path":"w.md","text":"w"}]})]))
    .expect("d");
    assert!(expand_skills(&[&b, &d], SKILL_DIR).is_ok());
}

#[test]
fn skill_dir_must_be_canonical() {
    let b = LibraryBundle::decode(&example_bytes()).expect("decodes");
    for bad in [
        "",
        "/",
        "relative/skills",
        "/home/agent/",
        "/home//agent",
        "/home/../etc",
    ] {
        assert_eq!(
            expand_skills(&[&b], bad).unwrap_err().code(),
            BUNDLE_SKILL_DIR_INVALID,
            "{bad:?}"
        );
    }
    // A directory that is itself acceptable, but too long for the layout.
    let long = format!("/{}", "d".repeat(4090));
    glove_types::paths::check_canonical(&long).expect("canonical");
    let e = expand_skills(&[&b], &long).map(|_| ()).unwrap_err();
    assert_eq!(e.code(), BUNDLE_SKILL_DIR_INVALID);
}

/// The expansion digest from `docs/digests.md`'s words alone: no glove
/// encoder, only SHA-256 and a hand-written canonical object (every string
/// in it is plain ASCII that needs no escape).
fn expansion_digest_by_definition(bundle: &[u8], skill_dir: &str) -> String {
    let v: Value = serde_json::from_slice(bundle).expect("json");
    let mut files: Vec<(String, String, bool)> = Vec::new();
    for e in v["entries"].as_array().expect("entries") {
        if e["kind"] != "skill" {
            continue;
        }
        let name = e["name"].as_str().expect("name");
        for f in e["files"].as_array().expect("files") {
            let path = format!("{skill_dir}/{name}/{}", f["path"].as_str().expect("path"));
            let text = f["text"].as_str().expect("text");
            let sha = hex(&Sha256::digest(text.as_bytes()));
            files.push((path, sha, f["executable"] == true));
        }
    }
    files.sort();
    let list: Vec<String> = files
        .iter()
        .map(|(p, s, x)| format!(r#"{{"executable":{x},"path":"{p}","sha256":"{s}"}}"#))
        .collect();
    let c = format!(
        r#"{{"files":[{}],"skill_dir":"{skill_dir}"}}"#,
        list.join(",")
    );
    let mut h = Sha256::new();
    h.update(b"glove.skill-expansion.v1");
    h.update([0u8]);
    h.update(c.as_bytes());
    hex(&h.finalize())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn expansion_digest_vector() {
    let bytes = example_bytes();
    let b = LibraryBundle::verify(&bytes, &Sha256Digest::of(&bytes)).expect("verifies");
    let api = expand_skills(&[&b], SKILL_DIR)
        .expect("expands")
        .digest()
        .to_hex();
    let by_hand = expansion_digest_by_definition(&bytes, SKILL_DIR);
    assert_eq!(api, by_hand);
    let doc = std::fs::read_to_string(crate::repo_root().join("docs/digests.md")).expect("doc");
    assert!(
        doc.contains(&api),
        "docs/digests.md lacks the expansion vector {api}"
    );
    assert!(doc.contains(&hex(&Sha256::digest(&bytes))));
}

#[test]
fn the_fuzz_seed_is_the_example() {
    let seed = std::fs::read(crate::repo_root().join("fuzz/seeds/library_bundle/bundle.json"))
        .expect("seed");
    assert_eq!(seed, example_bytes());
    LibraryBundle::decode(&seed).expect("the seed decodes");
}
