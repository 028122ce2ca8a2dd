//! Egress decisions: which hosts and ports a session's egress policy
//! allows, and which addresses may ever be connected to.
//!
//! A target is a host (a lowercase DNS name or an IP literal) and a port.
//! It is allowed when it equals an endpoint of the policy, *and* every
//! address it is or resolves to is acceptable: a public address always; a
//! loopback, private, link-local or shared (CGNAT) one only with
//! `allow_private`; a cloud metadata address, or an unspecified,
//! multicast, broadcast, documentation or reserved one, never. IPv6
//! forms that carry an IPv4 address (mapped `::ffff:a.b.c.d`, compatible
//! `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are judged by the
//! address they carry, so a private IPv4 address cannot be reached
//! through one. Checking *every* resolved address (not only the first)
//! is what defeats a name that resolves to a public and a private address
//! at once; the proxy then connects only to the addresses it checked.

pub mod event;
pub mod settings;

use crate::codes::egress::*;
use crate::Rejection;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What kind of address an IP is, for egress.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddressClass {
    /// Globally routable.
    Public,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// `10/8`, `172.16/12`, `192.168/16`, `fc00::/7`, `fec0::/10`.
    Private,
    /// `fe80::/10` (metadata addresses excepted). IPv4 link-local is
    /// [`AddressClass::Metadata`] as a whole.
    LinkLocal,
    /// `100.64.0.0/10` (carrier-grade NAT).
    Shared,
    /// A cloud metadata or credential service: all of `169.254/16`
    /// (IPv4 link-local, where they live: AWS, GCE, Azure, OpenStack,
    /// Tencent, EKS pod identity, AWS DNS), `100.100.100.200`,
    /// `168.63.129.16`, `fd00:ec2::/32`, `fd20:ce::254`, `fe80::a9fe:a9fe`.
    Metadata,
    /// Unspecified, `0/8`, multicast, broadcast, documentation,
    /// benchmarking, `192.0.0/24`, `240/4`, `100::/64`, `2001::/32`
    /// (Teredo), `2001:db8::/32`, and the rest that is not unicast.
    Reserved,
}

const METADATA_V4: [Ipv4Addr; 2] = [
    Ipv4Addr::new(100, 100, 100, 200),
    Ipv4Addr::new(168, 63, 129, 16),
];

const METADATA_V6: [Ipv6Addr; 2] = [
    Ipv6Addr::new(0xfd20, 0xce, 0, 0, 0, 0, 0, 0x254),
    Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0xa9fe, 0xa9fe),
];

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let o = ip.octets();
    if METADATA_V4.contains(&ip) || ip.is_link_local() {
        return AddressClass::Metadata;
    }
    if ip.is_loopback() {
        return AddressClass::Loopback;
    }
    if ip.is_private() {
        return AddressClass::Private;
    }
    if o[0] == 100 && (o[1] & 0xc0) == 64 {
        return AddressClass::Shared;
    }
    let reserved = o[0] == 0
        || ip.is_multicast()
        || ip.is_broadcast()
        || o[0] >= 240
        || (o[0] == 192 && o[1] == 0 && o[2] == 0)
        || (o[0] == 192 && o[1] == 0 && o[2] == 2)
        || (o[0] == 198 && o[1] == 51 && o[2] == 100)
        || (o[0] == 203 && o[1] == 0 && o[2] == 113)
        || (o[0] == 198 && (o[1] & 0xfe) == 18)
        || (o[0] == 192 && o[1] == 88 && o[2] == 99);
    if reserved {
        return AddressClass::Reserved;
    }
    AddressClass::Public
}

