//! An egress policy file: what `glove exec --egress FILE` reads, and the
//! full form of a session policy's egress entry. Strict JSON, every list
//! bounded, every cross-reference checked.
//!
//! ```json
//! {
//!   "schema_version": 1,
//!   "egress_policy_id": "model",
//!   "endpoints": ["api.example.com:443", "model.test:8000"],
//!   "allow_private": true,
//!   "limits": [{"endpoint": "model.test:8000", "max_connections": 64, "max_bytes": 1048576}],
//!   "hosts": {"model.test": ["127.0.0.1"]},
//!   "port_mappings": [{"listen_port": 18000, "endpoint": "model.test:8000"}],
//!   "brokered": [{"secret_handle": "openai", "source_path": "/etc/glove/openai.key",
//!                 "env": "OPENAI_API_KEY", "header": "authorization",
//!                 "endpoints": ["model.test:8000"]}]
//! }
//! ```
//!
//! * `hosts`, when present, is the proxy's whole resolver: a name not in it
//!   resolves to nothing (`egress_no_address`), and the system resolver is
//!   never asked. Without it the proxy asks the system resolver.
//! * A port mapping is a loopback port inside the sandbox that reaches one
//!   endpoint, for clients that ignore proxy variables; the agent speaks
//!   plain HTTP to it, and the proxy forwards each request.
//! * A brokered credential is read from `source_path` by the proxy; the
//!   agent's variable `env` holds a per-session placeholder, which the proxy
//!   replaces in the named header of requests to the listed endpoints only,
//!   and only over TLS unless `"scheme": "http"` says the endpoints speak
//!   plain HTTP (so a key bound to an HTTPS API never leaves in the clear).

use super::Endpoint;
use crate::canon::{self, Form};
use crate::codes::egress::EGRESS_POLICY_INVALID;
use crate::codes::policy::{POLICY_EGRESS_ENDPOINT_INVALID, POLICY_EGRESS_PRIVATE};
use crate::ids::{PolicyId, SecretHandle};
use crate::Rejection;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Largest egress policy file.
pub const MAX_SETTINGS_BYTES: usize = 256 * 1024;
/// Most endpoints.
pub const MAX_ENDPOINTS: usize = 64;
/// Most names in `hosts`, and addresses per name.
pub const MAX_HOSTS: usize = 64;
/// Most addresses one name in `hosts` has.
pub const MAX_HOST_ADDRESSES: usize = 8;
/// Most port mappings.
pub const MAX_MAPPINGS: usize = 16;
/// Most brokered credentials.
pub const MAX_BROKERED: usize = 16;
/// The proxy's port on the sandbox's loopback.
pub const PROXY_PORT: u16 = 3128;

/// Per-endpoint limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointLimits {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// Most connections (tunnels, mapped connections or forwarded requests) to it.
    pub max_connections: Option<u64>,
    /// Most bytes both ways, all its connections together.
    pub max_bytes: Option<u64>,
}

/// A loopback port inside the sandbox that reaches one endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortMapping {
    /// The port on the sandbox's `127.0.0.1`.
    pub listen_port: u16,
    /// The endpoint it reaches.
    pub endpoint: Endpoint,
}

/// How a brokered credential may travel to its endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// Only inside TLS: a terminated `CONNECT` tunnel, re-encrypted to the
    /// endpoint (the default).
    Https,
    /// Only in plain HTTP (absolute-URI requests and port mappings): for
    /// endpoints on loopback or a private network the operator trusts.
    Http,
}

/// A credential the proxy injects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Brokered {
    /// Its handle (named in the audit).
    pub secret_handle: SecretHandle,
    /// Where the proxy reads the real value (an absolute host path; the
    /// file must be the proxy's owner's and not readable by others).
    pub source_path: String,
    /// The agent's variable holding the placeholder.
    pub env: String,
    /// The header (lowercase) the placeholder is replaced in.
    pub header: String,
    /// The endpoints it is sent to.
    pub endpoints: Vec<Endpoint>,
    /// Whether it travels in TLS (default) or plain HTTP.
    pub scheme: Scheme,
}

