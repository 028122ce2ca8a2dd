//! Crash test with real processes.
//!
//! The test runs in a driver process of its own (this binary re-invoked,
//! see below). The driver re-invokes this test binary as a child (selected
//! by an environment variable) that appends from four threads sharing one
//! journal and prints `ACK <seq> <thread> <counter>` on its stdout pipe for
//! every acknowledged record. The driver `SIGKILL`s the child after a random
//! number of acknowledgements (while appends are in flight), collects every
//! acknowledgement the child managed to print, reopens the journal and
//! checks that each acknowledged record is present and intact and that
//! every record is self-consistent. Iterations: 200 by default,
//! `GLOVE_JOURNAL_CRASH_ITERS` to change.

use crate::common::{tempdir, Rng};
use glove_journal::format::JournalKind;
use glove_journal::{Journal, JournalError, JournalSpec};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;

const CHILD_ENV: &str = "GLOVE_JOURNAL_CRASH_CHILD";
const SEED_ENV: &str = "GLOVE_JOURNAL_CRASH_SEED";
const THREADS: u8 = 4;

const CRASH_SPEC: JournalSpec = JournalSpec {
    kind: JournalKind::GENERIC,
    max_bytes: 64 << 20,
    max_records: 1_000_000,
    max_payload: 1024,
    record_kinds: &[1],
};

/// A self-describing payload: thread, counter, length, then a pattern.
fn payload(tid: u8, counter: u32, len: usize) -> Vec<u8> {
    let mut v = vec![tid];
    v.extend_from_slice(&counter.to_le_bytes());
    v.extend_from_slice(&(len as u16).to_le_bytes());
    v.extend((0..len).map(|i| (u32::from(tid) * 31 + counter * 7 + i as u32) as u8));
    v
}

fn parse_payload(p: &[u8]) -> Option<(u8, u32)> {
    let tid = *p.first()?;
    let counter = u32::from_le_bytes(p.get(1..5)?.try_into().ok()?);
    let len = u16::from_le_bytes(p.get(5..7)?.try_into().ok()?) as usize;
    (payload(tid, counter, len) == p).then_some((tid, counter))
}

/// The child's body; a no-op unless run as the crash child.
#[test]
fn crash_child() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let seed: u64 = std::env::var(SEED_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let path = std::path::PathBuf::from(path);
    let journal = match Journal::open(&path, &CRASH_SPEC, None) {
        Ok(o) => o.journal,
        Err(JournalError::NotFound) => Journal::create(&path, &CRASH_SPEC).unwrap(),
        Err(e) => panic!("child open: {e:?}"),
    };
    let journal = Arc::new(journal);
    let threads: Vec<_> = (0..THREADS)
        .map(|tid| {
            let j = Arc::clone(&journal);
            std::thread::spawn(move || {
                let mut rng = Rng(seed.wrapping_mul(u64::from(tid) + 7) | 1);
                for counter in 0u32.. {
                    let len = rng.below(300) as usize;
                    let a = j.append(1, &payload(tid, counter, len)).unwrap();
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "ACK {} {tid} {counter}", a.seq).unwrap();
                    out.flush().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

const DRIVER_ENV: &str = "GLOVE_JOURNAL_CRASH_DRIVER";

/// The iterations run in a child process of their own (the *driver*): each
/// spawn copies every open descriptor of the spawning process until exec,
/// and in this multi-threaded test binary that includes the journal locks
/// of tests running beside it. One spawn, guarded by `common::SPAWN`, instead
/// of one per iteration.
#[test]
fn sigkill_while_appending_loses_nothing_acknowledged() {
    if std::env::var_os(DRIVER_ENV).is_some() {
        return crash_iterations();
    }
    crate::common::run_driver(
        "crash::sigkill_while_appending_loses_nothing_acknowledged",
        DRIVER_ENV,
    );
}

fn crash_iterations() {
    let iters: u64 = std::env::var("GLOVE_JOURNAL_CRASH_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let d = tempdir();
    let exe = std::env::current_exe().unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut acked: BTreeMap<u64, (u8, u32)> = BTreeMap::new();
    let mut path = d.path().join("crash-0");
    let mut killed_mid_flight = 0;
    for iter in 0..iters {
        // A fresh journal every 25 rounds keeps reopen cheap in debug builds.
        if iter % 25 == 0 {
            path = d.path().join(format!("crash-{iter}"));
            acked.clear();
        }
        let stderr = std::fs::File::create(d.path().join("child.stderr")).unwrap();
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash::crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &path)
            .env(SEED_ENV, rng.next().to_string())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .env_remove(DRIVER_ENV)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let kill_after = 1 + rng.below(40);
        let mut seen = 0;
        let mut killed = false;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let Some(rest) = line.strip_prefix("ACK ") else {
                continue;
            };
            let f: Vec<u64> = rest.split(' ').map(|x| x.parse().unwrap()).collect();
            let prev = acked.insert(f[0], (f[1] as u8, f[2] as u32));
            assert!(prev.is_none(), "seq {} acknowledged twice", f[0]);
            seen += 1;
            if seen == kill_after && !killed {
                child.kill().unwrap();
                killed = true;
            }
        }
        let status = child.wait().unwrap();
        if !killed {
            let err = std::fs::read_to_string(d.path().join("child.stderr")).unwrap();
            panic!("iteration {iter}: child ended by itself ({status}): {err}");
        }
        if seen > kill_after {
            killed_mid_flight += 1;
        }
        let opened = Journal::open(&path, &CRASH_SPEC, None)
            .unwrap_or_else(|e| panic!("iteration {iter}: reopen failed: {e:?}"));
        let mut present = BTreeMap::new();
        for r in opened.records() {
            let id = parse_payload(r.payload)
                .unwrap_or_else(|| panic!("iteration {iter}: record {} damaged", r.seq));
            present.insert(r.seq, id);
        }
        for (seq, id) in &acked {
            assert_eq!(
                present.get(seq),
                Some(id),
                "iteration {iter}: acknowledged record {seq} lost or changed"
            );
        }
        // Records written but not reported are kept too: adopt them so the
        // next round's numbering check stays exact.
        acked = present;
    }
    eprintln!("crash test: {iters} iterations, {killed_mid_flight} with acks racing the kill");
}
