//! A relay's standard input and output, handed to the mediator.
//!
//! `glove mcp-relay` is what a contained harness runs as its stdio MCP
//! server. Copying between its standard streams and the mediator's socket
//! would cost every message two more wake-ups (the relay's read and write,
//! each way). So when both streams are pipes or Unix stream sockets — what
//! an MCP client gives the server it starts — the relay passes them over
//! the socket instead: one byte, [`HANDOFF`], carrying the two descriptors
//! (`SCM_RIGHTS`). The mediator checks them, answers [`ACCEPTED`], and from
//! then on reads the harness's requests from, and writes its answers to,
//! those descriptors itself. The relay only waits.
//!
//! The socket stays open as the relay's life line. When the relay ends
//! (the harness stopped it), its end of the socket closes: the mediator
//! takes that as the end of the agent's input. When the mediator is done
//! with the connection, it closes its copies and the socket: the relay
//! exits, and the harness sees the end of its server's output.
//!
//! What the sandbox hands over is checked, and anything else refused (the
//! connection is closed, the relay says so and exits): exactly two
//! descriptors, the first readable and the second writable, each a FIFO
//! or a connected `AF_UNIX` stream socket. A descriptor for a file, a
//! device, a terminal or any other kind of socket never reaches the
//! mediator's reads or writes.

use rustix::fs::{FileType, OFlags};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SocketType,
};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::unix::pipe;
use tokio::net::UnixStream;

/// The byte a relay sends with its two descriptors.
pub const HANDOFF: u8 = 0;
/// The mediator's answer once it took them.
pub const ACCEPTED: u8 = 1;

/// Whether `fd` may be handed over as the agent's input (`read`) or
/// output: a FIFO open for that direction, or a connected `AF_UNIX` stream
/// socket. The relay asks before it hands anything; the mediator checks
/// again what it received.
pub fn passable(fd: BorrowedFd<'_>, read: bool) -> bool {
    let Ok(st) = rustix::fs::fstat(fd) else {
        return false;
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Fifo => {
            let Ok(fl) = rustix::fs::fcntl_getfl(fd) else {
                return false;
            };
            let mode = fl & OFlags::RWMODE;
            mode == OFlags::RDWR || mode == if read { OFlags::RDONLY } else { OFlags::WRONLY }
        }
        FileType::Socket => {
            rustix::net::sockopt::socket_domain(fd).is_ok_and(|d| d == AddressFamily::UNIX)
                && rustix::net::sockopt::socket_type(fd).is_ok_and(|t| t == SocketType::STREAM)
                && rustix::net::getpeername(fd).is_ok()
        }
        _ => false,
    }
}

/// What a new connection turned out to be.
pub(crate) enum Accepted {
    /// A plain stream: MCP frames on the socket itself.
    Stream(UnixStream),
    /// A relay's handed-over standard streams.
    Handed(Handed),
}

/// Looks at a new connection's first byte: a relay's [`HANDOFF`] (whose
/// descriptors are then checked and taken), or anything else (the stream
/// is served as it is, that byte still unread). `None`: the peer closed
/// before saying anything, or handed over something refused.
pub(crate) async fn accept(s: UnixStream) -> Option<Accepted> {
    let mut first = [0u8; 1];
    let n = loop {
        s.readable().await.ok()?;
        match s.try_io(Interest::READABLE, || {
            rustix::net::recv(&s, &mut first, RecvFlags::PEEK)
                .map(|(n, _)| n)
                .map_err(io::Error::from)
        }) {
            Ok(n) => break n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(_) => return None,
        }
    };
    if n == 0 {
        return None;
    }
    if first[0] != HANDOFF {
        return Some(Accepted::Stream(s));
    }
    let fds = loop {
        s.readable().await.ok()?;
        match s.try_io(Interest::READABLE, || receive(s.as_fd())) {
            Ok(fds) => break fds,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(_) => return None,
        }
    };
    let [rd, wr] = <[OwnedFd; 2]>::try_from(fds).ok()?;
    if !passable(rd.as_fd(), true) || !passable(wr.as_fd(), false) {
        return None;
    }
    let (rd, wr) = (Input::of(rd).ok()?, Output::of(wr).ok()?);
    // The relay's socket buffer is empty: one byte always fits.
    s.try_write(&[ACCEPTED]).ok().filter(|n| *n == 1)?;
    Some(Accepted::Handed(Handed { rd, wr, life: s }))
}

