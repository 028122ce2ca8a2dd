//! Receipt compaction killed with SIGKILL at many points, with real files
//! and real `fsync`.
//!
//! As in `crash`, the iterations run in a driver process of their own. Each
//! iteration re-invokes this test binary as a child that opens (or creates)
//! a receipt journal and loops: append a receipt (printing `RCPT <seq>` once
//! it is durable), acknowledge all but the newest two (`ACK <seq>` once the
//! acknowledgement is durable), then compact (`BEGIN`, then
//! `END <microseconds>`). The child also keeps one reservation held across
//! every compaction (`HELD` once it is durable). The driver kills the child
//! with SIGKILL after a random number of `BEGIN`s plus a random delay within
//! the compaction times seen so far, so kills land before, inside (at every
//! step: new file written, anchor naming both files, rename, directory
//! sync, anchor rewritten) and after compactions. It then reopens the
//! journal, which must succeed, and checks that nothing reported durable is
//! lost: every reported receipt is either kept or covered by the
//! acknowledged head, the acknowledged head is at least the last one
//! reported, the held reservation is still held, and the offline verifier
//! accepts the file with its anchor and acknowledged-head files. The next
//! iteration continues on the same journal. Iterations: 120 by default,
//! `GLOVE_RECEIPT_CRASH_ITERS` to change.

use crate::common::{anchor, body, key, tempdir, Rng};
use crate::sessions::sid;
use glove_journal::receipt::{
    verify_file_with, EvidenceFiles, ReceiptConfig, ReceiptJournal, ReceiptKind,
};
use glove_journal::JournalError;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "GLOVE_RECEIPT_CRASH_CHILD";
const DRIVER_ENV: &str = "GLOVE_RECEIPT_CRASH_DRIVER";

/// The child's body; a no-op unless run as the crash child.
#[test]
fn compaction_crash_child() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let path = std::path::PathBuf::from(path);
    let cfg = ReceiptConfig::default();
    let mut j = match ReceiptJournal::open(&path, key(), &anchor(), cfg) {
        Ok((j, _)) => j,
        Err(JournalError::NotFound) => {
            ReceiptJournal::create(&path, key(), &anchor(), cfg).unwrap()
        }
        Err(e) => panic!("child open: {e:?}"),
    };
    let live = sid("held");
    if j.held_reservation(&live).is_none() {
        let _r = j.reserve(&live).unwrap();
    }
    println!("HELD");
    loop {
        let n = j.head().seq + 1;
        let s = sid(&format!("c{n}"));
        // A kill between reserve and receipt leaves the reservation held.
        let r = match j.held_reservation(&s) {
            Some(r) => r,
            None => j.reserve(&s).unwrap(),
        };
        let stored = j
            .append_receipt(&r, ReceiptKind::ResourceV1, &body(n))
            .unwrap();
        println!("RCPT {}", stored.seq);
        let head = j.head().seq;
        let acked = j.acked().map_or(j.base().seq, |a| a.seq);
        if head - acked > 2 {
            let page = j.page(acked, (head - acked - 2) as usize, 1 << 20).unwrap();
            j.ack(&page.head).unwrap();
            println!("ACK {}", page.head.seq);
        }
        println!("BEGIN");
        let t = Instant::now();
        let _ = j.compact().unwrap();
        println!("END {}", t.elapsed().as_micros());
    }
}

#[test]
fn sigkill_during_compaction_loses_nothing() {
    if std::env::var_os(DRIVER_ENV).is_some() {
        return crash_iterations();
    }
    crate::common::run_driver(
        "receipt_compaction_crash::sigkill_during_compaction_loses_nothing",
        DRIVER_ENV,
    );
}

