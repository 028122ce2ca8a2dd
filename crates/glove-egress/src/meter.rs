//! Counting and deadlines: the agent-side stream wrapper that notes every
//! byte and moment of progress, the endpoint budgets, and the body
//! wrappers that count, bound and time out what flows through a request.

use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// `d` from now, or a far future when that would overflow.
pub(crate) fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(86_400 * 365)))
        .unwrap_or(now)
}

/// One endpoint's use over the session, against its limits.
#[derive(Debug, Default)]
pub(crate) struct EndpointState {
    /// Upstream connections opened (tunnels and forwarded requests).
    pub(crate) connections: AtomicU64,
    /// Bytes both ways, all its connections together.
    pub(crate) bytes: AtomicU64,
    /// The policy's limits.
    pub(crate) max_connections: Option<u64>,
    /// The policy's limits.
    pub(crate) max_bytes: Option<u64>,
}

impl EndpointState {
    /// Counts `n` more bytes; `false` once the byte limit is exceeded.
    pub(crate) fn spend(&self, n: u64) -> bool {
        let total = self.bytes.fetch_add(n, Ordering::SeqCst).saturating_add(n);
        self.max_bytes.is_none_or(|m| total <= m)
    }

    /// Counts `n` more bytes only if they fit the byte limit whole;
    /// `false` (and nothing counted) otherwise.
    pub(crate) fn reserve(&self, n: u64) -> bool {
        self.bytes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| {
                b.checked_add(n)
                    .filter(|t| self.max_bytes.is_none_or(|m| *t <= m))
            })
            .is_ok()
    }

    /// Gives back `n` bytes [`EndpointState::reserve`] took for something
    /// that was then not sent.
    pub(crate) fn refund(&self, n: u64) {
        let _ = self
            .bytes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| {
                Some(b.saturating_sub(n))
            });
    }

    /// Whether the byte budget is used up.
    pub(crate) fn bytes_exhausted(&self) -> bool {
        self.max_bytes
            .is_some_and(|m| self.bytes.load(Ordering::SeqCst) >= m)
    }

    /// Takes one connection from the budget; `false` when it is spent.
    pub(crate) fn take_connection(&self) -> bool {
        let n = self
            .connections
            .fetch_add(1, Ordering::SeqCst)
            .saturating_add(1);
        self.max_connections.is_none_or(|m| n <= m)
    }
}

/// Where one direction's bytes are counted: the endpoint's budget, the
/// session total and the connection's own total.
#[derive(Clone, Debug)]
pub(crate) struct Flow {
    pub(crate) endpoint: Arc<EndpointState>,
    pub(crate) session: Arc<AtomicU64>,
    pub(crate) connection: Arc<AtomicU64>,
}

impl Flow {
    /// Counts `n` bytes; `false` once the endpoint's byte limit is exceeded
    /// (the bytes are then not to be forwarded).
    pub(crate) fn spend(&self, n: usize) -> bool {
        let n = n as u64;
        if !self.endpoint.spend(n) {
            return false;
        }
        self.session.fetch_add(n, Ordering::SeqCst);
        self.connection.fetch_add(n, Ordering::SeqCst);
        true
    }
}

impl Flow {
    /// Counts `n` bytes already taken from the endpoint's budget (see
    /// [`EndpointState::reserve`]) into the session's and connection's
    /// totals.
    pub(crate) fn note(&self, n: u64) {
        self.session.fetch_add(n, Ordering::SeqCst);
        self.connection.fetch_add(n, Ordering::SeqCst);
    }
}

/// Progress on the agent's stream: bytes read, and the last moment
/// anything moved.
#[derive(Debug)]
pub(crate) struct IoMeter {
    start: Instant,
    last_ms: AtomicU64,
    read: AtomicU64,
    read_at_rest: AtomicU64,
}

impl IoMeter {
    pub(crate) fn new() -> Arc<IoMeter> {
        Arc::new(IoMeter {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            read: AtomicU64::new(0),
            read_at_rest: AtomicU64::new(0),
        })
    }

