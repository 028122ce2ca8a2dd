//! The model endpoint of `glove run --agent`: `--model URL` read strictly,
//! `--allow HOST:PORT` checked, the key's source checked, and the egress
//! policy they make together (validated as every egress policy is).

use super::AgentError;
use glove_types::codes::cli::{
    AGENT_ALLOW_INVALID, AGENT_ALLOW_PRIVATE, AGENT_KEY_FILE_LOOSE, AGENT_KEY_MISSING,
    AGENT_MODEL_URL_INVALID,
};
use glove_types::egress::settings::EgressSettings;
use glove_types::egress::{classify, AddressClass, Endpoint, Host};
use glove_types::harness::Harness;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// The loopback port inside the sandbox that reaches a plain-HTTP model
/// endpoint (a port mapping: the harness's base URL names it).
pub(crate) const MAPPED_PORT: u16 = 18000;

/// The egress policy's id in the journal and the outcome.
pub(crate) const POLICY_ID: &str = "agent-model";

/// The brokered credential's handle (the journal names it, never the key).
pub(crate) const KEY_HANDLE: &str = "agent-model-key";

/// How the endpoint is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scheme {
    /// Plain HTTP, through a port mapping (a loopback test endpoint, or a
    /// network the operator trusts).
    Http,
    /// HTTPS, through the proxy, which terminates TLS with the session CA
    /// to put the key in.
    Https,
}

/// A model endpoint, read.
#[derive(Clone, Debug)]
pub(crate) struct Model {
    pub(crate) scheme: Scheme,
    pub(crate) endpoint: Endpoint,
    /// The origin the harness is given (inside the sandbox).
    pub(crate) base_url: String,
    /// The model asked for.
    pub(crate) name: String,
    /// The URL as the operator gave it (or the vendor's), for the status.
    pub(crate) shown: String,
}

fn private(host: &Host) -> bool {
    match host {
        Host::Ip(ip) => !matches!(classify(*ip), AddressClass::Public),
        Host::Name(n) => n == "localhost" || n.ends_with(".localhost"),
    }
}

fn bad_url(url: &str, why: &str) -> AgentError {
    AgentError::new(
        AGENT_MODEL_URL_INVALID,
        format!("--model {url:?}: {why}"),
        "give the endpoint's origin, e.g. --model http://127.0.0.1:8080 or --model https://api.openai.com",
    )
}

