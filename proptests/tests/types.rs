//! Properties of glove-types, for auditors:
//!
//! 1. canonical encoding round-trips and is a fixed point;
//! 2. any re-ordering of object members or added whitespace in a canonical
//!    input is either rejected as `json_noncanonical` or (when the bytes are
//!    unchanged) accepted — and always maps back to the same canonical bytes;
//! 3. changing any single bound field of an admitted plan is rejected with
//!    that field's code;
//! 4. the strict decoder never panics and only fails with a JSON code;
//! 5. generated valid library bundles decode, re-encode to the same bytes
//!    and expand without panic into a sorted layout beneath the skill
//!    directory; mutated and arbitrary bytes never panic and either decode
//!    to a bundle whose encoding is the input or are refused with a JSON or
//!    bundle code;
//! 6. workspace manifests round-trip, and any one changed field changes
//!    their digest (`workspace_manifest` below).

use glove_types::bundle::{expand_skills, LibraryBundle, FORMAT};
use glove_types::canon::{parse_canonical, parse_strict, to_canonical, MAX_SAFE_INTEGER};
use glove_types::codes::json::JSON_NONCANONICAL;
use glove_types::codes::plan::*;
use glove_types::codes::Area;
use glove_types::plan::{admit, DecodedPlan};
use glove_types::policy::ValidatedPolicy;
use glove_types::ErrorCode;
use proptest::prelude::*;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

fn json_value() -> impl Strategy<Value = Value> {
    let max = i64::try_from(MAX_SAFE_INTEGER).unwrap_or(i64::MAX);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-max..=max).prop_map(|i| json!(i)),
        any::<String>().prop_map(Value::String),
        "[a-z\u{0}-\u{1f}\"\\\\\u{e9}\u{1f600}\u{ff61}]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z\u{e9}\u{1f600}\u{ff61}]{0,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Writes `v` as JSON with members in a permuted order and optional
