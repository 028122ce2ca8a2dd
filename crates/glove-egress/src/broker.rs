//! [`Broker`]: brokered credentials, their per-session placeholders, and
//! the one place a real value is put into a request.
//!
//! The agent's environment holds only a placeholder
//! (`glove-placeholder-` and 32 random hex digits, new for every session).
//! On every request the proxy forwards, the placeholder of a credential is
//! replaced with the real value where, and only where, it is bound: in the
//! credential's header of a request to one of its endpoints. A placeholder
//! anywhere else in the request head (another header, a header name, the
//! method or the request target, a hop-by-hop header such as
//! `Proxy-Authorization` or one the request's `Connection` names — even
//! the credential's own — or a request to an endpoint the credential is
//! not bound to) refuses the whole request with
//! `egress_placeholder_misdirected`.
//!
//! Limits: request **bodies are not scanned** (a placeholder in a body is
//! forwarded as is; it is worthless without the proxy, which never puts a
//! real value in a body). A `CONNECT` tunnel the proxy does not terminate
//! is opaque: nothing inside it is brokered, so a credential bound to an
//! HTTPS endpoint needs the proxy to terminate TLS for it: a `CONNECT` to
//! an endpoint some credential is bound to is terminated with a leaf of
//! the session CA ([`Broker::ca_certificate_pem`], which the sandbox must
//! trust), and each request inside is brokered and forwarded like any
//! other, over TLS verified against the configured roots.

use crate::error::EgressError;
use crate::tls::SessionCa;
use glove_types::codes::egress::EGRESS_PLACEHOLDER_MISDIRECTED;
use glove_types::egress::settings::EgressSettings;
use glove_types::egress::Endpoint;
use glove_types::ids::SecretHandle;
use glove_types::Rejection;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use rustix::fs::{FileType, Mode, OFlags};
use std::io::Read;

/// Largest brokered credential, in bytes (after the trailing newline is
/// trimmed).
pub const MAX_CREDENTIAL_BYTES: usize = 16 * 1024;

/// What every placeholder starts with.
pub const PLACEHOLDER_PREFIX: &str = "glove-placeholder-";

/// A credential's real value: never printed, overwritten when dropped.
struct Secret(Vec<u8>);

impl Drop for Secret {
    fn drop(&mut self) {
        self.0.fill(0);
        std::hint::black_box(&mut self.0);
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

#[derive(Debug)]
struct Credential {
    handle: SecretHandle,
    env: String,
    header: HeaderName,
    endpoints: Vec<Endpoint>,
    /// Injected only inside TLS (`true`) or only in plain HTTP.
    tls: bool,
    placeholder: String,
    value: Secret,
}

/// The brokered credentials of one session, read from the host, each with
/// its per-session placeholder, and the session CA that terminates TLS
/// for their endpoints. `Debug` never shows a value or the CA's key.
#[derive(Debug)]
pub struct Broker {
    creds: Vec<Credential>,
    ca: SessionCa,
}

fn credential_error(handle: &SecretHandle, reason: impl Into<String>) -> EgressError {
    EgressError::Credential {
        handle: handle.clone(),
        reason: reason.into(),
    }
}

fn read_source(path: &str, handle: &SecretHandle) -> Result<Vec<u8>, EgressError> {
    let bad = |r: String| credential_error(handle, r);
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::NONBLOCK,
        Mode::empty(),
    )
    .map_err(|e| bad(format!("cannot open {path}: {e}")))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| bad(format!("cannot stat {path}: {e}")))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(bad(format!("{path} is not a regular file")));
    }
    let euid = rustix::process::geteuid();
    if st.st_uid != euid.as_raw() {
        return Err(bad(format!(
            "{path} is owned by uid {}, not the proxy's {}",
            st.st_uid,
            euid.as_raw()
        )));
    }
    if st.st_mode & 0o077 != 0 {
        return Err(bad(format!(
            "{path} has mode {:o}: group and others must have no access",
            st.st_mode & 0o7777
        )));
    }
    let mut value = Vec::new();
    let limit = (MAX_CREDENTIAL_BYTES + 2) as u64;
    std::fs::File::from(fd)
        .take(limit)
        .read_to_end(&mut value)
        .map_err(|e| bad(format!("cannot read {path}: {e}")))?;
    let secret = Secret(value);
    let mut v = secret.0.as_slice();
    if let Some(rest) = v.strip_suffix(b"\n") {
        v = rest.strip_suffix(b"\r").unwrap_or(rest);
    }
    if v.is_empty() || v.len() > MAX_CREDENTIAL_BYTES {
        return Err(bad(format!(
            "{path} must hold 1 to {MAX_CREDENTIAL_BYTES} bytes"
        )));
    }
    if !v.iter().all(|b| (0x20..0x7f).contains(b) || *b == b'\t') {
        return Err(bad(format!(
            "{path} holds bytes a header value cannot carry (control or non-ASCII)"
        )));
    }
    Ok(v.to_vec())
}

