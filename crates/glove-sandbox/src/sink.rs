//! The caller's side of agent output: writes that never block the
//! supervisor, and terminal control sequences made harmless.
//!
//! A [`Sink`] holds a bounded queue in front of one of the caller's
//! descriptors and writes to it only when the write cannot block: a
//! terminal or a pipe is reopened (`/proc/self/fd/N`) as a new open file
//! description with `O_NONBLOCK`, so the descriptor the caller shares with
//! its shell keeps its flags; a socket is written with `MSG_DONTWAIT`; a
//! regular file is written as it is (it never waits for a reader). The
//! supervisor polls [`Sink::wants_poll`] for room, stops reading the
//! agent's output while the queue is full (so the agent waits on its own
//! pipe), and keeps every watchdog running whatever the reader does.
//!
//! [`Neutralizer`] renders control sequences visibly, as `less -R` does:
//! SGR colour sequences (`ESC [ digits;… m`) pass; every other escape,
//! C0 control (except tab, newline, carriage return and backspace), DEL
//! and UTF-8-encoded C1 control becomes caret notation (`^[`, `^G`, `^?`,
//! `M-^[`), so an OSC 52 clipboard write, a title change or a cursor
//! report query never reaches the operator's terminal as one.

use crate::sys::fd::{self, PollEntry};
use crate::sys::resolve;
use crate::sys::Errno;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Instant;

/// Bytes a sink queues at most; beyond it the agent's output is not read.
pub const QUEUE_MAX: usize = 1 << 20;

/// Longest SGR sequence passed through (longer ones are neutralised).
const SGR_MAX: usize = 64;

/// How bytes reach the descriptor.
#[derive(Debug)]
enum Target {
    /// A new non-blocking open file description (terminal, pipe).
    Reopened(OwnedFd),
    /// A socket: `send(MSG_DONTWAIT)`.
    Socket(OwnedFd),
    /// A regular file: writes never wait for a reader.
    File(OwnedFd),
    /// Anything else that cannot be reopened: writes of at most
    /// `PIPE_BUF` bytes after `poll` says there is room.
    Plain(OwnedFd),
    /// Nothing to write to (closed, or a write failed for good).
    Gone,
}

/// A bounded, non-blocking writer in front of one of the caller's
/// descriptors.
#[derive(Debug)]
pub struct Sink {
    target: Target,
    queue: Vec<u8>,
    filter: Option<Neutralizer>,
}

impl Sink {
    /// A sink writing to `fd` (borrowed for the sink's life: the caller's
    /// standard output or error), neutralising control sequences when
    /// `neutralize` is set.
    pub fn new(fd: BorrowedFd<'_>, neutralize: bool) -> Sink {
        // A copy of the caller's descriptor (the same open file
        // description), owned by the sink.
        let own = || fd.try_clone_to_owned().ok();
        let target = match resolve::meta(fd) {
            Err(_) => None,
            Ok(m) => match m.mode & libc::S_IFMT {
                libc::S_IFSOCK => own().map(Target::Socket),
                libc::S_IFREG => own().map(Target::File),
                _ => match fd::reopen_write_nonblocking(fd) {
                    Ok(o) => Some(Target::Reopened(o)),
                    Err(_) => own().map(Target::Plain),
                },
            },
        }
        .unwrap_or(Target::Gone);
        Sink {
            target,
            queue: Vec::new(),
            filter: neutralize.then(Neutralizer::default),
        }
    }

    /// Queues `bytes` (after neutralising) and writes what can be written
    /// now. Bytes beyond [`QUEUE_MAX`] are dropped (the supervisor stops
    /// reading before that happens).
    pub fn push(&mut self, bytes: &[u8]) {
        if matches!(self.target, Target::Gone) {
            return;
        }
        match &mut self.filter {
            Some(f) => f.feed(bytes, &mut self.queue),
            None => self.queue.extend_from_slice(bytes),
        }
        self.queue.truncate(QUEUE_MAX.saturating_mul(4));
        self.flush();
    }

    /// Bytes waiting for room.
    pub fn backlog(&self) -> usize {
        self.queue.len()
    }

    /// The descriptor to poll for room, while bytes wait.
    pub fn wants_poll(&self) -> Option<RawFd> {
        if self.queue.is_empty() {
            return None;
        }
        match &self.target {
            Target::Reopened(f) | Target::Socket(f) | Target::File(f) | Target::Plain(f) => {
                Some(f.as_raw_fd())
            }
            Target::Gone => None,
        }
    }

