use super::*;
use crate::codes::ids::DIGEST_INVALID;
use crate::codes::json::{JSON_DUPLICATE_KEY, JSON_UNKNOWN_FIELD};

fn file(path: &str, body: &[u8]) -> Entry {
    Entry {
        path: path.into(),
        kind: EntryKind::File,
        mode: 0o644,
        size: body.len() as u64,
        digest: Some(Sha256Digest::of(body)),
        hardlink: false,
        sparse: false,
        xattr: false,
    }
}

fn dir(path: &str) -> Entry {
    Entry {
        path: path.into(),
        kind: EntryKind::Dir,
        mode: 0o755,
        size: 0,
        digest: None,
        hardlink: false,
        sparse: false,
        xattr: false,
    }
}

fn sample() -> Manifest {
    Manifest::new(
        0o755,
        vec![
            file("b.txt", b"b"),
            dir("a"),
            file("a/x", b"x"),
            file("a-b", b""),
        ],
    )
    .expect("manifest")
}

#[test]
fn sorted_bytewise_and_round_trips() {
    let m = sample();
    let paths: Vec<&str> = m.entries().iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["a", "a-b", "a/x", "b.txt"]);
    let bytes = m.canonical_bytes().expect("encode");
    let back = Manifest::decode(&bytes).expect("decode");
    assert_eq!(back, m);
    assert_eq!(back.digest().expect("d"), m.digest().expect("d"));
    assert!(m.get("a/x").is_some());
    assert!(m.get("a/y").is_none());
}

fn refused(json: &str) -> crate::ErrorCode {
    Manifest::decode(json.as_bytes()).expect_err(json).code()
}

fn doc(entries: &str) -> String {
    format!(r#"{{"entries":[{entries}],"format":"glove.workspace-manifest-v1","root_mode":493}}"#)
}

const DIG: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

fn fe(path: &str) -> String {
    format!(
        r#"{{"digest":"{DIG}","hardlink":false,"kind":"file","mode":420,"path":"{path}","size":3,"sparse":false,"xattr":false}}"#
    )
}

#[test]
fn decode_refusals() {
    assert!(Manifest::decode(doc(&fe("a")).as_bytes()).is_ok());
    let two = format!("{},{}", fe("b"), fe("a"));
    assert_eq!(refused(&doc(&two)), WORKSPACE_MANIFEST_INVALID);
    let dup = format!("{},{}", fe("a"), fe("a"));
    assert_eq!(refused(&doc(&dup)), WORKSPACE_MANIFEST_INVALID);
    for p in ["", "/a", "a/", "a//b", "./a", "a/..", "d/a"] {
        assert_eq!(refused(&doc(&fe(p))), WORKSPACE_MANIFEST_INVALID, "{p}");
    }
    let bad_digest = fe("a").replace(DIG, &DIG.to_uppercase());
    assert_eq!(refused(&doc(&bad_digest)), DIGEST_INVALID);
    let unknown = fe("a").replace(r#""xattr":false"#, r#""xattr":false,"uid":0"#);
    assert_eq!(refused(&doc(&unknown)), JSON_UNKNOWN_FIELD);
    let dupkey = fe("a").replace(r#""xattr":false"#, r#""xattr":false,"xattr":true"#);
    assert_eq!(refused(&doc(&dupkey)), JSON_DUPLICATE_KEY);
    let no_digest = fe("a").replace(&format!("\"{DIG}\""), "null");
    assert_eq!(refused(&doc(&no_digest)), WORKSPACE_MANIFEST_INVALID);
    let big_mode = fe("a").replace("420", "4096");
    assert_eq!(refused(&doc(&big_mode)), WORKSPACE_MANIFEST_INVALID);
    let sparse_small = fe("a").replace(r#""sparse":false"#, r#""sparse":true"#);
    assert_eq!(refused(&doc(&sparse_small)), WORKSPACE_MANIFEST_INVALID);
    let other_format = doc(&fe("a")).replace("v1", "v2");
    assert_eq!(refused(&other_format), WORKSPACE_MANIFEST_INVALID);
    let deep = vec!["d"; MAX_DEPTH + 1].join("/");
    assert!(check_path(&deep).is_err());
    assert!(check_path(&"x".repeat(MAX_PATH_BYTES + 1)).is_err());
    assert!(check_path(&vec!["d"; MAX_DEPTH].join("/")).is_ok());
}

#[test]
fn blockers_name_each_reason() {
    let mut link = file("l", b"target");
    link.kind = EntryKind::Symlink;
    link.mode = 0o777;
    let mut fifo = dir("p");
    fifo.kind = EntryKind::Other;
    fifo.mode = 0o644;
    let mut hard = file("h", b"h");
    hard.hardlink = true;
    let mut suid = file("s", b"s");
    suid.mode = 0o4755;
    let mut sparse = file("z", &[0; 8192]);
    sparse.sparse = true;
    let mut attr = file("x", b"x");
    attr.xattr = true;
    let plain = file("ok", b"ok");
    let m =
        Manifest::new(0o2755, vec![link, fifo, hard, suid, sparse, attr, plain]).expect("manifest");
    let got: Vec<(String, &str)> = m
        .blockers()
        .into_iter()
        .map(|b| (b.path, b.reason.as_str()))
        .collect();
    let want = [
        (".", "special_mode_bits"),
        ("h", "hard_link"),
        ("l", "symlink"),
        ("p", "special_file"),
        ("s", "special_mode_bits"),
        ("x", "extended_attribute"),
        ("z", "sparse"),
    ];
    let want: Vec<(String, &str)> = want.iter().map(|(p, r)| (p.to_string(), *r)).collect();
    assert_eq!(got, want);
}
