//! `SIGKILL` during session-store compaction loses nothing: real files,
//! real `fsync`, real processes.
//!
//! A driver process (this binary re-invoked, as in `crash`) prepares a
//! store — anchored and unanchored — holding live sessions at every live
//! stage, terminal ones, and a first compaction's carried nonces. For each
//! iteration it copies that store into a fresh directory and runs a child
//! (this binary again) that opens it and compacts it:
//!
//! * **at a crash point**: the child is built with the crate's
//!   `crash-points` feature and stops at the named step (after the
//!   snapshot is built, after the anchor names both files, after the new
//!   file is synced, after the rename, after the store switched to the new
//!   file, after the anchor is collapsed), prints it and waits; the driver
//!   `SIGKILL`s it there. Each step must reopen to exactly the old store
//!   (before the rename) or exactly the compacted one (after it);
//! * **at a random moment**: the child compacts in a loop (a session
//!   created and ended, then a compaction carrying one more nonce) and the
//!   driver kills it right after the k-th compaction reported, while the
//!   next is under way.
//!
//! After every kill the store must open (through its anchor file where it
//! has one), every live session's records must be intact byte for byte,
//! the carried nonces must be those of the old or the new snapshot (at
//! least every one a reported compaction carried), no rewrite sibling may
//! be left, and the store must compact again.

use crate::common::{key, tempdir, write_file, Rng};
use crate::compaction::{evidence, kept, live_payloads, nonce, plan, Kept};
use crate::sessions::{key as ikey, new_session, sid};
use glove_journal::anchor_file::{AnchorFile, STORE_ANCHOR_DOMAIN};
use glove_journal::session::record::CarriedNonce;
use glove_journal::testing::StoreWriter;
use glove_journal::SessionStore;
use glove_types::ids::SessionId;
use glove_types::stage::SessionStage;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const DRIVER_ENV: &str = "GLOVE_STORE_COMPACT_CRASH_DRIVER";
const CHILD_ENV: &str = "GLOVE_STORE_COMPACT_CRASH_CHILD";
const ANCHORED_ENV: &str = "GLOVE_STORE_COMPACT_CRASH_ANCHORED";
const LOOP_ENV: &str = "GLOVE_STORE_COMPACT_CRASH_LOOP";
const POINT_ENV: &str = "GLOVE_JOURNAL_CRASH_POINT";
/// The child's clock and the nonces it carries.
const NOW_MS: u64 = 1_000;
const CARRY: [(u64, u64); 4] = [(10, 5_000), (11, 900), (12, 6_000), (1, 7_000)];

/// The steps of a compaction, in order, and whether the file at the
/// store's name is the new one once the step is reached.
const POINTS: [(&str, bool); 6] = [
    ("store_compact_built", false),
    ("store_compact_announced", false),
    ("journal_new_synced", false),
    ("journal_new_renamed", true),
    ("store_compact_in_place", true),
    ("store_compact_done", true),
];

fn open(p: &Path, anchored: bool) -> SessionStore {
    let r = if anchored {
        let file = AnchorFile::beside(p, key(), STORE_ANCHOR_DOMAIN).unwrap();
        SessionStore::open_anchored(p, file)
    } else {
        SessionStore::open(p, None)
    };
    r.unwrap_or_else(|e| panic!("open {p:?}: {e:?}")).0
}

fn carry() -> Vec<([u8; 16], u64)> {
    CARRY.iter().map(|(n, e)| (nonce(*n), *e)).collect()
}

/// The child's body; a no-op unless run as the crash child.
#[test]
fn compact_child() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let p = PathBuf::from(path);
    let anchored = std::env::var_os(ANCHORED_ENV).is_some_and(|v| v == "1");
    let mut st = open(&p, anchored);
    let mut out = std::io::stdout().lock();
    if std::env::var_os(LOOP_ENV).is_none() {
        st.compact(&carry(), NOW_MS).unwrap();
        writeln!(out, "DONE").unwrap();
        out.flush().unwrap();
        return;
    }
    let mut carried = carry();
    for i in 0u64.. {
        let id = sid(&format!("loop-{i}"));
        st.create_session(new_session(&id, &ikey(&format!("loop-key-{i}")), &plan(i)))
            .unwrap();
        st.transition(
            &id,
            SessionStage::Failed,
            &evidence(SessionStage::Failed, i),
        )
        .unwrap();
        carried.push((nonce(100 + i), u64::MAX));
        st.compact(&carried, NOW_MS).unwrap();
        writeln!(out, "COMPACTED {i}").unwrap();
        out.flush().unwrap();
    }
}

/// What the prepared store holds.
struct Template {
    store: Vec<u8>,
    anchor: Vec<u8>,
    /// Every session and its stage before compaction.
    all: BTreeMap<SessionId, SessionStage>,
    /// The live sessions' records.
    live: BTreeMap<SessionId, Kept>,
    /// The live sessions' record payloads in file order.
    payloads: Vec<(u16, Vec<u8>)>,
    generation: u64,
    old_nonces: Vec<CarriedNonce>,
    new_nonces: Vec<CarriedNonce>,
}