/// A validated egress policy: built only by [`EgressSettings::from_json`]
/// (an egress policy file) or by session policy validation, both through
/// the same rules, and read through its accessors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EgressSettings {
    policy_id: PolicyId,
    endpoints: Vec<Endpoint>,
    allow_private: bool,
    limits: Vec<EndpointLimits>,
    hosts: Option<BTreeMap<String, Vec<IpAddr>>>,
    port_mappings: Vec<PortMapping>,
    brokered: Vec<Brokered>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    pub(crate) endpoint: String,
    #[serde(default)]
    pub(crate) max_connections: Option<u64>,
    #[serde(default)]
    pub(crate) max_bytes: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMapping {
    pub(crate) listen_port: u16,
    pub(crate) endpoint: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBrokered {
    pub(crate) secret_handle: String,
    pub(crate) source_path: String,
    pub(crate) env: String,
    pub(crate) header: String,
    pub(crate) endpoints: Vec<String>,
    #[serde(default)]
    pub(crate) scheme: Option<String>,
}

/// An egress policy as written, before validation: the file's form, or
/// what session policy validation builds from a policy's egress section.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Raw {
    pub(crate) schema_version: u32,
    pub(crate) egress_policy_id: String,
    pub(crate) endpoints: Vec<String>,
    pub(crate) allow_private: bool,
    #[serde(default)]
    pub(crate) limits: Vec<RawLimits>,
    #[serde(default)]
    pub(crate) hosts: Option<BTreeMap<String, Vec<String>>>,
    #[serde(default)]
    pub(crate) port_mappings: Vec<RawMapping>,
    #[serde(default)]
    pub(crate) brokered: Vec<RawBrokered>,
}

fn bad(m: impl Into<String>) -> Rejection {
    Rejection::new(EGRESS_POLICY_INVALID, m)
}

fn at(i: usize, field: &str) -> String {
    format!("{field}[{i}]")
}

fn endpoint(s: &str) -> Result<Endpoint, Rejection> {
    let e = Endpoint::parse(s).map_err(|r| bad(r.message().to_owned()))?;
    // Never reachable, whatever `allow_private` says.
    if let super::Host::Ip(ip) = &e.host {
        use super::AddressClass::*;
        if matches!(super::classify(*ip), Metadata | Reserved) {
            return Err(bad(format!("{s} is a metadata or reserved address")));
        }
    }
    Ok(e)
}

/// What a session policy has always required of its endpoints, written
/// as text: a name in its normal form (lowercase, no trailing dot), and a
/// loopback, private or link-local endpoint (or `localhost`) only with
/// `allow_private`. The codes are the session policy's.
fn endpoint_rules(text: &str, e: &Endpoint, allow_private: bool) -> Result<(), Rejection> {
    if let super::Host::Name(n) = &e.host {
        let written = text.rsplit_once(':').map_or(text, |(h, _)| h);
        if n != written {
            return Err(Rejection::new(
                POLICY_EGRESS_ENDPOINT_INVALID,
                format!("{text:?} is not host:port with a lowercase name and no trailing dot"),
            ));
        }
    }
    if endpoint_private(e) && !allow_private {
        return Err(Rejection::new(
            POLICY_EGRESS_PRIVATE,
            format!("{text} is private or loopback; set allow_private to allow it"),
        ));
    }
    Ok(())
}

/// Whether an endpoint is loopback, private or link-local (anything but
/// a public address), or `localhost` by name.
fn endpoint_private(e: &Endpoint) -> bool {
    match &e.host {
        super::Host::Ip(ip) => super::classify(*ip) != super::AddressClass::Public,
        super::Host::Name(n) => n == "localhost" || n.ends_with(".localhost"),
    }
}

fn token_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

fn env_ok(s: &str) -> bool {
    s.len() <= 64
        && s.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_uppercase() || b == b'_')
        && s.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// Headers a credential may never be injected into: they steer the
/// proxy or the connection, not the upstream's authentication.
const HEADERS_REFUSED: &[&str] = &[
    "host",
    "connection",
    "content-length",
    "transfer-encoding",
    "proxy-authorization",
    "proxy-connection",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
];

