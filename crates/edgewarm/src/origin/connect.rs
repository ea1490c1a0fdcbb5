//! How the request kinds over TCP (HTTP/2 sets, HTTP/1.1 pools; the HTTP/3 kind dials QUIC,
//! [`super::h3`]) make a connection to their origin,
//! whatever carries it: [`Connect`], an object-safe [`Dial`] whose connection is a boxed byte
//! stream. TLS ([`TlsDial`]) and cleartext ([`super::cleartext`]) implement it, so a
//! protocol's set is written once and never learns what its bytes ride on.
//!
//! (`prewarm` pools keep the typed [`Dial`]: they hand the TLS session itself to a client, and
//! may move it to the kernel.)

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsConnector;

use super::dial::{Dial, TlsDial, WarmError};
use super::seam::BoxFuture;
use crate::tls::origin::{OriginTls, PoolKey};
use crate::transport::Resolver;

/// A byte stream to an origin.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

/// A connection to an origin, ready for its protocol's handshake.
pub(crate) type OriginIo = Box<dyn Io>;

/// What carries a set's bytes: part of its identity (a cleartext set never serves a route
/// that asked for TLS), and its `transport` in `/origins`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Transport {
    /// TCP and TLS, the certificate verified by `origin_tls`.
    Tls,
    /// TCP without TLS (`upstream.tls: false`).
    Cleartext,
    /// QUIC (always TLS 1.3).
    Quic,
}

/// Makes the connections of one request kind's set.
pub(crate) trait Connect: Send + Sync + 'static {
    /// Everything that decides which requests may ride this set's connections.
    fn key(&self) -> &PoolKey;

    /// Whether the bytes are encrypted (TLS) or not (cleartext).
    fn transport(&self) -> Transport;

    /// Make one connection within `timeout` per step, its socket using the congestion control
    /// `congestion` (`None`: the system's).
    fn connect<'a>(
        &'a self,
        timeout: Duration,
        congestion: Option<&'a str>,
    ) -> BoxFuture<'a, Result<OriginIo, WarmError>>;

    /// The same origin, for a connection that will speak HTTP/1.1 whatever this set speaks
    /// (a protocol upgrade): over TLS, no ALPN offered.
    fn for_http1(&self) -> Arc<dyn Connect>;
}

/// The request kinds' sets keep their connector behind the same [`Dial`] as every standing set.
impl Dial for Arc<dyn Connect> {
    type Conn = OriginIo;

    fn key(&self) -> &PoolKey {
        Connect::key(&**self)
    }

    async fn dial(&self, timeout: Duration) -> Result<OriginIo, WarmError> {
        self.connect(timeout, None).await
    }
}

/// Origin TLS for a request kind: `route`'s origin, offering `alpn`.
pub(crate) struct TlsConnect {
    dial: TlsDial,
    origin: Arc<OriginTls>,
}

impl TlsConnect {
    pub(crate) fn new(origin: Arc<OriginTls>, alpn: Option<&[u8]>, resolver: Arc<Resolver>) -> Self {
        Self { dial: TlsDial::new(&origin, alpn, resolver), origin }
    }
}

impl Connect for TlsConnect {
    fn key(&self) -> &PoolKey {
        &self.dial.key
    }

    fn transport(&self) -> Transport {
        Transport::Tls
    }

    fn connect<'a>(
        &'a self,
        timeout: Duration,
        congestion: Option<&'a str>,
    ) -> BoxFuture<'a, Result<OriginIo, WarmError>> {
        Box::pin(async move { Ok(Box::new(self.dial.dial_with(timeout, congestion).await?) as OriginIo) })
    }

    fn for_http1(&self) -> Arc<dyn Connect> {
        // No ALPN: HTTP/1.1 is the default without it, and WebSocket servers often do not
        // negotiate ALPN at all (an offer of `http/1.1` they ignore would fail the check).
        Arc::new(Self::new(self.origin.clone(), None, self.dial.resolver.clone()))
    }
}

impl TlsDial {
    /// How to make `origin`'s TLS connections offering exactly `alpn`.
    pub(crate) fn new(origin: &OriginTls, alpn: Option<&[u8]>, resolver: Arc<Resolver>) -> Self {
        TlsDial {
            key: origin.key(alpn),
            connector: TlsConnector::from(origin.config(alpn)),
            server_name: origin.server_name.clone(),
            resolver,
        }
    }
}