fn template(dir: &Path) -> Template {
    let p = dir.join("sessions");
    let file = AnchorFile::beside(&p, key(), STORE_ANCHOR_DOMAIN).unwrap();
    let mut st = SessionStore::create_anchored(&p, file).unwrap();
    let mut rng = Rng(0xc0ff_ee00_1234_5678);
    let mut n = 0u64;
    let mut add = |st: &mut SessionStore, target: SessionStage| {
        let id = sid(&format!("s{n}"));
        st.create_session(new_session(&id, &ikey(&format!("k{n}")), &plan(n)))
            .unwrap();
        let path: &[SessionStage] = match target {
            SessionStage::Failed => &[SessionStage::Preparing, SessionStage::Failed],
            SessionStage::Exited => &SessionStage::ALL[1..=5],
            other => {
                let i = SessionStage::ALL.iter().position(|s| *s == other).unwrap();
                &SessionStage::ALL[1..=i]
            }
        };
        for s in path {
            st.transition(&id, *s, &evidence(*s, n)).unwrap();
        }
        n += 1;
    };
    for _ in 0..40 {
        let target = SessionStage::ALL[rng.below(7) as usize];
        add(&mut st, target);
    }
    st.compact(
        &[(nonce(1), 2_000), (nonce(2), 500), (nonce(3), 3_000)],
        100,
    )
    .unwrap();
    for target in SessionStage::ALL.into_iter().chain(SessionStage::ALL) {
        add(&mut st, target);
    }
    let all = st
        .index()
        .iter()
        .map(|r| (r.session_id().clone(), r.stage()))
        .collect();
    let live: BTreeMap<SessionId, Kept> = st
        .index()
        .iter()
        .filter(|r| !r.stage().is_terminal())
        .map(|r| (r.session_id().clone(), kept(&st, r.session_id()).unwrap()))
        .collect();
    let generation = st.generation();
    let old_nonces = st.carried_nonces().to_vec();
    drop(st);
    let store = std::fs::read(&p).unwrap();
    let anchor = std::fs::read(dir.join("sessions.anchor")).unwrap();
    // What the child's compaction must produce: nonce 2 (expired at 500)
    // and 11 (at 900) go; 1 keeps the later expiry.
    let new_nonces = [(1, 7_000), (3, 3_000), (10, 5_000), (12, 6_000)]
        .iter()
        .map(|(n, e)| CarriedNonce {
            nonce: nonce(*n),
            expires_at_ms: *e,
        })
        .collect();
    Template {
        payloads: live_payloads(&store),
        store,
        anchor,
        all,
        live,
        generation,
        old_nonces,
        new_nonces,
    }
}

/// Copies the template into `dir` (with its anchor file when `anchored`).
fn place(t: &Template, dir: &Path, anchored: bool) -> PathBuf {
    let p = dir.join("sessions");
    write_file(&p, &t.store);
    if anchored {
        write_file(&dir.join("sessions.anchor"), &t.anchor);
    }
    p
}

/// Runs the child on `p` until it prints a line `stop` accepts (then
/// `SIGKILL`s it) or ends. Returns every line and whether it was killed.
/// (The child's first line of its own starts with libtest's `test … ...`.)
fn run_child(
    p: &Path,
    anchored: bool,
    envs: &[(&str, &str)],
    mut stop: impl FnMut(&str) -> bool,
) -> (Vec<String>, bool) {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        "compaction_crash::compact_child",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, p)
    .env(ANCHORED_ENV, if anchored { "1" } else { "0" })
    .env_remove(DRIVER_ENV)
    .env_remove(LOOP_ENV)
    .env_remove(POINT_ENV)
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    // A watchdog, so a child stuck by a bug fails the test instead of
    // hanging it: it kills the child if it still runs after a minute.
    let (done, watch) = std::sync::mpsc::channel::<()>();
    let pid = rustix::process::Pid::from_raw(child.id() as i32);
    let watchdog = std::thread::spawn(move || {
        if watch
            .recv_timeout(std::time::Duration::from_secs(60))
            .is_err()
        {
            if let Some(pid) = pid {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
            return true;
        }
        false
    });
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().unwrap();
    let mut lines = Vec::new();
    let mut killed = false;
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let hit = !killed && stop(&line);
        lines.push(line);
        if hit {
            child.kill().unwrap();
            killed = true;
        }
    }
    let status = child.wait().unwrap();
    drop(stdin);
    let _ = done.send(());
    assert!(!watchdog.join().unwrap(), "child hung: {lines:?}");
    assert!(
        killed || status.success(),
        "child failed: {status} {lines:?}"
    );
    (lines, killed)
}

