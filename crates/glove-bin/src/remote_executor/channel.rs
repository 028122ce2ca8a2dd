//! The channel: frames read from standard input and written to standard
//! output, each step bounded by a deadline.
//!
//! Framing is gloved's ([`crate::control::frame`]): a 4-byte big-endian
//! length, then that many bytes of UTF-8 JSON. A length above the bound is
//! refused from the header, before any of the payload is read.
//!
//! Every wait is a `poll(2)` whose timeout is what is left before the
//! deadline, recomputed after each wake-up; a read or write happens only
//! after `poll` reported the descriptor ready. Standard output is switched
//! to non-blocking for the life of the channel ([`NonBlocking`]), so a
//! write never blocks past the deadline however little room the pipe or
//! socket has; a read or write that would block (`EAGAIN`, also for
//! standard input when both are one socket, as sshd may arrange) goes back
//! to `poll`.

use super::deadline::remaining;
use crate::control::frame;
use glove_types::Rejection;
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fd::{AsFd, BorrowedFd};
use rustix::fs::OFlags;
use rustix::io::Errno;
use std::time::Instant;

/// Why a frame could not be read or written.
#[derive(Debug)]
#[non_exhaustive]
pub enum ChannelError {
    /// The deadline passed before the frame was whole.
    Deadline,
    /// The input ended inside a frame.
    Truncated,
    /// The header announced a frame above the bound.
    TooLarge(Rejection),
    /// The descriptor failed.
    Io(Errno),
}

/// Waits until `fd` is ready for `flags`, or the deadline passes.
fn wait(fd: BorrowedFd<'_>, flags: PollFlags, deadline: Instant) -> Result<(), ChannelError> {
    loop {
        let Some(left) = remaining(deadline, Instant::now()) else {
            return Err(ChannelError::Deadline);
        };
        let timeout = Timespec::try_from(left).map_err(|_| ChannelError::Deadline)?;
        let mut fds = [PollFd::new(&fd, flags)];
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            // Timed out: the loop re-checks the deadline.
            Ok(0) => continue,
            // Ready, or hung up or in error: the read or write says which.
            Ok(_) => return Ok(()),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(ChannelError::Io(e)),
        }
    }
}

/// Fills `buf` from `fd` by the deadline; returns how many bytes were read
/// before the end of input (`buf.len()` when it did not end).
fn read_full(fd: BorrowedFd<'_>, buf: &mut [u8], deadline: Instant) -> Result<usize, ChannelError> {
    let mut filled = 0;
    while filled < buf.len() {
        wait(fd, PollFlags::IN, deadline)?;
        match rustix::io::read(fd, &mut buf[filled..]) {
            Ok(0) => return Ok(filled),
            Ok(n) => filled += n,
            Err(Errno::INTR | Errno::AGAIN) => continue,
            Err(e) => return Err(ChannelError::Io(e)),
        }
    }
    Ok(filled)
}

/// Reads one frame's payload by the deadline: `Ok(None)` when the input
/// ends cleanly before a frame begins.
pub fn read_frame(
    fd: BorrowedFd<'_>,
    deadline: Instant,
    max_frame_bytes: u32,
) -> Result<Option<Vec<u8>>, ChannelError> {
    let mut header = [0u8; frame::HEADER_LEN];
    match read_full(fd, &mut header, deadline)? {
        0 => return Ok(None),
        n if n < frame::HEADER_LEN => return Err(ChannelError::Truncated),
        _ => {}
    }
    let len = frame::payload_len(header, max_frame_bytes).map_err(ChannelError::TooLarge)?;
    let mut payload = vec![0u8; len];
    if read_full(fd, &mut payload, deadline)? < len {
        return Err(ChannelError::Truncated);
    }
    Ok(Some(payload))
}

/// Writes all of `bytes` by the deadline.
pub fn write_all(fd: BorrowedFd<'_>, bytes: &[u8], deadline: Instant) -> Result<(), ChannelError> {
    let mut written = 0;
    while written < bytes.len() {
        wait(fd, PollFlags::OUT, deadline)?;
        // Checked again right before the write: a process descheduled
        // after the poll must not write once the deadline has passed.
        if remaining(deadline, Instant::now()).is_none() {
            return Err(ChannelError::Deadline);
        }
        match rustix::io::write(fd, &bytes[written..]) {
            Ok(n) => written += n,
            Err(Errno::INTR | Errno::AGAIN) => continue,
            Err(e) => return Err(ChannelError::Io(e)),
        }
    }
    Ok(())
}

/// A descriptor switched to non-blocking; the previous flags come back on
/// drop.
pub struct NonBlocking<'a> {
    fd: BorrowedFd<'a>,
    previous: OFlags,
}

impl<'a> NonBlocking<'a> {
    /// Sets `O_NONBLOCK` on `fd`.
    pub fn set(fd: BorrowedFd<'a>) -> Result<Self, Errno> {
        let previous = rustix::fs::fcntl_getfl(fd)?;
        rustix::fs::fcntl_setfl(fd, previous | OFlags::NONBLOCK)?;
        Ok(NonBlocking { fd, previous })
    }
}

impl Drop for NonBlocking<'_> {
    fn drop(&mut self) {
        // Best effort: the channel is over either way.
        let _ = rustix::fs::fcntl_setfl(self.fd.as_fd(), self.previous);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(30)
    }

    #[test]
    fn frames_eof_and_truncation() {
        let (mut a, b) = UnixStream::pair().expect("pair");
        a.write_all(&frame::encode(b"{}", 64).expect("encode"))
            .expect("write");
        a.write_all(&[0, 0]).expect("write");
        drop(a);
        let fd = b.as_fd();
        assert_eq!(
            read_frame(fd, soon(), 64).expect("frame"),
            Some(b"{}".to_vec())
        );
        assert!(matches!(
            read_frame(fd, soon(), 64),
            Err(ChannelError::Truncated)
        ));
        assert_eq!(read_frame(fd, soon(), 64).expect("eof"), None);
    }

    #[test]
    fn oversized_header_and_deadline() {
        let (mut a, b) = UnixStream::pair().expect("pair");
        a.write_all(&[0, 0, 1, 0]).expect("write");
        assert!(matches!(
            read_frame(b.as_fd(), soon(), 64),
            Err(ChannelError::TooLarge(_))
        ));
        // Nothing more arrives: the read ends at its (past) deadline.
        assert!(matches!(
            read_frame(b.as_fd(), Instant::now(), 64),
            Err(ChannelError::Deadline)
        ));
    }

    #[test]
    fn a_full_peer_makes_the_write_miss_its_deadline() {
        let (a, _b) = UnixStream::pair().expect("pair");
        let _nb = NonBlocking::set(a.as_fd()).expect("nonblocking");
        let big = vec![0u8; 8 << 20];
        let r = write_all(a.as_fd(), &big, Instant::now() + Duration::from_millis(50));
        assert!(matches!(r, Err(ChannelError::Deadline)));
    }
}
