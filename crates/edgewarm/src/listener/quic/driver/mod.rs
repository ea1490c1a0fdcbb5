//! `listeners[].quic_driver: own`: each worker drives its UDP socket and every QUIC connection on
//! it from one loop of its own on quinn-proto ([`endpoint`]), instead of quinn's endpoint task,
//! connection tasks and the channels between them. h3 runs on it through h3's `quic` traits
//! ([`conn`], [`stream`], [`h3`]); a connection's task is the same HTTP/3 driver as quinn's
//! ([`crate::action::http::serve_quic`]).
//!
//! The listener's default (`quic_driver: own`). What the quinn driver does around a connection,
//! it does too, on the same shared pieces: Retry when handshakes pile up, 0-RTT on `early_data`
//! routes, the same connection IDs (migration steering) and socket (the relay across upgrades;
//! a stopped loop goes on reading its socket for an older process, [`endpoint::Relaying`]).

mod conn;
mod endpoint;
mod h3;
mod state;
mod stream;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use quinn_proto::{ConnectionHandle, Incoming};
use tokio::sync::Semaphore;

use super::{Handshaking, Outcome, Shared as Listener};
use crate::config::{EarlyData as EarlyDataConfig, ListenerConfig};
use crate::error::CloseReason;
use crate::http::early::EarlyData;
use crate::listener::Context;
use crate::metrics::QuicResult;
pub(crate) use conn::Conn;
use endpoint::Admit;
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
    let accept = Accepting { local, listener, cx: cx.clone(), permit: None };
    let stop = Box::pin(async move { stop.cancelled().await });
    let relaying = endpoint::Driver::new(shared, socket, accept, stop, max_datagram).await;
    // Done draining (the tracker that awaits this learns so); the socket goes on relaying,
    // untracked, as quinn's kept endpoint does.
    cx.quic.keep(tokio::spawn(relaying));
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
    fn admit(&mut self, incoming: &Incoming) -> Admit {
        // As the quinn driver's accept loop decides (`super::accept_loop`).
        let piling_up = self.listener.handshaking.load(Ordering::Relaxed) >= super::RETRY_ABOVE;
        if piling_up && !incoming.remote_address_validated() && incoming.may_retry() {
            self.count(Outcome::Retry);
            return Admit::Retry;
        }
        self.permit = Semaphore::try_acquire_owned(self.listener.limit.clone()).ok();
        if self.permit.is_none() {
            self.count(Outcome::Refused);
            return Admit::Refuse;
        }
        Admit::Accept
    }

    fn accepted(&mut self, shared: &Arc<Shared>, ch: ConnectionHandle, generation: u64) {
        let Some(permit) = self.permit.take() else { return };
        let conn = Conn { shared: shared.clone(), ch, generation };
        let guard = Handshaking::enter(&self.listener.handshaking);
        let task = connection(conn, self.local, guard, self.listener.config.clone(), self.cx.clone(), permit);
        tokio::spawn(self.cx.tracker.track_future(task));
    }

    fn failed(&mut self) {
        self.permit = None;
        self.count(Outcome::Failed);
    }
}

/// One QUIC connection, start to end, with one access-log line, as the quinn driver's.
async fn connection(
    conn: Conn,
    local: SocketAddr,
    guard: Handshaking,
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
        // The handshake's end is counted (and leaves the count of handshakes under way) as it
        // comes, whether requests wait for it or not.
        {
            let (conn, handshakes, label) = (conn.clone(), metrics.quic.handshakes.clone(), local.to_string());
            tokio::spawn(async move {
                let result = if conn.connected().await { Outcome::Ok } else { Outcome::Failed };
                handshakes.get_or_create(&QuicResult { listener: label, result }).inc();
                drop(guard);
            });
        }
        let early = if http.client.early_data == EarlyDataConfig::Safe {
            // Requests may arrive in 0-RTT data from here: RFC 8470's gate sees each one.
            Some(Arc::new(conn.clone()) as Arc<dyn EarlyData>)
        } else {
            // Not a 0-RTT route: nothing is read before the handshake completes, so nothing
            // read can be a replay.
            let completed = tokio::select! {
                ok = conn.connected() => ok,
                () = cx.cut.cancelled() => {
                    conn.close_with(0);
                    break 'conn CloseReason::Shutdown;
                }
            };
            if !completed {
                break 'conn CloseReason::ClientTls;
            }
            None
        };
        Box::pin(crate::action::http::serve_quic(conn.clone(), early, http, &ctx, &mut log)).await
    };
    if let (Some(stats), Some(_)) = (conn.stats(), &log.route) {
        super::count_path(metrics, local, &log, &stats);
    }
    cx.finish(log, reason, route_metrics, accepted, permit);
}
