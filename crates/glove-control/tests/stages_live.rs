//! A stage whose session's mount still lives is never frozen, inspected or
//! removed, even when the process that held its lock is gone (gloved killed while
//! its launcher keeps the sandbox): attaching the image a second time would
//! put two file systems over one ext4. Real ext4 and loop devices; root only
//! (skipped with a reason otherwise, failing under GLOVE_REQUIRE_SANDBOX=1).

use glove_control::stages::{self, MakeStage, StageStore};
use glove_types::codes::retained::RETAINED_STAGE_BUSY;

fn ready() -> Option<glove_sandbox::retained::Mkfs> {
    let required = std::env::var("GLOVE_REQUIRE_SANDBOX").is_ok_and(|v| v == "1");
    match glove_sandbox::retained::support() {
        Ok(m) => Some(m),
        Err(u) => {
            assert!(!required, "GLOVE_REQUIRE_SANDBOX=1 but {}", u.reason);
            eprintln!("skipping: {}", u.reason);
            None
        }
    }
}

#[test]
fn a_live_mount_keeps_the_stage_from_being_frozen_or_inspected() {
    let Some(mkfs) = ready() else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    std::fs::create_dir(tmp.path().join("src")).expect("src");
    std::fs::write(tmp.path().join("src/a.txt"), "a\n").expect("a");
    let store = StageStore::open(&tmp.path().join("stages")).expect("store");
    let stage = store.create("s-live", "workspace").expect("create");
    let src = tmp.path().join("src");
    let (live, mount) = stages::make(
        stage,
        &MakeStage {
            mkfs: &mkfs,
            target: "/workspace",
            source: Some(&src),
            source_fd: None,
            bytes: 64 << 20,
            owner: (0, 0),
            now_ms: 1,
        },
    )
    .expect("make");
    // The session's writable mount lives on; the lock's holder is gone.
    let root = mount.mount;
    let stages::LiveStage {
        stage, lock, held, ..
    } = live;
    drop(lock);
    let e = stages::freeze(&stage, 2).expect_err("frozen under a live mount");
    assert_eq!(e.code(), RETAINED_STAGE_BUSY, "{e:?}");
    let e = stages::inspect(&stage, 2).expect_err("inspected under a live mount");
    assert_eq!(e.code(), RETAINED_STAGE_BUSY, "{e:?}");
    let e = store
        .remove("s-live", Some("workspace"))
        .expect_err("removed under a live mount");
    assert_eq!(e.code(), RETAINED_STAGE_BUSY, "{e:?}");
    assert_eq!(
        stage.record().expect("record").state,
        stages::StageState::Live
    );
    // Once the mount is gone, the stage freezes.
    drop(root);
    held.release(std::time::Duration::from_secs(10))
        .expect("release");
    let rec = stages::freeze(&stage, 3).expect("freeze");
    assert_eq!(rec.state, stages::StageState::Frozen);
}
