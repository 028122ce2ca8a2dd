//! A connection's framing: reading length-prefixed frames within the
//! bound, and the writer task that sends answers and events.

use super::*;

/// Why reading a frame stopped.
pub(super) enum ReadFault {
    /// The length prefix is over the bound.
    TooLarge(Rejection),
    /// The peer closed the stream (possibly inside a frame).
    Closed,
}

/// A cancel-safe frame reader: bytes are kept in `buf` across calls, so an
/// interrupted read loses nothing. The buffer never holds more than one
/// frame plus one read's worth.
pub(super) struct FrameReader {
    pub(super) rd: OwnedReadHalf,
    pub(super) buf: Vec<u8>,
    pub(super) max: u32,
}

impl FrameReader {
    pub(super) async fn next(&mut self) -> Result<Vec<u8>, ReadFault> {
        loop {
            match frame::decode(&self.buf, self.max) {
                Err(r) => return Err(ReadFault::TooLarge(r)),
                Ok(Some((payload, used))) => {
                    let p = payload.to_vec();
                    self.buf.drain(..used);
                    return Ok(p);
                }
                Ok(None) => {}
            }
            self.buf.reserve(8192);
            match self.rd.read_buf(&mut self.buf).await {
                Ok(0) | Err(_) => return Err(ReadFault::Closed),
                Ok(_) => {}
            }
        }
    }
}

/// Frames one message; an over-bound response becomes an error answering
/// the same id.
pub(super) fn framed(max: u32, msg: &serde_json::Value) -> Option<Vec<u8>> {
    let bytes = protocol::to_bytes(msg);
    frame::encode(&bytes, max)
        .or_else(|r| {
            let id = msg.get("id");
            let e = RpcError::from_rejection(&r);
            frame::encode(&protocol::to_bytes(&e.to_response(id)), max)
        })
        .ok()
}

/// Queues a message without waiting (the handshake: the queue holds at
/// least three messages, and the handshake sends at most two).
pub(super) fn send(tx: &mpsc::Sender<Vec<u8>>, max: u32, msg: &serde_json::Value) {
    if let Some(f) = framed(max, msg) {
        let _ = tx.try_send(f);
    }
}

/// Queues a message, waiting while the queue is full: a peer that does
/// not read its answers stops being read. False once the writer is gone.
pub(super) async fn send_wait(
    tx: &mpsc::Sender<Vec<u8>>,
    max: u32,
    msg: &serde_json::Value,
) -> bool {
    match framed(max, msg) {
        Some(f) => tx.send(f).await.is_ok(),
        None => true,
    }
}

/// Writes queued frames; a frame not written within the write timeout
/// ends the connection (dropping the queue, which stops the reader and
/// every task that sends to it).
pub(super) async fn write_loop(
    mut wr: OwnedWriteHalf,
    mut rx: mpsc::Receiver<Vec<u8>>,
    deadline: std::time::Duration,
) {
    while let Some(f) = rx.recv().await {
        match tokio::time::timeout(deadline, wr.write_all(&f)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => break,
            Err(_) => {
                tracing::debug!("peer does not read its answers; closing");
                break;
            }
        }
    }
    let _ = tokio::time::timeout(deadline, wr.shutdown()).await;
}

/// Waits for the writer to flush what is queued, for at most `deadline`,
/// then stops it (which closes the stream once the reader is gone too).
pub(super) async fn finish_writer(
    writer: tokio::task::JoinHandle<()>,
    deadline: std::time::Duration,
) {
    let abort = writer.abort_handle();
    if tokio::time::timeout(deadline, writer).await.is_err() {
        tracing::debug!("peer does not read; dropping what is queued for it");
        abort.abort();
    }
}
