//! A tunnel's relay: bytes copied both ways, counted into their flows,
//! cut when the endpoint's byte limit is exceeded, when nothing moves
//! either way for the idle deadline, or when the proxy is stopping.

use crate::meter::{idle_watch, Flow, IoMeter};
use std::future::Future;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

const BUF: usize = 16 * 1024;

async fn pump<R, W>(mut r: R, mut w: W, flow: &Flow, meter: &IoMeter) -> Result<(), ()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; BUF];
    loop {
        let n = r.read(&mut buf).await.map_err(drop)?;
        if n == 0 {
            let _ = w.shutdown().await;
            return Ok(());
        }
        if !flow.spend(n) {
            return Err(());
        }
        meter.touch();
        let chunk = buf.get(..n).ok_or(())?;
        w.write_all(chunk).await.map_err(drop)?;
        w.flush().await.map_err(drop)?;
        meter.touch();
    }
}

/// Relays until both sides have finished, one fails, a limit or the idle
/// deadline is reached, or `stop` resolves. The byte counts are in the
/// flows.
pub(crate) async fn relay<A, U>(
    agent: A,
    upstream: U,
    up: &Flow,
    down: &Flow,
    idle: Duration,
    stop: impl Future<Output = ()>,
) where
    A: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let meter = IoMeter::new();
    let (ar, aw) = tokio::io::split(agent);
    let (ur, uw) = tokio::io::split(upstream);
    let both = async {
        let _ = tokio::try_join!(pump(ar, uw, up, &meter), pump(ur, aw, down, &meter));
    };
    tokio::select! {
        () = both => {}
        () = idle_watch(&meter, idle) => {}
        () = stop => {}
    }
}

/// Most bytes one `splice` moves, and each tunnel pipe's size: a pipe
/// pins kernel memory charged to the proxy's user, outside the session.
const SPLICE_CHUNK: usize = 256 << 10;

/// One direction of a TCP-to-TCP tunnel with `splice(2)` through a pipe:
/// the bytes never enter this process, and each chunk is counted (and the
/// byte limit checked) between the two splices, before it moves on.
async fn splice_pump(
    from: &tokio::net::TcpStream,
    to: &tokio::net::TcpStream,
    flow: &Flow,
    meter: &IoMeter,
) -> Result<(), ()> {
    use rustix::pipe::{splice, SpliceFlags};
    use tokio::io::Interest;
    let (pr, pw) = rustix::pipe::pipe_with(
        rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
    )
    .map_err(drop)?;
    // A larger pipe moves more per call; the default (64 KiB) still works.
    let _ = rustix::pipe::fcntl_setpipe_size(&pw, SPLICE_CHUNK);
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    loop {
        from.readable().await.map_err(drop)?;
        let n = match from.try_io(Interest::READABLE, || {
            splice(from, None, &pw, None, SPLICE_CHUNK, flags).map_err(std::io::Error::from)
        }) {
            Ok(0) => {
                let _ = rustix::net::shutdown(to, rustix::net::Shutdown::Write);
                return Ok(());
            }
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return Err(()),
        };
        if !flow.spend(n) {
            return Err(());
        }
        meter.touch();
        let mut left = n;
        while left > 0 {
            to.writable().await.map_err(drop)?;
            match to.try_io(Interest::WRITABLE, || {
                splice(&pr, None, to, None, left, flags).map_err(std::io::Error::from)
            }) {
                Ok(0) => return Err(()),
                Ok(m) => left = left.saturating_sub(m),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => return Err(()),
            }
        }
        meter.touch();
    }
}

/// [`relay`] for two TCP sockets, zero-copy: `early` (bytes the agent sent
/// after its `CONNECT` head, already read) goes up first.
pub(crate) async fn relay_tcp(
    agent: tokio::net::TcpStream,
    early: &[u8],
    upstream: tokio::net::TcpStream,
    up: &Flow,
    down: &Flow,
    idle: Duration,
    stop: impl Future<Output = ()>,
) {
    let meter = IoMeter::new();
    let both = async {
        if !early.is_empty() {
            if !up.spend(early.len()) {
                return;
            }
            let mut rest = early;
            while !rest.is_empty() {
                if upstream.writable().await.is_err() {
                    return;
                }
                match upstream.try_write(rest) {
                    Ok(n) => rest = rest.get(n..).unwrap_or_default(),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                    Err(_) => return,
                }
            }
        }
        let _ = tokio::try_join!(
            splice_pump(&agent, &upstream, up, &meter),
            splice_pump(&upstream, &agent, down, &meter)
        );
    };
    tokio::select! {
        () = both => {}
        () = idle_watch(&meter, idle) => {}
        () = stop => {}
    }
}