/// whitespace, both driven by `seed`.
fn noisy(v: &Value, seed: &mut u64, out: &mut String) {
    fn step(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 33
    }
    let ws = |n: u64| match n % 4 {
        0 => "",
        1 => " ",
        2 => "\n",
        _ => "\t ",
    };
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            for i in (1..keys.len()).rev() {
                let j = usize::try_from(step(seed)).unwrap_or(0) % (i + 1);
                keys.swap(i, j);
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(ws(step(seed)));
                out.push_str(&serde_json::to_string(k).unwrap_or_default());
                out.push_str(ws(step(seed)));
                out.push(':');
                if let Some(x) = m.get(*k) {
                    noisy(x, seed, out);
                }
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(ws(step(seed)));
                noisy(x, seed, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn canonical_round_trip(v in json_value()) {
        let c = to_canonical(&v).expect("encodable");
        let back = parse_canonical(&c, 1 << 20).expect("canonical bytes parse canonically");
        prop_assert_eq!(&back, &v);
        prop_assert_eq!(to_canonical(&back).expect("again"), c);
    }

    #[test]
    fn reordering_and_whitespace(v in json_value(), seed in any::<u64>()) {
        let canonical = to_canonical(&v).expect("encodable");
        let mut s = String::new();
        let mut seed = seed;
        noisy(&v, &mut seed, &mut s);
        let strict = parse_strict(s.as_bytes(), 1 << 20).expect("noisy form is valid JSON");
        prop_assert_eq!(to_canonical(&strict).expect("encode"), canonical.clone());
        match parse_canonical(s.as_bytes(), 1 << 20) {
            Ok(_) => prop_assert_eq!(s.as_bytes(), &canonical[..]),
            Err(e) => {
                prop_assert_eq!(e.code(), JSON_NONCANONICAL);
                prop_assert_ne!(s.as_bytes(), &canonical[..]);
            }
        }
    }

    #[test]
    fn strict_decoder_fails_only_with_json_codes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        if let Err(e) = parse_strict(&bytes, 128) {
            prop_assert_eq!(e.code().area(), Area::Json);
        }
    }

    #[test]
    fn single_bound_field_change_is_rejected(field in 0usize..FIELDS.len(), delta in 1u64..1000) {
        let (ptr, code) = FIELDS[field];
        let mut v: Value = serde_json::from_slice(&example("plan.json")).expect("plan");
        let slot = v.pointer_mut(ptr).expect("pointer");
        *slot = match slot.clone() {
            Value::Number(n) => json!(n.as_u64().unwrap_or(0) + delta),
            Value::String(s) if s.len() == 64 => json!(format!("{:064x}", delta)),
            Value::String(s) => json!(format!("{s}-{delta}")),
            Value::Array(_) => json!([format!("x{delta}")]),
            other => other,
        };
        let bytes = to_canonical(&v).expect("canonical");
        let policy = ValidatedPolicy::from_json(&example("policy.json")).expect("policy");
        let got = DecodedPlan::decode(&bytes).and_then(|p| admit(p, None, &policy, NOW)).map(|_| ());
        let err = got.expect_err("a changed bound field must be rejected");
        prop_assert_eq!(err.code(), code, "{}", ptr);
    }
}

const NOW: u64 = 1_796_000_001_000;

const FIELDS: &[(&str, ErrorCode)] = &[
    ("/policy_revision", PLAN_POLICY_REVISION_MISMATCH),
    ("/runtime_template_id", PLAN_RUNTIME_TEMPLATE_UNKNOWN),
    ("/runtime_id", PLAN_RUNTIME_MISMATCH),
    ("/adapter_command_digest", PLAN_ADAPTER_DIGEST_MISMATCH),
    (
        "/resource_profile/profile_id",
        PLAN_RESOURCE_PROFILE_UNKNOWN,
    ),
    (
        "/resource_profile/cpu_time_ms",
        PLAN_RESOURCE_LIMIT_MISMATCH,
    ),
    (
        "/resource_profile/memory_bytes",
        PLAN_RESOURCE_LIMIT_MISMATCH,
    ),
    ("/resource_profile/pids", PLAN_RESOURCE_LIMIT_MISMATCH),
    (
        "/resource_profile/wall_time_ms",
        PLAN_RESOURCE_LIMIT_MISMATCH,
    ),
    ("/resource_profile/disk_bytes", PLAN_RESOURCE_LIMIT_MISMATCH),
    (
        "/resource_profile/terminal_output_bytes",
        PLAN_RESOURCE_LIMIT_MISMATCH,
    ),
    ("/egress_policy_ids", PLAN_EGRESS_POLICY_UNKNOWN),
    ("/tool_policy_ids", PLAN_TOOL_POLICY_UNKNOWN),
    ("/secret_handles", PLAN_SECRET_HANDLE_UNKNOWN),
    ("/path_grants/0/alias", PLAN_PATH_ALIAS_UNKNOWN),
    ("/path_grants/0/max_bytes", PLAN_PATH_QUOTA_MISMATCH),
    ("/path_grants/0/ttl_secs", PLAN_PATH_TTL_INVALID),
    (
        "/library_projections/0/destination_alias",
        PLAN_PROJECTION_DESTINATION_UNKNOWN,
    ),
];

fn example(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/examples")
        .join(name);
    std::fs::read(p).expect("example")
}

const SKILL_DIR: &str = "/home/agent/.codex/skills";

/// A file path that never conflicts with another: directories start with
/// `d`, files with `f`, so no file is also a directory.
fn file_path() -> impl Strategy<Value = String> {
    (
        prop::collection::vec("d[A-Za-z0-9._-]{0,5}", 0..3),
        "f[A-Za-z0-9._-]{0,8}",
    )
        .prop_map(|(dirs, file)| {
            let mut parts = dirs;
            parts.push(file);
            parts.join("/")
        })
}

fn kind() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["skill", "behavior", "prompt", "template", "workflow"])
}

type Files = BTreeMap<String, (String, bool)>;

fn files() -> impl Strategy<Value = Files> {
    prop::collection::btree_map(file_path(), (any::<String>(), any::<bool>()), 0..5)
}

