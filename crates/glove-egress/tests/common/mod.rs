//! The test harness: a proxy started on a SEQPACKET channel the test
//! owns, connections handed to it as the sandbox's forwarder would, an
//! upstream HTTP server on 127.0.0.1 that records what it sees, and
//! helpers to speak HTTP through the proxy and read the journal.
#![allow(dead_code, unreachable_pub, missing_docs)]

use glove_egress::{read_events, Broker, ProxyConfig, ProxyHandle, ProxyLimits, Summary, TlsRoots};
use glove_types::egress::event::EgressEvent;
use glove_types::egress::settings::EgressSettings;
use glove_types::ids::SessionId;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rustix::fd::{AsFd, OwnedFd};
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpStream;

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub journal: PathBuf,
    pub limits: ProxyLimits,
    pub env: Vec<(String, String)>,
    pub ca_pem: String,
    pub chan: Option<OwnedFd>,
    handle: Option<ProxyHandle>,
    listener: std::net::TcpListener,
}

pub fn private_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    dir
}

/// Writes a credential source file (mode 0600) and returns its path.
pub fn secret_file(dir: &tempfile::TempDir, name: &str, value: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, value).expect("write secret");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    p.to_str().expect("utf-8 path").to_owned()
}

pub fn settings(json: &str) -> EgressSettings {
    EgressSettings::from_json(json.as_bytes()).expect("valid egress settings")
}

impl Harness {
    pub fn start(json: &str, limits: ProxyLimits) -> Harness {
        Harness::start_in(private_dir(), json, limits)
    }

    pub fn start_in(dir: tempfile::TempDir, json: &str, limits: ProxyLimits) -> Harness {
        let roots = TlsRoots {
            extra_pem: Vec::new(),
            system_bundle: None,
        };
        Harness::start_tls(dir, json, limits, roots)
    }

    pub fn start_tls(
        dir: tempfile::TempDir,
        json: &str,
        limits: ProxyLimits,
        tls_roots: TlsRoots,
    ) -> Harness {
        let settings = settings(json);
        let broker = Broker::prepare(&settings).expect("broker");
        let env = broker.environment();
        let ca_pem = broker.ca_certificate_pem().to_owned();
        let journal = dir.path().join("egress.journal");
        let (ours, theirs) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .expect("socketpair");
        let config = ProxyConfig {
            session_id: SessionId::new("s-test").expect("id"),
            settings,
            journal_path: journal.clone(),
            limits: limits.clone(),
            tls_roots,
        };
        let handle = glove_egress::start(config, broker, theirs).expect("start");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        Harness {
            dir,
            journal,
            limits,
            env,
            ca_pem,
            chan: Some(ours),
            handle: Some(handle),
            listener,
        }
    }

    pub fn placeholder(&self) -> String {
        self.env.first().expect("a brokered credential").1.clone()
    }

