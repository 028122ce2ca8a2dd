//! The network parts of a policy: egress policies (endpoints, their
//! privacy, the proxy's settings) and the remote backend.

use super::*;

pub(super) fn egress(
    e: &RawEgress,
    listed: &[PolicyId],
    sources: &[CredentialSource],
) -> Result<EgressPolicy, Rejection> {
    let id = PolicyId::new(e.egress_policy_id.clone()).map_err(|x| x.at("egress_policy_id"))?;
    if !listed.contains(&id) {
        return Err(r(
            POLICY_EGRESS_UNRESOLVED,
            format!("egress policy {id} is not listed in egress_policy_ids"),
        )
        .at("egress_policy_id"));
    }
    check_sorted_unique(&e.endpoints, "endpoints", |s| s.clone())?;
    for (i, ep) in e.endpoints.iter().enumerate() {
        let private = endpoint_is_private(ep).map_err(|x| x.at(idx("endpoints", i)))?;
        if private && !e.allow_private {
            return Err(r(
                POLICY_EGRESS_PRIVATE,
                format!("{ep} is private or loopback; set allow_private to allow it"),
            )
            .at(idx("endpoints", i)));
        }
    }
    let settings = egress_settings(e, sources)?;
    Ok(EgressPolicy {
        egress_policy_id: id,
        endpoints: e.endpoints.clone(),
        allow_private: e.allow_private,
        settings,
    })
}

/// The proxy's full view of an egress policy with endpoints (`None`: the
/// policy keeps a session offline): the section in the egress policy
/// file's form, each brokered handle's source taken from
/// `credential_sources`, validated by the egress file's own rules (the
/// same function, so both refuse the same inputs).
fn egress_settings(
    e: &RawEgress,
    sources: &[CredentialSource],
) -> Result<Option<EgressSettings>, Rejection> {
    if e.endpoints.is_empty() {
        let extras = !e.limits.is_empty()
            || e.hosts.is_some()
            || !e.port_mappings.is_empty()
            || !e.brokered.is_empty();
        if extras {
            return Err(r(
                crate::codes::egress::EGRESS_POLICY_INVALID,
                "an egress policy without endpoints keeps the session offline: it has no limits, hosts, mappings or brokered credentials",
            ));
        }
        return Ok(None);
    }
    let mut brokered = Vec::new();
    for (i, b) in e.brokered.iter().enumerate() {
        let Some(source) = sources
            .iter()
            .find(|c| c.secret_handle.as_str() == b.secret_handle)
        else {
            return Err(r(
                POLICY_SECRET_UNRESOLVED,
                format!(
                    "brokered handle {} has no credential source",
                    b.secret_handle
                ),
            )
            .at(format!("brokered[{i}].secret_handle")));
        };
        brokered.push(settings::RawBrokered {
            secret_handle: b.secret_handle.clone(),
            source_path: source.source_path.clone(),
            env: b.env.clone(),
            header: b.header.clone(),
            endpoints: b.endpoints.clone(),
            scheme: b.scheme.clone(),
        });
    }
    // The section's limits, hosts and mappings were parsed strictly with
    // the policy; here they take the egress file's shapes.
    let raw = settings::Raw {
        schema_version: 1,
        egress_policy_id: e.egress_policy_id.clone(),
        endpoints: e.endpoints.clone(),
        allow_private: e.allow_private,
        limits: e
            .limits
            .iter()
            .map(|v| canon::from_value(v.clone()))
            .collect::<Result<_, _>>()?,
        hosts: e.hosts.clone().map(canon::from_value).transpose()?,
        port_mappings: e
            .port_mappings
            .iter()
            .map(|v| canon::from_value(v.clone()))
            .collect::<Result<_, _>>()?,
        brokered,
    };
    EgressSettings::validate(raw).map(Some)
}

