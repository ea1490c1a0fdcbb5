//! The client-facing TLS server of a `prewarm` route.
//!
//! edgewarm has already read the ClientHello and knows the route before any TLS happens, so each
//! route gets its own `ServerConfig` — its certificate, its minimum version — rather than one
//! config resolving certificates by name. ALPN is decided before the handshake too: the first
//! protocol of the route's list that the client offers *and the origin has shown it speaks* on
//! warm connections; the config used for the handshake offers exactly that one protocol, so the
//! client can only agree to what the warm origin connection speaks.
//!
//! Session resumption: stateless tickets from the process's rotating keys
//! ([`super::process_keys`]: rotated every 6 hours, tickets live 12, handed over at upgrades)
//! plus an in-memory session cache, both per route and both owned by the
//! server ([`Resumption`]) rather than by one configuration: a SIGHUP keeps every client's
//! tickets valid. Per route, so a ticket issued under one route's certificate never resumes on
//! another's.
//!
//! 0-RTT (`early_data: safe | opaque`): rustls accepts early data only with stateful
//! resumption, so such a route issues no stateless tickets; its tickets name sessions in a
//! [`SessionStore`] of its own (single use: the anti-replay guarantee), shared by its ALPN
//! configurations and kept across reloads like the ticket keys. Its handshakes are driven by
//! [`super::early`], which hands early data over before the handshake completes; routes without
//! early data keep tokio-rustls's acceptor.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rustls::server::{ProducesTickets, ServerSessionMemoryCache, StoresServerSessions};
use rustls::ServerConfig;

use super::certinfo::CertInfo;
use super::pem;
use super::process_keys::ProcessKeys;
use super::sessions::SessionStore;
use super::ticket_keys::TicketKeys;
use crate::config::{EarlyData, Ktls, TerminateConfig, TlsVersion};
use crate::metrics::{EarlyMetrics, RouteLabel, RouteName};

#[derive(Debug)]
pub struct ClientTls {
    /// The route's ALPN list, in preference order.
    pub alpn: Vec<Vec<u8>>,
    /// One config per protocol in `alpn`, offering just that protocol.
    by_alpn: HashMap<Vec<u8>, Arc<ServerConfig>>,
    /// No ALPN negotiated.
    plain: Arc<ServerConfig>,
    /// Whether (and how) this route takes 0-RTT data.
    pub early_data: EarlyData,
    /// Whether sessions may move to the kernel (then rustls reads record-aligned and gives up
    /// its keys on request), and after how many relayed bytes for `auto`.
    pub ktls: Ktls,
    pub ktls_after: u64,
    /// Where the certificate comes from.
    cert: CertSource,
}

/// A route's certificate: its files, read at load; or the ACME server's, which a renewal
/// replaces without a reload.
#[derive(Debug)]
enum CertSource {
    /// The leaf's names, issuer and expiry (for metrics and `/certificates`).
    File(Option<CertInfo>),
    Acme(Arc<dyn LiveCert>),
}

/// A certificate that changes without a reload (an ACME route's): the resolver its handshakes
/// use, and what it is now.
pub trait LiveCert: rustls::server::ResolvesServerCert {
    fn leaf(&self) -> Option<CertInfo>;
}

/// Where `cert: acme` routes' certificates come from ([`crate::acme`]; here as a trait so TLS
/// does not depend on how certificates are ordered).
pub trait LiveCerts {
    fn certificate(&self, name: &str) -> Arc<dyn LiveCert>;
}

/// Session IDs remembered per route (TLS 1.2 clients without tickets); about 1 KiB each.
const SESSION_CACHE_SIZE: usize = 4096;

type RouteResumption = (Arc<dyn ProducesTickets>, Arc<dyn StoresServerSessions>);

/// How long a 0-RTT route's sessions are kept (its tickets say 24 h; past this they resume
/// nothing and the client does a full handshake).
const EARLY_SESSION_TTL: std::time::Duration = std::time::Duration::from_secs(2 * 3600);

/// Ticket keys and session caches by route name, for the life of the server.
#[derive(Default)]
pub struct Resumption {
    routes: Mutex<HashMap<String, RouteResumption>>,
    /// The ticket keys when no file names them: rotated, and handed over at upgrades.
    process_keys: Arc<ProcessKeys>,
    /// The session stores of routes that accept 0-RTT.
    early: Mutex<HashMap<String, Arc<SessionStore>>>,
    metrics: EarlyMetrics,
}

impl std::fmt::Debug for Resumption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resumption").finish_non_exhaustive()
    }
}

impl Resumption {
    /// With the server's metrics (replays and evictions are counted there).
    pub fn new(metrics: EarlyMetrics) -> Self {
        Self { metrics, ..Self::default() }
    }

    /// The 0-RTT session store of a route, made on first use.
    fn early_store(&self, name: &RouteName) -> Arc<SessionStore> {
        self.store(&name.to_string(), name)
    }

    /// The single-use session store named `key` (a route's; an HTTP/3 listener's), counted
    /// under route `label`; made on first use, kept for the life of the server.
    pub(crate) fn store(&self, key: &str, label: &RouteName) -> Arc<SessionStore> {
        let mut stores = self.early.lock().unwrap_or_else(|p| p.into_inner());
        stores
            .entry(key.to_string())
            .or_insert_with(|| {
                let label = RouteLabel { route: label.clone() };
                Arc::new(SessionStore::new(
                    EARLY_SESSION_TTL,
                    self.metrics.replays.get_or_create(&label).clone(),
                    self.metrics.evictions.get_or_create(&label).clone(),
                ))
            })
            .clone()
    }