    pub(crate) fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::SeqCst);
    }

    /// When the stream will have been idle for `idle`.
    pub(crate) fn idle_deadline(&self, idle: Duration) -> Instant {
        let last = Duration::from_millis(self.last_ms.load(Ordering::SeqCst));
        last.checked_add(idle)
            .and_then(|d| self.start.checked_add(d))
            .unwrap_or_else(|| after(idle))
    }

    /// Notes that a response has been written whole: bytes read after this
    /// belong to a next request.
    pub(crate) fn rest(&self) {
        self.read_at_rest
            .store(self.read.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    /// Whether the agent sent bytes since the last response was written
    /// whole (a partial request head, when the head deadline fires).
    pub(crate) fn partial_since_rest(&self) -> bool {
        self.read.load(Ordering::SeqCst) > self.read_at_rest.load(Ordering::SeqCst)
    }
}

/// Resolves once `meter` has seen no progress for `idle`.
pub(crate) async fn idle_watch(meter: &IoMeter, idle: Duration) {
    loop {
        let deadline = meter.idle_deadline(idle);
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}

/// The agent's stream, noting progress in an [`IoMeter`].
#[derive(Debug)]
pub(crate) struct AgentIo<T> {
    inner: T,
    meter: Arc<IoMeter>,
}

impl<T> AgentIo<T> {
    pub(crate) fn new(inner: T, meter: Arc<IoMeter>) -> AgentIo<T> {
        meter.touch();
        AgentIo { inner, meter }
    }

    /// The stream itself.
    pub(crate) fn into_inner(self) -> T {
        self.inner
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for AgentIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            let n = buf.filled().len().saturating_sub(before) as u64;
            if n > 0 {
                self.meter.read.fetch_add(n, Ordering::SeqCst);
                self.meter.touch();
            }
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for AgentIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            if n > 0 {
                self.meter.touch();
            }
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r {
            if n > 0 {
                self.meter.touch();
            }
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Why a relayed body stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    /// Nothing moved for the idle deadline.
    #[error("the body was idle past its deadline")]
    Idle,
    /// The endpoint's byte limit was exceeded.
    #[error("the endpoint's byte limit is reached")]
    Limit,
    /// The other side failed.
    #[error("{0}")]
    Hyper(#[from] hyper::Error),
    /// The body carried a brokered credential's value.
    #[error("the response carried a brokered credential")]
    Reflected,
}

/// A body relayed from one side to the other: counted into a [`Flow`],
/// cut when the endpoint's byte limit is exceeded, and failed when no frame
/// comes for the idle deadline.
#[derive(Debug)]
pub(crate) struct Metered {
    inner: Incoming,
    idle: Duration,
    sleep: Pin<Box<Sleep>>,
    flow: Flow,
    /// Values that must not pass (see [`Metered::withholding`]).
    secrets: Secrets,
    /// The tail held back: what could begin a run of a secret, so a run
    /// split across two frames is seen whole before any of it goes.
    held: Vec<u8>,
    /// A trailers frame waiting behind the held tail.
    trailers: Option<Frame<Bytes>>,
    ended: bool,
    /// Told, once, why the body failed (see [`Metered::on_failure`]).
    on_fail: Option<FailHook>,
}

/// What a [`Metered`] body calls when it fails.
pub(crate) struct FailHook(Box<dyn FnOnce(glove_types::ErrorCode) + Send + Sync>);

impl std::fmt::Debug for FailHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FailHook")
    }
}

impl BodyError {
    /// The egress code a failure is audited with.
    pub(crate) fn code(&self) -> glove_types::ErrorCode {
        use glove_types::codes::egress::*;
        match self {
            BodyError::Idle => EGRESS_TIMEOUT,
            BodyError::Limit => EGRESS_LIMIT_REACHED,
            BodyError::Hyper(_) => EGRESS_UPSTREAM_FAILED,
            BodyError::Reflected => EGRESS_CREDENTIAL_REFLECTED,
        }
    }
}

impl Metered {
    pub(crate) fn new(inner: Incoming, flow: Flow, idle: Duration) -> Metered {
        Metered {
            inner,
            idle,
            sleep: Box::pin(tokio::time::sleep_until(after(idle))),
            flow,
            secrets: Secrets::default(),
            held: Vec::new(),
            trailers: None,
            ended: false,
            on_fail: None,
        }
    }

    /// Calls `hook` with the failure's code the first time the body fails
    /// (the response head is out by then: this is how the failure still
    /// reaches the journal).
    pub(crate) fn on_failure(
        mut self,
        hook: impl FnOnce(glove_types::ErrorCode) + Send + Sync + 'static,
    ) -> Metered {
        self.on_fail = Some(FailHook(Box::new(hook)));
        self
    }

    fn failed(&mut self, e: BodyError) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        if let Some(FailHook(hook)) = self.on_fail.take() {
            hook(e.code());
        }
        Poll::Ready(Some(Err(e)))
    }

    /// Fails the body (before any byte of it passes) where it carries a
    /// run of [`MIN_RUN`] or more bytes of one of `secrets` (see
    /// [`Secrets`]): the credentials bound to the endpoint, which one that
    /// echoes a request, or keeps and returns it, would hand back. Only
    /// the bytes that could begin such a run wait for the next frame.
    pub(crate) fn withholding_secrets(mut self, secrets: Secrets) -> Metered {
        self.secrets = secrets;
        self
    }

    /// Joins `data` to the held tail, checks it, and returns what may go.
    fn pass(&mut self, data: &[u8]) -> Result<Bytes, BodyError> {
        let mut all = std::mem::take(&mut self.held);
        all.extend_from_slice(data);
        if self.secrets.found_in(&all) {
            return Err(BodyError::Reflected);
        }
        let cut = all.len().saturating_sub(self.secrets.open_suffix(&all));
        self.held = all.split_off(cut);
        Ok(Bytes::from(all))
    }
}

/// Runs shorter than this may pass (a secret's shortest run checked).
pub(crate) const MIN_RUN: usize = 12;

/// The secrets a response is checked for: every run of `k` bytes of each
/// (`k` = [`MIN_RUN`], or the whole of a shorter one). Exact bytes only:
/// an endpoint that returns a credential encoded, or in pieces shorter
/// than `k`, is not caught (`docs/egress.md`).
#[derive(Debug, Default)]
pub(crate) struct Secrets {
    values: Vec<Vec<u8>>,
    runs: std::collections::HashSet<Vec<u8>>,
    k: usize,
}

impl Secrets {
    pub(crate) fn new(values: Vec<Vec<u8>>) -> Secrets {
        let values: Vec<Vec<u8>> = values.into_iter().filter(|v| !v.is_empty()).collect();
        let k = values
            .iter()
            .map(|v| v.len().min(MIN_RUN))
            .min()
            .unwrap_or(0);
        let mut runs = std::collections::HashSet::new();
        if k > 0 {
            for v in &values {
                for w in v.windows(k) {
                    runs.insert(w.to_vec());
                }
            }
        }
        Secrets { values, runs, k }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Whether `hay` holds a run of `k` bytes of a secret.
    pub(crate) fn found_in(&self, hay: &[u8]) -> bool {
        self.k > 0 && hay.windows(self.k).any(|w| self.runs.contains(w))
    }

    /// The longest suffix of `hay` shorter than `k` that is part of a
    /// secret (it could begin a run with what comes next); for random keys
    /// and ordinary text usually 0.
    fn open_suffix(&self, hay: &[u8]) -> usize {
        let most = self.k.saturating_sub(1).min(hay.len());
        (1..=most)
            .rev()
            .find(|&j| {
                let tail = &hay[hay.len() - j..];
                self.values.iter().any(|v| v.windows(j).any(|w| w == tail))
            })
            .unwrap_or(0)
    }
}

impl Body for Metered {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        if self.ended {
            // The held tail went out; then the trailers, then the end.
            return Poll::Ready(self.trailers.take().map(Ok));
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    if !self.flow.spend(data.len()) {
                        return self.failed(BodyError::Limit);
                    }
                }
                let deadline = after(self.idle);
                self.sleep.as_mut().reset(deadline);
                if self.secrets.is_empty() {
                    return Poll::Ready(Some(Ok(frame)));
                }
                match frame.into_data() {
                    Ok(data) => match self.pass(&data) {
                        Ok(out) => Poll::Ready(Some(Ok(Frame::data(out)))),
                        Err(e) => self.failed(e),
                    },
                    Err(trailers) => {
                        // Trailer fields are checked like the head's.
                        let carried = trailers.trailers_ref().is_some_and(|t| {
                            t.iter().any(|(n, v)| {
                                self.secrets.found_in(n.as_str().as_bytes())
                                    || self.secrets.found_in(v.as_bytes())
                            })
                        });
                        if carried {
                            return self.failed(BodyError::Reflected);
                        }
                        self.ended = true;
                        self.trailers = Some(trailers);
                        let tail = std::mem::take(&mut self.held);
                        Poll::Ready(Some(Ok(Frame::data(Bytes::from(tail)))))
                    }
                }
            }
            Poll::Ready(Some(Err(e))) => self.failed(BodyError::Hyper(e)),
            Poll::Ready(None) if !self.held.is_empty() => {
                self.ended = true;
                let tail = std::mem::take(&mut self.held);
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(tail)))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match self.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => self.failed(BodyError::Idle),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_empty() && self.trailers.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Marks the agent's stream at rest when a response body is dropped
/// (hyper drops it once written whole).
#[derive(Debug)]
struct RestMark(Arc<IoMeter>);

impl Drop for RestMark {
    fn drop(&mut self) {
        self.0.rest();
    }
}

#[derive(Debug)]
enum Kind {
    Full(Option<Bytes>),
    Stream(Box<Metered>),
}

/// Every response body the proxy sends the agent: a short text of its own
/// or an upstream's metered body.
#[derive(Debug)]
pub(crate) struct ProxyBody {
    kind: Kind,
    _rest: Option<RestMark>,
}

impl ProxyBody {
    pub(crate) fn full(text: impl Into<Bytes>) -> ProxyBody {
        ProxyBody {
            kind: Kind::Full(Some(text.into())),
            _rest: None,
        }
    }

    pub(crate) fn empty() -> ProxyBody {
        ProxyBody {
            kind: Kind::Full(None),
            _rest: None,
        }
    }

    pub(crate) fn stream(m: Metered) -> ProxyBody {
        ProxyBody {
            kind: Kind::Stream(Box::new(m)),
            _rest: None,
        }
    }

    /// Marks `meter` at rest when this body is dropped.
    pub(crate) fn resting(mut self, meter: &Arc<IoMeter>) -> ProxyBody {
        self._rest = Some(RestMark(meter.clone()));
        self
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match &mut self.kind {
            Kind::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Kind::Stream(m) => Pin::new(m.as_mut()).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full(b) => b.is_none(),
            Kind::Stream(m) => m.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::Stream(m) => m.size_hint(),
        }
    }
}

#[cfg(test)]
mod secret_tests {
    use super::Secrets;

    #[test]
    fn runs_are_found_and_only_a_possible_start_is_held_back() {
        let s = Secrets::new(vec![b"sk-abcdef0123456789".to_vec()]);
        // A run of 12 bytes anywhere, and the whole value.
        assert!(s.found_in(b"key: abcdef012345 (masked)"));
        assert!(s.found_in(b"sk-abcdef0123456789"));
        assert!(!s.found_in(b"sk-abcdef01 and 23456789"));
        // An SSE event's end is no part of the key: nothing waits.
        assert_eq!(s.open_suffix(b"data: {\"delta\":\"hi\"}\n\n"), 0);
        // A tail that could begin a run waits, at most 11 bytes of it.
        assert_eq!(s.open_suffix(b"error: sk-ab"), 5);
        assert_eq!(s.open_suffix(b"zzz sk-abcdef0123"), 11);
        assert!(Secrets::new(vec![]).is_empty());
    }
}
