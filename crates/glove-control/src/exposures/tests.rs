use super::*;
use glove_types::policy::Materialization;

fn params(v: serde_json::Value) -> CreateParams {
    serde_json::from_value(v).expect("params")
}

#[test]
fn labels_come_from_the_last_component() {
    assert_eq!(default_label("/a/My Project").as_str(), "my-project");
    assert_eq!(default_label("/a/..x").as_str(), "x");
    assert_eq!(default_label("/a/___").as_str(), "project");
    assert_eq!(destination(&default_label("/a/web")), "/work/web");
}

#[test]
fn modes_and_runtimes_are_subsets() {
    let allowed = [
        ExposureMode::new(Access::ReadOnly, Materialization::Copy, 1),
        ExposureMode::new(Access::EphemeralWrite, Materialization::Copy, 2),
    ];
    let p = params(json!({"path": "/x", "modes": ["ephemeral_write", "read_only", "read_only"]}));
    assert_eq!(p.modes(&allowed).unwrap(), allowed.to_vec());
    let p = params(json!({"path": "/x", "modes": ["retained_write"]}));
    assert_eq!(
        p.modes(&allowed).unwrap_err().code(),
        EXPOSURE_MODE_NOT_ALLOWED
    );
    let p = params(json!({"path": "/x", "modes": []}));
    assert_eq!(
        p.modes(&allowed).unwrap_err().code(),
        EXPOSURE_MODE_NOT_ALLOWED
    );
    let t = [RuntimeTemplateId::new("a").unwrap()];
    let p = params(json!({"path": "/x", "runtimes": ["b"]}));
    assert_eq!(p.runtimes(&t).unwrap_err().code(), EXPOSURE_RUNTIME_INVALID);
    let p = params(json!({"path": "/x"}));
    assert_eq!(p.runtimes(&t).unwrap(), t.to_vec());
    assert!(serde_json::from_value::<CreateParams>(json!({"path": "/x", "root": "y"})).is_err());
    assert!(
        serde_json::from_value::<RevokeParams>(json!({"exposure_id": "x", "path": "/"})).is_err()
    );
}

#[test]
fn projects_are_opened_beneath_the_root_without_links() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("real/p")).unwrap();
    std::fs::write(d.path().join("file"), "x").unwrap();
    std::os::unix::fs::symlink(d.path().join("real"), d.path().join("link")).unwrap();
    std::os::unix::fs::symlink(d.path().join("real/p"), d.path().join("last")).unwrap();
    let root = glove_fs::unconfined::open_dir_no_links(d.path()).unwrap();
    let (_, id) = open_project(&root, "real/p").unwrap();
    let st = std::fs::metadata(d.path().join("real/p")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(id, (st.dev(), st.ino()));
    for (rel, code) in [
        ("link/p", EXPOSURE_PATH_SYMLINK),
        ("last", EXPOSURE_PATH_SYMLINK),
        ("missing", EXPOSURE_PATH_NOT_FOUND),
        ("file", EXPOSURE_PATH_NOT_DIRECTORY),
        ("../x", EXPOSURE_PATH_CROSSES_MOUNT),
    ] {
        assert_eq!(open_project(&root, rel).unwrap_err().code(), code, "{rel}");
    }
}