/// Reads `http(s)://host[:port][/]`: no user, path, query or fragment.
pub(crate) fn parse_url(url: &str) -> Result<(Scheme, Endpoint), AgentError> {
    let (scheme, rest) = if let Some(r) = url.strip_prefix("http://") {
        (Scheme::Http, r)
    } else if let Some(r) = url.strip_prefix("https://") {
        (Scheme::Https, r)
    } else {
        return Err(bad_url(url, "the scheme must be http:// or https://"));
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.is_empty() {
        return Err(bad_url(url, "there is no host"));
    }
    if authority.contains(['/', '?', '#', '@']) {
        return Err(bad_url(
            url,
            "only an origin is taken (no path, query, fragment or user): the harness adds its API's path",
        ));
    }
    let has_port = match authority.rfind(':') {
        Some(i) => !authority[..i].ends_with(':') && authority.find(']').is_none_or(|j| i > j),
        None => false,
    };
    let with_port = if has_port {
        authority.to_owned()
    } else {
        let port = match scheme {
            Scheme::Http => 80,
            Scheme::Https => 443,
        };
        format!("{authority}:{port}")
    };
    let endpoint = Endpoint::parse(&with_port).map_err(|r| bad_url(url, r.message()))?;
    if let Host::Ip(ip) = endpoint.host {
        if matches!(
            classify(ip),
            AddressClass::Metadata | AddressClass::Reserved
        ) {
            return Err(bad_url(
                url,
                "a metadata or reserved address is never reached",
            ));
        }
    }
    Ok((scheme, endpoint))
}

impl Model {
    /// Whether the endpoint is on this machine or a private network.
    /// `resolved` is the `--resolve` table: a name it maps to a private
    /// address is private.
    pub(crate) fn is_private(&self, resolved: &Resolved) -> bool {
        private(&self.endpoint.host)
            || match &self.endpoint.host {
                Host::Name(n) => resolved.get(n).is_some_and(|ips| {
                    ips.iter()
                        .any(|ip| !matches!(classify(*ip), AddressClass::Public))
                }),
                Host::Ip(_) => false,
            }
    }
}

/// The endpoint from `--model` (or the harness's vendor default) and the
/// model name (`--model-name`, else the vendor's, else `default`).
pub(crate) fn resolve(
    h: &Harness,
    url: Option<&str>,
    name: Option<&str>,
) -> Result<Model, AgentError> {
    let (shown, vendor_model) = match (url, &h.model.vendor) {
        (Some(u), _) => (u.to_owned(), None),
        (None, Some(v)) => (v.base_url.to_owned(), Some(v.model)),
        (None, None) => {
            return Err(AgentError::new(
                AGENT_MODEL_URL_INVALID,
                format!("{} has no vendor endpoint Glove can point it at", h.id),
                "give --model URL (the endpoint's origin) and --model-name NAME",
            ))
        }
    };
    let (scheme, endpoint) = parse_url(&shown)?;
    // Plain HTTP carries the key in the clear: only to this machine or a
    // private network the operator runs (a loopback test endpoint).
    if scheme == Scheme::Http && !private(&endpoint.host) {
        return Err(AgentError::new(
            AGENT_MODEL_URL_INVALID,
            format!(
                "--model {shown:?}: plain http:// would send the key in the clear to a public host"
            ),
            "use https:// (http:// is for a loopback or private endpoint only)",
        ));
    }
    let base_url = match scheme {
        Scheme::Http => format!("http://127.0.0.1:{MAPPED_PORT}"),
        Scheme::Https if endpoint.port == 443 => format!("https://{}", endpoint.host),
        Scheme::Https => format!("https://{endpoint}"),
    };
    let name = name.or(vendor_model).unwrap_or("default").to_owned();
    Ok(Model {
        scheme,
        endpoint,
        base_url,
        name,
        shown,
    })
}

/// Reads each `--allow HOST:PORT`; a loopback, private or link-local
/// address (or `localhost`) needs `--allow-private`.
pub(crate) fn allows(list: &[String], allow_private: bool) -> Result<Vec<Endpoint>, AgentError> {
    let mut out = Vec::new();
    for a in list {
        let e = Endpoint::parse(a).map_err(|r| {
            AgentError::new(
                AGENT_ALLOW_INVALID,
                format!("--allow {a:?}: {}", r.message()),
                "write --allow HOST:PORT, e.g. --allow registry.npmjs.org:443",
            )
        })?;
        if let Host::Ip(ip) = e.host {
            if matches!(
                classify(ip),
                AddressClass::Metadata | AddressClass::Reserved
            ) {
                return Err(AgentError::new(
                    AGENT_ALLOW_INVALID,
                    format!("--allow {a}: a metadata or reserved address is never reached"),
                    "name a public host, or a private one with --allow-private",
                ));
            }
        }
        if private(&e.host) && !allow_private {
            return Err(AgentError::new(
                AGENT_ALLOW_PRIVATE,
                format!("--allow {a} is a loopback, private or link-local address"),
                "add --allow-private to let the agent reach it",
            ));
        }
        out.push(e);
    }
    Ok(out)
}

/// The `hosts` table `--resolve NAME:IP` entries make.
pub(crate) type Resolved = BTreeMap<String, Vec<IpAddr>>;

fn bad_resolve(r: &str, why: impl std::fmt::Display) -> AgentError {
    AgentError::new(
        AGENT_ALLOW_INVALID,
        format!("--resolve {r:?}: {why}"),
        "write --resolve NAME:IP for the --model host or an --allow host, e.g. --resolve model.test:127.0.0.1",
    )
}

/// Reads each `--resolve NAME:IP`: the name is the model endpoint's or an
/// `--allow` host's (with `--resolve`, the proxy resolves names through
/// these only, so every `--allow` name needs one too); the address is
/// neither a metadata nor a reserved one. A private address for an
/// `--allow` host needs `--allow-private`; for the model host it makes
/// the model endpoint private (see [`Model::is_private`]).
pub(crate) fn resolves(
    list: &[String],
    model: &Model,
    allow: &[Endpoint],
    allow_private: bool,
) -> Result<Resolved, AgentError> {
    let mut out = Resolved::new();
    for r in list {
        let Some((n, ip)) = r.split_once(':') else {
            return Err(bad_resolve(r, "not NAME:IP"));
        };
        let name = match Host::parse(n) {
            Ok(Host::Name(name)) => name,
            _ => return Err(bad_resolve(r, format!("{n:?} is not a DNS name"))),
        };
        let ip_s = ip.strip_prefix('[').and_then(|i| i.strip_suffix(']'));
        let Ok(ip) = ip_s.unwrap_or(ip).parse::<IpAddr>() else {
            return Err(bad_resolve(r, format!("{ip:?} is not an IP address")));
        };
        let host = Host::Name(name.clone());
        let is_model = model.endpoint.host == host;
        if !is_model && !allow.iter().any(|a| a.host == host) {
            return Err(bad_resolve(
                r,
                format!("{name} is neither the --model host nor an --allow host"),
            ));
        }
        match classify(ip) {
            AddressClass::Metadata | AddressClass::Reserved => {
                return Err(bad_resolve(
                    r,
                    "a metadata or reserved address is never reached",
                ))
            }
            // Plain HTTP to the model carries the key in the clear: the
            // name may only stand for this machine or a private network.
            AddressClass::Public if is_model && model.scheme == Scheme::Http => {
                return Err(bad_resolve(
                    r,
                    "a plain http:// model endpoint resolves only to a loopback or private address (the key would cross the network in the clear)",
                ))
            }
            AddressClass::Public => {}
            _ if is_model || allow_private => {}
            _ => {
                return Err(AgentError::new(
                    AGENT_ALLOW_PRIVATE,
                    format!("--resolve {r}: {ip} is a loopback, private or link-local address"),
                    "add --allow-private to let the agent reach it",
                ))
            }
        }
        let ips = out.entry(name).or_default();
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    if !out.is_empty() {
        for a in allow {
            if let Host::Name(n) = &a.host {
                if !out.contains_key(n) {
                    return Err(AgentError::new(
                        AGENT_ALLOW_INVALID,
                        format!("--allow {a}: with --resolve the proxy resolves names through --resolve only, and {n} has none"),
                        format!("add --resolve {n}:IP, or give --allow as IP:PORT"),
                    ));
                }
            }
        }
    }
    Ok(out)
}

/// Checks a key file: it exists, is a regular file of this user, and
/// neither group nor others can read or write it. Returns its canonical
/// path (what the egress policy names).
pub(crate) fn key_file(path: &Path) -> Result<PathBuf, AgentError> {
    use std::os::unix::fs::MetadataExt;
    let shown = path.display();
    let canon = std::fs::canonicalize(path).map_err(|e| {
        AgentError::new(
            AGENT_KEY_MISSING,
            format!("--key-file {shown}: {e}"),
            "write the API key into a file of mode 0600 (umask 077; printf %s \"$KEY\" > FILE), or give --key-env VAR",
        )
    })?;
    let m = std::fs::metadata(&canon)
        .map_err(|e| AgentError::new(AGENT_KEY_MISSING, format!("--key-file {shown}: {e}"), ""))?;
    let me = rustix::process::geteuid().as_raw();
    let loose = |why: String| {
        AgentError::new(
            AGENT_KEY_FILE_LOOSE,
            format!("--key-file {shown}: {why}"),
            format!("chmod 600 {shown} (and own it), so only you can read the key"),
        )
    };
    if !m.is_file() {
        return Err(loose("not a regular file".into()));
    }
    if m.uid() != me {
        return Err(loose(format!("owned by uid {}, not you ({me})", m.uid())));
    }
    if m.mode() & 0o077 != 0 {
        return Err(loose(format!(
            "mode {:04o}: group or others may read or write it",
            m.mode() & 0o7777
        )));
    }
    if m.len() == 0 {
        return Err(AgentError::new(
            AGENT_KEY_MISSING,
            format!("--key-file {shown} is empty"),
            "write the API key into it",
        ));
    }
    Ok(canon)
}

/// Names in an egress policy made for a model endpoint.
pub(crate) struct PolicyNames<'a> {
    /// The egress policy's id.
    pub(crate) policy_id: &'a str,
    /// The brokered credential's handle.
    pub(crate) handle: &'a str,
}

/// The names `glove run --agent` uses.
pub(crate) const AGENT_NAMES: PolicyNames<'static> = PolicyNames {
    policy_id: POLICY_ID,
    handle: KEY_HANDLE,
};

