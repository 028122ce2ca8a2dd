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
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// Where the system's CA bundle is looked for, in this order: Debian and
/// Ubuntu, Fedora and RHEL, openSUSE, Alpine. The first that is a file
/// (a symbolic link is followed: Fedora's and Alpine's are links) is the
/// bundle.
pub const BUNDLE_CANDIDATES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// Largest system bundle read (for the proxy and for the sandbox's copy).
pub const MAX_BUNDLE_BYTES: u64 = 4 << 20;
/// Largest extra root file.
pub const MAX_EXTRA_ROOT_BYTES: u64 = 1 << 20;
/// Most extra root files.
pub const MAX_EXTRA_ROOTS: usize = 16;

/// How long the session CA and its leaves are valid, in days from today.
const VALID_DAYS: i64 = 30;

/// Where the proxy's TLS client finds the roots it verifies upstreams
/// against: a PEM bundle (normally the system's, [`TlsRoots::system`])
/// and extra roots an operator names.
///
/// Nothing is silently dropped: at [`crate::start`] a bundle that is
/// missing, unreadable, over [`MAX_BUNDLE_BYTES`] or without a certificate,
/// and an extra root without one, is [`EgressError::TrustRoots`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsRoots {
    /// Extra roots, PEM, each holding at least one certificate (an
    /// operator's private CA; tests give their own CA here).
    pub extra_pem: Vec<String>,
    /// The PEM bundle to read too (`None`: none, the extra roots only).
    pub system_bundle: Option<PathBuf>,
}

impl TlsRoots {
    /// The system bundle, found at [`BUNDLE_CANDIDATES`], and no extra
    /// root; none found is [`EgressError::TrustRoots`].
    pub fn system() -> Result<TlsRoots, EgressError> {
        TlsRoots::system_among(&BUNDLE_CANDIDATES.map(Path::new))
    }

    /// [`TlsRoots::system`] over these candidates, in order: the first
    /// that exists is the bundle, and must be (or link to) a regular file.
    /// A candidate that exists but is not one (a dangling link, a
    /// directory) is refused, never passed over for a later, perhaps stale,
    /// bundle.
    pub fn system_among(candidates: &[&Path]) -> Result<TlsRoots, EgressError> {
        for p in candidates {
            match std::fs::symlink_metadata(p) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(EgressError::TrustRoots(format!(
                        "CA bundle {}: {e}",
                        p.display()
                    )))
                }
                Ok(_) => {}
            }
            if !std::fs::metadata(p).is_ok_and(|m| m.is_file()) {
                return Err(EgressError::TrustRoots(format!(
                    "CA bundle {} exists but is not a regular file (a dangling link?)",
                    p.display()
                )));
            }
            return Ok(TlsRoots {
                extra_pem: Vec::new(),
                system_bundle: Some(p.to_path_buf()),
            });
        }
        let tried: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
        Err(EgressError::TrustRoots(format!(
            "no system CA bundle found (tried {})",
            tried.join(", ")
        )))
    }

    /// The bundle the proxy reads, if any (the sandbox's trust file
    /// copies the same one).
    pub fn bundle(&self) -> Option<&Path> {
        self.system_bundle.as_deref()
    }

    /// Adds an extra root file's contents (`shown` names it in errors):
    /// at most [`MAX_EXTRA_ROOT_BYTES`], text, every PEM section a
    /// certificate that parses, at least one; at most [`MAX_EXTRA_ROOTS`]
    /// in all.
    pub fn add_extra_pem(&mut self, shown: &str, pem: &[u8]) -> Result<(), EgressError> {
        let bad = |why: String| EgressError::TrustRoots(format!("{shown}: {why}"));
        if self.extra_pem.len() >= MAX_EXTRA_ROOTS {
            return Err(bad(format!("more than {MAX_EXTRA_ROOTS} extra roots")));
        }
        if u64::try_from(pem.len()).unwrap_or(u64::MAX) > MAX_EXTRA_ROOT_BYTES {
            return Err(bad(format!("larger than {MAX_EXTRA_ROOT_BYTES} bytes")));
        }
        let text = std::str::from_utf8(pem).map_err(|_| bad("not text".into()))?;
        let certs = parse_certs(text.as_bytes()).map_err(bad)?;
        let mut store = rustls::RootCertStore::empty();
        let (added, ignored) = store.add_parsable_certificates(certs);
        if added == 0 || ignored > 0 {
            return Err(bad("holds a certificate that is not a usable root".into()));
        }
        self.extra_pem.push(text.to_owned());
        Ok(())
    }

    /// Reads the roots as [`crate::start`] does, so a door can refuse
    /// unusable ones before anything is launched.
    pub fn check(&self) -> Result<(), EgressError> {
        client_config(self).map(drop)
    }
}