fn placeholder() -> Result<String, EgressError> {
    let mut r = [0u8; 16];
    getrandom::fill(&mut r).map_err(|e| EgressError::Io {
        what: "random placeholder",
        source: std::io::Error::other(e.to_string()),
    })?;
    let mut s = String::from(PLACEHOLDER_PREFIX);
    for b in r {
        s.push_str(&format!("{b:02x}"));
    }
    Ok(s)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

fn replace_all(hay: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len() + with.len());
    let mut rest = hay;
    while let Some(i) = find(rest, needle) {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(with);
        rest = &rest[i + needle.len()..];
    }
    out.extend_from_slice(rest);
    out
}

impl Broker {
    /// Reads every brokered credential of `settings` from its
    /// `source_path` on the host and makes its placeholder. A source must
    /// be a regular file (not a symlink) owned by the current effective
    /// uid with no group or other permission bits, holding 1 to
    /// [`MAX_CREDENTIAL_BYTES`] bytes of printable ASCII (one trailing
    /// newline is trimmed).
    pub fn prepare(settings: &EgressSettings) -> Result<Broker, EgressError> {
        let mut creds = Vec::new();
        for b in settings.brokered() {
            let header = HeaderName::from_bytes(b.header.as_bytes()).map_err(|_| {
                credential_error(&b.secret_handle, "the header is not a header name")
            })?;
            let value = Secret(read_source(&b.source_path, &b.secret_handle)?);
            creds.push(Credential {
                handle: b.secret_handle.clone(),
                env: b.env.clone(),
                header,
                endpoints: b.endpoints.clone(),
                tls: b.scheme == glove_types::egress::settings::Scheme::Https,
                placeholder: placeholder()?,
                value,
            });
        }
        let bound: Vec<Endpoint> = creds
            .iter()
            .filter(|c| c.tls)
            .flat_map(|c| c.endpoints.clone())
            .collect();
        let ca = SessionCa::new(&bound)?;
        Ok(Broker { creds, ca })
    }

    /// A broker with no credentials (its CA is constrained to nothing it
    /// would ever sign for).
    pub fn empty() -> Result<Broker, EgressError> {
        Ok(Broker {
            creds: Vec::new(),
            ca: SessionCa::new(&[])?,
        })
    }

    /// The session CA's certificate (PEM), for the sandbox to trust: the
    /// proxy presents leaves it signed when it terminates TLS for an
    /// endpoint a credential is bound to. Its key never leaves the proxy.
    pub fn ca_certificate_pem(&self) -> &str {
        self.ca.pem()
    }

    pub(crate) fn ca(&self) -> &SessionCa {
        &self.ca
    }

    /// What the sandbox's environment gets: each credential's variable
    /// and its placeholder (never the value).
    pub fn environment(&self) -> Vec<(String, String)> {
        self.creds
            .iter()
            .map(|c| (c.env.clone(), c.placeholder.clone()))
            .collect()
    }

    /// Whether a credential that travels in TLS is bound to `endpoint`
    /// (its `CONNECT` tunnels are then terminated).
    pub fn binds(&self, endpoint: &Endpoint) -> bool {
        self.creds
            .iter()
            .any(|c| c.tls && c.endpoints.contains(endpoint))
    }

    /// Whether any credential, of either scheme, is bound to `endpoint`.
    pub(crate) fn binds_any(&self, endpoint: &Endpoint) -> bool {
        self.creds.iter().any(|c| c.endpoints.contains(endpoint))
    }

