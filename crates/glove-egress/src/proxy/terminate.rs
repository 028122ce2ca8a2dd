//! TLS termination: the agent side of a tunnel to an endpoint a
//! credential is bound to, served with a leaf of the session CA.

use super::serve::serve_http;
use super::{ConnCtx, Listener, Phase};
use hyper_util::rt::TokioIo;
use tokio::sync::watch;

impl ConnCtx {
    /// Terminates TLS on a tunnel's agent side with a leaf of the session
    /// CA for the endpoint, then serves HTTP/1.1 inside it (each request
    /// brokered, decided and forwarded over TLS); its closing event is
    /// written when it ends (with 0 bytes if the handshake failed).
    pub(super) async fn terminate(
        &self,
        agent: hyper::upgrade::Upgraded,
        endpoint: usize,
        phase: watch::Receiver<Phase>,
    ) {
        let inner = ConnCtx::new(
            self.shared.clone(),
            Listener::Terminated(endpoint),
            self.local,
        );
        let config = self
            .shared
            .settings
            .endpoints()
            .get(endpoint)
            .map(|e| self.shared.broker.ca().server_config(&e.host));
        let Some(Ok(config)) = config else {
            inner.close_event().await;
            return;
        };
        let accept = tokio_rustls::TlsAcceptor::from(config).accept(TokioIo::new(agent));
        let deadline = self.shared.limits.head_deadline;
        match tokio::time::timeout(deadline, accept).await {
            Ok(Ok(tls)) => serve_http(inner, tls, phase).await,
            _ => inner.close_event().await,
        }
    }
}