    /// Writes what can be written without blocking.
    pub fn flush(&mut self) {
        while !self.queue.is_empty() {
            let r = match &self.target {
                Target::Reopened(o) => fd::write_once(o.as_fd(), &self.queue),
                Target::Socket(f) => fd::send_nonblocking(f.as_fd(), &self.queue),
                Target::File(f) => fd::write_once(f.as_fd(), &self.queue),
                Target::Plain(f) => {
                    let mut e = [PollEntry {
                        fd: f.as_raw_fd(),
                        events: libc::POLLOUT,
                        revents: 0,
                    }];
                    match fd::poll(&mut e, 0) {
                        Ok(1) if e[0].revents & libc::POLLOUT != 0 => {
                            // Room for at least PIPE_BUF bytes: never blocks.
                            let n = self.queue.len().min(libc::PIPE_BUF);
                            fd::write_once(f.as_fd(), &self.queue[..n])
                        }
                        Ok(1) => Err(Errno(libc::EPIPE)),
                        _ => return,
                    }
                }
                Target::Gone => {
                    self.queue.clear();
                    return;
                }
            };
            match r {
                Ok(0) | Err(Errno(libc::EAGAIN)) => return,
                Ok(n) => {
                    self.queue.drain(..n);
                }
                Err(Errno(libc::EINTR)) => {}
                Err(_) => {
                    self.target = Target::Gone;
                    self.queue.clear();
                }
            }
        }
    }

    /// Writes out the rest, waiting for room until `deadline` (the session
    /// is over: waiting no longer holds up any limit). What is left then is
    /// dropped; returns how many bytes were.
    pub fn finish(&mut self, deadline: Option<Instant>) -> usize {
        if let Some(f) = &mut self.filter {
            f.end(&mut self.queue);
        }
        loop {
            self.flush();
            let Some(fd) = self.wants_poll() else {
                return 0;
            };
            let timeout = match deadline {
                None => 1000,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        let dropped = self.queue.len();
                        self.queue.clear();
                        return dropped;
                    }
                    left.as_millis().clamp(1, 1000) as i32
                }
            };
            let mut e = [PollEntry {
                fd,
                events: libc::POLLOUT,
                revents: 0,
            }];
            let _ = fd::poll(&mut e, timeout);
        }
    }
}

/// The state of a streaming control-sequence neutraliser.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Neutralizer {
    state: State,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum State {
    #[default]
    Text,
    /// After ESC.
    Escape,
    /// After `ESC [`, with the parameter bytes so far.
    Csi(Vec<u8>),
    /// After a UTF-8 lead byte 0xC2 (a C1 control may follow).
    LeadC2,
}

impl Neutralizer {
    /// Appends the neutralised form of `input` to `out`.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        for &b in input {
            self.byte(b, out);
        }
    }

    /// Flushes a sequence left open at the end of the stream.
    pub fn end(&mut self, out: &mut Vec<u8>) {
        match std::mem::take(&mut self.state) {
            State::Text => {}
            State::Escape => out.extend_from_slice(b"^["),
            State::Csi(params) => {
                out.extend_from_slice(b"^[[");
                out.extend_from_slice(&params);
            }
            State::LeadC2 => out.push(0xC2),
        }
    }

    fn byte(&mut self, b: u8, out: &mut Vec<u8>) {
        match std::mem::take(&mut self.state) {
            State::Text => self.text(b, out),
            State::Escape => {
                if b == b'[' {
                    self.state = State::Csi(Vec::new());
                } else {
                    out.extend_from_slice(b"^[");
                    self.text(b, out);
                }
            }
            State::Csi(mut params) => {
                if b == b'm' {
                    out.extend_from_slice(b"\x1b[");
                    out.extend_from_slice(&params);
                    out.push(b'm');
                } else if (b.is_ascii_digit() || b == b';' || b == b':') && params.len() < SGR_MAX {
                    params.push(b);
                    self.state = State::Csi(params);
                } else {
                    out.extend_from_slice(b"^[[");
                    out.extend_from_slice(&params);
                    self.text(b, out);
                }
            }
            State::LeadC2 => {
                if (0x80..=0x9F).contains(&b) {
                    out.extend_from_slice(b"M-^");
                    out.push((b - 0x80) ^ 0x40);
                } else {
                    out.push(0xC2);
                    self.text(b, out);
                }
            }
        }
    }

    fn text(&mut self, b: u8, out: &mut Vec<u8>) {
        match b {
            0x1B => self.state = State::Escape,
            0xC2 => self.state = State::LeadC2,
            b'\t' | b'\n' | b'\r' | 0x08 => out.push(b),
            0x00..=0x1F => {
                out.push(b'^');
                out.push(b ^ 0x40);
            }
            0x7F => out.extend_from_slice(b"^?"),
            _ => out.push(b),
        }
    }
}