/// Reads the handoff byte and its descriptors: every descriptor that came
/// with it (each closed if refused), or an error when the byte came
/// without exactly the ancillary data expected.
fn receive(s: BorrowedFd<'_>) -> io::Result<Vec<OwnedFd>> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut anc = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let got = rustix::net::recvmsg(
        s,
        &mut [io::IoSliceMut::new(&mut byte)],
        &mut anc,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for m in anc.drain() {
        if let RecvAncillaryMessage::ScmRights(r) = m {
            fds.extend(r);
        }
    }
    let refused = got.bytes != 1
        || byte[0] != HANDOFF
        || got.flags.contains(ReturnFlags::CTRUNC)
        || fds.len() != 2;
    if refused {
        return Err(io::Error::from(io::ErrorKind::InvalidData));
    }
    Ok(fds)
}

fn is_fifo(fd: &OwnedFd) -> io::Result<bool> {
    let st = rustix::fs::fstat(fd)?;
    Ok(FileType::from_raw_mode(st.st_mode) == FileType::Fifo)
}

/// A socket made a non-blocking tokio stream.
fn stream(fd: OwnedFd) -> io::Result<UnixStream> {
    let s = std::os::unix::net::UnixStream::from(fd);
    s.set_nonblocking(true)?;
    UnixStream::from_std(s)
}

/// The agent's input, as it was handed over.
enum Input {
    Fifo(pipe::Receiver),
    Socket(UnixStream),
}

impl Input {
    fn of(fd: OwnedFd) -> io::Result<Input> {
        if is_fifo(&fd)? {
            Ok(Input::Fifo(pipe::Receiver::from_owned_fd(fd)?))
        } else {
            Ok(Input::Socket(stream(fd)?))
        }
    }
}

/// The agent's output, as it was handed over.
enum Output {
    Fifo(pipe::Sender),
    Socket(UnixStream),
}

impl Output {
    fn of(fd: OwnedFd) -> io::Result<Output> {
        if is_fifo(&fd)? {
            Ok(Output::Fifo(pipe::Sender::from_owned_fd(fd)?))
        } else {
            Ok(Output::Socket(stream(fd)?))
        }
    }
}

/// The agent's side of a handed-over connection: reads from its input,
/// writes to its output, and ends its input when the relay is gone.
pub(crate) struct Handed {
    rd: Input,
    wr: Output,
    life: UnixStream,
}

impl Handed {
    /// Whether the relay's socket has closed (or sent anything at all,
    /// which a relay never does once it handed over). Registers the waker
    /// otherwise.
    fn relay_gone(&self, cx: &mut Context<'_>) -> bool {
        loop {
            match self.life.poll_read_ready(cx) {
                Poll::Pending => return false,
                Poll::Ready(Err(_)) => return true,
                Poll::Ready(Ok(())) => {}
            }
            let mut b = [0u8; 1];
            match self.life.try_read(&mut b) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                _ => return true,
            }
        }
    }
}

