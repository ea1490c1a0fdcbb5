//! How the HTTP/3 kind makes a QUIC connection to its origin: [`QuicDial`], a client endpoint
//! per address family, its TLS (the route's `origin_tls`, offering `h3`), and transport
//! settings for a long link.
//!
//! A reconnect resumes with 0-RTT where the origin gave a ticket: the connection is usable at
//! once, for requests that are safe to replay ([`super::conn`] decides which ride it early).
//! The kind keeps its own session store, apart from the TCP kinds': a ticket from a TLS-over-TCP
//! handshake carries no QUIC transport parameters and cannot start 0-RTT.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quinn::crypto::rustls::QuicClientConfig;
use quinn::{Endpoint, TransportConfig, VarInt, ZeroRttAccepted};

use crate::origin::connect::Transport;
use crate::origin::dial::WarmError;
use crate::origin::request_kind::Dialer;
use crate::tls::origin::{OriginTls, PoolKey};
use crate::transport::dial::ConnectError;
use crate::transport::Resolver;

/// Flow-control windows toward the origin, as the HTTP/2 kind's (`h2::conn`): a window caps a
/// stream's throughput at window / RTT; 4 MiB over 100 ms is ~335 Mbit/s per stream.
const STREAM_WINDOW: u32 = 4 << 20;
const CONNECTION_WINDOW: u32 = 32 << 20;
/// Tickets kept per set (one origin name, so a few suffice; rustls keeps the newest).
const TICKETS: usize = 32;

/// A new QUIC connection, and, when it started with 0-RTT, what becomes of its early data.
pub(crate) struct Dialed {
    pub(crate) conn: quinn::Connection,
    pub(crate) early: Option<ZeroRttAccepted>,
}

/// Makes the QUIC connections of one HTTP/3 set.
pub(crate) struct QuicDial {
    key: PoolKey,
    server_name: String,
    resolver: Arc<Resolver>,
    /// `None` if the route's TLS cannot carry QUIC (it lacks TLS 1.3's AES-128-GCM: never
    /// with the default provider); every connect then fails saying so.
    tls: Option<Arc<QuicClientConfig>>,
    /// One client endpoint (one UDP socket) per address family, bound at first use: every
    /// connection of the set shares it, as a browser's do.
    endpoints: Mutex<[Option<Endpoint>; 2]>,
}

/// Its sets' identity: the origin's key (offering `h3`), over QUIC.
impl Dialer for QuicDial {
    fn key(&self) -> &PoolKey {
        &self.key
    }

    fn transport(&self) -> Transport {
        Transport::Quic
    }
}

impl QuicDial {
    pub(crate) fn new(origin: &OriginTls, resolver: Arc<Resolver>) -> Self {
        let mut tls = (*origin.config(Some(b"h3"))).clone();
        tls.enable_early_data = true;
        tls.resumption = rustls::client::Resumption::in_memory_sessions(TICKETS);
        let tls = QuicClientConfig::try_from(tls).ok().map(Arc::new);
        let key = origin.key(Some(b"h3"));
        let server_name = key.tls.as_ref().map(|t| t.server_name.clone()).unwrap_or_default();
        Self { server_name, key, resolver, tls, endpoints: Mutex::default() }
    }