fn crash_iterations() {
    let iters: u64 = std::env::var("GLOVE_RECEIPT_CRASH_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    let d = tempdir();
    let exe = std::env::current_exe().unwrap();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let path = d.path().join("receipts");
    let cfg = ReceiptConfig::default();
    let (mut max_rcpt, mut last_ack) = (0u64, 0u64);
    let mut compact_us: Vec<u64> = Vec::new();
    let (mut inside, mut outside) = (0u32, 0u32);
    for iter in 0..iters {
        let stderr = std::fs::File::create(d.path().join("child.stderr")).unwrap();
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "receipt_compaction_crash::compaction_crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .env_remove(DRIVER_ENV)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let kill_at_begin = 1 + rng.below(4);
        // A delay within the compactions seen so far (the first ones are
        // killed at once): this picks the point of the kill, it does not
        // wait for anything.
        let longest = compact_us.iter().copied().max().unwrap_or(0);
        let delay = Duration::from_micros(rng.below(longest + longest / 4 + 1));
        let (mut begins, mut killed, mut held, mut in_compaction) = (0, false, false, false);
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let mut f = line.split(' ');
            match (f.next(), f.next().map(|x| x.parse::<u64>())) {
                (Some("HELD"), None) => held = true,
                (Some("RCPT"), Some(Ok(seq))) => max_rcpt = max_rcpt.max(seq),
                (Some("ACK"), Some(Ok(seq))) => last_ack = last_ack.max(seq),
                (Some("BEGIN"), None) => {
                    in_compaction = true;
                    begins += 1;
                    if begins == kill_at_begin && !killed {
                        std::thread::sleep(delay);
                        child.kill().unwrap();
                        killed = true;
                    }
                }
                (Some("END"), Some(Ok(us))) => {
                    in_compaction = false;
                    compact_us.push(us);
                }
                _ => {}
            }
        }
        let status = child.wait().unwrap();
        if !killed {
            let err = std::fs::read_to_string(d.path().join("child.stderr")).unwrap();
            panic!("iteration {iter}: child ended by itself ({status}): {err}");
        }
        if in_compaction {
            inside += 1;
        } else {
            outside += 1;
        }
        let (j, _) = ReceiptJournal::open(&path, key(), &anchor(), cfg)
            .unwrap_or_else(|e| panic!("iteration {iter}: reopen failed: {e:?}"));
        let acked = j.acked().map_or(anchor().seq, |a| a.seq);
        let head = j.head().seq;
        assert!(
            head >= max_rcpt,
            "iteration {iter}: receipt {max_rcpt} reported durable, head is {head}"
        );
        assert!(
            acked >= last_ack,
            "iteration {iter}: ack {last_ack} reported durable, acked head is {acked}"
        );
        assert!(j.base().seq <= acked, "iteration {iter}: base past the ack");
        // Everything after the acknowledged head is still in the file.
        let kept: Vec<u64> = j.receipts().iter().map(|r| r.seq).collect();
        let want: Vec<u64> = (j.base().seq + 1..=head).collect();
        assert_eq!(kept, want, "iteration {iter}: receipts kept");
        if held {
            assert!(
                j.held_reservation(&sid("held")).is_some(),
                "iteration {iter}: the held reservation was lost"
            );
        }
        let base = j.base();
        drop(j);
        let anchor_file = path.with_file_name("receipts.anchor");
        let ack_file = path.with_file_name("receipts.ack");
        let files = EvidenceFiles {
            anchor_file: Some(&anchor_file),
            ack_file: Some(&ack_file),
        };
        let v = verify_file_with(&path, &key(), &base, &files)
            .unwrap_or_else(|e| panic!("iteration {iter}: verify failed: {e:?}"));
        assert_eq!(v.head.seq, head, "iteration {iter}");
        max_rcpt = head;
        last_ack = acked;
    }
    // Staging files a kill left behind (`.<name>.new.*`, `.<name>.anchor.tmp.*`)
    // are garbage, not evidence; count them for the log.
    let leftovers = std::fs::read_dir(d.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().starts_with('.'))
        })
        .count();
    eprintln!(
        "compaction crash test: {iters} iterations, {inside} killed inside a compaction, \
         {outside} outside; {} compactions completed; {leftovers} staging files left",
        compact_us.len()
    );
    assert!(inside > 0, "no kill landed inside a compaction");
}
