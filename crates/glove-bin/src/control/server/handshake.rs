//! The handshake: the budget of connections still handshaking (and the
//! eviction of stale ones), and the hello exchange that authenticates a
//! connection.

use super::*;

/// A pending connection older than this (or than the handshake timeout,
/// if shorter) may be closed to admit a new one; a younger one is waited
/// for, so a burst of real clients waits its turn instead of evicting
/// itself.
const EVICTABLE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

impl Shared {
    /// Enters a new connection into the handshake budget. With the budget
    /// full, the oldest pending connection is closed once it has waited
    /// [`EVICTABLE_AFTER`]; until then the new one waits, for at most the
    /// handshake timeout (then `None`). Returns its number and its eviction
    /// signal.
    pub(super) async fn enter_handshake(&self) -> Option<(u64, Arc<Notify>)> {
        let id = self.next_pending.fetch_add(1, Ordering::Relaxed);
        let evictable = EVICTABLE_AFTER.min(self.limits.handshake_timeout);
        let deadline = Instant::now() + self.limits.handshake_timeout;
        loop {
            // Registered before the check, so a slot freed in between wakes it.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let wait = {
                let mut p = self
                    .pending
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let now = Instant::now();
                let wait = match p.front() {
                    Some((_, since, _)) if p.len() >= self.limits.max_handshakes => {
                        let age = now.saturating_duration_since(*since);
                        if age >= evictable {
                            if let Some((_, _, oldest)) = p.pop_front() {
                                // Kept if that task is not waiting on it yet.
                                oldest.notify_one();
                            }
                            None
                        } else {
                            Some(evictable - age)
                        }
                    }
                    _ => None,
                };
                if wait.is_none() {
                    let evict = Arc::new(Notify::new());
                    p.push_back((id, now, evict.clone()));
                    return Some((id, evict));
                }
                wait.unwrap_or_default()
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            tokio::select! {
                () = &mut freed => {}
                () = tokio::time::sleep(wait.min(left)) => {}
            }
        }
    }

    /// Leaves the handshake budget (done, failed or evicted).
    pub(super) fn leave_handshake(&self, id: u64) {
        let mut p = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        p.retain(|(i, _, _)| *i != id);
        drop(p);
        self.freed.notify_waiters();
    }
}

/// The handshake; on success also the connection's authenticated slot,
/// taken before the success is answered.
pub(super) async fn handshake(
    reader: &mut FrameReader,
    tx: &mpsc::Sender<Vec<u8>>,
    shared: &Shared,
) -> Option<(Authenticated, OwnedSemaphorePermit)> {
    let max = shared.limits.max_frame_bytes;
    let hs = match ServerHandshake::start() {
        Ok(h) => h,
        Err(r) => {
            tracing::error!(code = r.code().as_str(), "cannot draw a nonce");
            return None;
        }
    };
    send(tx, max, &protocol::notification("hello", hs.hello_params()));
    let refuse = |id: Option<&serde_json::Value>, r: Rejection| {
        tracing::warn!(code = r.code().as_str(), "handshake refused");
        send(tx, max, &RpcError::from_rejection(&r).to_response(id));
        None
    };
    let payload = match tokio::time::timeout(shared.limits.handshake_timeout, reader.next()).await {
        Err(_) => {
            return refuse(
                None,
                Rejection::new(AUTH_TIMEOUT, "the handshake did not complete in time"),
            )
        }
        Ok(Err(ReadFault::Closed)) => return None,
        Ok(Err(ReadFault::TooLarge(r))) => return refuse(None, r),
        Ok(Ok(p)) => p,
    };
    let req: Request = match protocol::parse_request(&payload, max as usize) {
        Ok(r) => r,
        Err(b) => {
            tracing::warn!(code = b.error.code.as_str(), "malformed handshake");
            send(tx, max, &b.to_response());
            return None;
        }
    };
    let Some(id) = req.id.as_ref().filter(|_| req.method == "authenticate") else {
        return refuse(
            req.id.as_ref(),
            Rejection::new(
                AUTH_REQUIRED,
                "authenticate first: nothing but the handshake is answered before it",
            ),
        );
    };
    let params: AuthenticateParams =
        match glove_types::canon::from_value(serde_json::Value::Object(req.params.clone())) {
            Ok(p) => p,
            Err(_) => {
                return refuse(
                    Some(id),
                    Rejection::new(AUTH_FAILED, "the handshake MAC does not verify"),
                )
            }
        };
    match hs.verify(&shared.secret, &params, &shared.replay) {
        Ok((server_mac, auth)) => {
            let Ok(slot) = shared.connections.clone().try_acquire_owned() else {
                tracing::warn!(
                    code = CONTROL_TOO_MANY_CONNECTIONS.as_str(),
                    "authenticated connection refused"
                );
                send(tx, max, &too_many_connections().to_response(Some(id)));
                return None;
            };
            send(
                tx,
                max,
                &protocol::result_response(
                    id,
                    serde_json::json!({"server_mac": to_hex(&server_mac)}),
                ),
            );
            Some((auth, slot))
        }
        Err(r) => refuse(Some(id), r),
    }
}