/// Parses `host:port` (IPv6 in brackets) and says whether the host is a
/// private, loopback or link-local address (or `localhost`).
pub(crate) fn endpoint_is_private(ep: &str) -> Result<bool, Rejection> {
    let bad = || {
        r(
            POLICY_EGRESS_ENDPOINT_INVALID,
            format!("{ep:?} is not host:port"),
        )
    };
    let (host, port) = ep.rsplit_once(':').ok_or_else(bad)?;
    let port_ok = !port.is_empty()
        && port.len() <= 5
        && port.bytes().all(|b| b.is_ascii_digit())
        && !port.starts_with('0')
        && port.parse::<u32>().is_ok_and(|p| (1..=65535).contains(&p));
    if !port_ok {
        return Err(bad());
    }
    let literal = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => Some(IpAddr::V6(v6.parse::<Ipv6Addr>().map_err(|_| bad())?)),
        None => host.parse::<Ipv4Addr>().ok().map(IpAddr::V4),
    };
    if let Some(ip) = literal {
        // A metadata or reserved address can never be an endpoint, with
        // or without allow_private (the proxy would refuse it anyway).
        use crate::egress::AddressClass;
        if matches!(
            crate::egress::classify(ip),
            AddressClass::Metadata | AddressClass::Reserved
        ) {
            return Err(r(
                POLICY_EGRESS_ENDPOINT_FORBIDDEN,
                format!("{ep} is a cloud metadata or reserved address"),
            ));
        }
        return Ok(ip_private(ip));
    }
    // The egress parser's rule, in its normal form (lowercase, no trailing
    // dot): a numeric shorthand such as `127.1` is no name.
    match crate::egress::Host::parse(host) {
        Ok(crate::egress::Host::Name(n)) if n == host => {}
        _ => return Err(bad()),
    }
    Ok(host == "localhost" || host.ends_with(".localhost"))
}

/// Anything but a public address (the egress classification).
fn ip_private(ip: IpAddr) -> bool {
    crate::egress::classify(ip) != crate::egress::AddressClass::Public
}

fn dns_name_ok(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 253
        && h.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

pub(super) fn remote(rb: &RawRemote) -> Result<RemoteBackend, Rejection> {
    let bad = |f: &str, why: &str| r(POLICY_REMOTE_BACKEND_INVALID, why.to_owned()).at(f);
    let host_ok = dns_name_ok(&rb.host) || rb.host.parse::<IpAddr>().is_ok();
    if !host_ok {
        return Err(bad(
            "host",
            "host must be a lowercase DNS name or an IP address",
        ));
    }
    let port = u16::try_from(rb.port)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| bad("port", "port must lie in 1..=65535"))?;
    let user_ok = !rb.user.is_empty()
        && rb.user.len() <= 32
        && rb
            .user
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && rb
            .user
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if !user_ok {
        return Err(bad("user", "user must match [a-z_][a-z0-9_-]{0,31}"));
    }
    let key_ok = rb
        .host_key
        .strip_prefix("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI")
        .is_some_and(|rest| {
            rest.len() == 43
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'=')
        });
    if !key_ok {
        return Err(bad(
            "host_key",
            "host_key must be one 'ssh-ed25519 <base64>' public key",
        ));
    }
    let image_digest = Sha256Digest::parse(&rb.container_image_digest)
        .map_err(|e| e.at("container_image_digest"))?;
    let (name, suffix) = rb.container_image.split_once("@sha256:").ok_or_else(|| {
        bad(
            "container_image",
            "container_image must be an untagged name@sha256:<hex> reference",
        )
    })?;
    let last = name.rsplit('/').next().unwrap_or(name);
    let name_ok = !name.is_empty()
        && !last.contains(':')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-/:".contains(&b));
    if !name_ok {
        return Err(bad(
            "container_image",
            "container_image must be an untagged name@sha256:<hex> reference",
        ));
    }
    if suffix != image_digest.to_hex() {
        return Err(bad(
            "container_image",
            "the container_image digest differs from container_image_digest",
        ));
    }
    Ok(RemoteBackend {
        host: rb.host.clone(),
        port,
        user: rb.user.clone(),
        host_key: rb.host_key.clone(),
        container_image: rb.container_image.clone(),
        container_image_digest: image_digest,
    })
}
