//! A relay's standard input and output, handed to the mediator.
//!
//! `glove mcp-relay` is what a contained harness runs as its stdio MCP
//! server. Copying between its standard streams and the mediator's socket
//! costs every message two more wake-ups (the relay's read and write, each
//! way). So when both streams are Unix socket-pair ends (what a Node MCP
//! client gives the server it starts) the relay passes them over the
//! socket instead: one byte, [`HANDOFF`], carrying the two descriptors
//! (`SCM_RIGHTS`). The mediator checks them, answers [`ACCEPTED`], and from
//! then on reads the harness's requests from, and writes its answers to,
//! those sockets itself. The relay only waits.
//!
//! Pipes (what Python and Rust clients give) are never handed over: every
//! open file description of a pipe shares one kernel lock, which the
//! sandbox can hold with a blocking `splice` and so stall any read, write,
//! open or close of the mediator's on that pipe, flags or not. For pipes
//! the relay copies, as it does for anything else.
//!
//! The socket stays open as the relay's life line. When the relay ends
//! (the harness stopped it), its end of the socket closes: the mediator
//! takes that as the end of the agent's input. When the mediator is done
//! with the connection, it closes its copies and the socket: the relay
//! exits, and the harness sees the end of its server's output.
//!
//! What the sandbox hands over is checked, and anything else refused (the
//! connection is closed unread and counted; the relay says so and exits):
//! exactly two descriptors, each a connected `AF_UNIX` stream socket
//! whose peer is not bound to a path (a socket pair's end; never a
//! connection to the mediator's own sockets).
//!
//! A received socket shares its open file description with the sandbox,
//! which can change its flags at any time. So nothing here relies on them:
//! it is only ever read and written with `MSG_DONTWAIT` (and
//! `MSG_NOSIGNAL`), which returns at once even while the sandbox blocks in
//! a `recv` or `splice` on the same socket.

use rustix::fs::FileType;
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendFlags,
    SocketAddrUnix, SocketType,
};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::UnixStream;

/// The byte a relay sends with its two descriptors.
pub const HANDOFF: u8 = 0;
/// The mediator's answer once it took them.
pub const ACCEPTED: u8 = 1;

/// Whether `fd` may be handed over as the agent's input or output: a
/// connected `AF_UNIX` stream socket whose peer has no path (one end of a
/// socket pair, as a Node client gives; never a connection to a socket
/// bound to a path, such as the mediator's own). Pipes are not: every
/// open file description of a pipe shares one kernel lock, which the
/// sandbox can hold (a blocking `splice` into it) to stall any read,
/// write, open or close of the mediator's on it, whatever its flags; a
/// relay whose streams are pipes copies instead. The relay asks before it
/// hands anything; the mediator checks again what it received.
pub fn passable(fd: BorrowedFd<'_>) -> bool {
    let Ok(st) = rustix::fs::fstat(fd) else {
        return false;
    };
    FileType::from_raw_mode(st.st_mode) == FileType::Socket
        && rustix::net::sockopt::socket_domain(fd).is_ok_and(|d| d == AddressFamily::UNIX)
        && rustix::net::sockopt::socket_type(fd).is_ok_and(|t| t == SocketType::STREAM)
        && match rustix::net::getpeername(fd) {
            // A socket pair's peer has no address at all. An abstract name
            // is of the sandbox's own network namespace; a path is refused
            // (the mediator's own sockets have one).
            Ok(None) => true,
            Ok(Some(a)) => SocketAddrUnix::try_from(a).is_ok_and(|u| u.path().is_none()),
            // Not connected.
            Err(_) => false,
        }
}

/// What a new connection turned out to be.
pub(crate) enum Accepted {
    /// A plain stream: MCP frames on the socket itself.
    Stream(UnixStream),
    /// A relay's handed-over standard streams.
    Handed(Handed),
    /// A handoff refused: what came with it is closed unread.
    Refused,
}

/// Looks at a new connection's first byte: a relay's [`HANDOFF`] (whose
/// descriptors are then checked and taken), or anything else (the stream
/// is served as it is, that byte still unread). `None`: the peer closed
/// before saying anything.
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
    Some(taken(&s).await.map_or(Accepted::Refused, |(rd, wr)| {
        Accepted::Handed(Handed { rd, wr, life: s })
    }))
}

