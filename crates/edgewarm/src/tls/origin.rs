//! The origin-facing TLS client of a `prewarm` route, and the identity of what it connects to.
//!
//! Everything that decides *which* origin connection a client may be given is in [`PoolKey`]:
//! address, ALPN and, over TLS ([`TlsKey`]), the server name, whether and against what the
//! certificate is verified, and the client certificate presented. Two routes share warm
//! connections only when all of these are equal; anything less would let one route's client
//! ride a connection made under another route's security settings.

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::pem;
use crate::config::{self, OriginAddr};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolKey {
    pub origin: OriginAddr,
    pub alpn: Option<Vec<u8>>,
    /// `None`: cleartext, where the address (and ALPN) is all there is to tell connections apart.
    pub tls: Option<TlsKey>,
}

/// What a TLS origin connection was made under.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TlsKey {
    pub server_name: String,
    pub verify: bool,
    /// SHA-256 of the CA bundle; `None`: system roots.
    pub ca: Option<[u8; 32]>,
    /// SHA-256 of the client certificate and key files.
    pub client_cert: Option<([u8; 32], [u8; 32])>,
    /// Sessions may move to the kernel: read record-aligned, keys extractable. A route without
    /// kernel TLS must not be given such a connection, nor the reverse.
    pub ktls: bool,
}

impl PoolKey {
    /// The name presented (for `/origins`): none over cleartext.
    pub fn sni(&self) -> &str {
        self.tls.as_ref().map_or("", |t| t.server_name.as_str())
    }

    /// Whether the origin's certificate is verified (for `/origins`): no certificate over
    /// cleartext.
    pub fn verified(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.verify)
    }

    pub fn alpn_label(&self) -> String {
        self.alpn.as_deref().map(|p| String::from_utf8_lossy(p).into_owned()).unwrap_or_else(|| "none".into())
    }
}

/// How to reach and verify one route's origin; one [`ClientConfig`] per ALPN choice.
#[derive(Debug)]
pub struct OriginTls {
    pub server_name: ServerName<'static>,
    base_key: PoolKey,
    base: ClientConfig,
}

impl OriginTls {
    /// `route_name` is the normalised SNI pattern (the default origin server name for exact
    /// routes). Errors name the field of `origin_tls` at fault.
    pub fn new(t: &config::OriginTls, route_name: &str, origin: OriginAddr) -> Result<Self, (&'static str, String)> {
        let name = t.sni.clone().unwrap_or_else(|| route_name.to_string());
        let server_name =
            ServerName::try_from(name.clone()).map_err(|_| ("origin_tls.sni", format!("invalid {name:?}")))?;
        let provider = super::provider();
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| ("origin_tls", e.to_string()))?;
        let mut ca_digest = None;
        let builder = if !t.verify {
            builder.dangerous().with_custom_certificate_verifier(Arc::new(NoChainVerification(provider)))
        } else if let Some(path) = &t.ca {
            let file = pem::read(path).map_err(|e| ("origin_tls.ca", e))?;
            let mut roots = RootCertStore::empty();
            for cert in pem::certs(&file, path).map_err(|e| ("origin_tls.ca", e))? {
                roots.add(cert).map_err(|e| ("origin_tls.ca", format!("{}: {e}", path.display())))?;
            }
            ca_digest = Some(file.digest);
            builder.with_root_certificates(roots)
        } else {
            builder.with_root_certificates(system_roots())
        };
        let (base, client_cert) = match (&t.client_cert, &t.client_key) {
            (Some(cert_path), Some(key_path)) => {
                let cf = pem::read(cert_path).map_err(|e| ("origin_tls.client_cert", e))?;
                let kf = pem::read(key_path).map_err(|e| ("origin_tls.client_key", e))?;
                let certs = pem::certs(&cf, cert_path).map_err(|e| ("origin_tls.client_cert", e))?;
                let key = pem::key(&kf, key_path).map_err(|e| ("origin_tls.client_key", e))?;
                let config =
                    builder.with_client_auth_cert(certs, key).map_err(|e| ("origin_tls.client_key", e.to_string()))?;
                (config, Some((cf.digest, kf.digest)))
            }
            _ => (builder.with_no_client_auth(), None),
        };
        // rustls's default in-memory session cache stays on: refills resume instead of doing
        // full handshakes. Early data towards the origin stays off: a warm connection has no
        // request to send early.
        let tls = TlsKey { server_name: name, verify: t.verify, ca: ca_digest, client_cert, ktls: false };
        let base_key = PoolKey { origin, alpn: None, tls: Some(tls) };
        Ok(Self { server_name, base_key, base })
    }

    /// Origin sessions that can be handed to the kernel (`ktls: on | auto`).
    pub fn with_kernel_tls(mut self) -> Self {
        self.base.enable_secret_extraction = true;
        if let Some(tls) = &mut self.base_key.tls {
            tls.ktls = true;
        }
        self
    }

    pub fn key(&self, alpn: Option<&[u8]>) -> PoolKey {
        PoolKey { alpn: alpn.map(<[u8]>::to_vec), ..self.base_key.clone() }
    }

    /// The client config offering exactly `alpn` (or none).
    pub fn config(&self, alpn: Option<&[u8]>) -> Arc<ClientConfig> {
        let mut c = self.base.clone();
        c.alpn_protocols = alpn.map(|p| vec![p.to_vec()]).unwrap_or_default();
        Arc::new(c)
    }
}

/// The system's trusted roots, read once per process (it is file I/O over hundreds of certs).
fn system_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let loaded = rustls_native_certs::load_native_certs();
            let mut roots = RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(loaded.certs);
            if added == 0 {
                tracing::warn!(errors = ?loaded.errors, "no system root certificates found: origins can only be verified with origin_tls.ca");
            }
            Arc::new(roots)
        })
        .clone()
}

/// `origin_tls.verify: false`. The chain and name are not checked, but the handshake signature
/// still is, so the origin must hold the key of the certificate it shows.
#[derive(Debug)]
struct NoChainVerification(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoChainVerification {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