/// Variables the sandbox sets itself.
const ENV_REFUSED: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "PATH",
    "HOME",
];

impl EgressSettings {
    /// Parses and validates an egress policy file.
    pub fn from_json(bytes: &[u8]) -> Result<EgressSettings, Rejection> {
        let raw: Raw = canon::decode(bytes, MAX_SETTINGS_BYTES, Form::Strict)?;
        EgressSettings::validate(raw)
    }

    /// Validates an egress policy: the one set of rules for an egress
    /// policy file and a session policy's egress section.
    pub(crate) fn validate(raw: Raw) -> Result<EgressSettings, Rejection> {
        if raw.schema_version != 1 {
            return Err(bad("schema_version must be 1").at("schema_version"));
        }
        let policy_id = PolicyId::new(raw.egress_policy_id.clone())
            .map_err(|r| bad(r.message().to_owned()).at("egress_policy_id"))?;
        if raw.endpoints.is_empty() || raw.endpoints.len() > MAX_ENDPOINTS {
            return Err(bad(format!("1 to {MAX_ENDPOINTS} endpoints")).at("endpoints"));
        }
        let mut endpoints = Vec::new();
        for (i, e) in raw.endpoints.iter().enumerate() {
            let e = endpoint(e).map_err(|r| r.at(at(i, "endpoints")))?;
            if endpoints.contains(&e) {
                return Err(bad("an endpoint is listed twice").at(at(i, "endpoints")));
            }
            endpoints.push(e);
        }
        let listed = |e: &Endpoint, where_: &str| {
            if endpoints.contains(e) {
                Ok(())
            } else {
                Err(bad("not an endpoint of this policy").at(where_))
            }
        };
        if raw.limits.len() > MAX_ENDPOINTS {
            return Err(bad("too many limits").at("limits"));
        }
        let mut limits: Vec<EndpointLimits> = Vec::new();
        for (i, l) in raw.limits.iter().enumerate() {
            let w = at(i, "limits");
            let e = endpoint(&l.endpoint).map_err(|r| r.at(&w))?;
            listed(&e, &w)?;
            if limits.iter().any(|x| x.endpoint == e) {
                return Err(bad("an endpoint has two limits").at(&w));
            }
            if l.max_connections == Some(0) || l.max_bytes == Some(0) {
                return Err(bad("a limit is at least 1").at(&w));
            }
            limits.push(EndpointLimits {
                endpoint: e,
                max_connections: l.max_connections,
                max_bytes: l.max_bytes,
            });
        }
        let hosts = match raw.hosts {
            None => None,
            Some(h) => {
                if h.len() > MAX_HOSTS {
                    return Err(bad(format!("at most {MAX_HOSTS} hosts")).at("hosts"));
                }
                let mut out = BTreeMap::new();
                for (name, addrs) in h {
                    let w = format!("hosts.{name}");
                    match super::Host::parse(&name) {
                        Ok(super::Host::Name(n)) if n == name => {}
                        _ => return Err(bad("not a lowercase DNS name").at(&w)),
                    }
                    if addrs.is_empty() || addrs.len() > MAX_HOST_ADDRESSES {
                        return Err(bad(format!("1 to {MAX_HOST_ADDRESSES} addresses")).at(&w));
                    }
                    let mut ips = Vec::new();
                    for a in &addrs {
                        let ip: IpAddr = a
                            .parse()
                            .map_err(|_| bad(format!("{a:?} is not an IP address")).at(&w))?;
                        ips.push(ip);
                    }
                    out.insert(name, ips);
                }
                Some(out)
            }
        };
        if raw.port_mappings.len() > MAX_MAPPINGS {
            return Err(bad(format!("at most {MAX_MAPPINGS} port mappings")).at("port_mappings"));
        }
        let mut port_mappings: Vec<PortMapping> = Vec::new();
        for (i, m) in raw.port_mappings.iter().enumerate() {
            let w = at(i, "port_mappings");
            if m.listen_port < 1024 || m.listen_port == PROXY_PORT {
                return Err(bad(format!(
                    "listen_port must be 1024-65535 and not the proxy's {PROXY_PORT}"
                ))
                .at(&w));
            }
            if port_mappings.iter().any(|x| x.listen_port == m.listen_port) {
                return Err(bad("a listen_port is mapped twice").at(&w));
            }
            let e = endpoint(&m.endpoint).map_err(|r| r.at(&w))?;
            listed(&e, &w)?;
            port_mappings.push(PortMapping {
                listen_port: m.listen_port,
                endpoint: e,
            });
        }
        if raw.brokered.len() > MAX_BROKERED {
            return Err(bad(format!("at most {MAX_BROKERED} brokered credentials")).at("brokered"));
        }
        let mut brokered: Vec<Brokered> = Vec::new();
        for (i, b) in raw.brokered.iter().enumerate() {
            let w = at(i, "brokered");
            let secret_handle = SecretHandle::new(b.secret_handle.clone())
                .map_err(|r| bad(r.message().to_owned()).at(&w))?;
            if brokered.iter().any(|x| x.secret_handle == secret_handle) {
                return Err(bad("a handle is brokered twice").at(&w));
            }
            if crate::paths::check_canonical(&b.source_path).is_err() {
                return Err(bad("source_path must be an absolute normal path").at(&w));
            }
            if !env_ok(&b.env) || ENV_REFUSED.contains(&b.env.as_str()) {
                return Err(bad(format!(
                    "env {:?} must be an uppercase variable name Glove does not set itself",
                    b.env
                ))
                .at(&w));
            }
            if brokered.iter().any(|x| x.env == b.env) {
                return Err(bad("two credentials share one variable").at(&w));
            }
            if !token_ok(&b.header) || HEADERS_REFUSED.contains(&b.header.as_str()) {
                return Err(bad(format!(
                    "header {:?} must be a lowercase header name that is not hop-by-hop or Host",
                    b.header
                ))
                .at(&w));
            }
            if b.endpoints.is_empty() || b.endpoints.len() > MAX_ENDPOINTS {
                return Err(bad("1 or more endpoints").at(&w));
            }
            let mut eps = Vec::new();
            for e in &b.endpoints {
                let e = endpoint(e).map_err(|r| r.at(&w))?;
                listed(&e, &w)?;
                eps.push(e);
            }
            let scheme = match b.scheme.as_deref() {
                None | Some("https") => Scheme::Https,
                Some("http") => Scheme::Http,
                Some(other) => {
                    return Err(bad(format!("scheme {other:?} is neither https nor http")).at(&w))
                }
            };
            brokered.push(Brokered {
                secret_handle,
                source_path: b.source_path.clone(),
                env: b.env.clone(),
                header: b.header.clone(),
                endpoints: eps,
                scheme,
            });
        }
        // A session policy's rules for its endpoints (checked there first,
        // with these codes), for every egress policy: an egress file is
        // refused what a session policy is, with the same code.
        for (i, (text, e)) in raw.endpoints.iter().zip(&endpoints).enumerate() {
            endpoint_rules(text, e, raw.allow_private).map_err(|r| r.at(at(i, "endpoints")))?;
        }
        Ok(EgressSettings {
            policy_id,
            endpoints,
            allow_private: raw.allow_private,
            limits,
            hosts,
            port_mappings,
            brokered,
        })
    }