/// Takes a handoff: its descriptors, checked and made the mediator's own,
/// once the relay was told; `None` when refused.
async fn taken(s: &UnixStream) -> Option<(UnixStream, UnixStream)> {
    let fds = loop {
        s.readable().await.ok()?;
        match s.try_io(Interest::READABLE, || receive(s.as_fd())) {
            Ok(fds) => break fds,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(_) => return None,
        }
    };
    let [rd, wr] = <[OwnedFd; 2]>::try_from(fds).ok()?;
    if !passable(rd.as_fd()) || !passable(wr.as_fd()) {
        return None;
    }
    let (rd, wr) = (stream(rd).ok()?, stream(wr).ok()?);
    // The relay's socket buffer is empty: one byte always fits.
    s.try_write(&[ACCEPTED]).ok().filter(|n| *n == 1)?;
    Some((rd, wr))
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

/// A socket as a tokio stream whose reads and writes never rely on the
/// open file description's flags (shared with the sandbox): each is a
/// `recv`/`send` with `MSG_DONTWAIT` (and `MSG_NOSIGNAL`).
fn stream(fd: OwnedFd) -> io::Result<UnixStream> {
    let s = std::os::unix::net::UnixStream::from(fd);
    s.set_nonblocking(true)?;
    UnixStream::from_std(s)
}

fn recv_now(s: &UnixStream, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
    loop {
        if let Err(e) = std::task::ready!(s.poll_read_ready(cx)) {
            return Poll::Ready(Err(e));
        }
        let unfilled = buf.initialize_unfilled();
        match s.try_io(Interest::READABLE, || {
            rustix::net::recv(s, &mut *unfilled, RecvFlags::DONTWAIT)
                .map(|(n, _)| n)
                .map_err(io::Error::from)
        }) {
            Ok(n) => {
                buf.advance(n);
                return Poll::Ready(Ok(()));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
}

fn send_now(s: &UnixStream, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
    loop {
        if let Err(e) = std::task::ready!(s.poll_write_ready(cx)) {
            return Poll::Ready(Err(e));
        }
        match s.try_io(Interest::WRITABLE, || {
            rustix::net::send(s, buf, SendFlags::DONTWAIT | SendFlags::NOSIGNAL)
                .map_err(io::Error::from)
        }) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            r => return Poll::Ready(r),
        }
    }
}

/// The agent's side of a handed-over connection: reads from its input,
/// writes to its output, and ends its input when the relay is gone.
pub(crate) struct Handed {
    rd: UnixStream,
    wr: UnixStream,
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
        recv_now(&this.rd, cx, buf)
    }
}

impl AsyncWrite for Handed {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        send_now(&self.wr, cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
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
    fn only_socket_pair_ends_pass() {
        let (a, _b) = StdStream::pair().expect("pair");
        assert!(passable(a.as_fd()));
        let (r, w) = rustix::pipe::pipe().expect("pipe");
        assert!(!passable(r.as_fd()) && !passable(w.as_fd()), "a pipe");
        let file = tempfile::tempfile().expect("file");
        assert!(!passable(file.as_fd()));
        let null = File::open("/dev/null").expect("null");
        assert!(!passable(null.as_fd()));
        let (d, _e) = UnixDatagram::pair().expect("dgram");
        assert!(!passable(d.as_fd()), "a datagram socket");
        let lone =
            rustix::net::socket(AddressFamily::UNIX, SocketType::STREAM, None).expect("socket");
        assert!(!passable(lone.as_fd()), "an unconnected socket");
        // A connection to a socket bound to a path (the mediator's own, say).
        let t = tempfile::tempdir().expect("dir");
        let _l = std::os::unix::net::UnixListener::bind(t.path().join("s")).expect("bind");
        let c = StdStream::connect(t.path().join("s")).expect("connect");
        assert!(!passable(c.as_fd()), "a peer with a path");
    }

    #[tokio::test]
    async fn a_handed_socket_pair_carries_both_ways_and_ends_with_the_relay() {
        let (s, mut relay) = mediator_side();
        let (mut agent_in, server_in) = StdStream::pair().expect("pair");
        let (mut agent_out, server_out) = StdStream::pair().expect("pair");
        send(&relay, HANDOFF, &[server_in.as_fd(), server_out.as_fd()]);
        drop((server_in, server_out));
        let Some(Accepted::Handed(mut h)) = accept(s).await else {
            panic!("not handed over");
        };
        let mut b = [0u8; 1];
        relay.read_exact(&mut b).expect("answer");
        assert_eq!(b[0], ACCEPTED);
        agent_in.write_all(b"ping\n").expect("write");
        let mut got = [0u8; 5];
        h.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"ping\n");
        h.write_all(b"pong\n").await.expect("write");
        agent_out.read_exact(&mut got).expect("read");
        assert_eq!(&got, b"pong\n");
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
    async fn the_agents_close_ends_the_input() {
        let (s, relay) = mediator_side();
        let (agent, server_end) = StdStream::pair().expect("pair");
        send(&relay, HANDOFF, &[server_end.as_fd(), server_end.as_fd()]);
        drop(server_end);
        let Some(Accepted::Handed(mut h)) = accept(s).await else {
            panic!("not handed over");
        };
        agent.shutdown(std::net::Shutdown::Write).expect("shutdown");
        let mut rest = Vec::new();
        h.read_to_end(&mut rest).await.expect("eof");
        assert!(rest.is_empty());
    }

    #[tokio::test]
    async fn a_plain_stream_is_served_with_its_first_byte() {
        let (s, mut relay) = mediator_side();
        relay.write_all(b"{}\n").expect("write");
        let Some(Accepted::Stream(mut s)) = accept(s).await else {
            panic!("not a plain stream");
        };
        let mut got = [0u8; 3];
        s.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"{}\n");
    }

    #[tokio::test]
    async fn anything_else_handed_over_is_refused() {
        let file = tempfile::tempfile().expect("file");
        let (r, w) = rustix::pipe::pipe().expect("pipe");
        let (a, _b) = StdStream::pair().expect("pair");
        let cases: Vec<(&str, Vec<BorrowedFd<'_>>)> = vec![
            ("a pipe", vec![r.as_fd(), w.as_fd()]),
            ("a file as input", vec![file.as_fd(), a.as_fd()]),
            ("a file as output", vec![a.as_fd(), file.as_fd()]),
            ("one descriptor", vec![a.as_fd()]),
            ("three descriptors", vec![a.as_fd(), a.as_fd(), a.as_fd()]),
            ("no descriptor", vec![]),
        ];
        for (what, fds) in cases {
            let (s, mut relay) = mediator_side();
            send(&relay, HANDOFF, &fds);
            assert!(matches!(accept(s).await, Some(Accepted::Refused)), "{what}");
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

    /// The sandbox makes its copy of the handed socket blocking again and
    /// sits in a blocking `recv` on it: the mediator's reads still never
    /// block. Run on a thread of its own, so that a read stuck in the
    /// kernel fails the test instead of hanging it.
    #[test]
    fn a_sandbox_that_clears_o_nonblock_cannot_block_the_mediator() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let _ = tx.send(rt.block_on(clears_o_nonblock()));
        });
        let r = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .unwrap_or_else(|_| Err("the mediator's read blocked".to_owned()));
        assert_eq!(r, Ok(()));
    }

    async fn clears_o_nonblock() -> Result<(), String> {
        let e = |x: io::Error| x.to_string();
        let (s, mut relay) = mediator_side();
        let (agent, server) = StdStream::pair().map_err(e)?;
        let server = OwnedFd::from(server);
        let kept = StdStream::from(server.try_clone().map_err(e)?);
        send(&relay, HANDOFF, &[server.as_fd(), server.as_fd()]);
        drop(server);
        let Some(Accepted::Handed(mut h)) = accept(s).await else {
            return Err("not handed over".to_owned());
        };
        let mut b = [0u8; 1];
        relay.read_exact(&mut b).map_err(e)?;
        // The sandbox's copy: blocking again, and a thread of its waiting
        // in a blocking recv on it.
        kept.set_nonblocking(false).map_err(e)?;
        let waiter = std::thread::spawn(move || {
            let mut one = [0u8; 1];
            let _ = (&kept).read(&mut one);
        });
        let mut agent = agent;
        agent.write_all(&[b'x'; 8192]).map_err(e)?;
        let mut got = vec![0u8; 8192];
        // Whatever the waiter took is not the mediator's; read what is left.
        let first = h.read(&mut got).await.map_err(e)?;
        let more = tokio::time::timeout(std::time::Duration::from_millis(300), async {
            let mut total = first;
            while total < 8191 {
                total += h.read(&mut got).await?;
            }
            Ok::<_, io::Error>(total)
        })
        .await;
        drop(agent);
        drop(waiter);
        match more {
            Ok(Ok(_)) | Err(_) => Ok(()),
            Ok(Err(x)) => Err(x.to_string()),
        }
    }
}
