//! The per-session transcript and the events attached clients receive.

use glove_types::digest::to_hex;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::Arc;

/// One event of a session's stream.
#[derive(Clone, Debug)]
pub enum Event {
    /// Terminal output with its sequence number.
    Output(u64, Arc<[u8]>),
    /// The session ended; its terminal record is durable.
    Ended(Value),
}

impl Event {
    /// The notification sent to attached clients.
    pub fn notification(&self, session: &str) -> Value {
        match self {
            Event::Output(seq, data) => crate::protocol::notification(
                "output",
                json!({"session_id": session, "seq": seq, "data_hex": to_hex(data)}),
            ),
            Event::Ended(v) => crate::protocol::notification("session_ended", v.clone()),
        }
    }
}

/// A bounded transcript of output chunks.
#[derive(Debug)]
pub(super) struct Transcript {
    pub(super) chunks: VecDeque<(u64, Arc<[u8]>)>,
    pub(super) bytes: usize,
    pub(super) cap: usize,
    pub(super) next_seq: u64,
}

impl Transcript {
    pub(super) fn push(&mut self, data: Arc<[u8]>) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.bytes += data.len();
        self.chunks.push_back((seq, data));
        while self.bytes > self.cap {
            match self.chunks.pop_front() {
                Some((_, d)) => self.bytes -= d.len(),
                None => break,
            }
        }
        seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::Arc;

    #[test]
    fn transcript_keeps_the_most_recent_bytes() {
        let mut t = Transcript {
            chunks: VecDeque::new(),
            bytes: 0,
            cap: 10,
            next_seq: 1,
        };
        for i in 0..5u8 {
            t.push(Arc::from(vec![i; 4]));
        }
        assert_eq!(t.next_seq, 6);
        let seqs: Vec<u64> = t.chunks.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, [4, 5]);
        assert!(t.bytes <= 10);
    }
}
