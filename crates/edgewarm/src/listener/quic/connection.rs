//! One QUIC connection from its accept to its access-log line: its ClientHello read within the
//! hello timeout, its route, its handshake counted, RFC 8470's gate (or the wait for the
//! handshake on routes without 0-RTT), HTTP/3, and the connection's single exit
//! ([`Context::finish`]), as [`crate::listener::conn::handle`] for TCP.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures_util::FutureExt;
use tokio::sync::OwnedSemaphorePermit;

use crate::accesslog::AccessLog;
use crate::config::{EarlyData as EarlyDataConfig, ListenerConfig};
use crate::error::CloseReason;
use crate::listener::Context;
use crate::metrics::{Metrics, QuicHandshake as Outcome, QuicResult, QuicRouteLabel, RouteName};
use crate::route::{HttpRoute, Route, RouteAction};
use crate::snapshot::Snapshot;
use crate::tls::handshake::{EarlyData, QuicHandshake};
use crate::transport::quic_conn::QuicConn;

/// quinn's connection being made, from its accept (or why that failed).
pub(super) struct Connecting {
    pub(super) remote: SocketAddr,
    pub(super) connecting: Result<quinn::Connecting, String>,
}

impl Connecting {
    /// The ClientHello's server name, once it is read (`Err`: why the connection ended first).
    async fn server_name(&mut self) -> Result<Option<String>, String> {
        let connecting = self.connecting.as_mut().map_err(|e| e.clone())?;
        let data = connecting.handshake_data().await.map_err(|e| e.to_string())?;
        Ok(data.downcast::<quinn::crypto::rustls::HandshakeData>().ok().and_then(|d| d.server_name))
    }

    /// The connection from the end of its ClientHello on, and its handshake as RFC 8470's gate
    /// sees it (`Err`: why it ended first).
    async fn made(self) -> Result<(quinn::Connection, Arc<QuicHandshake>), String> {
        let connecting = self.connecting?;
        // Server side, quinn always goes on before the handshake completes (0.5-RTT).
        let (conn, zero_rtt) = match connecting.into_0rtt() {
            Ok((conn, accepted)) => (conn, Some(accepted)),
            // Only a client without a session to resume is refused 0-RTT; kept for safety.
            Err(connecting) => (connecting.await.map_err(|e| e.to_string())?, None),
        };
        let handshake = Arc::new(QuicHandshake::new(conn.clone(), zero_rtt));
        Ok((conn, handshake))
    }
}

/// One QUIC connection, start to end, with one access-log line.
pub(super) async fn connection(
    mut connecting: Connecting,
    local: SocketAddr,
    guard: Handshaking,
    config: Arc<ListenerConfig>,
    cx: Arc<Context>,
    // The place in `max_connections`, and in the client's count where it has a cap: held to
    // the connection's end.
    (permit, place): (OwnedSemaphorePermit, Option<crate::limits::clients::ClientSlot>),
) {
    let accepted = Instant::now();
    let metrics = &*cx.metrics;
    let mut log = log_start(&cx, connecting.remote, local);
    let snapshot = cx.snapshot.borrow().clone();
    let count = |result| {
        metrics.quic.handshakes.get_or_create(&QuicResult { listener: local.to_string(), result }).inc();
    };
    let mut route_metrics = None;
    let reason = 'conn: {
        // The server name is known once the ClientHello is read (the certificate was chosen
        // from it then): well before the handshake completes. No certificate for the name (no
        // `http` route for it) ends here too.
        // A connection dropped unserved is closed by quinn as its last handle goes.
        match hello(snapshot.timeouts.client_hello, connecting.server_name(), &mut log).await {
            Ok(name) => log.sni = name,
            Err(reason) => {
                count(Outcome::Failed);
                break 'conn reason;
            }
        }
        log.hello_time = Some(accepted.elapsed());
        let Some((route, http)) = http_route(&snapshot, &mut log) else {
            count(Outcome::Failed);
            break 'conn CloseReason::UnknownSni;
        };
        let ctx = cx.conn_ctx(&snapshot, route, &config, local.port(), accepted);
        route_metrics = Some(ctx.route_metrics);
        // Server side, quinn goes on before the handshake completes (0.5-RTT): requests may
        // arrive in 0-RTT data from here.
        let (conn, handshake) = match connecting.made().await {
            Ok(made) => made,
            Err(e) => {
                count(Outcome::Failed);
                log.detail = Some(e);
                break 'conn CloseReason::ClientTls;
            }
        };
        let serve = async {
            let early = if http.client.early_data == EarlyDataConfig::Safe {
                // RFC 8470's gate sees each request read from here.
                Some(handshake.clone() as Arc<dyn EarlyData>)
            } else {
                // Not a 0-RTT route: nothing is read before the handshake completes, so nothing
                // read can be a replay. A handshake under way at a stop (an upgrade's, say) goes
                // on: the client then gets GOAWAY, and its first request is answered.
                let completed = tokio::select! {
                    ok = handshake.handshake_done() => ok,
                    () = cx.cut.cancelled() => {
                        conn.close(0u32.into(), b"");
                        return CloseReason::Shutdown;
                    }
                };
                if !completed {
                    return CloseReason::ClientTls;
                }
                None
            };
            Box::pin(crate::action::http::serve_quic(QuicConn(conn.clone()), early, http, &ctx, &mut log)).await
        };
        let reason = counting(serve, &*handshake, count, guard).await;
        count_path(metrics, local, &log, &conn.stats());
        reason
    };
    cx.finish(log, reason, route_metrics, accepted, permit);
    drop(place);
}

