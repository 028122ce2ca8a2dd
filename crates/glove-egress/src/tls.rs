//! TLS termination for brokered HTTPS: the per-session CA, the leaf
//! certificates it signs for the endpoints the proxy terminates, and the
//! client side that reaches the real upstream with normal verification.
//!
//! The CA is made (rcgen, ECDSA P-256, `ring`) when the [`Broker`] is
//! prepared; only its certificate leaves the process (for the sandbox to
//! trust), never its key. It is valid from a day before it is made for 30
//! days, may sign no intermediate, and is name-constrained to the hosts of
//! the endpoints a credential is bound to (and to no IP address unless one
//! such endpoint is an IP), so even a sandbox that trusts it trusts it for
//! nothing else.
//!
//! [`Broker`]: crate::Broker

use crate::error::EgressError;
use glove_types::egress::{Endpoint, Host};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, CidrSubnet, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, GeneralSubtree, IsCa, KeyPair, KeyUsagePurpose, NameConstraints,
};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// The system's CA bundle, read by default for upstream verification.
pub const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// How long the session CA and its leaves are valid, in days from today.
const VALID_DAYS: i64 = 30;

/// Where the proxy's TLS client finds the roots it verifies upstreams
/// against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsRoots {
    /// Extra roots, PEM (tests give their own CA here).
    pub extra_pem: Vec<String>,
    /// A PEM bundle to read too (`None`: none). A missing file adds
    /// nothing.
    pub system_bundle: Option<PathBuf>,
}

impl TlsRoots {
    /// The system bundle's path.
    pub fn default_bundle() -> &'static str {
        SYSTEM_BUNDLE
    }
}

impl Default for TlsRoots {
    fn default() -> TlsRoots {
        TlsRoots {
            extra_pem: Vec::new(),
            system_bundle: Some(PathBuf::from(SYSTEM_BUNDLE)),
        }
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_error(what: &'static str) -> impl FnOnce(String) -> EgressError {
    move |e| EgressError::Io {
        what,
        source: std::io::Error::other(e),
    }
}

/// The TLS client configuration for upstreams: these roots, HTTP/1.1.
pub(crate) fn client_config(roots: &TlsRoots) -> Result<Arc<rustls::ClientConfig>, EgressError> {
    let mut store = rustls::RootCertStore::empty();
    for pem in &roots.extra_pem {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| tls_error("parse an extra TLS root")(e.to_string()))?;
        let (added, _) = store.add_parsable_certificates(certs);
        if added == 0 {
            return Err(tls_error("parse an extra TLS root")(
                "no certificate in it".into(),
            ));
        }
    }
    if let Some(path) = &roots.system_bundle {
        if let Ok(bytes) = std::fs::read(path) {
            let certs = CertificateDer::pem_slice_iter(&bytes).filter_map(Result::ok);
            let _ = store.add_parsable_certificates(certs);
        }
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error("configure the TLS client")(e.to_string()))?
        .with_root_certificates(store)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Days since 1970-01-01 as a civil date (proleptic Gregorian).
fn civil(days: i64) -> (i32, u8, u8) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        i32::try_from(y).unwrap_or(1970),
        u8::try_from(m).unwrap_or(1),
        u8::try_from(d).unwrap_or(1),
    )
}

fn validity(params: &mut CertificateParams) {
    let today = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs() / 86_400).unwrap_or(0))
        .unwrap_or(0);
    let (y, m, d) = civil(today - 1);
    params.not_before = rcgen::date_time_ymd(y, m, d);
    let (y, m, d) = civil(today + VALID_DAYS);
    params.not_after = rcgen::date_time_ymd(y, m, d);
}

fn rcgen_error(what: &'static str) -> impl FnOnce(rcgen::Error) -> EgressError {
    move |e| tls_error(what)(e.to_string())
}

fn host_text(h: &Host) -> String {
    match h {
        Host::Name(n) => n.clone(),
        Host::Ip(ip) => ip.to_string(),
    }
}

/// The session CA and the server configurations of the leaves it signed.
pub(crate) struct SessionCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    pem: String,
    leaves: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
}

impl std::fmt::Debug for SessionCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionCa(..)")
    }
}