    /// Sends one message on the channel: `data` and these descriptors.
    pub fn send_raw(&self, data: &[u8], fds: &[rustix::fd::BorrowedFd<'_>]) {
        let chan = self.chan.as_ref().expect("channel open");
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !fds.is_empty() {
            assert!(control.push(SendAncillaryMessage::ScmRights(fds)));
        }
        rustix::net::sendmsg(
            chan,
            &[IoSlice::new(data)],
            &mut control,
            SendFlags::empty(),
        )
        .expect("sendmsg");
    }

    /// A connection to listener `index`, as the forwarder hands it over:
    /// the accepted side goes to the proxy, the test keeps the client side.
    pub async fn connect(&self, index: u8) -> TcpStream {
        let client = std::net::TcpStream::connect(self.listener.local_addr().expect("addr"))
            .expect("connect");
        let (accepted, _) = self.listener.accept().expect("accept");
        self.send_raw(&[index], &[accepted.as_fd()]);
        drop(accepted);
        client.set_nonblocking(true).expect("nonblocking");
        TcpStream::from_std(client).expect("tokio stream")
    }

    pub fn close_channel(&mut self) {
        self.chan = None;
    }

    /// Raw journal bytes replayed (while the proxy holds its lock).
    pub fn events_on_disk(&self) -> Vec<EgressEvent> {
        let bytes = std::fs::read(&self.journal).expect("read journal");
        let spec = self.limits.journal_spec();
        let r = glove_journal::replay_bytes(&bytes, &spec, None).expect("replay");
        r.records
            .iter()
            .map(|m| EgressEvent::decode(&bytes[m.payload.clone()]).expect("event"))
            .collect()
    }

    /// Finishes the proxy (on a blocking thread, so the test's runtime,
    /// where the upstream runs, keeps going) and reads the journal.
    pub async fn finish(mut self) -> (Summary, Vec<EgressEvent>) {
        let handle = self.handle.take().expect("running");
        let summary = tokio::task::spawn_blocking(move || handle.finish(Duration::from_secs(2)))
            .await
            .expect("join")
            .expect("finish");
        let events = read_events(&self.journal, &self.limits.journal_spec()).expect("events");
        (summary, events)
    }

    /// A connected pair on the harness's listener: (accepted, client).
    pub fn connect_pair(&self) -> (std::net::TcpStream, std::net::TcpStream) {
        let client = std::net::TcpStream::connect(self.listener.local_addr().expect("addr"))
            .expect("connect");
        let (accepted, _) = self.listener.accept().expect("accept");
        (accepted, client)
    }
}

/// What the upstream saw of one request.
#[derive(Clone, Debug)]
pub struct SeenRequest {
    pub method: String,
    pub uri: String,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

#[derive(Clone)]
pub struct Upstream {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<SeenRequest>>>,
    pub accepted: Arc<Mutex<u64>>,
}

impl Upstream {
    pub fn port(&self) -> u16 {
        self.addr.port()
    }
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.seen.lock().expect("lock").clone()
    }
    pub fn connections(&self) -> u64 {
        *self.accepted.lock().expect("lock")
    }
}

/// An HTTP/1.1 server on 127.0.0.1 answering `200 hello from upstream`.
pub async fn upstream() -> Upstream {
    upstream_with(None).await
}

/// A test CA and a TLS server configuration for `name` signed by it.
pub fn test_tls(name: &str) -> (String, Arc<rustls::ServerConfig>) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let ca_key = KeyPair::generate().expect("key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let issuer = CertifiedIssuer::self_signed(ca, ca_key).expect("ca");
    let key = KeyPair::generate().expect("key");
    let leaf = CertificateParams::new(vec![name.to_owned()])
        .expect("params")
        .signed_by(&key, &issuer)
        .expect("leaf");
    let der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], der)
        .expect("server config");
    (issuer.pem(), Arc::new(config))
}

