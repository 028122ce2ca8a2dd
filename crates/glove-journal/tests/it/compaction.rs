// This file is over 600 lines because it is one battery on the session store's compaction (bounded disk, live sessions kept, nonces carried, snapshot decoding) sharing one step driver.
//! Session-store compaction (issue 14, finding 2): a store serves sessions
//! without end in bounded disk; live sessions survive byte for byte; used
//! start-authorization nonces are carried; admissions are refused up front
//! when the live sessions' reserve would not fit.

use crate::common::{memdir, no_spawn, tempdir, write_file, Rng};
use crate::sessions::{key as ikey, new_session, sid};
use glove_journal::format::{encode_image, JournalKind};
use glove_journal::session::record::{
    decode_snapshot, encode_snapshot, CarriedNonce, Snapshot, KIND_CREATE, KIND_SNAPSHOT,
    MAX_CARRIED_NONCES,
};
use glove_journal::session::{
    replay_session_bytes, Room, MAX_STORE_BYTES, MAX_STORE_RECORDS, SESSION_RESERVE,
};
use glove_journal::testing::StoreWriter;
use glove_journal::SessionStore;
use glove_types::codes::journal as jc;
use glove_types::ids::SessionId;
use glove_types::stage::SessionStage;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

pub(crate) fn plan(n: u64) -> Vec<u8> {
    format!(r#"{{"plan":{n}}}"#).into_bytes()
}

pub(crate) fn evidence(stage: SessionStage, n: u64) -> Vec<u8> {
    format!(r#"{{"n":{n},"stage":"{}"}}"#, stage.as_str()).into_bytes()
}

pub(crate) fn nonce(n: u64) -> [u8; 16] {
    let mut b = [0xa5; 16];
    b[..8].copy_from_slice(&n.to_be_bytes());
    b
}

/// A live session as the store must keep it: plan and transitions.
pub(crate) type Kept = (Vec<u8>, Vec<(SessionStage, Vec<u8>)>);

/// What the store holds of one session, read through its public API.
pub(crate) fn kept(st: &SessionStore, id: &SessionId) -> Option<Kept> {
    let r = st.get(id)?;
    let t = st.transitions(id)?;
    Some((
        r.plan().to_vec(),
        t.iter()
            .map(|t| (t.stage(), t.evidence().to_vec()))
            .collect(),
    ))
}

/// The payloads, in file order, of every record of every session that is
/// not terminal in this store image (snapshot records left out).
pub(crate) fn live_payloads(image: &[u8]) -> Vec<(u16, Vec<u8>)> {
    let (index, replayed) = replay_session_bytes(image, None).expect("image replays");
    replayed
        .records
        .iter()
        .filter(|m| m.kind != KIND_SNAPSHOT)
        .filter_map(|m| {
            let p = &image[m.payload.clone()];
            let len = usize::from(p[0]);
            let id = SessionId::new(std::str::from_utf8(&p[1..1 + len]).ok()?).ok()?;
            let live = !index.get(&id)?.stage().is_terminal();
            live.then(|| (m.kind, p.to_vec()))
        })
        .collect()
}

/// One durable transition, mirrored in the model of live sessions.
fn step(
    st: &mut SessionStore,
    model: &mut BTreeMap<SessionId, Kept>,
    id: &SessionId,
    stage: SessionStage,
    n: u64,
) {
    let ev = evidence(stage, n);
    let t = st.transition(id, stage, &ev).unwrap();
    assert!(t.appended);
    if stage.is_terminal() {
        model.remove(id);
    } else if let Some(m) = model.get_mut(id) {
        m.1.push((stage, ev));
    }
}

/// Issue 14, finding 2: 100,000 sessions through one store lifetime (ten
/// times what the record bound held before compaction), compacting
/// whenever `needs_compaction()` says so. The file stays within about half
/// its record bound the whole time, and the sessions that are live at each
/// compaction (four that live through all of them and a window of recent
/// ones) come through byte for byte, as do the carried nonces.
///
/// Most sessions go created → failed (two durable appends); one in sixteen
/// goes the whole way (created … exited, six): about 225,000 appends. Each
/// append is one `fdatasync`, so on this host's disk (~160 µs a sync, more
/// under load) the test takes 60–80 s in the debug profile, almost all of
/// it in those syncs (compaction is under half a second of it). It
/// therefore runs in `/dev/shm` when there is one (about 25 s);
/// `GLOVE_JOURNAL_TEST_ON_DISK=1` runs it on the disk. Durability through
/// compaction is the crash test's job (`compaction_crash`, real disk).
/// `GLOVE_STORE_SESSIONS` changes the count.
#[test]
fn issue_14_finding_2_a_store_serves_100k_sessions_in_bounded_disk() {
    let sessions: u64 = std::env::var("GLOVE_STORE_SESSIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    const WINDOW: usize = 8;
    const NONCE_TTL_MS: u64 = 3_000;
    let started = Instant::now();
    let d = memdir();
    let p = d.path().join("sessions");
    let mut st = SessionStore::create(&p).unwrap();
    let mut model: BTreeMap<SessionId, Kept> = BTreeMap::new();
    let mut used_nonces: BTreeMap<[u8; 16], u64> = BTreeMap::new();
    // Four sessions that stay live through every compaction, one at each
    // live stage.
    let long: Vec<SessionId> = (0..4).map(|i| sid(&format!("long-{i}"))).collect();
    for (i, id) in long.iter().enumerate() {
        let pl = plan(1_000_000 + i as u64);
        st.create_session(new_session(id, &ikey(&format!("long-key-{i}")), &pl))
            .unwrap();
        model.insert(id.clone(), (pl, Vec::new()));
        for stage in &SessionStage::ALL[1..=i + 1] {
            step(&mut st, &mut model, id, *stage, i as u64);
        }
    }
    let mut inflight: VecDeque<(SessionId, bool)> = VecDeque::new();
    let (mut compactions, mut appends, mut max_used) = (0u64, 0u64, Room::default());
    let mut compaction_time = std::time::Duration::ZERO;
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for i in 0..sessions {
        let now_ms = i * 10;
        let before = st.used().records;
        let id = sid(&format!("s{i}"));
        let pl = plan(i);
        st.create_session(new_session(&id, &ikey(&format!("k{i}")), &pl))
            .unwrap();
        model.insert(id.clone(), (pl, Vec::new()));
        let full = i % 16 == 0;
        if full {
            for stage in [
                SessionStage::Preparing,
                SessionStage::Starting,
                SessionStage::Running,
            ] {
                step(&mut st, &mut model, &id, stage, i);
            }
            used_nonces.insert(nonce(i), now_ms + NONCE_TTL_MS);
        }
        inflight.push_back((id, full));
        if inflight.len() > WINDOW {
            // End a session at random in the window, so the live ones are
            // interleaved with the dead ones in the file.
            let at = rng.below(inflight.len() as u64) as usize;
            let (id, full) = inflight.remove(at).unwrap();
            if full {
                step(&mut st, &mut model, &id, SessionStage::Stopping, i);
                step(&mut st, &mut model, &id, SessionStage::Exited, i);
            } else {
                step(&mut st, &mut model, &id, SessionStage::Failed, i);
            }
        }
        appends += st.used().records - before;
        let used = st.used();
        max_used = Room {
            records: max_used.records.max(used.records),
            bytes: max_used.bytes.max(used.bytes),
        };
        assert!(
            used.records <= MAX_STORE_RECORDS / 2 + 16 && used.bytes <= MAX_STORE_BYTES / 2,
            "session {i}: {used:?} past the bound"
        );
        if st.needs_compaction() {
            used_nonces.retain(|_, e| *e > now_ms);
            let carry: Vec<([u8; 16], u64)> = used_nonces.iter().map(|(n, e)| (*n, *e)).collect();
            let check_bytes = compactions % 8 == 0;
            let old_image = check_bytes.then(|| std::fs::read(&p).unwrap());
            let t = Instant::now();
            let report = st.compact(&carry, now_ms).unwrap();
            compaction_time += t.elapsed();
            compactions += 1;
            assert_eq!(report.generation, compactions);
            assert_eq!(report.sessions_kept, model.len() as u64);
            assert_eq!(report.after, st.used());
            assert_eq!(std::fs::metadata(&p).unwrap().len(), st.used().bytes);
            // Live sessions byte for byte, through the API and in the file.
            assert_eq!(st.index().len(), model.len());
            for (id, want) in &model {
                assert_eq!(kept(&st, id).as_ref(), Some(want), "{id}");
            }
            if let Some(old) = old_image {
                let new = std::fs::read(&p).unwrap();
                assert_eq!(live_payloads(&old), live_payloads(&new));
            }
            let carried: Vec<([u8; 16], u64)> = st
                .carried_nonces()
                .iter()
                .map(|c| (c.nonce, c.expires_at_ms))
                .collect();
            assert_eq!(carried, carry);
        }
    }
    let anchor = st.anchor();
    let carried = st.carried_nonces().to_vec();
    drop(st);
    let _g = no_spawn();
    let (st, _) = SessionStore::open(&p, Some(&anchor)).unwrap();
    assert_eq!(st.carried_nonces(), &carried[..]);
    let live = st
        .index()
        .iter()
        .filter(|r| !r.stage().is_terminal())
        .count();
    assert_eq!(live, model.len());
    for (id, want) in &model {
        assert_eq!(kept(&st, id).as_ref(), Some(want), "{id}");
    }
    assert!(appends > 20 * MAX_STORE_RECORDS, "{appends} appends");
    assert!(compactions > 20, "{compactions} compactions");
    eprintln!(
        "100k store: {sessions} sessions, {appends} appends, {compactions} compactions \
         ({compaction_time:?} in compaction), peak {max_used:?}, {:?} in all",
        started.elapsed()
    );
}

/// What the store did before compaction existed: after 10,000 records
/// (about 5,000 short sessions) every creation fails, and a restart does
/// not help. Compaction is the way out.
#[test]
fn issue_14_finding_2_without_compaction_the_store_runs_out_and_compaction_recovers() {
    let d = tempdir();
    let p = d.path().join("sessions");
    let mut st = SessionStore::create(&p).unwrap();
    let mut n = 0u64;
    let err = loop {
        let id = sid(&format!("s{n}"));
        match st.create_session(new_session(&id, &ikey(&format!("k{n}")), &plan(n))) {
            Ok(_) => {}
            Err(e) => break e,
        }
        st.transition(
            &id,
            SessionStage::Failed,
            &evidence(SessionStage::Failed, n),
        )
        .unwrap();
        n += 1;
    };
    assert_eq!(err.code(), jc::STORE_NO_ROOM, "{err:?}");
    assert!(n < MAX_STORE_RECORDS / 2, "{n}");
    assert!(st.needs_compaction());
    drop(st);
    let _g = no_spawn();
    let (mut st, _) = SessionStore::open(&p, None).unwrap();
    let id = sid(&format!("s{n}"));
    let again = st
        .create_session(new_session(&id, &ikey(&format!("k{n}")), &plan(n)))
        .unwrap_err();
    assert_eq!(again.code(), jc::STORE_NO_ROOM, "a restart does not help");
    let report = st.compact(&[], 0).unwrap();
    assert_eq!(
        (report.sessions_dropped, report.sessions_kept),
        (n, 0),
        "{report:?}"
    );
    assert_eq!(st.used().records, 1);
    st.create_session(new_session(&id, &ikey(&format!("k{n}")), &plan(n)))
        .unwrap();
}

/// A creation, `preparing` and `starting` are admitted only while the room
/// left covers what every live session may still need; the appends on the
/// way to a terminal stage always fit, so no admitted session is ever
/// stuck without room for its terminal record.
#[test]
fn admissions_keep_room_for_every_live_session_to_end() {
    let d = tempdir();
    let p = d.path().join("sessions");
    let mut st = SessionStore::create(&p).unwrap();
    // Started sessions (a started one holds room for three more records).
    let mut started = Vec::new();
    let err = loop {
        let n = started.len() as u64;
        let id = sid(&format!("s{n}"));
        st.create_session(new_session(&id, &ikey(&format!("k{n}")), &plan(n)))
            .unwrap();
        st.transition(&id, SessionStage::Preparing, b"{}").unwrap();
        match st.check_room_to_start(&id) {
            Ok(()) => {
                st.transition(&id, SessionStage::Starting, b"{}").unwrap();
                started.push(id);
            }
            Err(e) => {
                // The transition refuses exactly the same, before anything
                // is written.
                let len = st.used();
                let t = st
                    .transition(&id, SessionStage::Starting, b"{}")
                    .unwrap_err();
                assert_eq!(t.code(), e.code());
                assert_eq!(st.used(), len);
                break e;
            }
        }
    };
    assert_eq!(err.code(), jc::STORE_NO_ROOM);
    assert!(started.len() > 100, "{}", started.len());
    // Fill what is left with creations until they are refused too.
    let mut created = Vec::new();
    loop {
        let n = 1_000_000 + created.len() as u64;
        let id = sid(&format!("c{n}"));
        match st.create_session(new_session(&id, &ikey(&format!("k{n}")), &plan(n))) {
            Ok(_) => created.push(id),
            Err(e) => {
                assert_eq!(e.code(), jc::STORE_NO_ROOM);
                break;
            }
        }
    }
    assert!(!st.has_room_for(SESSION_RESERVE.records, SESSION_RESERVE.bytes));
    // Every live session can still end, with the largest evidence there is.
    let big = format!(r#"{{"pad":"{}"}}"#, "x".repeat(64 * 1024 - 12)).into_bytes();
    assert!(big.len() <= glove_journal::session::MAX_EVIDENCE_BYTES);
    for id in &started {
        for stage in [
            SessionStage::Running,
            SessionStage::Stopping,
            SessionStage::Exited,
        ] {
            st.transition(id, stage, &big).unwrap();
        }
    }
    for id in &created {
        st.transition(id, SessionStage::Failed, &big).unwrap();
    }
    let preparing = sid(&format!("s{}", started.len()));
    st.transition(&preparing, SessionStage::Failed, &big)
        .unwrap();
    assert!(st.needs_compaction());
    let report = st.compact(&[], 0).unwrap();
    assert_eq!(report.sessions_kept, 0);
    assert!(st.has_room_for(SESSION_RESERVE.records, SESSION_RESERVE.bytes));
}

/// Carried nonces: the union of the previous snapshot's and the supplied
/// ones, deduplicated with the later expiry, expired ones dropped, at most
/// `MAX_CARRIED_NONCES` (more is refused and nothing changes); they
/// survive a reopen. Live sessions keep their records byte for byte and in
/// order; terminal ones, with their ids and keys, are gone.
#[test]
fn compaction_keeps_live_sessions_and_carries_nonces() {
    let d = tempdir();
    let p = d.path().join("sessions");
    let mut st = SessionStore::create(&p).unwrap();
    assert_eq!(st.generation(), 0);
    assert!(st.carried_nonces().is_empty());
    for n in 0..6u64 {
        let id = sid(&format!("s{n}"));
        st.create_session(new_session(&id, &ikey(&format!("k{n}")), &plan(n)))
            .unwrap();
    }
    for (n, stages) in [
        (0u64, &[SessionStage::Preparing, SessionStage::Failed][..]),
        (1, &[SessionStage::Preparing, SessionStage::Starting][..]),
        (2, &[SessionStage::Failed][..]),
        (3, &[SessionStage::Preparing][..]),
        (1, &[SessionStage::Running, SessionStage::Stopping][..]),
        (5, &[SessionStage::Preparing, SessionStage::Starting][..]),
        (5, &[SessionStage::Running, SessionStage::Stopping][..]),
        (5, &[SessionStage::Exited][..]),
    ] {
        for s in stages {
            st.transition(&sid(&format!("s{n}")), *s, &evidence(*s, n))
                .unwrap();
        }
    }
    let old = std::fs::read(&p).unwrap();
    let live: Vec<SessionId> = [1, 3, 4].iter().map(|n| sid(&format!("s{n}"))).collect();
    let before: Vec<Kept> = live.iter().map(|id| kept(&st, id).unwrap()).collect();
    assert_eq!(st.reclaimable().records, 3 + 2 + 6);
    let carry = [
        (nonce(1), 100),
        (nonce(2), 50),
        (nonce(1), 200),
        (nonce(3), 10),
    ];
    let r = st.compact(&carry, 10).unwrap();
    assert_eq!(r.generation, 1);
    assert_eq!((r.sessions_kept, r.sessions_dropped), (3, 3));
    assert_eq!((r.nonces_carried, r.nonces_expired), (2, 1));
    assert_eq!(st.reclaimable(), Room::default());
    let new = std::fs::read(&p).unwrap();
    assert_eq!(live_payloads(&old), live_payloads(&new));
    let (_, replayed) = replay_session_bytes(&new, None).unwrap();
    assert_eq!(replayed.records[0].kind, KIND_SNAPSHOT);
    let kinds: Vec<u16> = replayed.records.iter().map(|m| m.kind).collect();
    assert_eq!(replayed.records.len(), 1 + 5 + 2 + 1, "{kinds:?}");
    let want = [
        CarriedNonce {
            nonce: nonce(1),
            expires_at_ms: 200,
        },
        CarriedNonce {
            nonce: nonce(2),
            expires_at_ms: 50,
        },
    ];
    assert_eq!(st.carried_nonces(), &want[..]);
    assert_eq!(st.carried_nonce(&nonce(2)), Some(50));
    assert_eq!(st.carried_nonce(&nonce(3)), None);
    for (id, b) in live.iter().zip(&before) {
        assert_eq!(kept(&st, id).as_ref(), Some(b));
    }
    // Terminal sessions are forgotten: their id and key are free again
    // (the runtime refuses such a reuse through the receipt journal).
    assert!(st.get(&sid("s0")).is_none());
    assert!(st.by_idempotency_key(&ikey("k0")).is_none());
    // The still-live ones still refuse reuse.
    let e = st
        .create_session(new_session(&sid("s1"), &ikey("kx"), &plan(1)))
        .unwrap_err();
    assert_eq!(e.code(), jc::SESSION_CONFLICT);

    // Too many unexpired nonces: refused, nothing written.
    let many: Vec<([u8; 16], u64)> = (0..MAX_CARRIED_NONCES as u64)
        .map(|n| (nonce(1000 + n), 1_000))
        .collect();
    let e = st.compact(&many, 20).unwrap_err();
    assert_eq!(e.code(), jc::STORE_NONCES_TOO_MANY);
    assert_eq!(std::fs::read(&p).unwrap(), new);
    // Exactly the bound fits once the old ones expire.
    let r = st.compact(&many, 500).unwrap();
    assert_eq!(
        (r.generation, r.nonces_carried, r.nonces_expired),
        (2, MAX_CARRIED_NONCES as u64, 2)
    );
    let anchor = st.anchor();
    let carried = st.carried_nonces().to_vec();
    drop(st);
    let _g = no_spawn();
    let (mut st, _) = SessionStore::open(&p, Some(&anchor)).unwrap();
    assert_eq!(st.generation(), 2);
    assert_eq!(st.carried_nonces(), &carried[..]);
    for (id, b) in live.iter().zip(&before) {
        assert_eq!(kept(&st, id).as_ref(), Some(b));
    }
    // Transitions after compaction go on from the kept records.
    st.transition(&live[0], SessionStage::Exited, b"{}")
        .unwrap();
    let r = st.compact(&[], 2_000).unwrap();
    assert_eq!((r.sessions_kept, r.nonces_carried), (2, 0));
}

/// A snapshot record is only ever the first record, and only a strictly
/// encoded one; anything else is `store_snapshot_invalid`.
#[test]
fn a_misplaced_or_malformed_snapshot_is_corrupt() {
    let snap = encode_snapshot(&Snapshot {
        generation: 1,
        compacted_at_ms: 5,
        nonces: vec![],
    });
    let create = {
        let d = tempdir();
        let p = d.path().join("sessions");
        let mut st = SessionStore::create(&p).unwrap();
        st.create_session(new_session(&sid("a"), &ikey("ka"), b"{}"))
            .unwrap();
        let image = std::fs::read(&p).unwrap();
        let (_, r) = replay_session_bytes(&image, None).unwrap();
        image[r.records[0].payload.clone()].to_vec()
    };
    let ok = encode_image(
        JournalKind::SESSION_STORE,
        [1; 16],
        &[(KIND_SNAPSHOT, 1, &snap), (KIND_CREATE, 2, &create)],
    );
    let (index, _) = replay_session_bytes(&ok, None).unwrap();
    assert_eq!(index.snapshot().generation, 1);
    for records in [
        vec![(KIND_CREATE, 1, &create[..]), (KIND_SNAPSHOT, 2, &snap[..])],
        vec![(KIND_SNAPSHOT, 1, &snap[..]), (KIND_SNAPSHOT, 2, &snap[..])],
        vec![(KIND_SNAPSHOT, 1, &snap[..snap.len() - 1])],
        vec![(KIND_SNAPSHOT, 1, &[0u8; 20][..])],
    ] {
        let image = encode_image(JournalKind::SESSION_STORE, [1; 16], &records);
        let e = replay_session_bytes(&image, None).unwrap_err();
        assert_eq!(e.code(), jc::STORE_SNAPSHOT_INVALID);
    }
}

/// A rewrite a crash cut short leaves its new file beside the store; the
/// next open (which holds the lock) removes it, and nothing else.
#[test]
fn open_removes_a_rewrite_left_behind_by_a_crash() {
    let d = tempdir();
    let p = d.path().join("sessions");
    drop(SessionStore::create(&p).unwrap());
    let stale = d.path().join(".sessions.new.0123456789abcdef");
    let other = [
        d.path().join(".sessions.new.not-hex-at-all!"),
        d.path().join(".other.new.0123456789abcdef"),
    ];
    write_file(&stale, b"half a store");
    for o in &other {
        write_file(o, b"x");
    }
    let _g = no_spawn();
    let (_st, _) = SessionStore::open(&p, None).unwrap();
    assert!(!stale.exists());
    for o in &other {
        assert!(o.exists(), "{o:?}");
    }
}

fn any_nonces() -> impl Strategy<Value = Vec<CarriedNonce>> {
    proptest::collection::btree_map(any::<[u8; 16]>(), any::<u64>(), 0..40).prop_map(|m| {
        m.into_iter()
            .map(|(nonce, expires_at_ms)| CarriedNonce {
                nonce,
                expires_at_ms,
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Arbitrary bytes never panic the snapshot decoder, and whatever
    /// decodes re-encodes to exactly those bytes.
    #[test]
    fn snapshot_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Some(s) = decode_snapshot(&bytes) {
            prop_assert_eq!(encode_snapshot(&s), bytes);
        }
    }

    /// Valid snapshots round-trip; any one byte changed either still
    /// decodes (to something that re-encodes to the changed bytes) or is
    /// refused, and replay of an image holding it never panics.
    #[test]
    fn snapshots_round_trip_and_changes_never_panic(
        generation in 1u64..,
        at_ms in any::<u64>(),
        nonces in any_nonces(),
        at in any::<prop::sample::Index>(),
        flip in 1..=255u8,
    ) {
        let s = Snapshot { generation, compacted_at_ms: at_ms, nonces };
        let b = encode_snapshot(&s);
        prop_assert_eq!(decode_snapshot(&b), Some(s));
        let mut changed = b.clone();
        let i = at.index(changed.len());
        changed[i] ^= flip;
        if let Some(d) = decode_snapshot(&changed) {
            prop_assert_eq!(encode_snapshot(&d), changed.clone());
        }
        let image = encode_image(JournalKind::SESSION_STORE, [3; 16], &[(KIND_SNAPSHOT, 1, &changed)]);
        if let Err(e) = replay_session_bytes(&image, None) {
            prop_assert_eq!(e.code(), jc::STORE_SNAPSHOT_INVALID);
        }
    }
}

/// Sessions dropped by compaction are all terminal; every other one is
/// kept (a quick cross-check of the accounting on random workloads).
#[test]
fn compaction_drops_exactly_the_terminal_sessions() {
    let d = tempdir();
    let p = d.path().join("sessions");
    let mut st = SessionStore::create(&p).unwrap();
    let mut rng = Rng(77);
    let mut stages: BTreeMap<u64, SessionStage> = BTreeMap::new();
    for n in 0..300u64 {
        let id = sid(&format!("s{n}"));
        st.create_session(new_session(&id, &ikey(&format!("k{n}")), &plan(n)))
            .unwrap();
        let mut stage = SessionStage::Created;
        for _ in 0..rng.below(7) {
            let next = SessionStage::ALL
                .into_iter()
                .filter(|s| stage.can_transition(*s))
                .collect::<Vec<_>>();
            let Some(s) = next.get(rng.below(next.len() as u64) as usize) else {
                break;
            };
            st.transition(&id, *s, &evidence(*s, n)).unwrap();
            stage = *s;
        }
        stages.insert(n, stage);
    }
    let live: BTreeSet<u64> = stages
        .iter()
        .filter(|(_, s)| !s.is_terminal())
        .map(|(n, _)| *n)
        .collect();
    let r = st.compact(&[], 0).unwrap();
    assert_eq!(r.sessions_kept, live.len() as u64);
    assert_eq!(r.sessions_dropped, 300 - live.len() as u64);
    for n in 0..300u64 {
        assert_eq!(st.get(&sid(&format!("s{n}"))).is_some(), live.contains(&n));
    }
}
