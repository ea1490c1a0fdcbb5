//! How a pool makes one connection: the [`Dial`] trait, and [`TlsDial`] (origin TCP + TLS).
//!
//! The pool's sizing, backoff, watchers and metrics do not care what the connection is; a
//! `Dial` says how to make one and which [`PoolKey`] it is made under. Standing HTTP/2 origin
//! connections (the `http` action) are another `Dial` over the same machinery.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::error::CloseReason;
use crate::metrics::ConnectFailure;
use crate::tls::ktls::Aligned;
use crate::tls::origin::PoolKey;
use crate::transport::dial::{self, ConnectError};
use crate::transport::Resolver;

/// Makes the connections of one pool.
pub trait Dial: Send + Sync + 'static {
    type Conn: AsyncRead + AsyncWrite + Unpin + Send + 'static;

    /// Everything that decides which clients may be given this pool's connections.
    fn key(&self) -> &PoolKey;

    /// Make one connection, ready for a client, within `timeout` per step.
    fn dial(&self, timeout: Duration) -> impl Future<Output = Result<Self::Conn, WarmError>> + Send;
}

/// Why an origin connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum WarmError {
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("origin certificate rejected: {0}")]
    Certificate(std::io::Error),
    #[error("origin TLS handshake failed: {0}")]
    Handshake(std::io::Error),
    #[error("origin TLS handshake timed out")]
    HandshakeTimeout,
    #[error("origin negotiated ALPN {got:?}, pool needs {want:?}")]
    AlpnMismatch { want: Option<String>, got: Option<String> },
    #[error("origin is failing; not connecting until the backoff ends")]
    Backoff,
}

impl WarmError {
    /// Nothing came back from the origin before the timeout: it may be slow, not gone (see
    /// [`super::backoff::Connects::refusing`]).
    pub fn silent(&self) -> bool {
        matches!(self, Self::HandshakeTimeout | Self::Connect(ConnectError::Timeout))
    }

    /// How the connect failed, for `origin_connect_failures`. A handshake the origin cut
    /// short (a reset, or a close before it finished) is `reset`: the origin answered "no", as
    /// a refusal does, rather than failing TLS.
    pub fn failure(&self) -> ConnectFailure {
        match self {
            Self::Connect(e) => e.failure(),
            Self::Certificate(_) => ConnectFailure::Certificate,
            Self::Handshake(e) if cut_short(e) => ConnectFailure::Reset,
            Self::Handshake(_) => ConnectFailure::Tls,
            Self::HandshakeTimeout => ConnectFailure::Timeout,
            Self::AlpnMismatch { .. } => ConnectFailure::Alpn,
            // Not a connect (none was tried), so never counted; a pool's `take` says it.
            Self::Backoff => ConnectFailure::Refused,
        }
    }

    /// The metric label and the client connection's close reason.
    pub fn close_reason(&self) -> CloseReason {
        match self {
            Self::Connect(e) => e.close_reason(),
            Self::Certificate(_) => CloseReason::OriginCertificate,
            Self::Handshake(_) => CloseReason::OriginTls,
            Self::HandshakeTimeout => CloseReason::OriginTimeout,
            Self::AlpnMismatch { .. } => CloseReason::AlpnMismatch,
            Self::Backoff => CloseReason::OriginBackoff,
        }
    }
}

/// Origin TLS connections, handshaked with exactly the key's ALPN.
pub struct TlsDial {
    pub key: PoolKey,
    pub connector: TlsConnector,
    pub server_name: ServerName<'static>,
    pub resolver: Arc<Resolver>,
}

impl Dial for TlsDial {
    /// Record-aligned reads when the key says the session may move to the kernel.
    type Conn = TlsStream<Aligned<TcpStream>>;

    fn key(&self) -> &PoolKey {
        &self.key
    }

    async fn dial(&self, timeout: Duration) -> Result<Self::Conn, WarmError> {
        self.dial_with(timeout, None).await
    }
}

impl TlsDial {
    /// [`Dial::dial`], the socket using the congestion control `congestion` (`None`: the
    /// system's).
    pub(crate) async fn dial_with(
        &self,
        timeout: Duration,
        congestion: Option<&str>,
    ) -> Result<TlsStream<Aligned<TcpStream>>, WarmError> {
        let key = &self.key;
        // Fast Open would only shorten the warm-up, which no client waits for.
        let (tcp, _) = dial::connect_with(&self.resolver, &key.origin, false, timeout, &[], congestion).await?;
        let tls = tokio::time::timeout(
            timeout,
            self.connector
                .connect(self.server_name.clone(), Aligned::new(tcp, key.tls.as_ref().is_some_and(|t| t.ktls))),
        )
        .await
        .map_err(|_| WarmError::HandshakeTimeout)?
        .map_err(classify_tls_error)?;
        let got = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        if got != key.alpn {
            let show = |p: &Option<Vec<u8>>| p.as_deref().map(|p| String::from_utf8_lossy(p).into_owned());
            return Err(WarmError::AlpnMismatch { want: show(&key.alpn), got: show(&got) });
        }
        Ok(tls)
    }
}

/// The peer reset or closed the connection before the handshake finished.
pub(crate) fn cut_short(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    matches!(e.kind(), ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof)
}

/// Certificate problems are the operator's to fix and worth their own label; an origin that
/// refuses the offered ALPN (no_application_protocol) means "does not speak it".
fn classify_tls_error(e: std::io::Error) -> WarmError {
    match e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::InvalidCertificate(_)) => WarmError::Certificate(e),
        Some(rustls::Error::AlertReceived(rustls::AlertDescription::NoApplicationProtocol)) => {
            WarmError::AlpnMismatch { want: None, got: None }
        }
        _ => WarmError::Handshake(e),
    }
}
