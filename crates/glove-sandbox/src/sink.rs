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
//! [`Neutralizer`] (from `glove_types::neutralize`, where the MCP mediator
//! finds it too) renders control sequences visibly.

use crate::sys::fd::{self, PollEntry};
use crate::sys::resolve;
use crate::sys::Errno;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Instant;

pub use glove_types::neutralize::{fuzz_neutralize, neutralize, only_harmless, Neutralizer};

/// Bytes a sink queues at most; beyond it the agent's output is not read.
pub const QUEUE_MAX: usize = 1 << 20;

/// How bytes reach the descriptor.
#[derive(Debug)]
enum Target {
    /// A new non-blocking open file description (terminal, pipe).
    Reopened(OwnedFd),
    /// A socket: `send(MSG_DONTWAIT)`.
    Socket(OwnedFd),
    /// A regular file: writes never wait for a reader.
    File(OwnedFd),
    /// Anything else that cannot be reopened (a terminal owned by another
    /// user): each write is made with `O_NONBLOCK` set on the shared
    /// description for that one call.
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
                // A description shared with the caller's parent that
                // could not be reopened: non-blocking for each write only.
                Target::Plain(f) => fd::write_once_nonblocking_shared(f.as_fd(), &self.queue),
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
