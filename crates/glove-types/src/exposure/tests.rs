use super::lease::*;
use super::*;
use crate::ids::{ExposureId, ExposureLabel};

fn policy(roots: &str) -> String {
    format!(r#"{{"roots":[{roots}],"runtime_templates":["codex-safe"],"schema_version":1}}"#)
}

fn root(id: &str, path: &str) -> String {
    format!(
        r#"{{"max_ttl_secs":3600,"modes":[{{"access":"read_only","materialization":"copy","max_bytes":1024}}],"path":"{path}","root_id":"{id}"}}"#
    )
}

fn code(bytes: &str) -> &'static str {
    ExposurePolicy::decode(bytes.as_bytes())
        .unwrap_err()
        .code()
        .as_str()
}

#[test]
fn a_valid_policy_decodes_and_locates_projects() {
    let p = ExposurePolicy::decode(policy(&root("src", "/home/a/src")).as_bytes()).unwrap();
    assert_eq!(p.roots().len(), 1);
    let (r, rel) = p.locate("/home/a/src/proj/x").unwrap().unwrap();
    assert_eq!((r.id().as_str(), rel.as_str()), ("src", "proj/x"));
    assert!(p.locate("/home/a/srcx").unwrap().is_none());
    assert_eq!(
        p.locate("/home/a/src").unwrap_err().code(),
        EXPOSURE_PATH_IS_ROOT
    );
    let again = ExposurePolicy::decode(&p.canonical_bytes().unwrap()).unwrap();
    assert_eq!(again, p);
}

#[test]
fn every_bad_policy_has_its_code() {
    let two = format!("{},{}", root("a", "/srv/a"), root("b", "/srv/a/b"));
    assert_eq!(code(&policy(&two)), "exposure_policy_roots_overlap");
    let unsorted = format!("{},{}", root("b", "/srv/b"), root("a", "/srv/a"));
    assert_eq!(code(&policy(&unsorted)), "exposure_policy_not_canonical");
    assert_eq!(
        code(&policy(&root("a", "/etc/x"))),
        "exposure_policy_root_invalid"
    );
    assert_eq!(
        code(&policy(&root("a", "/"))),
        "exposure_policy_root_invalid"
    );
    assert_eq!(
        code(&policy(&root("a", "rel"))),
        "exposure_policy_root_invalid"
    );
    assert_eq!(code(&policy(&root("A", "/srv/a"))), "id_invalid");
    assert_eq!(code(&policy("")), "exposure_policy_invalid");
    let ttl = root("a", "/srv/a").replace("3600", "0");
    assert_eq!(code(&policy(&ttl)), "exposure_policy_ttl_invalid");
    let rw = root("a", "/srv/a").replace("read_only", "direct_write");
    assert_eq!(code(&policy(&rw)), "exposure_policy_mode_invalid");
    // A retained copy is an exposure mode (kept for diff and apply).
    let kept = root("a", "/srv/a").replace("read_only", "retained_write");
    assert!(ExposurePolicy::decode(policy(&kept).as_bytes()).is_ok());
    let bind = root("a", "/srv/a").replace("\"copy\"", "\"bind\"");
    assert_eq!(code(&policy(&bind)), "exposure_policy_mode_invalid");
    let zero = root("a", "/srv/a").replace("1024", "0");
    assert_eq!(code(&policy(&zero)), "exposure_policy_mode_invalid");
    let v2 = policy(&root("a", "/srv/a")).replace("\"schema_version\":1", "\"schema_version\":2");
    assert_eq!(code(&v2), "exposure_policy_invalid");
    let extra =
        policy(&root("a", "/srv/a")).replace("\"schema_version\"", "\"x\":1,\"schema_version\"");
    assert_eq!(code(&extra), "json_unknown_field");
    let dup = policy(&root("a", "/srv/a")).replace(
        "\"schema_version\":1",
        "\"schema_version\":1,\"schema_version\":1",
    );
    assert_eq!(code(&dup), "json_duplicate_key");
}

#[test]
fn the_starter_is_canonical_and_decodes() {
    let t = [
        crate::ids::RuntimeTemplateId::new("b").unwrap(),
        crate::ids::RuntimeTemplateId::new("a").unwrap(),
    ];
    let bytes = starter(
        &[
            (PathBuf::from("/home/u/Code"), StarterRoot::default()),
            (PathBuf::from("/srv/code"), StarterRoot::default()),
        ],
        &t,
    )
    .unwrap();
    let p = ExposurePolicy::decode(&bytes).unwrap();
    let ids: Vec<&str> = p.roots().iter().map(|r| r.id().as_str()).collect();
    assert_eq!(ids, ["code", "code-2"]);
    assert_eq!(p.canonical_bytes().unwrap(), bytes);
    assert_eq!(p.runtime_templates().len(), 2);
    assert!(starter(&[(PathBuf::from("/"), StarterRoot::default())], &[]).is_err());
}

pub(crate) fn created() -> CreatedRecord {
    let mut r = CreatedRecord {
        exposure_id: ExposureId::new("x0123").unwrap(),
        generation: 1,
        scope_digest: crate::Sha256Digest::of(b""),
        scope_nonce: [7; 16],
        label: ExposureLabel::new("proj").unwrap(),
        modes: vec![ExposureMode::new(
            Access::ReadOnly,
            Materialization::Copy,
            10,
        )],
        created_at_ms: 1,
        expires_at_ms: 2,
        runtimes: vec![],
        root_id: crate::ids::ExposureRootId::new("src").unwrap(),
        relative_path: "a/b".into(),
        dev: 3,
        ino: 4,
    };
    r.scope_digest = scope_digest(&r.scope()).unwrap();
    r
}

#[test]
fn records_round_trip_and_refuse_tampering() {
    let r = created();
    let b = r.encode().unwrap();
    assert_eq!(CreatedRecord::decode(&b).unwrap(), r);
    // Another path under the same digest: the digest does not verify.
    let moved = String::from_utf8(b.clone()).unwrap().replace("a/b", "a/c");
    assert_eq!(
        CreatedRecord::decode(moved.as_bytes()).unwrap_err().code(),
        EXPOSURE_RECORD_INVALID
    );
    for bad_path in ["", "/a", "a/", "a//b", "a/../b", "."] {
        let mut x = r.clone();
        x.relative_path = bad_path.into();
        x.scope_digest = scope_digest(&x.scope()).unwrap();
        assert!(x.check().is_err(), "{bad_path:?}");
    }
    let rv = RevokedRecord {
        exposure_id: r.exposure_id.clone(),
        generation: 1,
        revoked_at_ms: 9,
    };
    assert_eq!(RevokedRecord::decode(&rv.encode().unwrap()).unwrap(), rv);
    assert!(
        RevokedRecord::decode(b"{\"exposure_id\":\"x\",\"generation\":0,\"revoked_at_ms\":1}")
            .is_err()
    );
    assert!(CreatedRecord::decode(b" {}").is_err());
}

#[test]
fn a_catalog_entry_never_shows_local_facts() {
    let r = created();
    let j = CatalogEntry::of(&r, LeaseState::Live).to_json().to_string();
    for local in [
        "a/b",
        "src",
        "\"dev\"",
        "\"ino\"",
        "root_id",
        "relative_path",
        "0707",
    ] {
        assert!(!j.contains(local), "{local} in {j}");
    }
}
