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