    /// The real values of every credential bound to `endpoint`, of either
    /// scheme: what no response from it may carry back (an endpoint can
    /// have kept one from an earlier request).
    pub(crate) fn values_for(&self, endpoint: &Endpoint) -> Vec<Vec<u8>> {
        self.creds
            .iter()
            .filter(|c| c.endpoints.contains(endpoint))
            .map(|c| c.value.0.clone())
            .collect()
    }

    /// Whether the proxy may ever terminate TLS (some credential travels
    /// in it): only then does the sandbox get the session CA.
    pub fn terminates_tls(&self) -> bool {
        self.creds.iter().any(|c| c.tls)
    }

    /// Refuses a head that carries any placeholder in `texts` (a method,
    /// a request target) or in any header: what a `CONNECT` is checked with.
    pub(crate) fn refuse_any(&self, texts: &[&str], headers: &HeaderMap) -> Result<(), Rejection> {
        self.apply(None, false, texts, &mut headers.clone())
            .map(|_| ())
    }

    /// Refuses headers the proxy drops rather than forwards (hop-by-hop
    /// ones, and those a request's `Connection` names) when any carries a
    /// placeholder, in its name or value: a placeholder goes only where it
    /// is replaced, and a request that sent it elsewhere is not forwarded
    /// without it.
    pub(crate) fn refuse_dropped(&self, dropped: &HeaderMap) -> Result<(), Rejection> {
        for c in &self.creds {
            let p = c.placeholder.as_bytes();
            for (name, value) in dropped.iter() {
                if find(name.as_str().as_bytes(), p).is_some()
                    || find(value.as_bytes(), p).is_some()
                {
                    return Err(Rejection::new(
                        EGRESS_PLACEHOLDER_MISDIRECTED,
                        format!(
                            "the placeholder of {} was sent in {name}, a hop-by-hop header the proxy does not forward",
                            c.handle
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks a request head bound for `target` (`None`: no credential is
    /// ever injected, as in a `CONNECT`), and puts each bound credential's
    /// value in place of its placeholder in its header. Returns the first
    /// credential injected. A placeholder anywhere else refuses the head
    /// (see the module docs), and then `headers` is left as it was.
    ///
    /// `tls`: whether the request travels inside TLS (a terminated
    /// tunnel); a credential is injected only over its own scheme. The
    /// values injected come back too, for the response to be checked
    /// against (an upstream that reflects them must not reach the agent).
    pub(crate) fn apply(
        &self,
        target: Option<&Endpoint>,
        tls: bool,
        texts: &[&str],
        headers: &mut HeaderMap,
    ) -> Result<Injected, Rejection> {
        if self.creds.is_empty() {
            return Ok(Injected::default());
        }
        let misdirected = |c: &Credential, where_: &str| {
            Rejection::new(
                EGRESS_PLACEHOLDER_MISDIRECTED,
                format!("the placeholder of {} was sent {where_}", c.handle),
            )
        };
        let bound = |c: &Credential, name: &HeaderName| {
            c.header == name && c.tls == tls && target.is_some_and(|t| c.endpoints.contains(t))
        };
        let mut injected: Vec<usize> = Vec::new();
        for (i, c) in self.creds.iter().enumerate() {
            let p = c.placeholder.as_bytes();
            if texts.iter().any(|t| find(t.as_bytes(), p).is_some()) {
                return Err(misdirected(c, "in the request line"));
            }
            for (name, value) in headers.iter() {
                if find(name.as_str().as_bytes(), p).is_some() {
                    return Err(misdirected(c, "as a header name"));
                }
                if find(value.as_bytes(), p).is_none() {
                    continue;
                }
                if !bound(c, name) {
                    let to_bound = target.is_some_and(|t| c.endpoints.contains(t));
                    let where_ = if c.header == name && to_bound {
                        if c.tls {
                            "in plain HTTP; it travels only inside TLS".to_owned()
                        } else {
                            "inside TLS; it travels only in plain HTTP".to_owned()
                        }
                    } else if c.header == name {
                        format!("to an endpoint it is not bound to, in {name}")
                    } else {
                        format!("in the header {name}, not {}", c.header)
                    };
                    return Err(misdirected(c, &where_));
                }
                if !injected.contains(&i) {
                    injected.push(i);
                }
            }
        }
        for (_, value) in headers.iter_mut() {
            let mut bytes: Option<Vec<u8>> = None;
            for &i in &injected {
                let Some(c) = self.creds.get(i) else { continue };
                let cur = bytes.as_deref().unwrap_or(value.as_bytes());
                if find(cur, c.placeholder.as_bytes()).is_some() {
                    bytes = Some(replace_all(cur, c.placeholder.as_bytes(), &c.value.0));
                }
            }
            if let Some(b) = bytes {
                let Ok(mut v) = HeaderValue::from_bytes(&b) else {
                    return Err(Rejection::new(
                        EGRESS_PLACEHOLDER_MISDIRECTED,
                        "a brokered value does not fit its header",
                    ));
                };
                v.set_sensitive(true);
                *value = v;
            }
        }
        Ok(Injected {
            handle: injected
                .first()
                .and_then(|i| self.creds.get(*i))
                .map(|c| c.handle.clone()),
            values: injected
                .iter()
                .filter_map(|i| self.creds.get(*i))
                .map(|c| c.value.0.clone())
                .collect(),
        })
    }
}

/// What [`Broker::apply`] put into a request.
#[derive(Default)]
pub(crate) struct Injected {
    /// The first credential injected (named in the audit).
    pub(crate) handle: Option<SecretHandle>,
    /// Every value injected, to check the response for.
    pub(crate) values: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Injected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Injected")
            .field("handle", &self.handle)
            .field("values", &self.values.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(endpoint: &str) -> Broker {
        Broker {
            ca: SessionCa::new(&[]).expect("ca"),
            creds: vec![Credential {
                handle: SecretHandle::new("key").expect("handle"),
                env: "KEY".into(),
                header: HeaderName::from_static("authorization"),
                endpoints: vec![Endpoint::parse(endpoint).expect("endpoint")],
                tls: false,
                placeholder: placeholder().expect("placeholder"),
                value: Secret(b"real-secret".to_vec()),
            }],
        }
    }

    #[test]
    fn replaces_only_where_bound() {
        let b = broker("model.test:8000");
        let p = b.environment()[0].1.clone();
        assert!(p.starts_with(PLACEHOLDER_PREFIX) && p.len() == PLACEHOLDER_PREFIX.len() + 32);
        let ep = Endpoint::parse("model.test:8000").expect("endpoint");
        let other = Endpoint::parse("other.test:8000").expect("endpoint");
        let mut h = HeaderMap::new();
        h.insert(
            "authorization",
            HeaderValue::from_str(&format!("Bearer {p}")).expect("value"),
        );
        let mut h2 = h.clone();
        let mut h5 = h.clone();
        let got = b
            .apply(Some(&ep), false, &["GET", "/"], &mut h)
            .expect("bound");
        assert_eq!(got.handle.expect("injected").as_str(), "key");
        assert_eq!(got.values, vec![b"real-secret".to_vec()]);
        assert_eq!(h["authorization"], "Bearer real-secret");
        // Bound to plain HTTP: never injected inside TLS.
        let e = b
            .apply(Some(&ep), true, &["GET", "/"], &mut h5)
            .expect_err("wrong scheme");
        assert_eq!(e.code(), EGRESS_PLACEHOLDER_MISDIRECTED);
        let e = b
            .apply(Some(&other), false, &["GET", "/"], &mut h2)
            .expect_err("unbound");
        assert_eq!(e.code(), EGRESS_PLACEHOLDER_MISDIRECTED);
        assert!(!e.message().contains("real-secret"));
        let mut h3 = HeaderMap::new();
        h3.insert("x-api-key", HeaderValue::from_str(&p).expect("value"));
        assert!(b.apply(Some(&ep), false, &["GET", "/"], &mut h3).is_err());
        let mut h4 = HeaderMap::new();
        let uri = format!("/?k={p}");
        assert!(b.apply(Some(&ep), false, &["GET", &uri], &mut h4).is_err());
        assert!(!format!("{b:?}").contains("real-secret"));
    }
}
