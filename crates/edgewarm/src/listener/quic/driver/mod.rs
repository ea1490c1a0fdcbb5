//! `listeners[].quic_driver: own`: each worker drives its UDP socket and every QUIC connection on
//! it from one loop of its own on quinn-proto ([`endpoint`]), instead of quinn's endpoint task,
//! connection tasks and the channels between them. The edge's HTTP/3 layer
//! ([`crate::http::client::h3`]) runs on it through h3's `quic` traits ([`conn`], [`stream`],
//! [`h3`]); a connection's task is the same HTTP/3 driver as quinn's
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

use quinn_proto::{ConnectionHandle, Incoming};
use tokio::sync::Semaphore;

use super::connection::{connection, Connecting, Handshaking};
use super::{Outcome, Shared as Listener};
use crate::listener::Context;
use crate::metrics::QuicResult;
use crate::tls::handshake::EarlyData;
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
    let accept = Accepting { local, listener, cx: cx.clone(), permit: None, place: None };
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
    /// The client's place in its count, taken by `admit` with the permit.
    place: Option<crate::limits::clients::ClientSlot>,
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
        if self.listener.denies(incoming.remote_address(), &self.cx.metrics) {
            self.count(Outcome::Refused);
            return Admit::Refuse;
        }
        let piling_up = self.listener.handshaking.load(Ordering::Relaxed) >= super::RETRY_ABOVE;
        if piling_up && !incoming.remote_address_validated() && incoming.may_retry() {
            self.count(Outcome::Retry);
            return Admit::Retry;
        }
        let Ok(place) = self.listener.place(incoming.remote_address(), &self.cx.metrics) else {
            self.count(Outcome::Refused);
            return Admit::Refuse;
        };
        self.place = place;
        self.permit = Semaphore::try_acquire_owned(self.listener.limit.clone()).ok();
        if self.permit.is_none() {
            self.place = None;
            self.count(Outcome::Refused);
            return Admit::Refuse;
        }
        Admit::Accept
    }

    fn accepted(&mut self, shared: &Arc<Shared>, ch: ConnectionHandle, generation: u64) {
        let Some(permit) = self.permit.take() else { return };
        let place = self.place.take();
        let conn = Conn { shared: shared.clone(), ch, generation };
        let guard = Handshaking::enter(&self.listener.handshaking);
        let task = connection(conn, self.local, guard, self.listener.config.clone(), self.cx.clone(), (permit, place));
        tokio::spawn(self.cx.tracker.track_future(task));
    }

    fn failed(&mut self) {
        self.permit = None;
        self.place = None;
        self.count(Outcome::Failed);
    }
}

/// A connection of this loop's, from its accept on: it is made as soon as it is accepted.
impl Connecting for Conn {
    type Conn = Conn;

    fn remote(&self) -> SocketAddr {
        // A connection the loop dropped at once has no address left: only its log line needs it.
        self.remote().unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    async fn server_name(&mut self) -> Result<Option<String>, String> {
        Conn::server_name(self).await.map_err(|e| e.to_string())
    }

    async fn made(self) -> Result<(Conn, Arc<dyn EarlyData>), String> {
        Ok((self.clone(), Arc::new(self)))
    }

    fn close(self) {
        self.close_with(0);
    }

    fn stats(conn: &Conn) -> Option<quinn_proto::ConnectionStats> {
        conn.stats()
    }
}
