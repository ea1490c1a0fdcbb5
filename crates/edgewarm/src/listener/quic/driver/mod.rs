//! `listeners[].quic_driver: own`: each worker drives its UDP socket and every QUIC connection on
//! it from one loop of its own on quinn-proto ([`endpoint`]), instead of quinn's endpoint task,
//! connection tasks and the channels between them. h3 runs on it through h3's `quic` traits
//! ([`conn`], [`stream`], [`h3`]); a connection's task is the same HTTP/3 driver as quinn's
//! ([`crate::action::http::serve_quic`]).
//!
//! Not yet here (the `quinn` driver has them): 0-RTT (requests sent in it are read once the
//! handshake completes, as on a route without `early_data`), Retry under handshake floods, and
//! relaying datagrams to an older process across an upgrade (datagrams relayed to this one are
//! still served). Migration steering works as for quinn: the connection IDs are the same.

mod conn;
mod endpoint;
mod h3;
mod state;
mod stream;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use quinn_proto::{ConnectionHandle, Incoming};
use tokio::sync::Semaphore;

use super::{Outcome, Shared as Listener};
use crate::config::ListenerConfig;
use crate::error::CloseReason;
use crate::listener::Context;
use crate::metrics::QuicResult;
pub(crate) use conn::Conn;
use state::Shared;

/// One worker's loop on `socket`, until the stop and its connections' end.
pub(super) async fn run(
    socket: Arc<dyn quinn::AsyncUdpSocket>,
    config: quinn::EndpointConfig,
    server: quinn::ServerConfig,
    listener: Arc<Listener>,
    cx: Arc<Context>,
) {
    let Ok(local) = socket.local_addr() else { return };
    let max_datagram = usize::try_from(config.get_max_udp_payload_size()).unwrap_or(usize::from(u16::MAX));
    let endpoint = quinn_proto::Endpoint::new(Arc::new(config), Some(Arc::new(server)), true, None);
    let shared = Shared::new(endpoint);
    tracing::info!(listen = %local, worker = ?crate::workers::current(), "listening for HTTP/3 (QUIC, own driver)");
    let stop = cx.stop.clone();
    let accept = Accepting { local, listener, cx, permit: None };
    let stop = Box::pin(async move { stop.cancelled().await });
    endpoint::Driver::new(shared, socket, accept, stop, max_datagram).await;
}

/// The listener's side of a new connection: its limit, and a task to serve it.
struct Accepting {
    local: SocketAddr,
    listener: Arc<Listener>,
    cx: Arc<Context>,
    /// The place in `max_connections` taken by `admit` for the next `accepted`.
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Accepting {
    fn count(&self, result: Outcome) {
        let label = QuicResult { listener: self.local.to_string(), result };
        self.cx.metrics.quic.handshakes.get_or_create(&label).inc();
    }
}

impl endpoint::Accept for Accepting {
    fn admit(&mut self, _incoming: &Incoming) -> bool {
        self.permit = Semaphore::try_acquire_owned(self.listener.limit.clone()).ok();
        if self.permit.is_none() {
            self.count(Outcome::Refused);
        }
        self.permit.is_some()
    }

    fn accepted(&mut self, shared: &Arc<Shared>, ch: ConnectionHandle, generation: u64) {
        let Some(permit) = self.permit.take() else { return };
        let conn = Conn { shared: shared.clone(), ch, generation };
        let task = connection(conn, self.local, self.listener.config.clone(), self.cx.clone(), permit);
        tokio::spawn(self.cx.tracker.track_future(task));
    }
}

/// One QUIC connection, start to end, with one access-log line, as the quinn driver's.
async fn connection(
    conn: Conn,
    local: SocketAddr,
    config: Arc<ListenerConfig>,
    cx: Arc<Context>,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let accepted = Instant::now();
    let metrics = &*cx.metrics;
    let remote = conn.remote().unwrap_or(local);
    let mut log = super::log_start(&cx, remote, local);
    let snapshot = cx.snapshot.borrow().clone();
    let count =
        |result| metrics.quic.handshakes.get_or_create(&QuicResult { listener: local.to_string(), result }).inc();
    let mut route_metrics = None;
    let reason = 'conn: {
        match super::hello(snapshot.timeouts.client_hello, conn.server_name(), &mut log).await {
            Ok(name) => log.sni = name,
            Err(reason) => {
                count(Outcome::Failed);
                conn.close_with(0);
                break 'conn reason;
            }
        }
        log.hello_time = Some(accepted.elapsed());
        let Some((route, http)) = super::http_route(&snapshot, &mut log) else {
            count(Outcome::Failed);
            conn.close_with(0);
            break 'conn CloseReason::UnknownSni;
        };
        let ctx = cx.conn_ctx(&snapshot, route, &config, local.port(), accepted);
        route_metrics = Some(ctx.route_metrics);
        // No 0-RTT yet: nothing is read before the handshake completes, so nothing read can be
        // a replay.
        let completed = tokio::select! {
            ok = conn.connected() => ok,
            () = cx.cut.cancelled() => {
                conn.close_with(0);
                break 'conn CloseReason::Shutdown;
            }
        };
        count(if completed { Outcome::Ok } else { Outcome::Failed });
        if !completed {
            break 'conn CloseReason::ClientTls;
        }
        Box::pin(crate::action::http::serve_quic(conn.clone(), None, http, &ctx, &mut log)).await
    };
    if let (Some(stats), Some(_)) = (conn.stats(), &log.route) {
        super::count_path(metrics, local, &log, &stats);
    }
    cx.finish(log, reason, route_metrics, accepted, permit);
}
