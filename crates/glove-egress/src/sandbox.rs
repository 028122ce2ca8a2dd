//! What a sandbox in egress mode gets from its session's proxy: the
//! loopback ports its forwarder listens on, the proxy variables, the
//! brokered credentials' placeholders, and the session CA as trusted
//! files (its key never leaves the proxy).

use crate::{Broker, TlsRoots};
use glove_types::egress::settings::{EgressSettings, PROXY_PORT};

/// The session CA alone, inside the sandbox.
pub const CA_FILE: &str = "/glove/egress-ca.pem";
/// The host's trust bundle with the session CA appended, inside the sandbox.
pub const CA_BUNDLE_FILE: &str = "/glove/ca-bundle.pem";

/// The ports of the sandbox's forwarder, in listener order: the proxy,
/// then each port mapping.
pub fn sandbox_ports(settings: &EgressSettings) -> Vec<u16> {
    let mut ports = vec![PROXY_PORT];
    ports.extend(settings.port_mappings().iter().map(|m| m.listen_port));
    ports
}

/// The agent's variables: the proxy for HTTP and HTTPS (loopback, and so
/// the port mappings, go direct), the trust files, and each brokered
/// credential's placeholder.
pub fn sandbox_environment(broker: &Broker) -> Vec<String> {
    let proxy = format!("http://127.0.0.1:{PROXY_PORT}");
    let mut env = Vec::new();
    for name in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
    ] {
        env.push(format!("{name}={proxy}"));
    }
    for name in ["NO_PROXY", "no_proxy"] {
        env.push(format!("{name}=127.0.0.1,localhost,::1"));
    }
    // Node 24 and later honour the proxy variables in `fetch` with it.
    env.push("NODE_USE_ENV_PROXY=1".into());
    // The session CA only where the proxy terminates TLS for a credential.
    if broker.terminates_tls() {
        env.push(format!("NODE_EXTRA_CA_CERTS={CA_FILE}"));
        env.push(format!("SSL_CERT_FILE={CA_BUNDLE_FILE}"));
    }
    for (k, v) in broker.environment() {
        env.push(format!("{k}={v}"));
    }
    env
}

/// The two trust files, `(path inside, contents)`: the session CA, and the
/// bundle the proxy's `roots` name (the system bundle found,
/// [`TlsRoots::system`]; when readable and at most
/// [`crate::MAX_BUNDLE_BYTES`]) with the CA appended, so that a client
/// reading `SSL_CERT_FILE` still trusts the public roots for tunnels the
/// proxy does not terminate.
///
/// None when no credential travels in TLS: the proxy then never
/// terminates a tunnel, and the sandbox trusts only the host's roots.
pub fn sandbox_trust_files(broker: &Broker, roots: &TlsRoots) -> Vec<(String, String)> {
    if !broker.terminates_tls() {
        return Vec::new();
    }
    let ca = broker.ca_certificate_pem().to_owned();
    let mut combined = roots
        .bundle()
        .and_then(|p| crate::tls::read_bundle(p).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .unwrap_or_default();
    if !combined.is_empty() && !combined.ends_with('\n') {
        combined.push('\n');
    }
    combined.push_str(&ca);
    vec![(CA_FILE.into(), ca), (CA_BUNDLE_FILE.into(), combined)]
}
