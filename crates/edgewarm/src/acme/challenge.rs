//! TLS-ALPN-01 (RFC 8737): the ACME server proves this node answers for a name by connecting to
//! it on 443 and offering only the protocol `acme-tls/1`; the listener has read that in the
//! ClientHello before anything else, so it answers with a self-signed certificate for the name
//! carrying the key authorization's digest, completes the handshake and closes. Nothing else
//! is ever served on such a connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::PrivateKeyDer;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::store::Store;
use crate::error::CloseReason;
use crate::peek::Hello;
use crate::transport::Rewind;

/// The protocol an ACME server's validation offers (RFC 8737 §6.2).
pub(crate) const ACME_TLS_ALPN: &str = "acme-tls/1";

/// The challenge answers pending now, by name.
#[derive(Debug, Default)]
pub struct Challenges {
    pending: Mutex<HashMap<String, Arc<ServerConfig>>>,
    /// A fleet's store: answers another node's order placed there, looked up when a
    /// validation for a name without a pending answer here arrives.
    shared: Mutex<Option<Arc<dyn Store>>>,
}

/// A challenge answered while this lives.
pub(crate) struct Presented<'a> {
    challenges: &'a Challenges,
    name: String,
}

impl Drop for Presented<'_> {
    fn drop(&mut self) {
        self.challenges.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.name);
    }
}

impl Challenges {
    /// Answer validations of `name` with `digest` (the key authorization's SHA-256) until the
    /// returned guard is dropped.
    pub(crate) fn present(&self, name: &str, digest: &[u8]) -> Result<Presented<'_>, String> {
        let config = Arc::new(challenge_config(name, digest)?);
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).insert(name.to_string(), config);
        Ok(Presented { challenges: self, name: name.to_string() })
    }

    fn config(&self, name: &str) -> Option<Arc<ServerConfig>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).get(name).cloned()
    }

    /// Look up other nodes' answers in `store` from now on (`None`: this node's only).
    pub(crate) fn share(&self, store: Option<Arc<dyn Store>>) {
        *self.shared.lock().unwrap_or_else(|p| p.into_inner()) = store.filter(|s| s.shared());
    }

    /// Another node's answer for `name`, from the fleet's store (bounded: the validation waits).
    async fn fleet_answer(&self, name: &str) -> Option<Arc<ServerConfig>> {
        let store = self.shared.lock().unwrap_or_else(|p| p.into_inner()).clone()?;
        let key = super::challenge_key(name);
        let digest = tokio::time::timeout(Duration::from_secs(2), store.load(&key)).await.ok()?.ok()??;
        challenge_config(name, &digest).ok().map(Arc::new)
    }

    /// Answer a connection whose hello offered `acme-tls/1`: the challenge's handshake, or,
    /// with no challenge pending for its name, a refusal (`detail` says which).
    pub(crate) async fn answer(
        &self,
        client: TcpStream,
        hello: Box<Hello>,
        timeout: Duration,
        detail: &mut Option<String>,
    ) -> CloseReason {
        let name = hello.sni.as_deref().unwrap_or_default().trim_end_matches('.').to_ascii_lowercase();
        let only_acme = hello.alpn.len() == 1;
        let config = match self.config(&name) {
            Some(config) => Some(config),
            None if only_acme => self.fleet_answer(&name).await,
            None => None,
        };
        let Some(config) = config.filter(|_| only_acme) else {
            *detail = Some(format!("acme-tls/1 offered for {name:?} with no ACME challenge pending"));
            return CloseReason::ClientTls;
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        match tokio::time::timeout(timeout, acceptor.accept(Rewind::new(hello.bytes, client))).await {
            Ok(Ok(mut tls)) => {
                *detail = Some(format!("ACME challenge answered for {name}"));
                // The validation needs only the handshake; close_notify ends it cleanly.
                let _ = tls.shutdown().await;
                CloseReason::Done
            }
            Ok(Err(e)) => {
                *detail = Some(format!("ACME challenge handshake: {e}"));
                CloseReason::ClientTls
            }
            Err(_) => CloseReason::HelloTimeout,
        }
    }
}

/// The challenge certificate, whatever the hello. Not rustls's single-certificate resolver:
/// that one checks the certificate with webpki, which refuses the critical extension
/// TLS-ALPN-01 requires.
#[derive(Debug)]
struct Presenting(Arc<CertifiedKey>);

impl ResolvesServerCert for Presenting {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// A configuration presenting the challenge certificate: self-signed, for `name` alone, with
/// the critical `acmeIdentifier` extension holding `digest`, and `acme-tls/1` as its protocol.
fn challenge_config(name: &str, digest: &[u8]) -> Result<ServerConfig, String> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| e.to_string())?;
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).map_err(|e| e.to_string())?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
    let signing = crate::tls::provider()
        .key_provider
        .load_private_key(PrivateKeyDer::Pkcs8(key.serialize_der().into()))
        .map_err(|e| e.to_string())?;
    let certified = Arc::new(CertifiedKey::new(vec![cert.der().clone()], signing));
    let mut config = ServerConfig::builder_with_provider(crate::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Presenting(certified)));
    config.alpn_protocols = vec![ACME_TLS_ALPN.as_bytes().to_vec()];
    Ok(config)
}