impl SessionCa {
    /// Makes a CA name-constrained to the hosts of `bound`.
    pub(crate) fn new(bound: &[Endpoint]) -> Result<SessionCa, EgressError> {
        let key = KeyPair::generate().map_err(rcgen_error("make the session CA key"))?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "Glove egress session CA");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut params);
        let mut permitted = Vec::new();
        let mut any_ip = false;
        for e in bound {
            let sub = match &e.host {
                Host::Name(n) => GeneralSubtree::DnsName(n.clone()),
                Host::Ip(IpAddr::V4(v4)) => {
                    any_ip = true;
                    GeneralSubtree::IpAddress(CidrSubnet::V4(v4.octets(), [255; 4]))
                }
                Host::Ip(IpAddr::V6(v6)) => {
                    any_ip = true;
                    GeneralSubtree::IpAddress(CidrSubnet::V6(v6.octets(), [255; 16]))
                }
            };
            if !permitted.contains(&sub) {
                permitted.push(sub);
            }
        }
        if !permitted.is_empty() {
            let excluded = if any_ip {
                Vec::new()
            } else {
                vec![
                    GeneralSubtree::IpAddress(CidrSubnet::V4([0; 4], [0; 4])),
                    GeneralSubtree::IpAddress(CidrSubnet::V6([0; 16], [0; 16])),
                ]
            };
            params.name_constraints = Some(NameConstraints {
                permitted_subtrees: permitted,
                excluded_subtrees: excluded,
            });
        }
        let issuer = CertifiedIssuer::self_signed(params, key)
            .map_err(rcgen_error("sign the session CA"))?;
        let pem = issuer.pem();
        Ok(SessionCa {
            issuer,
            pem,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA certificate, PEM.
    pub(crate) fn pem(&self) -> &str {
        &self.pem
    }

    /// The server configuration presenting a leaf for `host` (made once
    /// per host).
    pub(crate) fn server_config(
        &self,
        host: &Host,
    ) -> Result<Arc<rustls::ServerConfig>, EgressError> {
        let name = host_text(host);
        if let Ok(leaves) = self.leaves.lock() {
            if let Some(c) = leaves.get(&name) {
                return Ok(c.clone());
            }
        }
        let (chain, key_der) = self.leaf(&name)?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_error("configure the TLS server")(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, key_der)
            .map_err(|e| tls_error("configure the TLS server")(e.to_string()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        if let Ok(mut leaves) = self.leaves.lock() {
            leaves.insert(name, config.clone());
        }
        Ok(config)
    }

    /// A leaf for `name` (and the CA after it) with its key.
    fn leaf(
        &self,
        name: &str,
    ) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), EgressError> {
        let key = KeyPair::generate().map_err(rcgen_error("make a leaf key"))?;
        let mut params =
            CertificateParams::new(vec![name.to_owned()]).map_err(rcgen_error("name a leaf"))?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        validity(&mut params);
        let leaf = params
            .signed_by(&key, &self.issuer)
            .map_err(rcgen_error("sign a leaf"))?;
        let chain = vec![leaf.der().clone(), self.issuer.der().clone()];
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        Ok((chain, key_der))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::{ServerName, UnixTime};

    fn verify(ca: &SessionCa, signed_for: &str, as_name: &str) -> bool {
        let (chain, _) = ca.leaf(signed_for).expect("leaf");
        let mut store = rustls::RootCertStore::empty();
        store.add(chain[1].clone()).expect("root");
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(store),
            provider(),
        )
        .build()
        .expect("verifier");
        let name = ServerName::try_from(as_name.to_owned()).expect("name");
        verifier
            .verify_server_cert(&chain[0], &[], &name, &[], UnixTime::now())
            .is_ok()
    }

    #[test]
    fn the_session_ca_signs_only_for_bound_hosts() {
        let bound = [Endpoint::parse("model.test:443").expect("endpoint")];
        let ca = SessionCa::new(&bound).expect("ca");
        assert!(verify(&ca, "model.test", "model.test"));
        // A leaf for another host is refused by its name constraints.
        assert!(!verify(&ca, "bank.example", "bank.example"));
        assert!(!verify(&ca, "10.0.0.1", "10.0.0.1"));
        assert!(!verify(&ca, "model.test", "other.test"));
        assert!(!format!("{ca:?}").contains("PRIVATE"));
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(19_782), (2024, 2, 29));
        assert_eq!(civil(20_454), (2026, 1, 1));
    }
}