/// The checks after every kill; returns whether the store is the
/// compacted one.
fn check_reopened(t: &Template, dir: &Path, anchored: bool, case: &str) -> (bool, SessionStore) {
    let p = dir.join("sessions");
    let st = open(&p, anchored);
    for (id, want) in &t.live {
        assert_eq!(kept(&st, id).as_ref(), Some(want), "{case}: {id}");
    }
    assert_eq!(
        live_payloads(&std::fs::read(&p).unwrap())[..t.payloads.len()],
        t.payloads[..],
        "{case}: live records byte for byte"
    );
    let compacted = st.generation() > t.generation;
    if anchored {
        let a = AnchorFile::beside(&p, key(), STORE_ANCHOR_DOMAIN)
            .unwrap()
            .load()
            .unwrap()
            .unwrap();
        assert_eq!(a.next, None, "{case}: the reopen collapsed the anchor");
        assert_eq!(a.current, st.anchor(), "{case}");
    }
    let leftovers: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".sessions."))
        .collect();
    assert!(leftovers.is_empty(), "{case}: {leftovers:?}");
    (compacted, st)
}

/// See the module docs. Iterations: every crash point 3 times for each of
/// the anchored and the unanchored store, a run without a crash, and 30
/// random-moment kills for each (`GLOVE_STORE_COMPACT_CRASH_ITERS` changes
/// the 30).
#[test]
fn sigkill_during_compaction_loses_nothing() {
    if std::env::var_os(DRIVER_ENV).is_some() {
        return crash_iterations();
    }
    crate::common::run_driver(
        "compaction_crash::sigkill_during_compaction_loses_nothing",
        DRIVER_ENV,
    );
}

fn crash_iterations() {
    let random_iters: u64 = std::env::var("GLOVE_STORE_COMPACT_CRASH_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let root = tempdir();
    let t = template(root.path());
    let mut rng = Rng(0x5eed_0000_0000_0001);
    let mut iteration = 0u32;
    let mut fresh = || {
        iteration += 1;
        let d = root.path().join(format!("i{iteration}"));
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        d
    };
    for anchored in [true, false] {
        let cases = POINTS
            .iter()
            .map(|(p, new)| (Some(*p), *new))
            .flat_map(|c| [c, c, c])
            .chain([(None, true)]);
        for (point, new) in cases {
            let case = format!("{point:?} anchored={anchored}");
            let d = fresh();
            let p = place(&t, &d, anchored);
            let envs: Vec<(&str, &str)> = point.map(|x| (POINT_ENV, x)).into_iter().collect();
            let (lines, killed) = run_child(&p, anchored, &envs, |l| l.contains("CRASH_POINT "));
            // Without an anchor file the anchor is never announced, so that
            // point is never reached and the compaction completes.
            let reached = point.is_some() && (anchored || point != Some("store_compact_announced"));
            assert_eq!(killed, reached, "{case}: {lines:?}");
            let (compacted, mut st) = check_reopened(&t, &d, anchored, &case);
            let new = new || !reached;
            assert_eq!(compacted, new, "{case}");
            if compacted {
                assert_eq!(st.carried_nonces(), &t.new_nonces[..], "{case}");
                assert_eq!(st.index().len(), t.live.len(), "{case}");
            } else {
                assert_eq!(st.carried_nonces(), &t.old_nonces[..], "{case}");
                let all: BTreeMap<_, _> = st
                    .index()
                    .iter()
                    .map(|r| (r.session_id().clone(), r.stage()))
                    .collect();
                assert_eq!(all, t.all, "{case}: exactly the old store");
            }
            // Usable: it compacts again and reopens.
            st.compact(&carry(), NOW_MS).unwrap();
            drop(st);
            let (_, st) = check_reopened(&t, &d, anchored, &case);
            assert_eq!(st.carried_nonces(), &t.new_nonces[..], "{case}");
        }
        for _ in 0..random_iters {
            let kill_after = rng.below(8);
            let case = format!("random kill after {kill_after} compactions, anchored={anchored}");
            let d = fresh();
            let p = place(&t, &d, anchored);
            let want = format!("COMPACTED {kill_after}");
            let (lines, killed) =
                run_child(&p, anchored, &[(LOOP_ENV, "1")], |l| l.ends_with(&want));
            assert!(killed, "{case}: {lines:?}");
            let (compacted, mut st) = check_reopened(&t, &d, anchored, &case);
            assert!(compacted, "{case}");
            // Every reported compaction's nonces are carried.
            assert!(st.generation() > t.generation + kill_after, "{case}");
            for i in 0..=kill_after {
                assert_eq!(
                    st.carried_nonce(&nonce(100 + i)),
                    Some(u64::MAX),
                    "{case}: {i}"
                );
            }
            for (n, e) in CARRY.iter().filter(|(_, e)| *e > NOW_MS) {
                assert!(st.carried_nonce(&nonce(*n)) >= Some(*e), "{case}: {n}");
            }
            st.compact(&[], NOW_MS).unwrap();
        }
    }
    eprintln!("compaction crash test: {iteration} iterations");
}