impl AsyncRead for Handed {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.relay_gone(cx) {
            // The end of the agent's input.
            return Poll::Ready(Ok(()));
        }
        match &mut this.rd {
            Input::Fifo(r) => Pin::new(r).poll_read(cx, buf),
            Input::Socket(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Handed {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().wr {
            Output::Fifo(w) => Pin::new(w).poll_write(cx, buf),
            Output::Socket(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().wr {
            Output::Fifo(w) => Pin::new(w).poll_flush(cx),
            Output::Socket(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The descriptors close when the connection is dropped (a socket
        // handed as both input and output keeps reading until then).
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    use std::fs::File;
    use std::io::{Read, Write};
    use std::os::unix::net::{UnixDatagram, UnixStream as StdStream};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn pipe() -> (OwnedFd, OwnedFd) {
        rustix::pipe::pipe().expect("pipe")
    }

    /// What the relay sends: the byte and these descriptors.
    fn send(relay: &StdStream, byte: u8, fds: &[BorrowedFd<'_>]) {
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(3))];
        let mut anc = SendAncillaryBuffer::new(&mut space);
        if !fds.is_empty() {
            assert!(anc.push(SendAncillaryMessage::ScmRights(fds)));
        }
        let n = rustix::net::sendmsg(
            relay,
            &[io::IoSlice::new(&[byte])],
            &mut anc,
            SendFlags::empty(),
        )
        .expect("sendmsg");
        assert_eq!(n, 1);
    }

    fn mediator_side() -> (UnixStream, StdStream) {
        let (m, relay) = StdStream::pair().expect("pair");
        m.set_nonblocking(true).expect("nonblocking");
        (UnixStream::from_std(m).expect("tokio"), relay)
    }

    #[test]
    fn only_fifos_and_connected_unix_stream_sockets_pass() {
        let (r, w) = pipe();
        assert!(passable(r.as_fd(), true));
        assert!(!passable(r.as_fd(), false), "a read end is no output");
        assert!(passable(w.as_fd(), false));
        assert!(!passable(w.as_fd(), true), "a write end is no input");
        let (a, _b) = StdStream::pair().expect("pair");
        assert!(passable(a.as_fd(), true) && passable(a.as_fd(), false));
        let file = tempfile::tempfile().expect("file");
        assert!(!passable(file.as_fd(), true) && !passable(file.as_fd(), false));
        let null = File::open("/dev/null").expect("null");
        assert!(!passable(null.as_fd(), true));
        let (d, _e) = UnixDatagram::pair().expect("dgram");
        assert!(!passable(d.as_fd(), true), "a datagram socket");
        let lone =
            rustix::net::socket(AddressFamily::UNIX, SocketType::STREAM, None).expect("socket");
        assert!(!passable(lone.as_fd(), true), "an unconnected socket");
    }

    #[tokio::test]
    async fn handed_pipes_carry_both_ways_and_end_with_the_relay() {
        let (s, mut relay) = mediator_side();
        let (in_r, in_w) = pipe();
        let (out_r, out_w) = pipe();
        send(&relay, HANDOFF, &[in_r.as_fd(), out_w.as_fd()]);
        // The relay keeps no copies here; the agent keeps its own ends.
        drop((in_r, out_w));
        let Some(Accepted::Handed(mut h)) = accept(s).await else {
            panic!("not handed over");
        };
        let mut b = [0u8; 1];
        relay.read_exact(&mut b).expect("answer");
        assert_eq!(b[0], ACCEPTED);
        let (mut agent_in, mut agent_out) = (File::from(in_w), File::from(out_r));
        agent_in.write_all(b"hello\n").expect("write");
        let mut got = [0u8; 6];
        h.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"hello\n");
        h.write_all(b"world\n").await.expect("write");
        let mut got = [0u8; 6];
        agent_out.read_exact(&mut got).expect("read");
        assert_eq!(&got, b"world\n");
        // The relay gone: the end of the agent's input, though the agent
        // still holds its end open.
        drop(relay);
        let mut rest = Vec::new();
        h.read_to_end(&mut rest).await.expect("eof");
        assert!(rest.is_empty());
        // The mediator done: the agent sees the end of the output.
        drop(h);
        let mut rest = Vec::new();
        agent_out.read_to_end(&mut rest).expect("eof");
        assert!(rest.is_empty());
    }

    #[tokio::test]
    async fn a_handed_socket_pair_works_and_the_agents_close_ends_the_input() {
        let (s, _relay) = mediator_side();
        let (agent, server_end) = StdStream::pair().expect("pair");
        send(&_relay, HANDOFF, &[server_end.as_fd(), server_end.as_fd()]);
        drop(server_end);
        let Some(Accepted::Handed(mut h)) = accept(s).await else {
            panic!("not handed over");
        };
        let mut agent = agent;
        agent.write_all(b"ping\n").expect("write");
        let mut got = [0u8; 5];
        h.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"ping\n");
        h.write_all(b"pong\n").await.expect("write");
        agent.read_exact(&mut got).expect("read");
        assert_eq!(&got, b"pong\n");
        agent.shutdown(std::net::Shutdown::Write).expect("shutdown");
        let mut rest = Vec::new();
        h.read_to_end(&mut rest).await.expect("eof");
        assert!(rest.is_empty());
    }

    #[tokio::test]
    async fn a_plain_stream_is_served_with_its_first_byte() {
        let (s, mut relay) = mediator_side();
        relay.write_all(b"{}\n").expect("write");
        let Some(Accepted::Stream(s)) = accept(s).await else {
            panic!("not a plain stream");
        };
        let mut got = [0u8; 3];
        let mut s = s;
        s.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"{}\n");
    }

    #[tokio::test]
    async fn anything_else_handed_over_is_refused() {
        let file = tempfile::tempfile().expect("file");
        let (r, w) = pipe();
        let cases: Vec<(&str, u8, Vec<BorrowedFd<'_>>)> = vec![
            ("a file as input", HANDOFF, vec![file.as_fd(), w.as_fd()]),
            ("a file as output", HANDOFF, vec![r.as_fd(), file.as_fd()]),
            (
                "the pipe's ends swapped",
                HANDOFF,
                vec![w.as_fd(), r.as_fd()],
            ),
            ("one descriptor", HANDOFF, vec![r.as_fd()]),
            (
                "three descriptors",
                HANDOFF,
                vec![r.as_fd(), w.as_fd(), w.as_fd()],
            ),
            ("no descriptor", HANDOFF, vec![]),
        ];
        for (what, byte, fds) in cases {
            let (s, mut relay) = mediator_side();
            send(&relay, byte, &fds);
            assert!(accept(s).await.is_none(), "{what}");
            // The connection is closed without an answer.
            let mut b = Vec::new();
            relay.read_to_end(&mut b).expect("eof");
            assert!(b.is_empty(), "{what}: {b:?}");
        }
        // A peer that closes before a word.
        let (s, relay) = mediator_side();
        drop(relay);
        assert!(accept(s).await.is_none());
    }
}