/// The egress policy file (JSON) for a model endpoint: the endpoint
/// (mapped to [`MAPPED_PORT`] for plain HTTP), the `--allow` endpoints,
/// the key brokered into the harness's header on the model endpoint only,
/// over the endpoint's scheme; `resolved` (from `--resolve`), when not
/// empty, as the proxy's whole resolver (`hosts`).
pub(crate) fn egress_file(
    h: &Harness,
    model: &Model,
    allow: &[Endpoint],
    allow_private: bool,
    resolved: &Resolved,
    key_source: &Path,
    names: &PolicyNames<'_>,
) -> serde_json::Value {
    let ep = model.endpoint.to_string();
    let mut endpoints = vec![ep.clone()];
    for a in allow {
        let s = a.to_string();
        if !endpoints.contains(&s) {
            endpoints.push(s);
        }
    }
    let scheme = match model.scheme {
        Scheme::Http => "http",
        Scheme::Https => "https",
    };
    let mut v = serde_json::json!({
        "schema_version": 1,
        "egress_policy_id": names.policy_id,
        "endpoints": endpoints,
        // The model endpoint the operator named is reached even when it
        // is private (a loopback test endpoint); `--allow` entries were
        // held to `--allow-private` when they were read.
        "allow_private": allow_private || model.is_private(resolved),
        "brokered": [{
            "secret_handle": names.handle,
            "source_path": key_source.display().to_string(),
            "env": h.model.key_variable,
            "header": h.model.key_header,
            "endpoints": [ep],
            "scheme": scheme,
        }],
    });
    if !resolved.is_empty() {
        v["hosts"] = serde_json::json!(resolved);
    }
    if model.scheme == Scheme::Http {
        v["port_mappings"] = serde_json::json!([{"listen_port": MAPPED_PORT, "endpoint": ep}]);
    }
    v
}

