//! Tests for tool pinning.

use super::*;
use serde_json::json;
use std::os::unix::fs::PermissionsExt;

/// Fourth review, finding 7: `pins show` wrote U+2028 and U+2029 as
/// they are (a line break in the operator's terminal).
#[test]
fn separators_and_selectors_are_written_out() {
    let def = json!({"name": "t", "description": "a\u{2028}b\u{2029}c\u{e000}\u{2764}\u{fe0f}"});
    assert_eq!(
        render_definition(&def),
        ["description: a\\u{2028}b\\u{2029}c\\u{e000}\u{2764}\\u{fe0f}"]
    );
}

#[test]
fn kept_definitions_round_trip_render_and_must_match_their_digest() {
    let def = json!({"name": "t", "description": "Adds\u{200b} numbers\nnow",
        "inputSchema": {"type": "object"}});
    let d = tool_digest(&def);
    let mut f = PinFile::default();
    let p = f.servers.entry("s".into()).or_default();
    p.tools.insert("t".into(), d);
    p.definitions.insert(d, def.clone());
    let b = f.encode();
    assert_eq!(PinFile::decode(&b).expect("decodes"), f);
    assert_eq!(
        render_definition(&def),
        [
            "description: Adds\\u{200b} numbers\\nnow",
            r#"inputSchema: {"type":"object"}"#
        ]
    );
    // A definition under another digest, or not a definition, is refused.
    let other = tool_digest(&json!({"name": "u", "inputSchema": {}}));
    let text = String::from_utf8(b)
        .expect("utf-8")
        .replace(&d.to_hex(), &other.to_hex());
    assert_eq!(
        PinFile::decode(text.as_bytes()).map_err(|r| r.code()),
        Err(MCP_PIN_FILE_INVALID)
    );
    let mut g = f.clone();
    g.servers
        .get_mut("s")
        .expect("s")
        .definitions
        .insert(d, json!({"name": "t"}));
    assert!(PinFile::decode(&g.encode()).is_err());
}

/// Third review: the kept definitions were bounded by their canonical
/// length, but the file holds each as a JSON string, where a `"` or
/// `\\` takes twice its canonical bytes: an upstream whose allowed
/// tool describes itself in quotes made a pin file past
/// [`MAX_PIN_FILE_BYTES`], which no later read (the next session's
/// start, `pins show`, `pins approve`) accepts.
#[test]
fn kept_definitions_never_make_a_pin_file_too_large_to_read() {
    let shell = json!({"name": "t", "description": "", "inputSchema": {}});
    let room = MAX_KEPT_DEFINITION_BYTES - json::canonical(&shell).len();
    let def = json!({"name": "t", "description": "\"".repeat(room / 2),
        "inputSchema": {}});
    let d = tool_digest(&def);
    let mut f = PinFile::default();
    let p = f.servers.entry("s".into()).or_default();
    p.tools.insert("t".into(), d);
    let seen: BTreeMap<Sha256Digest, &Value> = [(d, &def)].into_iter().collect();
    keep_definitions(&mut f, "s", &seen);
    let b = f.encode();
    assert!(b.len() <= MAX_PIN_FILE_BYTES, "{} bytes", b.len());
    assert_eq!(PinFile::decode(&b).expect("decodes"), f);
}

#[test]
fn concurrent_updates_of_one_pin_file_lose_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let path = dir.path().join("pins.json");
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let path = path.clone();
            std::thread::spawn(move || {
                for j in 0..10 {
                    PinFile::update(&path, |f| {
                        f.servers
                            .entry("s".into())
                            .or_default()
                            .tools
                            .insert(format!("t{i}-{j}"), Sha256Digest::of(b"x"));
                    })
                    .expect("update");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    let f = PinFile::load(&path).expect("load");
    assert_eq!(f.servers["s"].tools.len(), 80);
    // A refused approval changes nothing on disk.
    let before = std::fs::read(&path).expect("read");
    assert!(approve(&path, "s", Some("nosuch"), None).is_err());
    assert!(approve(&path, "other", Some("nosuch"), None).is_err());
    assert_eq!(std::fs::read(&path).expect("read"), before);
}

#[test]
fn definitions_keep_only_pinned_members() {
    let e = json!({"name":"echo","description":"d","inputSchema":{"type":"object"},
                   "_meta":{"x":1},"execution":{"taskSupport":"optional"}});
    let d = tool_definition(&e).expect("definition");
    assert_eq!(
        d,
        json!({"name":"echo","description":"d","inputSchema":{"type":"object"}})
    );
    let changed = json!({"name":"echo","description":"D","inputSchema":{"type":"object"}});
    assert_ne!(tool_digest(&d), tool_digest(&changed));
    assert!(tool_definition(&json!({"name":"x"})).is_none());
    let (a, b) = (tool_digest(&d), tool_digest(&changed));
    assert_eq!(
        server_digest(Some("i"), &[a, b]),
        server_digest(Some("i"), &[b, a])
    );
    assert_ne!(server_digest(None, &[a]), server_digest(Some(""), &[a]));
}

#[test]
fn file_round_trip_first_sight_mismatch_approve() {
    let t = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let path = t.path().join("pins.json");
    let mut f = PinFile::load(&path).expect("missing is empty");
    let d1 = Sha256Digest::of(b"1");
    let d2 = Sha256Digest::of(b"2");
    let s = Sha256Digest::of(b"s");
    let tools = BTreeMap::from([("echo".to_owned(), d1)]);
    let (v, differs) = judge(None, &mut f, "srv", s, &tools);
    assert_eq!(v["echo"], Verdict::FirstSight);
    assert!(!differs);
    f.save(&path).expect("save");
    let mut f = PinFile::load(&path).expect("load");
    let tools2 = BTreeMap::from([("echo".to_owned(), d2)]);
    let (v, differs) = judge(None, &mut f, "srv", Sha256Digest::of(b"s2"), &tools2);
    assert_eq!(v["echo"], Verdict::Mismatch);
    assert!(differs);
    f.save(&path).expect("save");
    assert_eq!(
        show(&path).expect("show").servers["srv"].pending["echo"],
        d2
    );
    assert_eq!(
        approve(&path, "srv", Some("echo"), None).expect("approve"),
        d2
    );
    let mut f = PinFile::load(&path).expect("load");
    let (v, _) = judge(None, &mut f, "srv", s, &tools2);
    assert_eq!(v["echo"], Verdict::Matches);
    let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    assert!(PinFile::load(&path).is_err());
    assert!(PinFile::decode(br#"{"version":1,"servers":{"a__b":{}}}"#).is_err());
    assert!(PinFile::decode(br#"{"version":2,"servers":{}}"#).is_err());
}