/// Neutralises `input` in one go (a whole stream).
pub fn neutralize(input: &[u8]) -> Vec<u8> {
    let mut n = Neutralizer::default();
    let mut out = Vec::with_capacity(input.len());
    n.feed(input, &mut out);
    n.end(&mut out);
    out
}

/// For the fuzz target: neutralising never panics, and its output holds no
/// escape but SGR and no control but tab, newline, return and backspace.
pub fn fuzz_neutralize(input: &[u8]) {
    let out = neutralize(input);
    assert!(only_harmless(&out));
}

/// Whether `out` holds only text, the four harmless controls and SGR
/// sequences.
pub fn only_harmless(out: &[u8]) -> bool {
    let mut i = 0;
    while i < out.len() {
        match out[i] {
            0x1B => {
                // Must be ESC [ params m.
                let rest = &out[i + 1..];
                if rest.first() != Some(&b'[') {
                    return false;
                }
                let Some(end) = rest.iter().position(|b| *b == b'm') else {
                    return false;
                };
                if !rest[1..end]
                    .iter()
                    .all(|b| b.is_ascii_digit() || *b == b';' || *b == b':')
                {
                    return false;
                }
                i += end + 2;
                continue;
            }
            b'\t' | b'\n' | b'\r' | 0x08 => {}
            0x00..=0x1F | 0x7F => return false,
            0xC2 if out.get(i + 1).is_some_and(|n| (0x80..=0x9F).contains(n)) => return false,
            _ => {}
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_reviewed_sequences_are_shown_not_obeyed() {
        // OSC 52 clipboard write, a title change, a cursor position query.
        let osc52 = b"\x1b]52;c;aGk=\x07";
        assert_eq!(neutralize(osc52), b"^[]52;c;aGk=^G");
        assert_eq!(neutralize(b"\x1b]0;pwned\x1b\\"), b"^[]0;pwned^[\\");
        assert_eq!(neutralize(b"\x1b[6n"), b"^[[6n");
        // C1 CSI (U+009B) and OSC (U+009D) in UTF-8.
        assert_eq!(neutralize(b"\xc2\x9b6n"), b"M-^[6n");
        assert_eq!(neutralize(b"\x7f\x00"), b"^?^@");
    }

    #[test]
    fn colours_and_ordinary_text_pass() {
        let s = "é \x1b[1;31mred\x1b[0m\tcol\r\nnext\x08".as_bytes();
        assert_eq!(neutralize(s), s);
        // Split anywhere, the stream gives the same result.
        for cut in 0..s.len() {
            let mut n = Neutralizer::default();
            let mut out = Vec::new();
            n.feed(&s[..cut], &mut out);
            n.feed(&s[cut..], &mut out);
            n.end(&mut out);
            assert_eq!(out, s, "cut at {cut}");
        }
    }

    proptest! {
        #[test]
        fn neutralised_output_is_harmless(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            prop_assert!(only_harmless(&neutralize(&bytes)));
        }

        #[test]
        fn chunking_does_not_matter(
            bytes in prop::collection::vec(any::<u8>(), 0..256),
            cut in 0usize..256,
        ) {
            let cut = cut.min(bytes.len());
            let mut n = Neutralizer::default();
            let mut out = Vec::new();
            n.feed(&bytes[..cut], &mut out);
            n.feed(&bytes[cut..], &mut out);
            n.end(&mut out);
            prop_assert_eq!(out, neutralize(&bytes));
        }

        #[test]
        fn harmless_text_is_unchanged(s in "[ -~\\t\\n]{0,200}") {
            prop_assert_eq!(neutralize(s.as_bytes()), s.as_bytes());
        }
    }
}