/// Validates an egress policy file made by [`egress_file`], as any egress
/// policy file is validated.
pub(crate) fn validate(v: &serde_json::Value) -> Result<EgressSettings, AgentError> {
    let bytes = serde_json::to_vec(v).unwrap_or_default();
    EgressSettings::from_json(&bytes).map_err(|r| {
        AgentError::new(
            r.code(),
            format!("the egress policy for the model: {}", r.message()),
            "check --model, --allow and --resolve",
        )
    })
}

/// The session's egress policy for `glove run --agent`, validated.
pub(crate) fn egress_settings(
    h: &Harness,
    model: &Model,
    allow: &[Endpoint],
    allow_private: bool,
    resolved: &Resolved,
    key_source: &Path,
) -> Result<EgressSettings, AgentError> {
    validate(&egress_file(
        h,
        model,
        allow,
        allow_private,
        resolved,
        key_source,
        &AGENT_NAMES,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_origins_only() {
        let (s, e) = parse_url("http://127.0.0.1:8080").expect("ok");
        assert_eq!((s, e.to_string()), (Scheme::Http, "127.0.0.1:8080".into()));
        let (s, e) = parse_url("https://api.example.com/").expect("ok");
        assert_eq!(
            (s, e.to_string()),
            (Scheme::Https, "api.example.com:443".into())
        );
        let (_, e) = parse_url("http://[::1]:9").expect("ok");
        assert_eq!(e.to_string(), "[::1]:9");
        for bad in [
            "ftp://x",
            "http://",
            "http://a/v1",
            "http://u@a",
            "http://a:0",
            "http://a:99999",
            "127.0.0.1:80",
            "http://169.254.169.254",
            "http://a?b",
            "",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn private_allows_need_the_opt_in() {
        assert!(allows(&["127.0.0.1:80".into()], false).is_err());
        assert!(allows(&["localhost:80".into()], false).is_err());
        assert!(allows(&["10.1.2.3:80".into()], true).is_ok());
        assert!(allows(&["example.com:443".into()], false).is_ok());
        assert!(allows(&["example.com".into()], false).is_err());
    }

    #[test]
    fn an_https_endpoint_is_brokered_inside_tls_and_not_mapped() {
        let h = glove_types::harness::all().next().expect("a harness");
        let m = resolve(h, Some("https://api.example.com"), Some("m")).expect("model");
        assert_eq!(m.base_url, "https://api.example.com");
        let v = egress_file(
            h,
            &m,
            &[],
            false,
            &Resolved::new(),
            Path::new("/k"),
            &AGENT_NAMES,
        );
        assert_eq!(v["brokered"][0]["scheme"], "https");
        assert_eq!(v["allow_private"], false);
        assert!(v.get("port_mappings").is_none());
        validate(&v).expect("valid");
        let m = resolve(h, Some("http://127.0.0.1:8080"), None).expect("model");
        assert_eq!(m.base_url, format!("http://127.0.0.1:{MAPPED_PORT}"));
        let v = egress_file(
            h,
            &m,
            &[],
            false,
            &Resolved::new(),
            Path::new("/k"),
            &AGENT_NAMES,
        );
        assert_eq!(v["allow_private"], true);
        assert_eq!(v["port_mappings"][0]["endpoint"], "127.0.0.1:8080");
        validate(&v).expect("valid");
    }

    #[test]
    fn resolve_names_the_model_or_an_allow_host_and_fills_hosts() {
        let h = glove_types::harness::all().next().expect("a harness");
        let m = resolve(h, Some("https://model.test:8443"), None).expect("model");
        let npm = allows(&["npm.test:443".into()], true).expect("allow");
        let r = |l: &[&str], allow: &[Endpoint], p: bool| {
            let l: Vec<String> = l.iter().map(|s| (*s).to_owned()).collect();
            resolves(&l, &m, allow, p)
        };
        let t = r(&["model.test:127.0.0.1", "npm.test:[::1]"], &npm, true).expect("ok");
        assert!(m.is_private(&t));
        assert!(!m.is_private(&Resolved::new()));
        let v = egress_file(h, &m, &npm, false, &t, Path::new("/k"), &AGENT_NAMES);
        assert_eq!(v["hosts"]["model.test"][0], "127.0.0.1");
        assert_eq!(v["allow_private"], true);
        validate(&v).expect("valid");
        for bad in [
            "model.test",
            "other.test:1.2.3.4",
            "model.test:nope",
            "1.2.3.4:1.2.3.4",
            "model.test:169.254.169.254",
        ] {
            assert!(r(&[bad], &npm, true).is_err(), "{bad}");
        }
        // A private address for an --allow host needs --allow-private.
        assert!(r(&["model.test:8.8.8.8", "npm.test:10.0.0.1"], &npm, false).is_err());
        // With --resolve, every --allow name needs one.
        assert!(r(&["model.test:8.8.8.8"], &npm, true).is_err());
    }
}
