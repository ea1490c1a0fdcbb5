//! What a connection does once its route is known: one module per route action.
//!
//! Every action has the same shape, `serve(client, hello, &ConnCtx, &mut AccessLog) ->
//! CloseReason`: it owns the client socket from here on, fills in the parts of the access log
//! it knows, and says why the connection ended. The listener does not know which actions exist;
//! a new one is a new file here and one arm in [`serve`].

pub(crate) mod http;
pub(crate) mod prewarm;
pub(crate) mod reject;
pub(crate) mod tunnel;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::accesslog::AccessLog;
use crate::config::{EarlyData, Ktls};
use crate::error::CloseReason;
use crate::metrics::{Metrics, RouteLabel, RouteMetrics};
use crate::peek::Hello;
use crate::relay::{End, Side};
use crate::route::{Route, RouteAction};
use crate::snapshot::Snapshot;
use crate::tls::early::{AcceptError, Handshake};
use crate::tls::ktls::Aligned;
use crate::transport::Rewind;

/// What one connection needs, and nothing more. Everything here was resolved before the
/// connection arrived (the route's metric handles, its pools): serving a connection takes no
/// lock shared with other connections.
pub(crate) struct ConnCtx<'a> {
    /// The configuration as it was when the connection was accepted.
    pub snapshot: &'a Arc<Snapshot>,
    pub route: &'a Route,
    pub route_metrics: &'a RouteMetrics,
    pub metrics: &'a Metrics,
    /// The listener's peers are trusted load balancers (`listeners[].trust_forwarded`).
    pub trust_forwarded: bool,
    /// The listener's port the connection arrived on.
    pub port: u16,
    /// Cancelled when shutdown begins: connections that can end gracefully (HTTP keep-alive
    /// between requests) should.
    pub stop: &'a CancellationToken,
    /// Cancelled when the shutdown grace period is over.
    pub cut: &'a CancellationToken,
    pub accepted: Instant,
    /// The TCP listener's reclaimable connections and this client's key in them: an HTTP
    /// connection registers, so that a full listener can ask it to finish while it is idle.
    pub idle: Option<(&'a Arc<crate::limits::reclaim::Idle>, u128)>,
    /// `Alt-Svc` when this listener serves HTTP/3 too (its drivers decide how often: [`crate::http::client::alt_svc`]).
    pub alt_svc: Option<::http::HeaderValue>,
    /// The listener's header policy (`listeners[].headers`), as of `snapshot`.
    pub headers: Arc<crate::config::HeaderPolicy>,
}

/// Hand the connection to its route's action.
pub(crate) async fn serve(client: TcpStream, hello: Box<Hello>, ctx: &ConnCtx<'_>, log: &mut AccessLog) -> CloseReason {
    // An ACME server validating a name (TLS-ALPN-01): answered here, on a route whose
    // certificate this node presents; a tunnel's origin answers its own.
    let terminating = matches!(ctx.route.action, RouteAction::Prewarm(_) | RouteAction::Http(_));
    if terminating && hello.alpn.iter().any(|p| p == crate::acme::challenge::ACME_TLS_ALPN) {
        let timeout = ctx.snapshot.timeouts.client_hello;
        return ctx.snapshot.acme.challenges().answer(client, hello, timeout, &mut log.detail).await;
    }
    match &ctx.route.action {
        RouteAction::Reject => reject::serve(client, hello, ctx, log).await,
        RouteAction::Tunnel(route) => tunnel::serve(client, hello, route, ctx, log).await,
        // Boxed: their state (TLS sessions, hyper's connection) is many kilobytes, and an
        // unboxed arm would make every connection's task that large, blind tunnels included
        // (the most numerous, often idle); docs/benchmarks-history.md has the sizes.
        RouteAction::Prewarm(route) => Box::pin(prewarm::serve(client, hello, route, ctx, log)).await,
        RouteAction::Http(route) => Box::pin(self::http::serve(client, hello, route, ctx, log)).await,
    }
}

/// tokio-rustls's server stream over the client socket: the peeked hello replayed first, reads
/// record-aligned on routes that may hand the session to the kernel.
pub(crate) type ClientTlsStream = tokio_rustls::server::TlsStream<Aligned<Rewind<TcpStream>>>;

/// A client TLS session terminated here: tokio-rustls over the socket with the peeked hello
/// replayed, or, on routes that accept 0-RTT, edgewarm's own driver ([`crate::tls::early`]).
pub(crate) enum ClientIo {
    Rustls(Box<ClientTlsStream>),
    Early(crate::tls::early::EarlyStream),
}

