//! The channel from the sandbox's forwarder: a Unix `SOCK_SEQPACKET`
//! socket on which each message is one data byte (the listener index) and
//! exactly one descriptor (`SCM_RIGHTS`), a connected TCP stream the
//! forwarder accepted on the sandbox's loopback.
//!
//! A message that breaks the shape (no byte, more than one byte, no
//! descriptor, several, truncated ancillary data) is dropped with every
//! descriptor it carried closed. A descriptor that is not a connected
//! `AF_INET`/`AF_INET6` stream socket is closed and ignored.

use crate::error::EgressError;
use rustix::fd::{AsFd, OwnedFd};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SocketType,
};
use std::io::IoSliceMut;
use std::mem::MaybeUninit;
use tokio::io::Interest;
use tokio::net::UnixDatagram;

/// Room for this many descriptors in one message: more than the one
/// allowed, so a message with several is seen and dropped whole (the
/// kernel closes any beyond the room).
const FD_ROOM: usize = 4;

/// The receiving end of the channel. (Held as a tokio `UnixDatagram`
/// only to register it with the reactor safely; every receive is a
/// `recvmsg` of our own through `async_io`.)
#[derive(Debug)]
pub(crate) struct Channel {
    sock: UnixDatagram,
}

/// What one receive gave.
#[derive(Debug)]
pub(crate) enum Received {
    /// A connection for listener `index`.
    Connection {
        index: u8,
        stream: std::net::TcpStream,
    },
    /// A message that was dropped (its descriptors closed).
    Dropped,
    /// The forwarder closed its end: no more connections.
    Closed,
}

impl Channel {
    /// Wraps the inherited channel (made non-blocking); needs a runtime.
    pub(crate) fn new(fd: OwnedFd) -> Result<Channel, EgressError> {
        let io = |e: rustix::io::Errno| EgressError::Io {
            what: "the connection channel",
            source: e.into(),
        };
        match rustix::net::sockopt::socket_type(&fd) {
            Ok(SocketType::SEQPACKET) => {}
            Ok(_) => return Err(io(rustix::io::Errno::PROTOTYPE)),
            Err(e) => return Err(io(e)),
        }
        let flags = rustix::fs::fcntl_getfl(&fd).map_err(io)?;
        rustix::fs::fcntl_setfl(&fd, flags | rustix::fs::OFlags::NONBLOCK).map_err(io)?;
        let sock = UnixDatagram::from_std(std::os::unix::net::UnixDatagram::from(fd))
            .map_err(EgressError::io("register the connection channel"))?;
        Ok(Channel { sock })
    }

    /// Receives the next message.
    pub(crate) async fn recv(&self) -> Received {
        loop {
            let r = self
                .sock
                .async_io(Interest::READABLE, || {
                    receive_one(self.sock.as_fd()).map_err(std::io::Error::from)
                })
                .await;
            match r {
                Ok(r) => return r,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return Received::Closed,
            }
        }
    }
}

fn receive_one(fd: rustix::fd::BorrowedFd<'_>) -> rustix::io::Result<Received> {
    let mut data = [0u8; 2];
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(FD_ROOM))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let msg = rustix::net::recvmsg(
        fd,
        &mut [IoSliceMut::new(&mut data)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
    )?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(it) = m {
            fds.extend(it);
        }
    }
    if msg.bytes == 0 && fds.is_empty() {
        return Ok(Received::Closed);
    }
    let truncated =
        msg.flags.contains(ReturnFlags::TRUNC) || msg.flags.contains(ReturnFlags::CTRUNC);
    if msg.bytes != 1 || truncated || fds.len() != 1 {
        return Ok(Received::Dropped);
    }
    let Some(fd) = fds.pop() else {
        return Ok(Received::Dropped);
    };
    match stream_of(fd) {
        Some(stream) => Ok(Received::Connection {
            index: data[0],
            stream,
        }),
        None => Ok(Received::Dropped),
    }
}

/// The descriptor as a TCP stream, if it is a connected `AF_INET` or
/// `AF_INET6` stream socket (closed otherwise).
fn stream_of(fd: OwnedFd) -> Option<std::net::TcpStream> {
    let stream = rustix::net::sockopt::socket_type(&fd).ok()? == SocketType::STREAM;
    let domain = rustix::net::sockopt::socket_domain(&fd).ok()?;
    let inet = domain == AddressFamily::INET || domain == AddressFamily::INET6;
    let tcp = rustix::net::sockopt::socket_protocol(&fd).ok()? == Some(rustix::net::ipproto::TCP);
    let listening = rustix::net::sockopt::socket_acceptconn(&fd).ok()?;
    let connected = rustix::net::getpeername(&fd).ok()?.is_some();
    if !(stream && inet && tcp && !listening && connected) {
        return None;
    }
    let s = std::net::TcpStream::from(fd);
    s.set_nonblocking(true).ok()?;
    Some(s)
}
