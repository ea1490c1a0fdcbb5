//! `action: http`: terminate TLS, then hand the connection to the HTTP core's driver for the
//! protocol the client chose by ALPN ([`crate::http::client`]); every request goes through the
//! one request service ([`crate::http::service`]) to the route's origin. HTTP/3 connections
//! come here from the QUIC listener with TLS already done ([`serve_quic`]).

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio_util::task::TaskTracker;

use super::{terminate_tls, ConnCtx};
use crate::accesslog::AccessLog;
use crate::error::CloseReason;
use crate::http::client::alt_svc::AltSvc;
use crate::http::client::{self, Ended};
use crate::http::service::{Conn, Service};
use crate::limits::reclaim::Activity;
use crate::metrics::ClientProtocol;
use crate::peek::Hello;
use crate::route::HttpRoute;
use crate::tls::handshake::EarlyData;
use crate::transport::batch::TurnCount;
use crate::transport::idle::IdleTimeout;
use crate::transport::Batched;

pub(crate) async fn serve(
    client: TcpStream,
    hello: Box<Hello>,
    route: &Arc<HttpRoute>,
    ctx: &ConnCtx<'_>,
    log: &mut AccessLog,
) -> CloseReason {
    // The client may speak either protocol, whatever the origin side speaks.
    let alpn = route.client.choose(&hello.alpn, |_| true);
    let tls = match terminate_tls(client, hello, &route.client, alpn.as_deref(), ctx, log).await {
        Ok(tls) => tls,
        Err(reason) => return reason,
    };
    let handshake = tls.pending_handshake().map(|h| h as Arc<dyn EarlyData>);
    let h2 = alpn.as_deref() == Some(b"h2".as_slice());
    let protocol = if h2 { ClientProtocol::Http2 } else { ClientProtocol::Http1 };
    // Finishing is asked of this connection alone when its full listener reclaims it, and of
    // all of them at shutdown (the child token follows its parent).
    let stop = ctx.stop.child_token();
    let upgrades = TaskTracker::new();
    let reclaim = ctx.idle.map(|(idle, client)| idle.register(client, stop.clone(), upgrades.clone()));
    let (_place, activity) = reclaim.map_or((None, None), |(place, activity)| (Some(place), Some(activity)));
    let Some((service, retired)) = service(route, ctx, log, handshake, protocol, (upgrades, activity)) else {
        return CloseReason::Internal;
    };
    // A client that moves no byte for `timeouts.idle` (silent between requests, or no longer
    // reading a response) is closed, releasing every origin stream it held.
    let tls = IdleTimeout::new(tls, ctx.snapshot.timeouts.idle);
    let alt_svc = AltSvc::over_tcp(ctx.alt_svc.clone());
    let ended = if h2 {
        // HTTP/2 writes are gathered: the responses of every stream ready in one poll of this
        // task leave in one write (transport::batch).
        let turns = TurnCount::default();
        let io = Batched::with_turns(tls, turns.clone());
        let mut serving = pin!(client::h2::serve(io, service.clone(), alt_svc, &stop, &retired, ctx.cut));
        poll_fn(|cx| {
            turns.tick();
            serving.as_mut().poll(cx)
        })
        .await
    } else {
        let header_timeout = ctx.snapshot.timeouts.client_hello;
        client::h1::serve(tls, service.clone(), alt_svc, header_timeout, &stop, &retired, ctx.cut).await
    };
    close(ended, &service, log)
}

/// An HTTP/3 connection whose QUIC handshake the listener accepted for this route
/// ([`crate::listener::quic`]): TLS is quinn's, so only the driver is left to pick. `handshake`
/// is the handshake still running when requests may arrive in 0-RTT data.
pub(crate) async fn serve_quic(
    quic: crate::transport::quic_conn::QuicConn,
    handshake: Option<Arc<dyn EarlyData>>,
    route: &Arc<HttpRoute>,
    ctx: &ConnCtx<'_>,
    log: &mut AccessLog,
) -> CloseReason {
    let Some((service, retired)) = service(route, ctx, log, handshake, ClientProtocol::Http3, Default::default())
    else {
        return CloseReason::Internal;
    };
    let alt_svc = AltSvc::over_http3(ctx.alt_svc.clone());
    let ended = client::h3::serve(quic, service.clone(), alt_svc, ctx.stop, &retired, ctx.cut).await;
    close(ended, &service, log)
}

/// The request service for one client connection, and the token a reload cancels when it
/// retires the route's origin connections (any kind): the driver then asks the client to
/// finish (HTTP/2 and HTTP/3 GOAWAY, HTTP/1.1 close after the current response), so its next
/// request comes in afresh on the new configuration. `None` (and the log says why) for a route
/// whose origin the server has not attached.
fn service(
    route: &Arc<HttpRoute>,
    ctx: &ConnCtx<'_>,
    log: &mut AccessLog,
    handshake: Option<Arc<dyn EarlyData>>,
    protocol: ClientProtocol,
    (upgrades, activity): (TaskTracker, Option<Arc<Activity>>),
) -> Option<(Arc<Service>, tokio_util::sync::CancellationToken)> {
    let conn = Arc::new(Conn {
        snapshot: ctx.snapshot.clone(),
        client: log.client,
        port: ctx.port,
        metrics: ctx.metrics.http.clone(),
        trust_forwarded: ctx.trust_forwarded,
        cut: ctx.cut.clone(),
        handshake,
        early_metrics: ctx.metrics.early.requests.clone(),
        protocol,
        up: AtomicU64::new(0),
        down: AtomicU64::new(0),
        upgrades,
        early_seen: AtomicBool::new(false),
        affinity: Default::default(),
        activity,
        headers: ctx.headers.clone(),
    });
    let Some(service) = Service::new(conn, ctx.route.name.clone(), route.clone()) else {
        log.detail = Some("no upstream for this route".into());
        return None;
    };
    // The server, or a group's servers (its requests' lines name the one each went to).
    let servers: Vec<&str> = route.backend.servers.iter().map(|s| s.config.address.as_str()).collect();
    log.origin = Some(servers.join(","));
    let retired = service.origin.retired().clone();
    // A connection without SNI was routed by that and serves any name on its own route.
    let service = if &*ctx.route.name != crate::route::NO_SNI { service.with_coalescing() } else { service };
    Some((Arc::new(service), retired))
}

fn close(ended: Ended, service: &Service, log: &mut AccessLog) -> CloseReason {
    let conn = &service.conn;
    log.bytes_up = conn.up.load(Ordering::Relaxed);
    log.bytes_down = conn.down.load(Ordering::Relaxed);
    // Over QUIC this is how the edge learns that 0-RTT was used: a request came in it.
    log.early_data |= conn.early_seen.load(Ordering::Relaxed);
    match ended {
        Ended::Done if conn.reclaimed() => CloseReason::Reclaimed,
        Ended::Done => CloseReason::Done,
        Ended::Cut => CloseReason::Shutdown,
        // A connection closed by the edge before it sent anything may end in an error (hyper's
        // "closed before a message"): the edge chose to close it, so that is the reason.
        Ended::Failed(e) if conn.reclaimed() => {
            log.detail = Some(e);
            CloseReason::Reclaimed
        }
        Ended::Failed(e) => {
            log.detail = Some(e);
            CloseReason::ClientReset
        }
    }
}