/// A valid bundle as a JSON value: entries and files come out of ordered
/// maps, so they are sorted and unique; every skill gets its manifest.
fn bundle_value() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(
        "[a-z0-9]{1,6}(-[a-z0-9]{1,6}){0,2}",
        (kind(), files(), "[ -~]{0,40}"),
        1..6,
    )
    .prop_map(|entries| {
        let entries: Vec<Value> = entries
            .into_iter()
            .map(|(name, (kind, mut files, body))| {
                if kind == "skill" || files.is_empty() {
                    let text = format!("---\nname: {name}\ndescription: d\n---\n{body}");
                    files.insert("SKILL.md".into(), (text, false));
                }
                let files: Vec<Value> = files
                    .into_iter()
                    .map(|(path, (text, exec))| {
                        let mut f = json!({"path": path, "text": text});
                        if exec {
                            f["executable"] = json!(true);
                        }
                        f
                    })
                    .collect();
                json!({"kind": kind, "name": name, "files": files})
            })
            .collect();
        json!({"format": FORMAT, "entries": entries})
    })
}

/// Decoding `bytes` either refuses with a JSON or bundle code or yields a
/// bundle whose encoding is exactly `bytes` and which expands.
fn decode_is_exact(bytes: &[u8]) -> Result<(), TestCaseError> {
    match LibraryBundle::decode(bytes) {
        Ok(b) => {
            prop_assert_eq!(b.encode().expect("encodes"), bytes);
            let _ = expand_skills(&[&b], SKILL_DIR);
        }
        Err(e) => prop_assert!(
            matches!(e.code().area(), Area::Json | Area::Bundle),
            "{}",
            e.code()
        ),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn valid_bundles_round_trip_and_expand(v in bundle_value()) {
        let bytes = to_canonical(&v).expect("encodable");
        let b = LibraryBundle::verify(&bytes, &glove_types::Sha256Digest::of(&bytes))
            .expect("a generated bundle is valid");
        prop_assert_eq!(b.encode().expect("encodes"), bytes.clone());
        let entries = v["entries"].as_array().map_or(0, Vec::len);
        prop_assert_eq!(b.entries().len(), entries);
        let x = expand_skills(&[&b], SKILL_DIR).expect("expands");
        let want: usize = b.skills().map(|e| e.files().len()).sum();
        prop_assert_eq!(x.files().len(), want);
        prop_assert_eq!(x.skill_names().len(), b.skills().count());
        let mut last: Option<&str> = None;
        for f in x.files() {
            prop_assert!(glove_types::paths::is_within(f.path(), SKILL_DIR));
            prop_assert!(glove_types::paths::check_canonical(f.path()).is_ok());
            prop_assert!(last < Some(f.path()));
            last = Some(f.path());
        }
        // Deterministic, and another directory is another digest.
        let again = expand_skills(&[&b], SKILL_DIR).expect("expands");
        prop_assert_eq!(again.digest(), x.digest());
        let other = expand_skills(&[&b], "/home/agent/.claude/skills").expect("expands");
        prop_assert_ne!(other.digest(), x.digest());
        // The bundle given twice conflicts exactly when it has a skill.
        prop_assert_eq!(expand_skills(&[&b, &b], SKILL_DIR).is_err(), b.skills().count() > 0);
    }

    #[test]
    fn mutated_bundles_never_panic(
        v in bundle_value(),
        op in 0u8..4,
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let mut bytes = to_canonical(&v).expect("encodable");
        let i = at.index(bytes.len());
        match op {
            0 => bytes[i] ^= byte | 1,
            1 => { bytes.remove(i); }
            2 => bytes.insert(i, byte),
            _ => bytes.truncate(i),
        }
        decode_is_exact(&bytes)?;
        // Under any other digest the bytes are never looked at.
        let wrong = glove_types::Sha256Digest::of(b"not the bundle");
        prop_assert_eq!(
            LibraryBundle::verify(&bytes, &wrong).map(|_| ()).unwrap_err().code(),
            glove_types::codes::bundle::BUNDLE_DIGEST_MISMATCH
        );
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        decode_is_exact(&bytes)?;
    }

    #[test]
    fn arbitrary_json_never_panics(v in json_value()) {
        decode_is_exact(&to_canonical(&v).expect("encodable"))?;
    }
}

mod egress {
    use glove_types::codes::Area;
    use glove_types::egress::{address_allowed, classify, decide, Endpoint, Host};
    use proptest::prelude::*;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    proptest! {
        /// An IPv4 address carried in IPv6 (mapped, compatible, NAT64,
        /// 6to4) is judged exactly as the IPv4 address itself.
        #[test]
        fn ipv4_in_ipv6_is_judged_as_the_ipv4(o in any::<[u8; 4]>()) {
            let v4 = Ipv4Addr::from(o);
            let want = classify(IpAddr::V4(v4));
            let seg = |a: u8, b: u8| u16::from(a) << 8 | u16::from(b);
            let (hi, lo) = (seg(o[0], o[1]), seg(o[2], o[3]));
            let forms = [
                v4.to_ipv6_mapped(),
                Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, hi, lo),
                Ipv6Addr::new(0x2002, hi, lo, 0, 0, 0, 0, 1),
            ];
            for f in forms {
                prop_assert_eq!(classify(IpAddr::V6(f)), want, "{}", f);
            }
            for allow in [false, true] {
                prop_assert_eq!(
                    address_allowed(IpAddr::V4(v4), allow).is_ok(),
                    address_allowed(IpAddr::V6(v4.to_ipv6_mapped()), allow).is_ok()
                );
            }
        }

        /// Parsing never panics and refuses only with an egress code; a
        /// parsed endpoint decides against itself without panicking, and
        /// is never allowed to a metadata or reserved address.
        #[test]
        fn targets_never_panic(s in "\\PC{0,64}", ip in any::<[u8; 16]>()) {
            match Endpoint::parse(&s) {
                Ok(e) => {
                    let addr = IpAddr::V6(Ipv6Addr::from(ip));
                    if let Ok(addrs) = decide(std::slice::from_ref(&e), true, &e.host, e.port, &[addr]) {
                        for a in addrs {
                            prop_assert!(address_allowed(a, true).is_ok());
                        }
                    }
                }
                Err(r) => prop_assert_eq!(r.code().area(), Area::Egress),
            }
            if let Err(r) = Host::parse(&s) {
                prop_assert_eq!(r.code().area(), Area::Egress);
            }
        }
    }

    proptest! {
        /// An egress event: the seed with one byte changed, or arbitrary
        /// bytes, never panics, and whatever decodes re-encodes to itself.
        #[test]
        fn events_decode_only_their_encoding(
            at in any::<prop::sample::Index>(),
            to in any::<u8>(),
            junk in prop::collection::vec(any::<u8>(), 0..256),
        ) {
            use glove_types::egress::event::EgressEvent;
            let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
            let mut seed = std::fs::read(root.join("fuzz/seeds/egress_event/request")).expect("seed");
            prop_assert!(EgressEvent::decode(&seed).is_ok(), "the seed decodes");
            let i = at.index(seed.len());
            seed[i] = to;
            for bytes in [seed, junk] {
                if let Ok(e) = EgressEvent::decode(&bytes) {
                    prop_assert_eq!(e.encode().expect("encodes"), bytes);
                }
            }
        }
    }

    proptest! {
        /// An egress policy file: the seed with one byte changed, or
        /// arbitrary bytes, never panics; a refusal names a code, and what
        /// is accepted only maps, limits and brokers its own endpoints.
        #[test]
        fn egress_policy_files_keep_their_cross_references(
            at in any::<prop::sample::Index>(),
            to in any::<u8>(),
            junk in prop::collection::vec(any::<u8>(), 0..256),
        ) {
            use glove_types::egress::settings::{EgressSettings, PROXY_PORT};
            let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
            let mut seed = std::fs::read(root.join("fuzz/seeds/egress_settings/policy")).expect("seed");
            prop_assert!(EgressSettings::from_json(&seed).is_ok(), "the seed parses");
            let i = at.index(seed.len());
            seed[i] = to;
            for bytes in [seed, junk] {
                match EgressSettings::from_json(&bytes) {
                    Ok(s) => {
                        for m in s.port_mappings() {
                            prop_assert!(s.endpoints().contains(&m.endpoint));
                            prop_assert!(m.listen_port >= 1024 && m.listen_port != PROXY_PORT);
                        }
                        for b in s.brokered() {
                            prop_assert!(b.endpoints.iter().all(|e| s.endpoints().contains(e)));
                        }
                    }
                    Err(r) => prop_assert!(!r.code().as_str().is_empty()),
                }
            }
        }
    }

    #[test]
    fn the_fuzz_seed_parses() {
        let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let seed =
            std::fs::read_to_string(root.join("fuzz/seeds/egress_target/endpoint")).expect("seed");
        Endpoint::parse(&seed).expect("the seed is an endpoint");
    }
}