    /// The limits of one endpoint, if any.
    pub fn limits_of(&self, e: &Endpoint) -> Option<&EndpointLimits> {
        self.limits.iter().find(|l| &l.endpoint == e)
    }

    /// The policy id.
    pub fn policy_id(&self) -> &PolicyId {
        &self.policy_id
    }

    /// The allowed endpoints (at least one, none twice).
    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// Whether loopback and private targets may be reached.
    pub fn allow_private(&self) -> bool {
        self.allow_private
    }

    /// Per-endpoint limits (each for an endpoint of the policy).
    pub fn limits(&self) -> &[EndpointLimits] {
        &self.limits
    }

    /// The static resolver, when given: the proxy's whole resolver.
    pub fn hosts(&self) -> Option<&BTreeMap<String, Vec<IpAddr>>> {
        self.hosts.as_ref()
    }

    /// Port mappings (each to an endpoint of the policy).
    pub fn port_mappings(&self) -> &[PortMapping] {
        &self.port_mappings
    }

    /// Brokered credentials (each bound to endpoints of the policy).
    pub fn brokered(&self) -> &[Brokered] {
        &self.brokered
    }

    /// The same settings with only the brokered credentials whose handle
    /// `named` lists (a session gets those its plan names, no others).
    /// Dropping credentials keeps every rule the settings were validated
    /// with.
    pub fn keep_brokered(&self, named: &[SecretHandle]) -> EgressSettings {
        let mut s = self.clone();
        s.brokered.retain(|b| named.contains(&b.secret_handle));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Narrowing only drops brokered credentials: endpoints, limits, hosts
    /// and mappings stay, and a handle not in the policy adds nothing.
    #[test]
    fn keep_brokered_only_drops_credentials() {
        let s = EgressSettings::from_json(GOOD.as_bytes()).expect("good");
        let openai = SecretHandle::new("openai").expect("handle");
        let other = SecretHandle::new("other").expect("handle");
        for (named, kept) in [
            (vec![openai.clone()], 1),
            (vec![], 0),
            (vec![other.clone()], 0),
            (vec![other, openai], 1),
        ] {
            let n = s.keep_brokered(&named);
            assert_eq!(n.brokered().len(), kept, "{named:?}");
            assert_eq!(n.endpoints(), s.endpoints());
            assert_eq!(n.limits(), s.limits());
            assert_eq!(n.hosts(), s.hosts());
            assert_eq!(n.port_mappings(), s.port_mappings());
            assert_eq!(n.allow_private(), s.allow_private());
            assert_eq!(n.policy_id(), s.policy_id());
        }
    }

    const GOOD: &str = r#"{"schema_version":1,"egress_policy_id":"model","endpoints":["model.test:8000","api.example.com:443"],"allow_private":true,
      "limits":[{"endpoint":"model.test:8000","max_connections":4}],
      "hosts":{"model.test":["127.0.0.1"]},
      "port_mappings":[{"listen_port":18000,"endpoint":"model.test:8000"}],
      "brokered":[{"secret_handle":"openai","source_path":"/etc/glove/k","env":"OPENAI_API_KEY","header":"authorization","endpoints":["model.test:8000"]}]}"#;

