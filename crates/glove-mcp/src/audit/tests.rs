//! Tests for the MCP audit.

use super::*;

fn ev() -> AuditEvent {
    AuditEvent {
        seq: 1,
        session_id: SessionId::new("s1").expect("id"),
        server: Some("everything".into()),
        tool: Some("echo".into()),
        method: Some("tools/call".into()),
        decision: Decision::Allowed,
        code: None,
        arguments_sha256: Some(Sha256Digest::of(b"a")),
        result_sha256: Some(Sha256Digest::of(b"r")),
        latency_ms: 3,
        started_at_ms: 1_700_000_000_000,
        count: None,
    }
}

fn private_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    d
}

#[tokio::test]
async fn a_writer_that_ends_unshut_answers_every_waiting_event_not_recorded() {
    let dir = private_dir();
    let (audit, writer) =
        open(&dir.path().join("a.journal"), &journal_spec(1 << 20, 100)).expect("open");
    let audit = Arc::new(audit);
    let a = audit.clone();
    let waiting = tokio::spawn(async move { a.record(ev()).await });
    while audit
        .queue
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .jobs
        .is_empty()
    {
        tokio::task::yield_now().await;
    }
    // As a panic, an abort or a runtime going away would.
    drop(writer);
    let answered = tokio::time::timeout(std::time::Duration::from_secs(30), waiting)
        .await
        .expect("the waiting event is answered")
        .expect("task");
    assert!(!answered, "answered: not recorded");
    assert!(audit.failed());
    assert!(
        !audit.record(ev()).await,
        "a later event is refused at once"
    );
}

#[tokio::test]
async fn the_writer_ends_when_the_audit_is_dropped() {
    let dir = private_dir();
    let (audit, task) =
        spawn(&dir.path().join("a.journal"), &journal_spec(1 << 20, 100)).expect("spawn");
    assert!(audit.record(ev()).await);
    let failed = audit.failed.clone();
    drop(audit);
    let s = tokio::time::timeout(std::time::Duration::from_secs(30), task)
        .await
        .expect("the writer ends")
        .expect("task");
    assert_eq!(
        (s.allowed, s.journal_records, s.audit_failed),
        (1, 1, false)
    );
    assert!(!failed.load(Ordering::SeqCst), "a normal end is no failure");
}

#[tokio::test]
async fn an_aborted_writer_fails_closed() {
    let dir = private_dir();
    let (audit, task) =
        spawn(&dir.path().join("a.journal"), &journal_spec(1 << 20, 100)).expect("spawn");
    task.abort();
    assert!(task.await.is_err_and(|e| e.is_cancelled()));
    assert!(audit.failed());
    assert!(!audit.record(ev()).await, "refused at once");
}

#[test]
fn round_trip_and_rules() {
    let b = ev().encode().expect("valid");
    assert_eq!(AuditEvent::decode(&b).expect("decodes"), ev());
    let mut e = ev();
    e.decision = Decision::Denied;
    assert!(e.encode().is_err(), "a denial names a code, no result");
    e.result_sha256 = None;
    e.code = Some(MCP_TOOL_DENIED);
    assert!(e.encode().is_ok());
    e.code = Some(glove_types::codes::egress::EGRESS_TIMEOUT);
    assert!(e.encode().is_err(), "mcp codes only");
    let with_null = String::from_utf8(b.clone()).expect("utf-8").replacen(
        "\"decision\"",
        "\"code\":null,\"decision\"",
        1,
    );
    assert!(AuditEvent::decode(with_null.as_bytes()).is_err());
    let spaced = String::from_utf8(b).expect("utf-8").replacen(':', ": ", 1);
    assert_eq!(
        AuditEvent::decode(spaced.as_bytes()).map_err(|r| r.code().as_str()),
        Err("mcp_event_invalid")
    );
}
