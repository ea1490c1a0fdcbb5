//! TLS for HTTP/3 (QUIC, RFC 9001): one rustls configuration per listener, whose certificate is
//! chosen per connection from the route the handshake's server name leads to.
//!
//! Over TCP each route has a rustls configuration of its own, picked after the ClientHello was
//! peeked. quinn takes one configuration per endpoint and starts the TLS session from the very
//! first packet, so here the route is looked up from inside the handshake instead: the
//! certificate resolver finds the route by name in the current snapshot (the same lookup as
//! TCP's) and presents that route's certificate. A name whose route is not `http` gets no
//! certificate, and the handshake fails.
//!
//! 0-RTT: QUIC requires early data to be offered as all or nothing (`max_early_data_size` of
//! `u32::MAX`), so every HTTP/3 ticket allows it; a route without `early_data: safe` makes its
//! connections wait for the handshake before reading a request
//! ([`super`]). The listener's sessions live in a single-use store, as 0-RTT
//! routes' do over TCP: a ticket resumes once, and a replayed first flight finds no session.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use rustls::server::{ClientHello, ResolvesServerCert, StoresServerSessions};
use rustls::sign::CertifiedKey;
use tokio::sync::watch;

use crate::route::RouteAction;
use crate::snapshot::Snapshot;
use crate::tls::sessions::SessionStore;

/// ALPN for HTTP/3 (RFC 9114 §3.1).
const H3: &[u8] = b"h3";
/// Unidirectional streams a client may open: HTTP/3's control stream and QPACK's two, with room
/// for the reserved (grease) types clients may send.
const MAX_UNI_STREAMS: u32 = 16;

/// The certificate of the route a handshake's name leads to, in the snapshot current at the
/// handshake.
struct RouteCerts {
    snapshot: watch::Receiver<Arc<Snapshot>>,
}

impl std::fmt::Debug for RouteCerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteCerts").finish_non_exhaustive()
    }
}

impl ResolvesServerCert for RouteCerts {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let snapshot = self.snapshot.borrow().clone();
        let route = snapshot.routes.lookup(hello.server_name())?;
        match &route.action {
            RouteAction::Http(http) => http.client.config(None).cert_resolver.resolve(hello),
            _ => None,
        }
    }
}

/// What a QUIC listener is built with.
pub(crate) struct QuicSettings {
    /// HTTP requests a client may have open at once (as HTTP/2's stream limit).
    pub streams: u32,
    /// A connection with no packet either way for this long is closed (`timeouts.idle`).
    pub idle: Duration,
    /// QUIC connections (handshaking or established) at once (`max_connections`).
    pub max_connections: usize,
    /// `quic_congestion`: `bbr`, `cubic` or `reno`; quinn's default (cubic) if unset.
    pub congestion: Option<String>,
}

/// The listener's quinn server configuration; 0-RTT accepted is counted in `zero_rtt_accepted`.
pub(crate) fn server_config(
    snapshot: watch::Receiver<Arc<Snapshot>>,
    sessions: Arc<dyn StoresServerSessions>,
    zero_rtt_accepted: Counter,
    settings: &QuicSettings,
) -> Result<quinn::ServerConfig, String> {
    let mut tls = rustls::ServerConfig::builder_with_provider(crate::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(RouteCerts { snapshot }));
    tls.alpn_protocols = vec![H3.to_vec()];
    // Stateful tickets only (rustls offers 0-RTT only then), kept in a single-use store.
    tls.session_storage = sessions;
    tls.max_early_data_size = u32::MAX;
    tls.send_tls13_tickets = 2;
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls).map_err(|e| e.to_string())?;
    let crypto = super::zero_rtt::Counting::new(Arc::new(crypto), zero_rtt_accepted);
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    let idle = quinn::IdleTimeout::try_from(settings.idle).map_err(|e| format!("timeouts.idle: {e}"))?;
    transport
        .max_concurrent_bidi_streams(settings.streams.into())
        .max_concurrent_uni_streams(MAX_UNI_STREAMS.into())
        .max_idle_timeout(Some(idle))
        .congestion_controller_factory(crate::transport::quic_cc::controller(settings.congestion.as_deref()));
    server.transport_config(Arc::new(transport));
    // One address-validation token (NEW_TOKEN) per connection, not quinn's two: a browser keeps
    // one per origin, and it is all a returning client needs to skip the Retry of a flood.
    // Each token costs a key derivation and an encryption (twice when its packet is full).
    let mut tokens = quinn_proto::ValidationTokenConfig::default();
    tokens.sent(1);
    server.validation_token_config(tokens);
    server.token_key(Arc::new(TokenKeys::new()?));
    server.max_incoming(settings.max_connections);
    Ok(server)
}

/// The keys of the listener's address-validation tokens (Retry's and NEW_TOKEN's). quinn seals
/// each token with an AES-256-GCM key of its own, HKDF-Expand of a process-wide secret over the
/// token's random bytes; so does this, with the secret's HMAC keyed once. quinn's own (aws-lc's
/// one-shot HKDF, which extracts and keys afresh each time) cost 22k instructions a token, and a
/// connection meets about three: its NEW_TOKEN, sealed twice when its first packet is full, and
/// the token a returning client brings (docs/benchmarks.md). The secret is random per process,
/// as quinn's is: after an upgrade, tokens from before are not honoured, and their clients
/// are validated as new ones.
struct TokenKeys(aws_lc_rs::hmac::Key);

impl TokenKeys {
    fn new() -> Result<Self, String> {
        let mut secret = [0; 32];
        aws_lc_rs::rand::fill(&mut secret).map_err(|_| "no random bytes for QUIC's token key".to_string())?;
        Ok(Self(aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, &secret)))
    }
}

impl quinn_proto::crypto::HandshakeTokenKey for TokenKeys {
    fn aead_from_hkdf(&self, random_bytes: &[u8]) -> Box<dyn quinn_proto::crypto::AeadKey> {
        // HKDF-Expand (RFC 5869) for one block: T(1) = HMAC(secret, info | 0x01).
        let mut t = aws_lc_rs::hmac::Context::with_key(&self.0);
        t.update(random_bytes);
        t.update(&[1]);
        let key = aws_lc_rs::aead::UnboundKey::new(&aws_lc_rs::aead::AES_256_GCM, t.sign().as_ref())
            .expect("SHA-256's output is an AES-256 key");
        Box::new(aws_lc_rs::aead::LessSafeKey::new(key))
    }
}

/// The listener's single-use session store (the server's, so an upgrade can hand it over),
/// counting the sessions it gives back for resumption in `resumed` and the tickets it cannot
/// honour in `refused`.
pub(crate) fn sessions(store: Arc<SessionStore>, resumed: Counter, refused: Counter) -> Arc<dyn StoresServerSessions> {
    Arc::new(Resumed { store, resumed, refused })
}

/// A session store that counts resumptions: every session taken back is a returning client
/// resuming (and, over QUIC, free to send 0-RTT), which quinn does not report itself. A ticket
/// not found (taken before: a replay; expired; issued elsewhere) means a full handshake, and
/// any 0-RTT the client sent on it is dropped unread.
#[derive(Debug)]
struct Resumed {
    store: Arc<SessionStore>,
    resumed: Counter,
    refused: Counter,
}

impl StoresServerSessions for Resumed {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.store.put(key, value)
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.store.get(key)
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        let taken = self.store.take(key);
        match taken {
            Some(_) => self.resumed.inc(),
            None => self.refused.inc(),
        };
        taken
    }

    fn can_cache(&self) -> bool {
        self.store.can_cache()
    }
}
