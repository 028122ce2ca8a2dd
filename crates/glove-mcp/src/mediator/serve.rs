//! One agent connection: its reader, its writer task and the requests in
//! flight until it closes ([`Mediator::serve`] and [`Mediator::serve_scoped`]).

use super::*;

/// Answers queued per connection before its requests wait.
const WRITER_QUEUE: usize = 4;

/// How long a write to an agent may make no progress before the
/// connection is closed (its requests in flight then end at once).
const WRITE_STALL: std::time::Duration = std::time::Duration::from_secs(10);

impl Mediator {
    pub(super) async fn serve_inner<S>(&self, io: S, scope: Option<String>) -> Result<(), McpError>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let shared = &self.shared;
        let conn = shared
            .connections
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        let (r, w) = tokio::io::split(io);
        // Few answers queue per connection: a connection that does not
        // read holds little, and its requests wait for the queue.
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(WRITER_QUEUE);
        let changed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let pending = changed.clone();
        let writer = tokio::spawn(async move {
            let mut w = w;
            let mut out: Vec<u8> = Vec::new();
            while let Some(f) = rx.recv().await {
                // Every answer already queued goes out in one write.
                out.clear();
                out.extend_from_slice(&f);
                out.push(b'\n');
                while out.len() < MAX_FRAME_BYTES {
                    let Ok(f) = rx.try_recv() else {
                        break;
                    };
                    out.extend_from_slice(&f);
                    out.push(b'\n');
                }
                // A list_changed that found the queue full goes out now.
                if pending.swap(false, std::sync::atomic::Ordering::SeqCst) {
                    out.extend_from_slice(&frame::encode_notification(
                        "notifications/tools/list_changed",
                        None,
                    ));
                    out.push(b'\n');
                }
                // An agent that stops reading is cut off: its answers would
                // otherwise hold in-flight slots and memory for good.
                let sent = async {
                    w.write_all(&out).await?;
                    w.flush().await
                };
                match tokio::time::timeout(WRITE_STALL, sent).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) | Err(_) => break,
                }
            }
            let _ = w.shutdown().await;
        });
        lock(&shared.agents).insert(
            conn,
            AgentWriter {
                tx: tx.clone(),
                changed,
            },
        );
        let session = Arc::new(Session::default());
        // One connection takes at most a quarter of the mediator's
        // in-flight requests, so one that stalls cannot starve the others.
        let max = (shared.profile.limits().max_in_flight / 4).max(1);
        let sem = Arc::new(Semaphore::new(max));
        let mut lines = LineReader::new(BufReader::new(r), MAX_FRAME_BYTES);
        loop {
            // Reading stops when the writer gave up on this agent.
            let next = tokio::select! {
                l = lines.next() => l,
                _ = tx.closed() => break,
            };
            let line = match next {
                Ok(Line::Frame(f)) => f,
                Ok(Line::TooLong(_)) => {
                    let m = "a frame over the 4 MiB bound";
                    shared
                        .refuse_frame(&tx, MCP_FRAME_TOO_LARGE, frame::INVALID_REQUEST, m)
                        .await;
                    continue;
                }
                Ok(Line::Eof) | Err(_) => break,
            };
            let started = Instant::now();
            let started_at_ms = now_ms();
            // The frame's bytes count against the budget of every agent
            // frame in flight (a parsed frame can take ten times its size)
            // until it is answered.
            let cost = u32::try_from(line.len().max(1))
                .unwrap_or(u32::MAX)
                .min(FRAME_BUDGET);
            let Ok(budget) = shared.frame_budget.clone().acquire_many_owned(cost).await else {
                break;
            };
            match frame::decode(&line) {
                Ok(Message::Request { id, method, params }) => {
                    let Ok(permit) = sem.clone().acquire_owned().await else {
                        break;
                    };
                    let Ok(all) = shared.in_flight_all.clone().acquire_owned().await else {
                        break;
                    };
                    let req = Req {
                        id,
                        method,
                        params: params.unwrap_or_default(),
                        modern: false,
                        started,
                        started_at_ms,
                        conn,
                        scope: scope.clone(),
                    };
                    let (s, sess, tx) = (shared.clone(), session.clone(), tx.clone());
                    if req.method == "initialize" {
                        // Decided before the next frame is read: a client
                        // that does not wait for the answer still has its
                        // next requests seen after the handshake.
                        s.handle(&sess, &tx, req).await;
                        drop((all, permit, budget));
                        continue;
                    }
                    tokio::spawn(async move {
                        s.handle(&sess, &tx, req).await;
                        drop((all, permit, budget));
                    });
                }
                Ok(Message::Notification { method, params }) => {
                    // Never waits on an upstream (see `Upstream::cancel`).
                    if !shared.notification(conn, &method, params) {
                        shared.ignored(&method).await;
                    }
                }
                Ok(Message::Response { .. }) | Ok(Message::Error { .. }) => {
                    // The mediator sends the agent no requests.
                    shared.dropped(None, MCP_FRAME_INVALID).await;
                }
                Err(rej) => match rej.reply_to() {
                    Some(id) => {
                        let req = Req {
                            id: id.clone(),
                            method: String::new(),
                            params: Map::new(),
                            modern: false,
                            started,
                            started_at_ms,
                            conn,
                            scope: scope.clone(),
                        };
                        let o = Outcome::denied(rej.code(), rej.message());
                        match shared.audit.reserve() {
                            Some(res) => shared.release(&tx, &req, o, res).await,
                            None => shared.refuse_closed(&tx, &req.id).await,
                        }
                    }
                    None if rej.answers_null() => {
                        shared
                            .refuse_frame(&tx, rej.code(), rej.rpc_code(), rej.message())
                            .await;
                    }
                    None => shared.dropped(None, rej.code()).await,
                },
            }
        }
        let all = u32::try_from(max).unwrap_or(u32::MAX);
        let _ = sem.acquire_many(all).await;
        lock(&shared.agents).remove(&conn);
        drop(tx);
        let _ = writer.await;
        Ok(())
    }
}
