//! `CONNECT` tunnels: the decision, then either an opaque relay to the
//! upstream or, to an endpoint a credential is bound to, a terminated
//! tunnel (see `terminate`); every allowed tunnel has its end event.

use super::decision::{authority_port, head_len};
use super::record::{audit_failed, Refusal, Seen};
use super::{reached, ConnCtx, Phase};
use crate::audit::Tally;
use crate::meter::{AgentIo, Flow, ProxyBody};
use crate::relay::relay;
use glove_types::codes::egress::*;
use glove_types::egress::event::Decision;
use glove_types::egress::Host;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio::sync::watch;

/// A tunnel the service approved, waiting for hyper to hand over the
/// agent's stream.
pub(super) struct Tunnel {
    on_upgrade: hyper::upgrade::OnUpgrade,
    endpoint: usize,
    seen: Seen,
    /// `Some`: an opaque tunnel to this upstream; `None`: terminated.
    upstream: Option<TcpStream>,
}

impl ConnCtx {
    pub(super) async fn connect(&self, mut req: Request<Incoming>) -> Response<ProxyBody> {
        let (lhost, lport) = self.listener_target();
        let seen = Seen::connection(lhost, lport);
        if head_len(&req) > self.shared.limits.max_head_bytes {
            let r = Refusal::new(EGRESS_REQUEST_INVALID, "the request head is too large")
                .status(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
            return self.refuse(&seen, r).await;
        }
        let Some(authority) = req.uri().authority().cloned() else {
            let r = Refusal::new(EGRESS_TARGET_INVALID, "CONNECT needs host:port");
            return self.refuse(&seen, r).await;
        };
        let host = match Host::parse(authority.host()) {
            Ok(h) => h,
            Err(r) => return self.refuse(&seen, Refusal::of(&r)).await,
        };
        let port = match authority_port(&authority, None) {
            Ok(p) => p,
            Err(r) => return self.refuse(&seen, r).await,
        };
        let seen = seen.at(&host, port);
        let port = port.get();
        let texts = [req.method().as_str(), authority.as_str()];
        if let Err(r) = self.shared.broker.refuse_any(&texts, req.headers()) {
            return self.refuse(&seen, Refusal::of(&r)).await;
        }
        let (addrs, index) = match self.decide(&host, port).await {
            Ok(v) => v,
            Err(r) => return self.refuse(&seen, r).await,
        };
        let (ep, st) = match self.endpoint(index) {
            Ok(v) => v,
            Err(r) => return self.refuse(&seen, r).await,
        };
        // A tunnel to an endpoint a credential is bound to is terminated:
        // its upstream connections are its requests', counted then.
        let terminate = self.shared.broker.binds(&ep);
        // An endpoint a plain-HTTP credential is bound to is reached in
        // plain HTTP only, where its responses are checked: an opaque
        // tunnel could carry a kept credential back unseen.
        if !terminate && self.shared.broker.binds_any(&ep) {
            let r = Refusal::new(
                EGRESS_REQUEST_INVALID,
                "no tunnel to an endpoint a plain-HTTP credential is bound to",
            );
            return self.refuse(&seen, r).await;
        }
        let budget = if !terminate {
            self.take_budget(&st, &ep, 0)
        } else if st.bytes_exhausted() {
            Err(Refusal::new(
                EGRESS_LIMIT_REACHED,
                format!("{ep} has used its byte limit"),
            ))
        } else {
            Ok(())
        };
        if let Err(r) = budget {
            return self.refuse(&seen, r).await;
        }
        if !self.shared.audit.ensure_room(2) {
            return audit_failed().response();
        }
        // The decision is durable before the upstream sees even a
        // handshake; a connection that then fails is its end event.
        let ev = self.event(&seen, Decision::Allowed, None, None, 0, 0);
        if !self.shared.audit.record(ev, Tally::Decision).await {
            return audit_failed().response();
        }
        let upstream = if terminate {
            None
        } else {
            match self.connect_upstream(&addrs, port).await {
                Ok(s) => Some(s),
                Err(r) => {
                    let ev = self.event(&seen, Decision::Refused, Some(r.code), None, 0, 0);
                    if self.shared.audit.record(ev, Tally::Failed).await {
                        return r.response();
                    }
                    return audit_failed().response();
                }
            }
        };
        let on_upgrade = hyper::upgrade::on(&mut req);
        if let Ok(mut slot) = self.tunnel.lock() {
            *slot = Some(Tunnel {
                on_upgrade,
                upstream,
                endpoint: index,
                seen,
            });
        }
        Response::new(ProxyBody::empty())
    }

    /// Runs an approved tunnel once hyper hands the agent's stream over,
    /// then writes its end event. A tunnel whose upgrade fails (the agent
    /// went away before its `200` was written) ends too, with nothing
    /// moved: every allowed decision has its end.
    pub(super) async fn run_tunnel(&self, t: Tunnel, phase: watch::Receiver<Phase>) {
        let upgraded = t.on_upgrade.await;
        let Some(upstream) = t.upstream else {
            match upgraded {
                // The terminated tunnel writes its own end event.
                Ok(agent) => self.terminate(agent, t.endpoint, phase).await,
                Err(_) => {
                    let ev = self.event(&t.seen, Decision::Allowed, None, None, 0, 0);
                    let _ = self.shared.audit.record(ev, Tally::Closing).await;
                }
            }
            return;
        };
        let up = Arc::new(AtomicU64::new(0));
        let down = Arc::new(AtomicU64::new(0));
        if let (Ok(agent), Some(st)) = (upgraded, self.shared.endpoints.get(t.endpoint)) {
            let fu = Flow {
                endpoint: st.clone(),
                session: self.shared.bytes_up.clone(),
                connection: up.clone(),
            };
            let fd = Flow {
                endpoint: st.clone(),
                session: self.shared.bytes_down.clone(),
                connection: down.clone(),
            };
            let stop = reached(phase, Phase::Stopping);
            let idle = self.shared.limits.idle_deadline;
            // A proxy connection is a TCP stream under hyper: take it back
            // and relay with `splice`; anything else is copied.
            match agent.downcast::<TokioIo<AgentIo<TcpStream>>>() {
                Ok(parts) => {
                    let tcp = parts.io.into_inner().into_inner();
                    crate::relay::relay_tcp(tcp, &parts.read_buf, upstream, &fu, &fd, idle, stop)
                        .await;
                }
                Err(agent) => relay(TokioIo::new(agent), upstream, &fu, &fd, idle, stop).await,
            }
        }
        let ev = self.event(
            &t.seen,
            Decision::Allowed,
            None,
            None,
            up.load(Ordering::SeqCst),
            down.load(Ordering::SeqCst),
        );
        let _ = self.shared.audit.record(ev, Tally::Closing).await;
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Listener, Shared};
    use super::*;
    use crate::broker::Broker;
    use crate::ProxyLimits;
    use glove_types::egress::settings::EgressSettings;
    use glove_types::ids::SessionId;
    use std::net::IpAddr;
    use std::num::NonZeroU16;
    use std::os::unix::fs::PermissionsExt;

    /// Issue 26, finding 10: a `CONNECT` whose upgrade fails (the agent is
    /// gone before its `200` is written) left its allowed decision with no
    /// end event. No socket can time that failure reliably; hyper's own
    /// handle for a message that was never upgraded fails the same way.
    #[tokio::test]
    async fn issue26_a_tunnel_whose_upgrade_fails_still_ends() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        let limits = ProxyLimits::default();
        let (audit, writer) = crate::audit::spawn(
            &dir.path().join("egress.journal"),
            &limits.journal_spec(),
            limits.max_concurrent,
        )
        .expect("audit");
        let settings = EgressSettings::from_json(
            br#"{"schema_version":1,"egress_policy_id":"t","endpoints":["model.test:8443"],
                "allow_private":true,"hosts":{"model.test":["127.0.0.1"]}}"#,
        )
        .expect("settings");
        let roots = crate::TlsRoots {
            extra_pem: Vec::new(),
            system_bundle: None,
        };
        let shared = Arc::new(Shared::new(
            SessionId::new("s-test").expect("id"),
            settings,
            limits,
            Broker::empty().expect("broker"),
            audit,
            crate::tls::client_config(&roots).expect("tls"),
        ));
        let proxy_port = NonZeroU16::new(3128).expect("port");
        let ctx = ConnCtx::new(
            shared.clone(),
            Listener::Proxy,
            (IpAddr::from([127, 0, 0, 1]), proxy_port),
        );
        let seen = Seen::connection("model.test".into(), NonZeroU16::new(8443).expect("port"));
        let decision = ctx.event(&seen, Decision::Allowed, None, None, 0, 0);
        assert!(shared.audit.record(decision, Tally::Decision).await);
        let (_phase_tx, phase) = watch::channel(Phase::Running);
        // A terminated tunnel (no upstream of its own) whose upgrade fails.
        let tunnel = Tunnel {
            on_upgrade: hyper::upgrade::on(Request::new(())),
            endpoint: 0,
            seen,
            upstream: None,
        };
        ctx.run_tunnel(tunnel, phase).await;
        drop(ctx);
        drop(shared);
        let totals = writer.join().expect("the writer ends");
        assert_eq!(totals.connections_allowed, 1);
        assert_eq!(
            totals.connections_closed, 1,
            "the allowed tunnel has its end event"
        );
        assert_eq!(totals.journal_records, 2);
    }
}
