//! Tests for bundles.

use super::*;

#[test]
fn names() {
    for ok in ["a", "code-review", "a1-b2-c3", &"a".repeat(64)] {
        assert!(check_entry_name(ok).is_ok(), "{ok}");
    }
    for bad in [
        "",
        "-a",
        "a-",
        "a--b",
        "A",
        "a_b",
        "a.b",
        "é",
        &"a".repeat(65),
    ] {
        assert_eq!(
            check_entry_name(bad).unwrap_err().code(),
            BUNDLE_ENTRY_NAME_INVALID,
            "{bad:?}"
        );
    }
}

#[test]
fn paths() {
    for ok in [
        "SKILL.md",
        "scripts/check.sh",
        ".hidden",
        "a/b/c/d/e/f/g/h",
        "...",
    ] {
        assert!(check_file_path(ok).is_ok(), "{ok}");
    }
    let long_comp = "a".repeat(101);
    let long_path = ["a".repeat(100), "b".repeat(100), "c".repeat(54)].join("/");
    assert_eq!(long_path.len(), 256);
    for bad in [
        "",
        "/a",
        "a/",
        "a//b",
        "./a",
        "a/..",
        "../x",
        "a\\b",
        "a b",
        "a/b/c/d/e/f/g/h/i",
        &long_comp,
        &long_path,
        "a\0",
    ] {
        assert_eq!(
            check_file_path(bad).unwrap_err().code(),
            BUNDLE_PATH_INVALID,
            "{bad:?}"
        );
    }
}

#[test]
fn manifests() {
    let ok = "---\nname: x-y\ndescription: Does things.\n---\n# body\n";
    assert!(check_skill_manifest(ok, "x-y").is_ok());
    assert!(check_skill_manifest("---\r\nname: \"x\"\r\ndescription: d\r\n---", "x").is_ok());
    for bad in [
        "",
        "# no front matter\n",
        "---\nname: x\ndescription: d\n",
        "---\nname: y\ndescription: d\n---\n",
        "---\ndescription: d\n---\n",
        "---\nname: x\nname: x\ndescription: d\n---\n",
        "---\nname: x\n---\n",
        "---\nname: x\ndescription:\n---\n",
        " ---\nname: x\ndescription: d\n---\n",
        "---\n  name: x\ndescription: d\n---\n",
    ] {
        assert_eq!(
            check_skill_manifest(bad, "x").unwrap_err().code(),
            BUNDLE_SKILL_MANIFEST_INVALID,
            "{bad:?}"
        );
    }
}

#[test]
fn kinds_round_trip() {
    for k in [
        EntryKind::Skill,
        EntryKind::Behavior,
        EntryKind::Prompt,
        EntryKind::Template,
        EntryKind::Workflow,
    ] {
        assert_eq!(EntryKind::parse(k.as_str()).unwrap(), k);
    }
    for bad in ["Skill", "skills", "", "agent"] {
        assert_eq!(
            EntryKind::parse(bad).unwrap_err().code(),
            BUNDLE_ENTRY_KIND_UNKNOWN
        );
    }
}