/// 6. Workspace manifests: a generated manifest round-trips through its
///    canonical encoding; changing any one field of any one entry (or the
///    root mode) changes the digest; arbitrary bytes never panic.
mod workspace_manifest {
    use glove_types::manifest::{Entry, EntryKind, Manifest};
    use glove_types::Sha256Digest;
    use proptest::prelude::*;

    fn entries() -> impl Strategy<Value = Vec<Entry>> {
        let name = "[a-z\u{e9} ._-]{1,6}".prop_filter("not . or ..", |s| s != "." && s != "..");
        prop::collection::btree_map(name, (0u8..3, 0u32..0o10000, any::<Vec<u8>>()), 0..12)
            .prop_map(|m| {
                let mut out = vec![Entry {
                    path: "d".into(),
                    kind: EntryKind::Dir,
                    mode: 0o755,
                    size: 0,
                    digest: None,
                    hardlink: false,
                    sparse: false,
                    xattr: false,
                }];
                for (i, (n, (k, mode, body))) in m.into_iter().enumerate() {
                    let path = if i % 2 == 0 { n } else { format!("d/{n}") };
                    let (kind, digest, size) = match k {
                        0 => (EntryKind::File, Some(Sha256Digest::of(&body)), body.len()),
                        1 => (
                            EntryKind::Symlink,
                            Some(Sha256Digest::of(&body)),
                            body.len(),
                        ),
                        _ => (EntryKind::Other, None, 0),
                    };
                    if path == "d" {
                        continue;
                    }
                    out.push(Entry {
                        path,
                        kind,
                        mode,
                        size: size as u64,
                        digest,
                        hardlink: k == 0 && mode % 2 == 0,
                        sparse: false,
                        xattr: mode % 3 == 0,
                    });
                }
                out
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn round_trips_and_every_change_moves_the_digest(es in entries(), pick in any::<usize>(), field in 0usize..6) {
            let m = Manifest::new(0o755, es.clone()).expect("valid");
            let bytes = m.canonical_bytes().expect("encode");
            let back = Manifest::decode(&bytes).expect("decode");
            prop_assert_eq!(&back, &m);
            let d = m.digest().expect("digest");
            prop_assert_eq!(back.digest().expect("digest"), d);
            let mut changed: Vec<Entry> = m.entries().to_vec();
            let i = pick % changed.len();
            let e = &mut changed[i];
            match (field, e.kind) {
                (0, _) => e.mode ^= 0o1,
                (1, _) if e.kind != EntryKind::Dir => e.hardlink = !e.hardlink,
                (2, _) => e.xattr = !e.xattr,
                (3, EntryKind::File | EntryKind::Symlink) => {
                    e.digest = Some(Sha256Digest::of(b"another"));
                }
                (4, EntryKind::File | EntryKind::Symlink) => e.size += 1,
                _ => {
                    let m2 = Manifest::new(0o700, m.entries().to_vec()).expect("valid");
                    prop_assert_ne!(m2.digest().expect("digest"), d);
                    return Ok(());
                }
            }
            let m2 = Manifest::new(0o755, changed).expect("still valid");
            prop_assert_ne!(m2.digest().expect("digest"), d);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(m) = Manifest::decode(&bytes) {
                let again = Manifest::decode(&m.canonical_bytes().expect("encode")).expect("decode");
                prop_assert_eq!(again, m);
            }
        }
    }

    #[test]
    fn the_fuzz_seed_decodes() {
        let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let seed =
            std::fs::read(root.join("fuzz/seeds/workspace_manifest/manifest.json")).expect("seed");
        Manifest::decode(&seed).expect("the seed is a manifest");
    }
}