    /// Every 0-RTT store's sessions, for the next process; these stores resume nothing after.
    pub fn hand_over_sessions(&self) -> Vec<(String, super::sessions::Exported)> {
        let stores = self.early.lock().unwrap_or_else(|p| p.into_inner());
        stores.iter().map(|(name, store)| (name.clone(), store.hand_over())).collect()
    }

    /// The previous process's sessions, into the stores of the same name; how many.
    pub fn adopt_sessions(&self, handed: &[(String, super::sessions::Exported)]) -> usize {
        let stores = self.early.lock().unwrap_or_else(|p| p.into_inner());
        handed.iter().filter_map(|(name, e)| Some(stores.get(name)?.adopt(e))).sum()
    }

    /// The process's ticket keys (rotation, upgrades).
    pub fn process_keys(&self) -> &Arc<ProcessKeys> {
        &self.process_keys
    }

    /// The route's ticketer and session cache, made on first use.
    fn for_route(&self, name: &str) -> Result<RouteResumption, rustls::Error> {
        let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = routes.get(name) {
            return Ok(r.clone());
        }
        let made: RouteResumption =
            (self.process_keys.for_route(name), ServerSessionMemoryCache::new(SESSION_CACHE_SIZE));
        routes.insert(name.to_string(), made.clone());
        Ok(made)
    }
}

impl ClientTls {
    /// `name` is the route's label (its normalised SNI pattern): the key of its resumption
    /// state.
    pub fn new(
        route: &TerminateConfig,
        name: &RouteName,
        resumption: &Resumption,
        ticket_keys: Option<&TicketKeys>,
        acme: &dyn LiveCerts,
    ) -> Result<Self, (&'static str, String)> {
        let versions: &[&rustls::SupportedProtocolVersion] = match route.min_tls {
            TlsVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
            TlsVersion::Tls13 => &[&rustls::version::TLS13],
        };
        let base = ServerConfig::builder_with_provider(super::provider())
            .with_protocol_versions(versions)
            .map_err(|e| ("min_tls", e.to_string()))?
            .with_no_client_auth();
        let (mut base, cert) = if route.cert_from_acme() {
            let live = acme.certificate(&name.to_string());
            (base.with_cert_resolver(live.clone()), CertSource::Acme(live))
        } else {
            let (Some(cert_path), Some(key_path)) = (&route.cert, &route.key) else {
                return Err(("cert", "required when a route terminates TLS".into()));
            };
            let certs = pem::read(cert_path).and_then(|f| pem::certs(&f, cert_path)).map_err(|e| ("cert", e))?;
            let leaf = certs.first().and_then(CertInfo::of);
            let key = pem::read(key_path).and_then(|f| pem::key(&f, key_path)).map_err(|e| ("key", e))?;
            let base = base
                .with_single_cert(certs, key)
                .map_err(|e| ("key", format!("does not match the certificate or is unsupported: {e}")))?;
            (base, CertSource::File(leaf))
        };
        if route.early_data == EarlyData::Off {
            (base.ticketer, base.session_storage) = resumption.for_route(name).map_err(|e| ("cert", e.to_string()))?;
            if let Some(keys) = ticket_keys {
                // The fleet's keys, so tickets resume on any node holding the same file.
                base.ticketer = keys.for_route(name);
            }
        } else {
            // Stateful tickets only (the builder's default ticketer issues none): rustls
            // refuses early data on stateless resumption.
            base.session_storage = resumption.early_store(name);
            base.max_early_data_size = route.max_early_data_size;
            // The response to an early request may go out right after the server's Finished.
            base.send_half_rtt_data = true;
        }
        base.enable_secret_extraction = route.ktls != Ktls::Off;
        let alpn: Vec<Vec<u8>> = route.alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
        let by_alpn = alpn
            .iter()
            .map(|p| {
                let mut c = base.clone();
                c.alpn_protocols = vec![p.clone()];
                (p.clone(), Arc::new(c))
            })
            .collect();
        Ok(Self {
            alpn,
            by_alpn,
            plain: Arc::new(base),
            early_data: route.early_data,
            ktls: route.ktls,
            ktls_after: route.ktls_after,
            cert,
        })
    }

    /// The certificate presented now: its names, issuer and expiry.
    pub fn leaf(&self) -> Option<CertInfo> {
        match &self.cert {
            CertSource::File(leaf) => leaf.clone(),
            CertSource::Acme(managed) => managed.leaf(),
        }
    }

    /// The certificate comes from the ACME server.
    pub fn is_acme(&self) -> bool {
        matches!(self.cert, CertSource::Acme(_))
    }

    /// Whether a handshake can succeed: false while an ACME route waits for its certificate.
    pub fn has_certificate(&self) -> bool {
        match &self.cert {
            CertSource::File(_) => true,
            CertSource::Acme(managed) => managed.leaf().is_some(),
        }
    }

    /// The protocol to negotiate: the route's first that the client offers and `origin_speaks`.
    pub fn choose(&self, offered: &[String], origin_speaks: impl Fn(&[u8]) -> bool) -> Option<Vec<u8>> {
        self.alpn.iter().find(|p| offered.iter().any(|o| o.as_bytes() == p.as_slice()) && origin_speaks(p)).cloned()
    }

    pub fn config(&self, alpn: Option<&[u8]>) -> Arc<ServerConfig> {
        alpn.and_then(|p| self.by_alpn.get(p)).unwrap_or(&self.plain).clone()
    }
}
