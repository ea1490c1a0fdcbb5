//! Certificates: a CA and leaf per side, in PEM and DER, written where an edge config can
//! name them.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// A CA and a leaf certificate for some names, in PEM and DER.
pub struct Certs {
    pub ca_pem: String,
    pub ca_der: CertificateDer<'static>,
    pub cert_pem: String,
    pub key_pem: String,
    pub cert_der: CertificateDer<'static>,
    pub key_der: PrivatePkcs8KeyDer<'static>,
}

pub fn certs(names: &[&str]) -> Certs {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "edgewarm test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    Certs {
        ca_pem: ca.pem(),
        ca_der: ca.der().clone(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        cert_der: cert.der().clone(),
        key_der: PrivatePkcs8KeyDer::from(key.serialize_der()),
    }
}

impl Certs {
    pub fn write(&self, dir: &Path) {
        std::fs::write(dir.join("ca.pem"), &self.ca_pem).unwrap();
        std::fs::write(dir.join("cert.pem"), &self.cert_pem).unwrap();
        std::fs::write(dir.join("key.pem"), &self.key_pem).unwrap();
    }

    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor_with_alpn(&[])
    }

    /// A TLS acceptor for this certificate offering `alpn`.
    pub fn acceptor_with_alpn(&self, alpn: &[&[u8]]) -> TlsAcceptor {
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![self.cert_der.clone()], PrivateKeyDer::Pkcs8(self.key_der.clone_key()))
            .unwrap();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        TlsAcceptor::from(Arc::new(config))
    }

    pub fn connector(&self) -> TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_der.clone()).unwrap();
        let config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
        TlsConnector::from(Arc::new(config))
    }
}

/// Certificates for the client-facing side (`b.test`, signed by the "edge" CA) and the origin
/// (`origin.test`, signed by the "origin" CA), written to a temporary directory, for routes
/// that terminate TLS.
pub struct Pki {
    _dir: tempfile::TempDir,
    pub path: std::path::PathBuf,
    pub edge: Arc<Certs>,
    pub origin: Certs,
    action: &'static str,
}

/// A [`Pki`] whose [`Pki::route`] makes routes of `action` (`prewarm`, `http`).
pub fn pki(action: &'static str) -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let (edge, origin) = (certs(&["b.test"]), certs(&["origin.test"]));
    for (name, c) in [("edge", &edge), ("origin", &origin)] {
        std::fs::create_dir(path.join(name)).unwrap();
        c.write(&path.join(name));
    }
    Pki { _dir: dir, path, edge: Arc::new(edge), origin, action }
}

impl Pki {
    /// A route for b.test to `origin` (verified as origin.test); `extra` adds keys, indented
    /// like the route's keys.
    pub fn route(&self, origin: SocketAddr, extra: &str) -> String {
        let (p, action) = (self.path.display(), self.action);
        format!(
            "  - sni: b.test\n    action: {action}\n    origin: \"{origin}\"\n    cert: {p}/edge/cert.pem\n    key: {p}/edge/key.pem\n    origin_tls: {{sni: origin.test, ca: {p}/origin/ca.pem}}\n{extra}"
        )
    }
}