/// Every PEM section of `pem` as a certificate: an error if one does not
/// parse, if one is anything else (a private key, a CRL), or if there is
/// none.
fn parse_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::SectionKind;
    let mut certs = Vec::new();
    for section in <(SectionKind, Vec<u8>)>::pem_slice_iter(pem) {
        match section.map_err(|e| e.to_string())? {
            (SectionKind::Certificate, der) => certs.push(CertificateDer::from(der)),
            (other, _) => return Err(format!("holds a {other:?} section, not only certificates")),
        }
    }
    if certs.is_empty() {
        return Err("holds no PEM certificate".into());
    }
    Ok(certs)
}

/// Reads the bundle at `path`: a regular file (after symbolic links) of
/// at most [`MAX_BUNDLE_BYTES`].
pub(crate) fn read_bundle(path: &Path) -> Result<Vec<u8>, EgressError> {
    use std::io::Read;
    let shown = path.display();
    let bad = |why: String| EgressError::TrustRoots(format!("CA bundle {shown}: {why}"));
    // Non-blocking, so a FIFO put in its place cannot hold the open; a
    // regular file reads the same either way.
    let f = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(path)
            .map_err(|e| bad(e.to_string()))?
    };
    let meta = f.metadata().map_err(|e| bad(e.to_string()))?;
    if !meta.is_file() {
        return Err(bad("not a regular file".into()));
    }
    let mut bytes = Vec::new();
    f.take(MAX_BUNDLE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| bad(e.to_string()))?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_BUNDLE_BYTES {
        return Err(bad(format!("larger than {MAX_BUNDLE_BYTES} bytes")));
    }
    Ok(bytes)
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
    for (i, pem) in roots.extra_pem.iter().enumerate() {
        let bad = |why: String| EgressError::TrustRoots(format!("extra root {}: {why}", i + 1));
        let (added, _) = store.add_parsable_certificates(parse_certs(pem.as_bytes()).map_err(bad)?);
        if added == 0 {
            return Err(bad("holds no usable certificate".into()));
        }
    }
    if let Some(path) = &roots.system_bundle {
        let bytes = read_bundle(path)?;
        // A bundle may hold a section that does not parse; it is skipped,
        // as long as one certificate is usable.
        let certs = CertificateDer::pem_slice_iter(&bytes).filter_map(Result::ok);
        let (added, _) = store.add_parsable_certificates(certs);
        if added == 0 {
            return Err(EgressError::TrustRoots(format!(
                "CA bundle {}: holds no usable certificate",
                path.display()
            )));
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

    fn pem_of(ca: &SessionCa) -> String {
        ca.pem().to_owned()
    }

    #[test]
    fn the_bundle_is_the_first_candidate_that_is_a_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = SessionCa::new(&[]).expect("ca");
        let [a, b, c, d] =
            ["debian.crt", "fedora.crt", "suse.pem", "alpine.pem"].map(|n| dir.path().join(n));
        let candidates = [a.as_path(), b.as_path(), c.as_path(), d.as_path()];
        let none = TlsRoots::system_among(&candidates).expect_err("none exists");
        assert_eq!(none.code().as_str(), "egress_trust_roots_invalid");
        assert!(none.to_string().contains("debian.crt"), "{none}");
        // A symbolic link to a file is a bundle; the first candidate that
        // exists decides, so a directory or a dangling link there is
        // refused, not passed over for a later (perhaps stale) bundle.
        std::fs::write(dir.path().join("real.pem"), pem_of(&ca)).expect("write");
        std::os::unix::fs::symlink(dir.path().join("real.pem"), &c).expect("link");
        std::fs::write(&d, pem_of(&ca)).expect("write");
        let found = TlsRoots::system_among(&candidates).expect("found");
        assert_eq!(found.bundle(), Some(c.as_path()));
        assert!(found.extra_pem.is_empty());
        std::fs::create_dir(&b).expect("dir");
        let e = TlsRoots::system_among(&candidates).expect_err("a directory first");
        assert_eq!(e.code().as_str(), "egress_trust_roots_invalid");
        std::fs::remove_dir(&b).expect("rmdir");
        std::os::unix::fs::symlink(dir.path().join("gone.pem"), &b).expect("link");
        let e = TlsRoots::system_among(&candidates).expect_err("a dangling link first");
        assert!(e.to_string().contains("fedora.crt"), "{e}");
        std::fs::remove_file(&b).expect("unlink");
        std::fs::write(&a, pem_of(&ca)).expect("write");
        let found = TlsRoots::system_among(&candidates).expect("found");
        assert_eq!(found.bundle(), Some(a.as_path()));
        found.check().expect("the bundle holds a certificate");
        // The real list is the documented order.
        assert_eq!(BUNDLE_CANDIDATES[0], "/etc/ssl/certs/ca-certificates.crt");
        assert_eq!(BUNDLE_CANDIDATES[3], "/etc/ssl/cert.pem");
    }

    #[test]
    fn a_bundle_that_is_missing_empty_or_garbage_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("missing.pem");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").expect("write");
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a certificate\n").expect("write");
        for p in [missing.clone(), empty, garbage, dir.path().to_path_buf()] {
            let roots = TlsRoots {
                extra_pem: Vec::new(),
                system_bundle: Some(p.clone()),
            };
            let e = roots.check().expect_err("refused");
            assert_eq!(e.code().as_str(), "egress_trust_roots_invalid", "{e}");
            assert!(e.to_string().contains(&p.display().to_string()), "{e}");
        }
    }

    #[test]
    fn extra_roots_must_hold_a_certificate_and_are_bounded() {
        let ca = SessionCa::new(&[]).expect("ca");
        let mut roots = TlsRoots {
            extra_pem: Vec::new(),
            system_bundle: None,
        };
        for bad in [
            &b""[..],
            b"garbage",
            b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
            b"\xff\xfe",
        ] {
            let e = roots.add_extra_pem("ca.pem", bad).expect_err("refused");
            assert_eq!(e.code().as_str(), "egress_trust_roots_invalid", "{e}");
            assert!(e.to_string().contains("ca.pem"), "{e}");
        }
        // A root file that also carries a private key, or a certificate
        // that does not parse after a good one, is refused whole (review:
        // non-certificate sections and unparsable certificates were
        // skipped).
        let with_key = format!(
            "{}-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            pem_of(&ca)
        );
        let with_bad = format!(
            "{}-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
            pem_of(&ca)
        );
        for bad in [with_key, with_bad] {
            let e = roots
                .add_extra_pem("mixed.pem", bad.as_bytes())
                .expect_err("refused");
            assert_eq!(e.code().as_str(), "egress_trust_roots_invalid", "{e}");
        }
        let big = vec![b'a'; usize::try_from(MAX_EXTRA_ROOT_BYTES).expect("usize") + 1];
        assert!(roots.add_extra_pem("big.pem", &big).is_err());
        assert!(roots.extra_pem.is_empty());
        for _ in 0..MAX_EXTRA_ROOTS {
            roots
                .add_extra_pem("ca.pem", pem_of(&ca).as_bytes())
                .expect("added");
        }
        let e = roots
            .add_extra_pem("ca.pem", pem_of(&ca).as_bytes())
            .expect_err("one too many");
        assert_eq!(e.code().as_str(), "egress_trust_roots_invalid");
        roots.check().expect("usable");
        // Garbage given directly (not through add_extra_pem) is refused at
        // start, not skipped.
        roots.extra_pem.push("garbage".into());
        assert!(roots.check().is_err());
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(19_782), (2024, 2, 29));
        assert_eq!(civil(20_454), (2026, 1, 1));
    }
}