    #[test]
    fn a_good_file_parses() {
        let s = EgressSettings::from_json(GOOD.as_bytes()).expect("parses");
        assert_eq!(s.endpoints.len(), 2);
        assert_eq!(s.port_mappings[0].listen_port, 18000);
        assert_eq!(s.brokered[0].header, "authorization");
        assert!(s.limits_of(&s.endpoints[0]).is_some());
    }

    #[test]
    fn bad_files_are_refused_with_the_code() {
        for (from, to) in [
            ("\"schema_version\":1", "\"schema_version\":2"),
            ("model.test:8000\",\"api", "169.254.169.254:80\",\"api"),
            ("\"listen_port\":18000", "\"listen_port\":3128"),
            ("\"listen_port\":18000", "\"listen_port\":80"),
            ("\"header\":\"authorization\"", "\"header\":\"host\""),
            ("\"env\":\"OPENAI_API_KEY\"", "\"env\":\"HTTPS_PROXY\""),
            ("\"source_path\":\"/etc/glove/k\"", "\"source_path\":\"k\""),
            ("\"max_connections\":4", "\"max_connections\":0"),
            (
                "\"endpoint\":\"model.test:8000\"}]",
                "\"endpoint\":\"other.test:8000\"}]",
            ),
            ("[\"127.0.0.1\"]", "[\"localhost\"]"),
            ("\"model.test\":[", "\"Model.test\":["),
        ] {
            let text = GOOD.replacen(from, to, 1);
            assert_ne!(text, GOOD, "{from}");
            let e = EgressSettings::from_json(text.as_bytes()).expect_err(to);
            assert_eq!(e.code(), EGRESS_POLICY_INVALID, "{to}: {e:?}");
        }
        let dup = GOOD.replacen(
            "\"allow_private\":true",
            "\"allow_private\":true,\"allow_private\":false",
            1,
        );
        assert!(EgressSettings::from_json(dup.as_bytes()).is_err());
    }
}