/// The IPv4 address an IPv6 one carries, if it is a form that routes to
/// one (mapped, compatible, NAT64, 6to4).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let tail = |a: u16, b: u16| Ipv4Addr::new((a >> 8) as u8, a as u8, (b >> 8) as u8, b as u8);
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    // IPv4-compatible `::a.b.c.d` (deprecated; `::` and `::1` are not).
    if s[..6] == [0; 6] && !(s[6] == 0 && s[7] <= 1) {
        return Some(tail(s[6], s[7]));
    }
    // NAT64 well-known prefix `64:ff9b::/96`. (The local-use
    // `64:ff9b:1::/48` may embed the IPv4 at any prefix length from /48 to
    // /96, so it cannot be read reliably: it is reserved instead.)
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0; 4] {
        return Some(tail(s[6], s[7]));
    }
    // 6to4 `2002:a.b.c.d::/48`.
    if s[0] == 0x2002 {
        return Some(tail(s[1], s[2]));
    }
    None
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    let s = ip.segments();
    if METADATA_V6.contains(&ip) || (s[0] == 0xfd00 && s[1] == 0x0ec2) {
        return AddressClass::Metadata;
    }
    if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
        return AddressClass::Reserved;
    }
    if let Some(v4) = embedded_v4(ip) {
        return classify_v4(v4);
    }
    if ip.is_loopback() {
        return AddressClass::Loopback;
    }
    if ip.is_unspecified() || ip.is_multicast() {
        return AddressClass::Reserved;
    }
    if (s[0] & 0xfe00) == 0xfc00 || (s[0] & 0xffc0) == 0xfec0 {
        return AddressClass::Private;
    }
    if (s[0] & 0xffc0) == 0xfe80 {
        return AddressClass::LinkLocal;
    }
    let reserved = (s[0] == 0x100 && s[1..4] == [0; 3])
        || (s[0] == 0x2001 && s[1] == 0)
        || (s[0] == 0x2001 && s[1] == 0xdb8)
        || (s[0] == 0x2001 && (s[1] & 0xfff0) == 0x10)
        || (s[0] & 0xe000) != 0x2000;
    if reserved {
        return AddressClass::Reserved;
    }
    AddressClass::Public
}

/// The class of `ip` (IPv4-carrying IPv6 forms by the IPv4 they carry).
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

/// Whether an address of this class may be connected to under a policy
/// with `allow_private`; the refusal's code otherwise.
pub fn address_allowed(ip: IpAddr, allow_private: bool) -> Result<(), Rejection> {
    let refuse = |code, what: &str| Err(Rejection::new(code, format!("{ip} is {what}")));
    match classify(ip) {
        AddressClass::Public => Ok(()),
        AddressClass::Loopback
        | AddressClass::Private
        | AddressClass::LinkLocal
        | AddressClass::Shared
            if allow_private =>
        {
            Ok(())
        }
        AddressClass::Loopback => refuse(EGRESS_ADDRESS_PRIVATE, "a loopback address"),
        AddressClass::Private => refuse(EGRESS_ADDRESS_PRIVATE, "a private address"),
        AddressClass::LinkLocal => refuse(EGRESS_ADDRESS_PRIVATE, "a link-local address"),
        AddressClass::Shared => refuse(EGRESS_ADDRESS_PRIVATE, "a shared (CGNAT) address"),
        AddressClass::Metadata => refuse(EGRESS_ADDRESS_METADATA, "a cloud metadata address"),
        AddressClass::Reserved => refuse(EGRESS_ADDRESS_RESERVED, "a reserved address"),
    }
}

/// A requested host.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Host {
    /// A lowercase DNS name without a trailing dot.
    Name(String),
    /// An IP literal.
    Ip(IpAddr),
}

impl Host {
    /// Parses a host as a client names it: an IP literal (IPv6 with or
    /// without brackets) or a DNS name (ASCII, case folded, one trailing
    /// dot dropped, labels of `[a-z0-9-]`, 1-63 bytes, no leading or
    /// trailing hyphen, at most 253 bytes). Anything else, including
    /// numeric shorthands such as `127.1` or `0x7f000001` that some
    /// resolvers would read as addresses, is `egress_target_invalid`.
    pub fn parse(s: &str) -> Result<Host, Rejection> {
        let bad = || Rejection::new(EGRESS_TARGET_INVALID, format!("{s:?} is not a host"));
        if s.len() > 255 {
            return Err(bad());
        }
        let inner = s
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(s);
        if let Ok(v6) = inner.parse::<Ipv6Addr>() {
            return Ok(Host::Ip(IpAddr::V6(v6)));
        }
        if inner.len() != s.len() {
            return Err(bad());
        }
        if let Ok(v4) = s.parse::<Ipv4Addr>() {
            return Ok(Host::Ip(IpAddr::V4(v4)));
        }
        let name = s.strip_suffix('.').unwrap_or(s).to_ascii_lowercase();
        let label_ok = |l: &str| {
            (1..=63).contains(&l.len())
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        };
        let labels: Vec<&str> = name.split('.').collect();
        // A name whose last label is all digits (or hex) reads as an
        // address to some resolvers: refused rather than guessed.
        let numeric_tail = labels.last().is_some_and(|l| {
            l.bytes().all(|b| b.is_ascii_digit())
                || (l.starts_with("0x")
                    && l.len() > 2
                    && l[2..].bytes().all(|b| b.is_ascii_hexdigit()))
        });
        if name.is_empty()
            || name.len() > 253
            || !labels.iter().all(|l| label_ok(l))
            || numeric_tail
        {
            return Err(bad());
        }
        Ok(Host::Name(name))
    }
}

