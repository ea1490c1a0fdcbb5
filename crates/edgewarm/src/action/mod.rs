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

use std::sync::Arc;
use std::time::Instant;

use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::accesslog::AccessLog;
use crate::error::CloseReason;
use crate::metrics::{Metrics, RouteMetrics};
use crate::peek::Hello;
use crate::relay::{End, Side};
use crate::route::{Route, RouteAction};
use crate::snapshot::Snapshot;

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
    /// Cancelled when shutdown begins: connections that can end gracefully (HTTP keep-alive
    /// between requests) should.
    pub stop: &'a CancellationToken,
    /// Cancelled when the shutdown grace period is over.
    pub cut: &'a CancellationToken,
    pub accepted: Instant,
}

/// Hand the connection to its route's action.
pub(crate) async fn serve(client: TcpStream, hello: Hello, ctx: &ConnCtx<'_>, log: &mut AccessLog) -> CloseReason {
    match &ctx.route.action {
        RouteAction::Reject => reject::serve(client, hello, ctx, log).await,
        RouteAction::Tunnel(route) => tunnel::serve(client, hello, route, ctx, log).await,
        RouteAction::Prewarm(route) => prewarm::serve(client, hello, route, ctx, log).await,
        RouteAction::Http(route) => self::http::serve(client, hello, route, ctx, log).await,
    }
}

/// A client TLS session terminated here, over the socket with the peeked hello replayed.
pub(crate) type ClientTlsStream = tokio_rustls::server::TlsStream<crate::transport::Rewind<TcpStream>>;

/// Terminate the client's TLS (routes that do: `prewarm`, `http`): the peeked hello is replayed
/// into rustls, which must finish within `timeouts.client_hello`. `alpn` is the one protocol
/// the handshake may agree to. Fills in the access log's TLS fields.
pub(crate) async fn terminate_tls(
    client: TcpStream,
    hello: Hello,
    tls: &crate::tls::client::ClientTls,
    alpn: Option<&[u8]>,
    ctx: &ConnCtx<'_>,
    log: &mut AccessLog,
) -> Result<ClientTlsStream, CloseReason> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.config(alpn));
    // Rewind frees the hello's buffer once rustls has read it.
    let handshake = acceptor.accept(crate::transport::Rewind::new(hello.bytes, client));
    let stream = match tokio::time::timeout(ctx.snapshot.timeouts.client_hello, handshake).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            log.detail = Some(e.to_string());
            return Err(CloseReason::ClientTls);
        }
        Err(_) => return Err(CloseReason::HelloTimeout),
    };
    log.alpn_selected = alpn.map(|p| String::from_utf8_lossy(p).into_owned());
    log.tls_version = stream.get_ref().1.protocol_version().map(|v| format!("{v:?}"));
    Ok(stream)
}

/// How a relay's end reads in the metrics and the access log (the same for every action).
pub(crate) fn relay_close_reason(end: End) -> CloseReason {
    match end {
        End::Done => CloseReason::Done,
        End::Idle => CloseReason::IdleTimeout,
        End::Reset(Side::Client) => CloseReason::ClientReset,
        End::Reset(Side::Origin) => CloseReason::OriginReset,
        End::Shutdown => CloseReason::Shutdown,
    }
}