/// A TLS client configuration trusting exactly `ca_pem`.
pub fn client_tls(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.expect("pem")).expect("root");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// The same server, over TLS with `tls` when given.
pub async fn upstream_with(tls: Option<Arc<rustls::ServerConfig>>) -> Upstream {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind upstream");
    let up = Upstream {
        addr: l.local_addr().expect("addr"),
        seen: Arc::default(),
        accepted: Arc::default(),
    };
    let u = up.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            *u.accepted.lock().expect("lock") += 1;
            let u = u.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let u = u.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        if parts.uri.path().starts_with("/slow") {
                            tokio::time::sleep(Duration::from_millis(300)).await;
                        }
                        // `/echo-body`: the request's authorization in the
                        // body, after a long prefix (so it spans frames);
                        // `/echo-head`: in a response header.
                        let auth = parts
                            .headers
                            .get("authorization")
                            .map(|v| v.as_bytes().to_vec())
                            .unwrap_or_default();
                        let echo_body = parts.uri.path().starts_with("/echo-body");
                        let echo_head = parts.uri.path().starts_with("/echo-head");
                        // `/echo-trunc`: the authorization but its last
                        // byte; `/kept`: the authorization of the request
                        // before; `/gzip`: a compressed answer.
                        let path = parts.uri.path().to_owned();
                        let kept = u
                            .seen
                            .lock()
                            .expect("lock")
                            .last()
                            .and_then(|r| {
                                r.headers
                                    .get("authorization")
                                    .map(|v| v.as_bytes().to_vec())
                            })
                            .unwrap_or_default();
                        let body = body
                            .collect()
                            .await
                            .map(|c| c.to_bytes())
                            .unwrap_or_default();
                        u.seen.lock().expect("lock").push(SeenRequest {
                            method: parts.method.to_string(),
                            uri: parts.uri.to_string(),
                            headers: parts.headers,
                            body,
                        });
                        let text = if path.starts_with("/echo-trunc") {
                            let mut t = b"invalid key: ".to_vec();
                            t.extend_from_slice(&auth[..auth.len().saturating_sub(1)]);
                            Bytes::from(t)
                        } else if path.starts_with("/kept") {
                            Bytes::from(kept)
                        } else if echo_body {
                            let mut t = vec![b'x'; 100_000];
                            t.extend_from_slice(&auth);
                            t.extend_from_slice(b" tail");
                            Bytes::from(t)
                        } else {
                            Bytes::from_static(b"hello from upstream")
                        };
                        let mut r = Response::new(Full::new(text));
                        r.headers_mut()
                            .insert("x-upstream", hyper::header::HeaderValue::from_static("1"));
                        if path.starts_with("/gzip") {
                            r.headers_mut().insert(
                                "content-encoding",
                                hyper::header::HeaderValue::from_static("gzip"),
                            );
                        }
                        if echo_head {
                            if let Ok(v) = hyper::header::HeaderValue::from_bytes(&auth) {
                                r.headers_mut().insert("x-echo", v);
                            }
                        }
                        Ok::<_, std::convert::Infallible>(r)
                    }
                });
                let builder = hyper::server::conn::http1::Builder::new();
                match tls {
                    Some(config) => {
                        let acceptor = tokio_rustls::TlsAcceptor::from(config);
                        if let Ok(s) = acceptor.accept(s).await {
                            let _ = builder.serve_connection(TokioIo::new(s), svc).await;
                        }
                    }
                    None => {
                        let _ = builder.serve_connection(TokioIo::new(s), svc).await;
                    }
                }
            });
        }
    });
    up
}

/// A response with its body collected.
pub struct Got {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: String,
}

impl Got {
    pub fn refusal(&self) -> Option<&str> {
        self.headers
            .get("x-glove-refusal")
            .and_then(|v| v.to_str().ok())
    }
}

pub type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// An HTTP/1.1 client connection over `stream`.
pub async fn client(stream: TcpStream) -> Sender {
    client_on(TokioIo::new(stream)).await
}

/// An HTTP/1.1 client connection over any hyper stream (a tunnel).
pub async fn client_on<T>(io: T) -> Sender
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .expect("handshake");
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    sender
}

pub async fn collect(resp: Response<Incoming>) -> Got {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp
        .into_body()
        .collect()
        .await
        .map(|c| String::from_utf8_lossy(&c.to_bytes()).into_owned())
        .unwrap_or_default();
    Got {
        status,
        headers,
        body,
    }
}

pub fn get(uri: &str) -> Request<Full<Bytes>> {
    Request::get(uri)
        .body(Full::new(Bytes::new()))
        .expect("request")
}

pub async fn send(sender: &mut Sender, req: Request<Full<Bytes>>) -> Got {
    let resp = tokio::time::timeout(Duration::from_secs(10), sender.send_request(req))
        .await
        .expect("in time")
        .expect("response");
    collect(resp).await
}

/// One request on a fresh connection to listener `index`.
pub async fn once(h: &Harness, index: u8, req: Request<Full<Bytes>>) -> Got {
    let mut s = client(h.connect(index).await).await;
    send(&mut s, req).await
}

/// Asserts a refusal: status, code header and body.
pub fn assert_refused(g: &Got, status: u16, code: &str) {
    assert_eq!(g.status, status, "{code}: {}", g.body);
    assert_eq!(g.refusal(), Some(code), "{}", g.body);
    assert!(
        g.body
            .starts_with(&format!("glove egress refused: {code}: ")),
        "{}",
        g.body
    );
}

/// The codes of the refused events, in order.
pub fn refused_codes(events: &[EgressEvent]) -> Vec<String> {
    events.iter().filter_map(|e| e.code.clone()).collect()
}