impl std::fmt::Display for Host {
    /// The normal form: a name as is, an IPv4 address dotted, an IPv6
    /// address in brackets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// One endpoint of an egress policy: a host and a port.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// The host.
    pub host: Host,
    /// The port.
    pub port: u16,
}

impl Endpoint {
    /// Parses `host:port` (an IPv6 host in brackets), as policies write
    /// endpoints.
    pub fn parse(s: &str) -> Result<Endpoint, Rejection> {
        let bad = || Rejection::new(EGRESS_TARGET_INVALID, format!("{s:?} is not host:port"));
        let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
        let port_ok = !port.is_empty()
            && port.len() <= 5
            && port.bytes().all(|b| b.is_ascii_digit())
            && !port.starts_with('0');
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|p| port_ok && *p > 0)
            .ok_or_else(bad)?;
        if host.contains(':') && !host.starts_with('[') {
            return Err(bad());
        }
        Ok(Endpoint {
            host: Host::parse(host)?,
            port,
        })
    }
}

/// Decides a target against a policy's endpoints: the host must be an
/// endpoint, on that port, and every address it is or resolved to must be
/// acceptable (see the module docs). `resolved` is what the proxy's own
/// resolver returned for a name (ignored for an IP literal). Returns the
/// addresses that may be connected to.
pub fn decide(
    endpoints: &[Endpoint],
    allow_private: bool,
    host: &Host,
    port: u16,
    resolved: &[IpAddr],
) -> Result<Vec<IpAddr>, Rejection> {
    let same_host: Vec<&Endpoint> = endpoints.iter().filter(|e| &e.host == host).collect();
    let shown = match host {
        Host::Name(n) => n.clone(),
        Host::Ip(ip) => ip.to_string(),
    };
    // A metadata literal is never allowed, endpoint or not (a policy
    // cannot list one): it is named for what it is, not as a host that
    // happens to be missing from the list.
    if let Host::Ip(ip) = host {
        if classify(*ip) == AddressClass::Metadata {
            return Err(Rejection::new(
                EGRESS_ADDRESS_METADATA,
                format!("{shown} is a cloud metadata address"),
            ));
        }
    }
    if same_host.is_empty() {
        return Err(Rejection::new(
            EGRESS_HOST_NOT_ALLOWED,
            format!("{shown} is not an endpoint of the egress policy"),
        ));
    }
    if !same_host.iter().any(|e| e.port == port) {
        return Err(Rejection::new(
            EGRESS_PORT_NOT_ALLOWED,
            format!("{shown} is an endpoint, but not on port {port}"),
        ));
    }
    let addrs: Vec<IpAddr> = match host {
        Host::Ip(ip) => vec![*ip],
        Host::Name(_) => resolved.to_vec(),
    };
    if addrs.is_empty() {
        return Err(Rejection::new(
            EGRESS_NO_ADDRESS,
            format!("{shown} resolved to no address"),
        ));
    }
    for a in &addrs {
        address_allowed(*a, allow_private)
            .map_err(|r| Rejection::new(r.code(), format!("{shown}: {}", r.message())))?;
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> AddressClass {
        classify(s.parse().expect("ip"))
    }

    #[test]
    fn classes() {
        use AddressClass::*;
        for (ip, want) in [
            ("93.184.216.34", Public),
            ("2606:4700::1111", Public),
            ("127.0.0.1", Loopback),
            ("127.255.0.9", Loopback),
            ("::1", Loopback),
            ("10.1.2.3", Private),
            ("172.31.255.1", Private),
            ("192.168.0.1", Private),
            ("fd12::1", Private),
            ("fec0::1", Private),
            ("169.254.1.1", Metadata),
            ("169.254.170.23", Metadata),
            ("169.254.169.253", Metadata),
            ("169.254.0.23", Metadata),
            ("fd00:ec2::23", Metadata),
            ("fd20:ce::254", Metadata),
            ("fe80::a9fe:a9fe", Metadata),
            ("64:ff9b:1:a00:0:100:808:808", Reserved),
            ("fe80::1", LinkLocal),
            ("100.64.0.1", Shared),
            ("100.127.255.254", Shared),
            ("169.254.169.254", Metadata),
            ("169.254.170.2", Metadata),
            ("100.100.100.200", Metadata),
            ("168.63.129.16", Metadata),
            ("fd00:ec2::254", Metadata),
            ("0.0.0.0", Reserved),
            ("0.1.2.3", Reserved),
            ("255.255.255.255", Reserved),
            ("224.0.0.1", Reserved),
            ("240.0.0.1", Reserved),
            ("192.0.2.1", Reserved),
            ("198.18.0.1", Reserved),
            ("::", Reserved),
            ("ff02::1", Reserved),
            ("2001:db8::1", Reserved),
            ("2001::1", Reserved),
            ("100::1", Reserved),
            // IPv4 carried in IPv6 is judged as that IPv4.
            ("::ffff:127.0.0.1", Loopback),
            ("::ffff:169.254.169.254", Metadata),
            ("::ffff:10.0.0.1", Private),
            ("::10.0.0.1", Private),
            ("64:ff9b::a9fe:a9fe", Metadata),
            ("64:ff9b:1::7f00:1", Reserved),
            ("2002:c0a8:0101::1", Private),
            ("2002:5db8:d822::1", Public),
        ] {
            assert_eq!(c(ip), want, "{ip}");
        }
    }

    #[test]
    fn what_allow_private_opens_and_what_it_never_does() {
        for ip in [
            "127.0.0.1",
            "10.0.0.1",
            "fe80::1",
            "100.64.1.1",
            "::ffff:192.168.1.1",
        ] {
            let ip: IpAddr = ip.parse().expect("ip");
            assert_eq!(
                address_allowed(ip, false).expect_err("private").code(),
                EGRESS_ADDRESS_PRIVATE
            );
            address_allowed(ip, true).expect("allowed with allow_private");
        }
        for (ip, code) in [
            ("169.254.169.254", EGRESS_ADDRESS_METADATA),
            ("169.254.170.23", EGRESS_ADDRESS_METADATA),
            ("fd00:ec2::23", EGRESS_ADDRESS_METADATA),
            ("::ffff:169.254.169.254", EGRESS_ADDRESS_METADATA),
            ("0.0.0.0", EGRESS_ADDRESS_RESERVED),
            ("::", EGRESS_ADDRESS_RESERVED),
            ("239.1.1.1", EGRESS_ADDRESS_RESERVED),
        ] {
            let ip: IpAddr = ip.parse().expect("ip");
            assert_eq!(
                address_allowed(ip, true)
                    .expect_err(ip.to_string().as_str())
                    .code(),
                code
            );
        }
    }

    #[test]
    fn hosts_parse_strictly() {
        assert_eq!(
            Host::parse("API.Example.com.").expect("name"),
            Host::Name("api.example.com".into())
        );
        assert_eq!(
            Host::parse("[::1]").expect("v6"),
            Host::Ip("::1".parse().expect("ip"))
        );
        assert_eq!(
            Host::parse("::1").expect("v6"),
            Host::Ip("::1".parse().expect("ip"))
        );
        assert_eq!(
            Host::parse("10.0.0.1").expect("v4"),
            Host::Ip("10.0.0.1".parse().expect("ip"))
        );
        for bad in [
            "",
            ".",
            "a..b",
            "-a.com",
            "a-.com",
            "a_b.com",
            "127.1",
            "0x7f000001",
            "2130706433",
            "a.b.123",
            "exa mple.com",
            "[10.0.0.1]",
            "[::1",
            "é.com",
            "a.com:80",
        ] {
            assert_eq!(
                Host::parse(bad).expect_err(bad).code(),
                EGRESS_TARGET_INVALID,
                "{bad}"
            );
        }
    }

    #[test]
    fn decisions() {
        let eps: Vec<Endpoint> = ["api.openai.com:443", "127.0.0.1:8080", "[::1]:9000"]
            .iter()
            .map(|s| Endpoint::parse(s).expect("endpoint"))
            .collect();
        let name = Host::parse("api.openai.com").expect("name");
        let public: IpAddr = "104.18.7.192".parse().expect("ip");
        assert_eq!(
            decide(&eps, false, &name, 443, &[public]).expect("allowed"),
            vec![public]
        );
        let code = |r: Result<Vec<IpAddr>, Rejection>| r.expect_err("refused").code();
        assert_eq!(
            code(decide(&eps, false, &name, 80, &[public])),
            EGRESS_PORT_NOT_ALLOWED
        );
        let other = Host::parse("example.com").expect("name");
        assert_eq!(
            code(decide(&eps, false, &other, 443, &[public])),
            EGRESS_HOST_NOT_ALLOWED
        );
        // Rebinding: one of the answers is private, so none is used.
        let private: IpAddr = "10.0.0.5".parse().expect("ip");
        assert_eq!(
            code(decide(&eps, false, &name, 443, &[public, private])),
            EGRESS_ADDRESS_PRIVATE
        );
        assert_eq!(
            code(decide(&eps, false, &name, 443, &[])),
            EGRESS_NO_ADDRESS
        );
        // A direct IP is its own host: not the name's endpoint.
        let direct = Host::Ip(public);
        assert_eq!(
            code(decide(&eps, false, &direct, 443, &[])),
            EGRESS_HOST_NOT_ALLOWED
        );
        // Loopback endpoints need allow_private.
        let lo = Host::parse("127.0.0.1").expect("ip");
        assert_eq!(
            code(decide(&eps, false, &lo, 8080, &[])),
            EGRESS_ADDRESS_PRIVATE
        );
        decide(&eps, true, &lo, 8080, &[]).expect("with allow_private");
        // The IPv4-mapped spelling of an endpoint is another host.
        let mapped = Host::parse("::ffff:127.0.0.1").expect("ip");
        assert_eq!(
            code(decide(&eps, true, &mapped, 8080, &[])),
            EGRESS_HOST_NOT_ALLOWED
        );
        let v6 = Host::parse("[::1]").expect("ip");
        decide(&eps, true, &v6, 9000, &[]).expect("v6 loopback endpoint");
        // The proxy's own backstop for a listed private literal (validation
        // already refuses one without allow_private): IPv6 loopback and a
        // private range are refused like IPv4 loopback.
        assert_eq!(
            code(decide(&eps, false, &v6, 9000, &[])),
            EGRESS_ADDRESS_PRIVATE
        );
        let ten: Vec<Endpoint> = vec![Endpoint::parse("10.0.0.5:80").expect("endpoint")];
        let h = Host::parse("10.0.0.5").expect("ip");
        assert_eq!(
            code(decide(&ten, false, &h, 80, &[])),
            EGRESS_ADDRESS_PRIVATE
        );
        // Issue 26: a metadata literal, never an endpoint, has its own code
        // (in any spelling that carries it).
        for meta in ["169.254.169.254", "::ffff:169.254.169.254", "fd00:ec2::254"] {
            let h = Host::parse(meta).expect("ip");
            assert_eq!(
                code(decide(&eps, true, &h, 80, &[])),
                EGRESS_ADDRESS_METADATA,
                "{meta}"
            );
        }
    }

    #[test]
    fn endpoints_parse_strictly() {
        for bad in [
            "a.com",
            "a.com:",
            "a.com:0",
            "a.com:65536",
            "a.com:080",
            "::1:80",
            "a.com:8a",
        ] {
            assert_eq!(
                Endpoint::parse(bad).expect_err(bad).code(),
                EGRESS_TARGET_INVALID,
                "{bad}"
            );
        }
        assert_eq!(Endpoint::parse("[::1]:443").expect("v6").port, 443);
    }
}
