//! Tests for the journal: appends, failures and what stays durable.

use super::*;

const SPEC: JournalSpec = JournalSpec {
    kind: crate::format::JournalKind::GENERIC,
    max_bytes: 1 << 20,
    max_records: 100,
    max_payload: 4096,
    record_kinds: &[1, 2],
};

#[test]
fn queued_records_are_durable_only_with_a_later_append_or_flush() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let path = dir.path().join("j");
    let j = Journal::create(&path, &SPEC).unwrap();
    let _ = j.queue(1, b"closing").unwrap();
    // Not durable yet: the anchor does not count it, and a handle
    // dropped now leaves nothing on disk.
    assert_eq!(j.anchor().records, 0);
    assert_eq!(j.record_count(), 1);
    let _ = j.append(2, b"decision").unwrap();
    assert_eq!(j.anchor().records, 2, "one sync covered both");
    let _ = j.queue(1, b"closing again").unwrap();
    drop(j);
    let opened = Journal::open(&path, &SPEC, None).unwrap();
    assert_eq!(opened.record_count(), 2, "the unflushed record is gone");
    let (j, ..) = opened.into_parts();
    let _ = j.queue(1, b"closing").unwrap();
    j.flush().unwrap();
    assert_eq!(j.anchor().records, 3);
    j.flush().unwrap();
    drop(j);
    assert_eq!(Journal::open(&path, &SPEC, None).unwrap().record_count(), 3);
}

#[test]
fn poisoned_handle_refuses_everything() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let path = dir.path().join("j");
    let j = Journal::create(&path, &SPEC).unwrap();
    let _ = j.append(1, b"a").unwrap();
    j.state().unwrap().poisoned = true;
    assert_eq!(
        j.append(1, b"b").unwrap_err().code(),
        glove_types::codes::journal::JOURNAL_POISONED
    );
    assert!(j.rewrite([]).is_err());
    drop(j);
    let o = Journal::open(&path, &SPEC, None).unwrap();
    assert_eq!(o.record_count(), 1);
}

/// Issue 14, finding 4: the anchor counts only what a completed sync
/// covered, never a record whose sync failed.
#[test]
fn issue_14_the_anchor_never_counts_a_record_whose_sync_failed() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let path = dir.path().join("j");
    let j = Journal::create(&path, &SPEC).unwrap();
    let _ = j.append(1, b"durable").unwrap();
    let durable = j.anchor();
    assert_eq!(durable.records, 1);
    let (appended, st) = j.write(1, b"never synced").unwrap();
    let fail = |_: &[u8], _: u64| Err((IoOp::Sync, rustix::io::Errno::IO));
    let e = j.commit.wait_durable(st, appended.seq, &fail).unwrap_err();
    assert_eq!(e.code(), glove_types::codes::journal::JOURNAL_SYNC_FAILED);
    assert_eq!(j.anchor(), durable);
}