impl ClientIo {
    /// The handshake's progress when the stream may be handed over before it completes (early
    /// data accepted); `None` when it completed before.
    pub(crate) fn pending_handshake(&self) -> Option<Arc<Handshake>> {
        match self {
            Self::Early(s) if !s.handshake().is_done() => Some(s.handshake()),
            _ => None,
        }
    }
}

macro_rules! each {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            ClientIo::Rustls($s) => {
                let $s = Pin::new(&mut **$s);
                $e
            }
            ClientIo::Early($s) => {
                let $s = Pin::new($s);
                $e
            }
        }
    };
}

impl AsyncRead for ClientIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        each!(self, s => s.poll_read(cx, buf))
    }
}

impl AsyncWrite for ClientIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        each!(self, s => s.poll_write(cx, buf))
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        each!(self, s => s.poll_flush(cx))
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        each!(self, s => s.poll_shutdown(cx))
    }
}

/// User-space TLS records either way: never spliced.
impl crate::relay::Relayable for ClientIo {}

/// Terminate the client's TLS (routes that do: `prewarm`, `http`): the peeked hello is replayed
/// into rustls, and the handshake must finish within `timeouts.client_hello`. `alpn` is the one
/// protocol the handshake may agree to. On a route that accepts 0-RTT, a client whose early
/// data rustls accepted gets its stream at once, before its Finished has arrived (see
/// [`ClientIo::pending_handshake`]). Fills in the access log's TLS fields.
pub(crate) async fn terminate_tls(
    client: TcpStream,
    hello: Box<Hello>,
    tls: &crate::tls::client::ClientTls,
    alpn: Option<&[u8]>,
    ctx: &ConnCtx<'_>,
    log: &mut AccessLog,
) -> Result<ClientIo, CloseReason> {
    let config = tls.config(alpn);
    let timeout = ctx.snapshot.timeouts.client_hello;
    let (stream, version) = if tls.early_data == EarlyData::Off {
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        // Rewind frees the hello's buffer once rustls has read it.
        let io = Aligned::new(Rewind::new(hello.bytes, client), tls.ktls != Ktls::Off);
        let handshake = acceptor.accept(io);
        match tokio::time::timeout(timeout, handshake).await {
            Ok(Ok(stream)) => {
                let version = stream.get_ref().1.protocol_version();
                (ClientIo::Rustls(Box::new(stream)), version)
            }
            Ok(Err(e)) => return Err(refused(tls, e.to_string(), log)),
            Err(_) => return Err(CloseReason::HelloTimeout),
        }
    } else {
        match crate::tls::early::accept(config, &hello.bytes, client, timeout).await {
            Ok((stream, early)) => {
                if early {
                    ctx.metrics.early.accepted.get_or_create(&RouteLabel { route: ctx.route.name.clone() }).inc();
                    log.early_data = true;
                }
                let version = stream.protocol_version();
                (ClientIo::Early(stream), version)
            }
            Err(AcceptError::Timeout) => return Err(CloseReason::HelloTimeout),
            Err(e) => return Err(refused(tls, e.to_string(), log)),
        }
    };
    log.alpn_selected = alpn.map(|p| String::from_utf8_lossy(p).into_owned());
    log.tls_version = version.map(|v| format!("{v:?}"));
    Ok(stream)
}

/// Why a handshake failed: a `cert: acme` route still waiting for its certificate (rustls sent
/// the client an alert), or the client's TLS.
fn refused(tls: &crate::tls::client::ClientTls, error: String, log: &mut AccessLog) -> CloseReason {
    if tls.has_certificate() {
        log.detail = Some(error);
        CloseReason::ClientTls
    } else {
        log.detail =
            Some("no certificate yet: the route's ACME order is pending or failing (see /certificates)".into());
        CloseReason::NoCertificate
    }
}

/// How a relay's end reads in the metrics and the access log (the same for every action).
pub(crate) fn relay_close_reason(end: End) -> CloseReason {
    match end {
        End::Done => CloseReason::Done,
        End::Idle => CloseReason::IdleTimeout,
        End::Reset(Side::Client) => CloseReason::ClientReset,
        End::Reset(Side::Origin) => CloseReason::OriginReset,
        End::Shutdown => CloseReason::Shutdown,
        End::KeyUpdate(_) => CloseReason::KtlsKeyUpdate,
    }
}