/// Runs `serve`, counting the handshake's end as it comes (whether requests wait for it or
/// not) and then leaving the count of handshakes under way (`guard`): in the connection's own
/// task, not one spawned for it.
async fn counting<F: Future>(
    serve: F,
    handshake: &dyn EarlyData,
    count: impl Fn(Outcome),
    guard: Handshaking,
) -> F::Output {
    let mut serve = pin!(serve);
    let mut done = handshake.handshake_done();
    let mut guard = Some(guard);
    let end = |ok: bool| if ok { Outcome::Ok } else { Outcome::Failed };
    loop {
        tokio::select! {
            biased;
            ok = &mut done, if guard.is_some() => {
                count(end(ok));
                guard = None;
            }
            out = &mut serve => {
                if guard.is_some() {
                    // Served to the end before the handshake's outcome was seen: it is known
                    // by now (the connection is closed), or it never completed.
                    count(end(done.now_or_never().unwrap_or(false)));
                }
                return out;
            }
        }
    }
}

/// Counts a handshake as in progress until dropped.
pub(super) struct Handshaking(Arc<AtomicUsize>);

impl Handshaking {
    pub(super) fn enter(n: &Arc<AtomicUsize>) -> Self {
        n.fetch_add(1, Ordering::Relaxed);
        Self(n.clone())
    }
}

impl Drop for Handshaking {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A QUIC connection's access-log line as it starts (QUIC is TLS 1.3, and h3 its only
/// protocol here), the connection counted as active.
fn log_start(cx: &Context, remote: SocketAddr, local: SocketAddr) -> AccessLog {
    let mut log = AccessLog::new(remote, local);
    log.alpn_selected = Some("h3".into());
    log.tls_version = Some("TLSv1_3".into());
    cx.metrics.active.inc();
    log
}

/// The ClientHello's outcome (`read`) within the listener's hello timeout, or why the
/// connection ends. Once read, the ALPN is h3 (the only one a QUIC listener offers).
async fn hello<T>(
    limit: std::time::Duration,
    read: impl Future<Output = Result<T, String>>,
    log: &mut AccessLog,
) -> Result<T, CloseReason> {
    match tokio::time::timeout(limit, read).await {
        Err(_) => Err(CloseReason::HelloTimeout),
        Ok(Err(e)) => {
            log.detail = Some(e);
            Err(CloseReason::ClientTls)
        }
        Ok(Ok(read)) => {
            log.alpn = vec!["h3".into()];
            Ok(read)
        }
    }
}

/// The `http` route for a connection's server name (`log.sni`), named in `log`. The same
/// lookup the certificate came from; a reload in between may have changed it.
fn http_route<'a>(snapshot: &'a Snapshot, log: &mut AccessLog) -> Option<(&'a Route, &'a Arc<HttpRoute>)> {
    let route = snapshot.routes.lookup(log.sni.as_deref())?;
    let RouteAction::Http(http) = &route.action else { return None };
    log.route = Some(route.name.clone());
    Some((route, http))
}

/// A finished connection's path statistics, into its route's QUIC metrics.
fn count_path(metrics: &Metrics, local: SocketAddr, log: &AccessLog, stats: &quinn_proto::ConnectionStats) {
    // A connection is only made once its route is known.
    let route = RouteName::new(log.route.as_deref().unwrap_or_default());
    let label = QuicRouteLabel { listener: local.to_string(), route };
    metrics.quic.lost_packets.get_or_create(&label).inc_by(stats.path.lost_packets);
    metrics.quic.sent_packets.get_or_create(&label).inc_by(stats.path.sent_packets);
    metrics.quic.rtt.get_or_create(&label).observe(stats.path.rtt.as_secs_f64());
}
