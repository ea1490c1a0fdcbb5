//! One name's certificate from the ACME server: what handshakes present now, swapped in place
//! when a renewal arrives, and what `/certificates` says of it.
//!
//! Routes hold the [`Managed`] itself as their certificate resolver, so a renewal reaches the
//! next handshake without a reload; tickets are the route's (keyed by route, not certificate),
//! so sessions resume across the swap.

use std::sync::{Arc, Mutex, RwLock};

use prometheus_client::metrics::gauge::Gauge;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::tls::certinfo::CertInfo;
use crate::tls::client::LiveCert;

/// What `/certificates` shows of an ACME name besides the certificate itself.
#[derive(Debug, Default, Clone)]
pub(crate) struct Status {
    /// When the next order is due (Unix seconds): a renewal, or a retry after a failure.
    pub next_order: Option<i64>,
    /// The last order's failure, until an order succeeds.
    pub last_error: Option<String>,
}

#[derive(Debug)]
pub struct Managed {
    name: String,
    current: RwLock<Option<(Arc<CertifiedKey>, CertInfo)>>,
    status: Mutex<Status>,
    /// `edgewarm_tls_certificate_expiry_seconds` of the route: kept true across renewals.
    expiry: Gauge,
}

impl LiveCert for Managed {
    fn leaf(&self) -> Option<CertInfo> {
        Managed::leaf(self)
    }
}

impl ResolvesServerCert for Managed {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).as_ref().map(|(key, _)| key.clone())
    }
}

/// A stored or issued PEM (the chain, then the key) that does not make a certificate for the name.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unusable(String);

impl Managed {
    pub(crate) fn new(name: &str, expiry: Gauge) -> Self {
        Self { name: name.to_string(), current: RwLock::default(), status: Mutex::default(), expiry }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Present nothing (the ACME server changed: its certificates are loaded or ordered anew).
    pub(crate) fn clear(&self) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// The certificate presented now.
    pub fn leaf(&self) -> Option<CertInfo> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).as_ref().map(|(_, info)| info.clone())
    }

    /// The leaf's DER (for renewal information).
    pub(crate) fn leaf_der(&self) -> Option<CertificateDer<'static>> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).as_ref().and_then(|(k, _)| k.cert.first().cloned())
    }

    pub(crate) fn status(&self) -> Status {
        self.status.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn set_status(&self, f: impl FnOnce(&mut Status)) {
        f(&mut self.status.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// Present `pem` from the next handshake on, if it is a chain and key for this name that
    /// has not expired at `now`.
    pub(crate) fn install(&self, pem: &[u8], now: i64) -> Result<CertInfo, Unusable> {
        let (key, info) = self.parse(pem)?;
        if info.not_after <= now {
            return Err(Unusable(format!("expired at {}", info.not_after)));
        }
        self.expiry.set(info.not_after);
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Some((key, info.clone()));
        Ok(info)
    }

    /// [`Managed::install`] if `pem`'s certificate expires later than the one serving (another
    /// node's newer order); `None` when it does not.
    pub(crate) fn install_newer(&self, pem: &[u8], now: i64) -> Result<Option<CertInfo>, Unusable> {
        let (_, info) = self.parse(pem)?;
        if self.leaf().is_some_and(|serving| serving.not_after >= info.not_after) {
            return Ok(None);
        }
        self.install(pem, now).map(Some)
    }

    fn parse(&self, pem: &[u8]) -> Result<(Arc<CertifiedKey>, CertInfo), Unusable> {
        let chain = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Unusable(format!("invalid PEM: {e}")))?;
        let leaf = chain.first().ok_or_else(|| Unusable("no certificate".into()))?;
        let info = CertInfo::of(leaf).ok_or_else(|| Unusable("the certificate does not parse".into()))?;
        if !info.names.iter().any(|n| n.eq_ignore_ascii_case(&self.name)) {
            return Err(Unusable(format!("the certificate is for {:?}, not {}", info.names, self.name)));
        }
        let key = PrivateKeyDer::from_pem_slice(pem).map_err(|e| Unusable(format!("no usable key: {e}")))?;
        let signing = crate::tls::provider()
            .key_provider
            .load_private_key(key)
            .map_err(|e| Unusable(format!("unsupported key: {e}")))?;
        let certified = CertifiedKey::new(chain, signing);
        certified.keys_match().map_err(|e| Unusable(format!("the key does not match the certificate: {e}")))?;
        Ok((Arc::new(certified), info))
    }
}