    /// Connect within `timeout`: with 0-RTT if a ticket allows (returned at once), else after
    /// the handshake. `congestion`: `bbr`, `cubic` or `reno` (checked at load), or quinn's
    /// default (cubic); `keepalive`: the PING interval that keeps the path and its NAT state
    /// alive, and proves the origin is there (a connection silent for 3 of them is dead);
    /// `zero_rtt`: return at once in 0-RTT where a ticket allows.
    pub(crate) async fn connect(
        &self,
        timeout: Duration,
        congestion: Option<&str>,
        keepalive: Duration,
        zero_rtt: bool,
    ) -> Result<Dialed, WarmError> {
        let addrs =
            self.resolver.resolve(&self.key.origin).await.map_err(|e| WarmError::Connect(ConnectError::Resolve(e)))?;
        let addr = *addrs.first().ok_or_else(|| {
            WarmError::Connect(ConnectError::Resolve(std::io::Error::other("no address for the origin")))
        })?;
        let tls = self.tls.clone().ok_or_else(|| {
            WarmError::Handshake(std::io::Error::other("the origin's TLS settings cannot carry QUIC"))
        })?;
        let mut config = quinn::ClientConfig::new(tls);
        config.transport_config(Arc::new(transport(congestion, keepalive)));
        let endpoint = self.endpoint(addr).map_err(|e| WarmError::Connect(ConnectError::Unreachable(e)))?;
        let connecting = endpoint
            .connect_with(config, addr, &self.server_name)
            .map_err(|e| WarmError::Handshake(std::io::Error::other(e)))?;
        let early = if zero_rtt { connecting.into_0rtt() } else { Err(connecting) };
        match early {
            Ok((conn, accepted)) => Ok(Dialed { conn, early: Some(accepted) }),
            Err(connecting) => match tokio::time::timeout(timeout, connecting).await {
                Err(_) => Err(WarmError::HandshakeTimeout),
                Ok(Err(e)) => Err(handshake_error(e)),
                Ok(Ok(conn)) => Ok(Dialed { conn, early: None }),
            },
        }
    }

    /// The set's endpoint for `addr`'s family, bound on first use.
    fn endpoint(&self, addr: SocketAddr) -> std::io::Result<Endpoint> {
        let mut endpoints = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        let (slot, any) = match addr {
            SocketAddr::V4(_) => (0, SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))),
            SocketAddr::V6(_) => (1, SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))),
        };
        if let Some(e) = &endpoints[slot] {
            return Ok(e.clone());
        }
        let endpoint = Endpoint::client(any)?;
        endpoints[slot] = Some(endpoint.clone());
        Ok(endpoint)
    }
}

/// A refused certificate reads as such in `/origins` and the log; the rest as a failed handshake.
fn handshake_error(e: quinn::ConnectionError) -> WarmError {
    let text = e.to_string();
    if text.contains("certificate") {
        WarmError::Certificate(std::io::Error::other(text))
    } else if matches!(e, quinn::ConnectionError::TimedOut) {
        WarmError::HandshakeTimeout
    } else {
        WarmError::Handshake(std::io::Error::other(text))
    }
}

/// How long a standing connection may hear nothing from the origin before it is taken for
/// dead and replaced (at least three PTOs: quinn's floor). Its in-flight requests then fail as
/// lost: idempotent ones without a body go again on another connection.
pub(crate) const DEAD_AFTER: Duration = Duration::from_secs(1);

/// Transport settings for a long, possibly lossy link.
fn transport(congestion: Option<&str>, keepalive: Duration) -> TransportConfig {
    let mut t = TransportConfig::default();
    t.stream_receive_window(VarInt::from_u32(STREAM_WINDOW));
    t.receive_window(VarInt::from_u32(CONNECTION_WINDOW));
    t.send_window(u64::from(CONNECTION_WINDOW));
    // The origin opens no request streams toward us; it opens its three HTTP/3 unidirectional
    // ones (control, QPACK encoder and decoder), within quinn's default.
    t.max_concurrent_bidi_streams(VarInt::from_u32(0));
    // A far end that crashed sends nothing to say so (its successor's stateless resets need a
    // key it shares, `tls.ticket_keys`), so silence is the only sign: PINGs often enough that
    // three unanswered ones take about a second, whatever `keepalive` says. quinn never lets
    // the idle timeout fall below three PTOs, so a slow or lossy link is not taken for a dead one.
    t.keep_alive_interval(Some(keepalive.min(DEAD_AFTER / 3)));
    t.max_idle_timeout((keepalive * 3).min(DEAD_AFTER).try_into().ok());
    t.congestion_controller_factory(crate::transport::quic_cc::controller(congestion));
    t
}
