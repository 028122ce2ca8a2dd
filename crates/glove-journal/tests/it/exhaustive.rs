//! Every truncation and every single-bit flip of small journals of each
//! kind: the result is either exactly the longest valid prefix (only when
//! the damage is a torn tail) or corruption — never changed content.

use crate::common::{anchor, body, key, tempdir, write_file, SPEC};
use crate::sessions::{key as ikey, new_session, sid};
use glove_journal::receipt::{verify_bytes, ReceiptConfig, ReceiptJournal, ReceiptKind};
use glove_journal::session::{replay_session_bytes, SESSION_STORE_SPEC};
use glove_journal::testing::StoreWriter;
use glove_journal::{replay_bytes, Journal, JournalError, JournalSpec, SessionStore};
use glove_types::stage::SessionStage;
use std::path::Path;

type Rec = (u16, u64, Vec<u8>);

#[derive(Clone, Copy, Debug)]
enum Kind {
    Generic,
    Sessions,
    Receipts,
}

impl Kind {
    fn spec(self) -> JournalSpec {
        match self {
            Kind::Generic => SPEC,
            Kind::Sessions => SESSION_STORE_SPEC,
            Kind::Receipts => ReceiptConfig::default().spec(),
        }
    }

    fn build(self, path: &Path) {
        match self {
            Kind::Generic => {
                let j = Journal::create(path, &SPEC).unwrap();
                for (k, p) in [
                    (1u16, &b"one"[..]),
                    (2, b""),
                    (3, b"three three"),
                    (1, b"4"),
                ] {
                    let _ = j.append(k, p).unwrap();
                }
            }
            Kind::Sessions => {
                let mut st = SessionStore::create(path).unwrap();
                let (a, b) = (sid("a"), sid("b"));
                let (ka, kb) = (ikey("ka"), ikey("kb"));
                st.create_session(new_session(&a, &ka, br#"{"p":1}"#))
                    .unwrap();
                st.transition(&a, SessionStage::Preparing, b"{}").unwrap();
                st.create_session(new_session(&b, &kb, br#"{"p":2}"#))
                    .unwrap();
                st.transition(&a, SessionStage::Failed, br#"{"c":"x"}"#)
                    .unwrap();
            }
            Kind::Receipts => {
                let mut j =
                    ReceiptJournal::create(path, key(), &anchor(), ReceiptConfig::default())
                        .unwrap();
                let r1 = j.reserve(&sid("a")).unwrap();
                let r2 = j.reserve(&sid("b")).unwrap();
                j.append_receipt(&r1, ReceiptKind::ResourceV1, &body(1))
                    .unwrap();
                j.release(r2).unwrap();
                let r3 = j.reserve(&sid("c")).unwrap();
                j.append_receipt(&r3, ReceiptKind::ResourceV1, &body(2))
                    .unwrap();
            }
        }
    }

    /// Pure decode: the records if every layer accepts the image, and
    /// whether a torn tail was found.
    fn decode(self, bytes: &[u8]) -> Result<(Vec<Rec>, bool), JournalError> {
        let replayed = match self {
            Kind::Generic => replay_bytes(bytes, &SPEC, None)?,
            Kind::Sessions => replay_session_bytes(bytes, None)?.1,
            Kind::Receipts => {
                verify_bytes(bytes, &key(), &anchor())?;
                replay_bytes(bytes, &self.spec(), None)?
            }
        };
        let recs = replayed
            .records
            .iter()
            .map(|m| (m.kind, m.seq, bytes[m.payload.clone()].to_vec()))
            .collect();
        Ok((recs, replayed.torn.is_some()))
    }

    /// Real open (with torn-tail repair): the records it recovered.
    fn open(self, path: &Path) -> Result<(Vec<Rec>, bool), JournalError> {
        let torn = match self {
            Kind::Generic => Journal::open(path, &SPEC, None)?.report.torn.is_some(),
            Kind::Sessions => SessionStore::open(path, None)?.1.torn.is_some(),
            Kind::Receipts => {
                ReceiptJournal::open(path, key(), &anchor(), ReceiptConfig::default())?
                    .1
                    .torn
                    .is_some()
            }
        };
        let bytes = std::fs::read(path).unwrap();
        let (recs, torn_after) = self.decode(&bytes)?;
        assert!(!torn_after, "repair left a torn tail");
        Ok((recs, torn))
    }
}

fn fixture(kind: Kind) -> (tempfile::TempDir, Vec<u8>, Vec<Rec>, Vec<usize>) {
    let d = tempdir();
    let p = d.path().join("j");
    kind.build(&p);
    let bytes = std::fs::read(&p).unwrap();
    let (recs, torn) = kind.decode(&bytes).unwrap();
    assert!(!torn);
    let r = replay_bytes(&bytes, &kind.spec(), None).unwrap();
    let ends = r.records.iter().map(|m| m.payload.end + 32).collect();
    (d, bytes, recs, ends)
}

fn every_truncation(kind: Kind) {
    let (d, bytes, recs, ends) = fixture(kind);
    let p = d.path().join("cut");
    let (mut recovered, mut rejected) = (0, 0);
    for t in 0..=bytes.len() {
        write_file(&p, &bytes[..t]);
        match kind.open(&p) {
            Ok((got, torn)) => {
                let n = ends.iter().filter(|e| **e <= t).count();
                assert_eq!(got, recs[..n], "{kind:?} cut at {t}");
                let at_boundary = t == 80 || ends.contains(&t);
                assert_eq!(torn, !at_boundary, "{kind:?} cut at {t}");
                assert_eq!(
                    std::fs::metadata(&p).unwrap().len() as usize,
                    if n == 0 { 80 } else { ends[n - 1] }
                );
                recovered += 1;
            }
            Err(e) => {
                assert!(e.is_corrupt(), "{kind:?} cut at {t}: {e:?}");
                rejected += 1;
            }
        }
        for entry in std::fs::read_dir(d.path()).unwrap() {
            let name = entry.unwrap().file_name();
            if name.to_string_lossy().contains(".torn.") {
                std::fs::remove_file(d.path().join(name)).unwrap();
            }
        }
    }
    // Headers shorter than 80 bytes are corrupt; everything else recovers,
    // except receipts cut before their base record is complete.
    assert!(rejected >= 80, "{kind:?}: {rejected}");
    assert!(recovered > 0);
}

fn every_bit_flip(kind: Kind) {
    let (_d, bytes, recs, _) = fixture(kind);
    let mut img = bytes.clone();
    let mut accepted = 0;
    for i in 0..bytes.len() {
        for bit in 0..8 {
            img[i] ^= 1 << bit;
            match kind.decode(&img) {
                Ok((got, torn)) => {
                    assert!(
                        torn && got.len() < recs.len() && got == recs[..got.len()],
                        "{kind:?} flip {i}:{bit} accepted changed content"
                    );
                    accepted += 1;
                }
                Err(e) => assert!(e.is_corrupt(), "{kind:?} flip {i}:{bit}: {e:?}"),
            }
            img[i] ^= 1 << bit;
        }
    }
    // Flips inside the final record's payload or digest read as a torn
    // final record; nothing else is accepted.
    assert!(accepted > 0);
}

#[test]
fn generic_every_truncation() {
    every_truncation(Kind::Generic);
}

#[test]
fn generic_every_bit_flip() {
    every_bit_flip(Kind::Generic);
}

#[test]
fn sessions_every_truncation() {
    every_truncation(Kind::Sessions);
}

#[test]
fn sessions_every_bit_flip() {
    every_bit_flip(Kind::Sessions);
}

#[test]
fn receipts_every_truncation() {
    every_truncation(Kind::Receipts);
}

#[test]
fn receipts_every_bit_flip() {
    every_bit_flip(Kind::Receipts);
}
